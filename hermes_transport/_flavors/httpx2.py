"""The httpx2 flavor: the watchdog transports and client factories on httpx2.

openai 3.x builds its clients on ``httpx2`` (a fork of httpx with the same
transport API), and the anthropic 2.x SDK accepts nothing else. The names
and shape are ``_flavors.httpx``'s; the logic is the shared shells'.
Imported only when asked for: httpx2 is optional.
"""

from __future__ import annotations

from typing import Any

try:
    import httpcore2
    import httpx2
except ImportError as exc:  # pragma: no cover - exercised in an environment without httpx2
    raise ImportError(
        "hermes_transport.httpx2 needs the httpx2 package;"
        " install it with: pip install 'hermes-transport[httpx2]'"
    ) from exc

from .._core.checkpoints import CheckpointCallback
from .._core.errors import StreamStalled as _BaseStreamStalled
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


# The two HTTPError bases type `request` with their own Request classes; an
# instance carries the request of the flavor that raised it.
class StreamStalled(  # type: ignore[misc]
    _BaseStreamStalled, httpx2.ReadTimeout, httpx2.RemoteProtocolError
):
    """A streaming response made no progress within its budget and was cut (httpx2 flavor).

    As ``hermes_transport.StreamStalled``, whose subclass it is; also an
    ``httpx2.ReadTimeout`` and ``httpx2.RemoteProtocolError``.
    """

    # Its public name, even where only this module was imported (a factory given
    # flavor="httpx2"): in tracebacks, and for pickle, which finds it there.
    __module__ = "hermes_transport.httpx2"


# The httpx2 flavor: what the shared shells look up instead of httpx's names.
import_helpers("httpcore2._backends.sync", "httpx2._utils")
FLAVOR = Flavor.of("httpx2", httpx2, httpcore2, StreamStalled)


class WatchdogTransport(SyncShell[httpx2.BaseTransport], httpx2.BaseTransport):
    """``hermes_transport.WatchdogTransport`` on httpx2: same arguments, policy and errors.

    ``inner`` defaults to an ``httpx2.HTTPTransport`` built from
    ``http_transport_kwargs``. The SDKs' retries and the limits are those
    ``hermes_transport.WatchdogTransport`` states, with httpx2's classes: a
    stall raises this module's ``StreamStalled``, and only an
    ``httpx2.HTTPTransport`` inner gives guards its sockets before headers.
    """

    _flavor = FLAVOR

    def __init__(
        self,
        inner: httpx2.BaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        on_stats: StatsCallback | None = None,
        on_checkpoint: CheckpointCallback | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs, on_stats, on_checkpoint)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = self._handle(request)
        return response


class AsyncWatchdogTransport(AsyncShell[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport):
    """``hermes_transport.AsyncWatchdogTransport`` on httpx2: same arguments, policy and errors.

    ``inner`` defaults to an ``httpx2.AsyncHTTPTransport`` built from
    ``http_transport_kwargs``. The SDKs' retries and the limits are those
    ``hermes_transport.AsyncWatchdogTransport`` states.
    """

    _flavor = FLAVOR

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        on_stats: StatsCallback | None = None,
        on_checkpoint: CheckpointCallback | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs, on_stats, on_checkpoint)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = await self._handle(request)
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
) -> httpx2.Client:
    """An ``httpx2.Client`` over this flavor's ``WatchdogTransport``; as
    ``hermes_transport.http_client_for`` (arguments, defaults, refusals)."""
    client: httpx2.Client = CLIENTS.client(
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
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` over this flavor's ``AsyncWatchdogTransport``; as
    ``hermes_transport.async_http_client_for``."""
    client: httpx2.AsyncClient = CLIENTS.client(
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
