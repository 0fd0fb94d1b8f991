"""The httpx flavor: the watchdog transports and client factories on httpx.

The classes here are the shells of ``_transports`` naming httpx's modules;
``_flavors.httpx2`` has the same names, in the same shape, for httpx2.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx

from .._core.checkpoints import CheckpointCallback
from .._core.errors import StreamStalled
from .._core.flavor import Flavor, import_helpers
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._transports.async_shell import AsyncShell
from .._transports.builder import ClientFactory, with_checkpoints
from .._transports.sync_shell import SyncShell

__all__ = [
    "CLIENTS",
    "FLAVOR",
    "AsyncWatchdogTransport",
    "StreamStalled",
    "WatchdogTransport",
    "async_http_client_for",
    "http_client_for",
]

import_helpers("httpcore._backends.sync", "httpx._utils")
FLAVOR = Flavor.of("httpx", httpx, httpcore, StreamStalled)


class WatchdogTransport(SyncShell[httpx.BaseTransport], httpx.BaseTransport):
    """An httpx transport that kills hung SSE streams and re-sends early stalls.

    ``inner`` is the transport that does the HTTP; by default an
    ``httpx.HTTPTransport`` built from ``http_transport_kwargs`` (``verify``,
    ``cert``, ``trust_env``, ``limits``, ``proxy``, ``socket_options``, ...):
    httpx ignores a client's TLS and connection settings once a transport is
    given, so they belong here. ``policy`` defaults to
    ``StreamPolicy.from_env()``; ``interrupt`` binds every request made
    through this transport to that ``Interrupt``. ``on_stats`` is called with
    each streaming request's ``StreamStats`` once it has ended (on the thread
    that ended it; an exception it raises is logged), which are also the
    response's ``extensions["stream_stats"]``.

    Streaming requests (a JSON body with ``"stream": true``, or
    ``Accept: text/event-stream``) are held in ``handle_request`` until their
    first progress event, so a stall before it is re-sent up to
    ``policy.retries`` times before ``StreamStalled`` is raised. After the
    first event, a stream with no progress for ``policy.stale_timeout``
    seconds is cut and its reader raises ``StreamStalled``; it is never
    re-sent.

    The SDK's retries: the openai SDK (every major) and the anthropic SDK
    retry a ``StreamStalled`` raised from ``handle_request`` (it is a
    ``ReadTimeout``), but their retries send nothing more: the re-send budget
    belongs to the call, so a retry of a stream whose re-sends are spent
    fails at once, offline. The SDK still sleeps its back-off before each,
    then raises its ``APITimeoutError`` with the stall as ``__cause__``
    (openai 3.x wraps a stall raised while iterating that way too, without a
    retry). An interrupt is never re-sent: openai 2.x and 3.x and the
    anthropic SDK let its ``StreamInterrupted`` through untouched, while a
    bare openai 1.x client retries it (offline, after its back-off) and
    raises ``openai.APIConnectionError`` with it as ``__cause__``. Under the
    streaming runners (``stream_chat_completion``) the SDK retries neither,
    on any major; elsewhere ``max_retries=0`` gets the error at once.

    Limits: HTTP/2 is refused (``http2=True``, here or on an inner
    ``httpx.HTTPTransport``: ``ValueError``), since one socket carries many
    streams. DNS resolution and a wait for a free connection in a full pool
    have no socket to shut down: a stall or interrupt there takes effect as
    soon as they end. With an inner transport of another class (respx,
    ``httpx.MockTransport``, a wrapper), sockets cannot be reached before
    headers: a stall or interrupt is noticed only when the response (or an
    error) arrives. After the headers the socket is reached through the
    response's ``network_stream`` extension when it has one (not on HTTP/2);
    otherwise a stall or interrupt is noticed when the next bytes arrive.
    """

    _flavor = FLAVOR

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        on_stats: StatsCallback | None = None,
        on_checkpoint: CheckpointCallback | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs, on_stats, on_checkpoint)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = self._handle(request)
        return response


class AsyncWatchdogTransport(AsyncShell[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """An async httpx transport that kills hung SSE streams and re-sends early stalls.

    The async twin of ``WatchdogTransport``, with the same arguments, policy,
    gating, re-sends and errors, and the same behaviour of the SDKs'
    retries (``openai.AsyncOpenAI``, ``anthropic.AsyncAnthropic``); see its
    docstring. It runs on asyncio or trio with no thread: deadlines are
    timers of the running loop. An ``Interrupt`` may be fired from any thread
    or from the loop itself.

    Ordinary cancellation (``task.cancel()``, ``asyncio.timeout``, a cancel
    scope) stays ordinary: the usual ``CancelledError`` or timeout, with the
    connection closed and nothing left armed.

    Up to its first event (for a response that is not a stream: up to its
    headers) an attempt runs in a cancel scope, which a stall or interrupt
    cancels wherever no socket can be shut down: every stage stops at once,
    DNS resolution and a wait for a pooled connection included, whatever the
    inner transport.

    Limits: HTTP/2 is refused, as for ``WatchdogTransport``. With an inner
    transport of another class (mocks, wrappers), after the first event the
    socket is reached through the response's ``network_stream`` extension
    when it has one (not on HTTP/2); otherwise a stall or interrupt is
    noticed when the next bytes arrive. A loop that is busy runs its timers
    late: a stall is reported as late as the loop is behind.
    """

    _flavor = FLAVOR

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        on_stats: StatsCallback | None = None,
        on_checkpoint: CheckpointCallback | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs, on_stats, on_checkpoint)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = await self._handle(request)
        return response


CLIENTS = ClientFactory(FLAVOR, WatchdogTransport, AsyncWatchdogTransport)


def http_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    **httpx_client_kwargs: Any,
) -> httpx.Client:
    """An ``httpx.Client`` over a ``WatchdogTransport`` for this kind of caller.

    ``platform``, ``api_mode`` and ``provider`` decide (``should_stream_inline``)
    whether ``stream_chat_completion`` later streams this client inline or on
    a worker thread; the decision is recorded with ``policy`` (default:
    ``StreamPolicy.from_env()``) and ``interrupt``, which binds every request
    of the client. ``on_stats`` is given every stream's ``StreamStats``, as
    ``WatchdogTransport`` gives them.

    TLS and connection settings (``verify``, ``cert``, ``trust_env``,
    ``limits``, ``proxy``, ``http1``, ``uds``, ``local_address``,
    ``socket_options``) configure the transport (``http2=True`` is refused
    with ``ValueError``); everything else (``event_hooks``, ``headers``,
    ``timeout``, ...) goes to ``httpx.Client``; ``transport``, ``mounts`` and
    ``app`` are refused with ``TypeError``, since they would bypass the
    watchdog. Defaults follow the openai SDK's (1000 connections, 100 kept
    alive, a 600 s timeout with 5 s to connect, following redirects), with
    socket timeouts raised above the watchdog's budgets; given settings win.
    Proxy environment variables (``HTTPS_PROXY``, ``NO_PROXY``, ...) are
    honoured as httpx honours them, unless ``trust_env=False`` or ``proxy``
    is given. ``hermes_transport.httpx2`` has the same factory for ``httpx2``
    clients.
    """
    client: httpx.Client = CLIENTS.client(
        "http_client_for",
        False,
        platform,
        api_mode,
        provider,
        policy,
        interrupt,
        on_stats,
        with_checkpoints(httpx_client_kwargs, on_checkpoint),
    )
    return client


def async_http_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    **httpx_async_client_kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over an ``AsyncWatchdogTransport``; as ``http_client_for``.

    The inline decision it records means nothing to ``astream_chat_completion``,
    which always streams on the running event loop.
    """
    client: httpx.AsyncClient = CLIENTS.client(
        "async_http_client_for",
        True,
        platform,
        api_mode,
        provider,
        policy,
        interrupt,
        on_stats,
        with_checkpoints(httpx_async_client_kwargs, on_checkpoint),
    )
    return client
