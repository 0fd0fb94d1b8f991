"""The httpx flavor: the watchdog transports and client factories on httpx.

The classes here are the shells of ``_transports`` naming httpx's modules;
``_flavors.httpx2`` has the same names, in the same shape, for httpx2.
"""

from __future__ import annotations

from typing import Any

import httpcore
import httpx

from .._core.errors import StreamStalled
from .._core.flavor import Flavor, import_helpers
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._transports.async_shell import AsyncShell
from .._transports.builder import ClientFactory
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
    ``StreamPolicy.from_env()``.

    Streaming requests (a JSON body with ``"stream": true``, or
    ``Accept: text/event-stream``) are held in ``handle_request`` until their
    first progress event, so a stall before it is re-sent up to
    ``policy.retries`` times before ``StreamStalled`` is raised. Note that the
    openai SDK's own retry loop (``max_retries``) retries that error again, on
    top of these re-sends. After the first event, a stream with no progress for
    ``policy.stale_timeout`` seconds is cut and its reader raises
    ``StreamStalled``.

    Limits: HTTP/2 is refused (one socket carries many streams). With an inner
    transport whose sockets cannot be reached before headers (mocks, custom
    transports), a stall while waiting for headers is noticed only when the
    response arrives, and a mid-stream stall when the next bytes arrive.
    """

    _flavor = FLAVOR

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response: httpx.Response = self._handle(request)
        return response


class AsyncWatchdogTransport(AsyncShell[httpx.AsyncBaseTransport], httpx.AsyncBaseTransport):
    """An async httpx transport that kills hung SSE streams and re-sends early stalls.

    The async twin of ``WatchdogTransport``, with the same arguments, policy,
    gating, re-sends and errors; see its docstring. It runs on asyncio or trio
    with no thread: deadlines are timers of the running loop. An
    ``Interrupt`` may be fired from any thread or from the loop itself.

    Ordinary cancellation (``task.cancel()``, ``asyncio.timeout``, a cancel
    scope) stays ordinary: the usual ``CancelledError`` or timeout, with the
    connection closed and nothing left armed.

    Limits: HTTP/2 is refused. With an inner transport whose sockets cannot
    be reached (mocks, custom transports), a stall or interrupt before the
    first event cancels the request; after it, a stall is noticed only when
    the next bytes arrive.
    """

    _flavor = FLAVOR

    def __init__(
        self,
        inner: httpx.AsyncBaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs)

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
    **httpx_client_kwargs: Any,
) -> httpx.Client:
    """An ``httpx.Client`` over a ``WatchdogTransport`` for this kind of caller.

    TLS and connection settings (``verify``, ``cert``, ``trust_env``,
    ``limits``, ``proxy``, ``http2``, ...) configure the transport; everything
    else (``event_hooks``, ``headers``, ``timeout``, ...) goes to
    ``httpx.Client``. Defaults follow the openai SDK's (limits, a 600 s
    timeout with 5 s to connect, following redirects), with socket timeouts
    raised above the watchdog's budgets; given settings win. Proxy
    environment variables are honoured. ``hermes_transport.httpx2`` has the
    same factory for ``httpx2`` clients.
    """
    client: httpx.Client = CLIENTS.client(
        "http_client_for",
        False,
        platform,
        api_mode,
        provider,
        policy,
        interrupt,
        httpx_client_kwargs,
    )
    return client


def async_http_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    **httpx_async_client_kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over an ``AsyncWatchdogTransport``; as ``http_client_for``."""
    client: httpx.AsyncClient = CLIENTS.client(
        "async_http_client_for",
        True,
        platform,
        api_mode,
        provider,
        policy,
        interrupt,
        httpx_async_client_kwargs,
    )
    return client
