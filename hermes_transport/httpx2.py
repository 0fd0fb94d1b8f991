"""The httpx2 flavor: the watchdog transports for openai 3.x's own HTTP stack.

openai 3.x builds its clients on ``httpx2`` (a fork of httpx with the same
transport API), and the anthropic 2.x SDK accepts nothing else. The classes
here are the ones in ``hermes_transport``, naming httpx2 instead of httpx;
the logic is shared::

    import anthropic
    from hermes_transport import httpx2 as ht2

    client = anthropic.Anthropic(http_client=ht2.http_client_for("cron"))

Importable only where httpx2 is installed (``pip install
'hermes-transport[httpx2]'``). A stall on this flavor raises this module's
``StreamStalled``: an ``httpx2.ReadTimeout`` and ``httpx2.RemoteProtocolError``,
and also a ``hermes_transport.StreamStalled`` (hence an httpx one), so one
``except hermes_transport.StreamStalled`` catches a stall of either flavor.
``StreamInterrupted`` is the same class on both.
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

# Modules, not names: this module's namespace is its public face.
from . import _async_transport, _errors, _factory, _flavor, _interrupt, _policy, _transport

__all__ = [
    "AsyncWatchdogTransport",
    "StreamStalled",
    "WatchdogTransport",
    "async_http_client_for",
    "http_client_for",
]


# The two HTTPError bases type `request` with their own Request classes; an
# instance carries the request of the flavor that raised it.
class StreamStalled(  # type: ignore[misc]
    _errors.StreamStalled, httpx2.ReadTimeout, httpx2.RemoteProtocolError
):
    """A streaming response made no progress within its budget and was cut (httpx2 flavor).

    As ``hermes_transport.StreamStalled``, whose subclass it is; also an
    ``httpx2.ReadTimeout`` and ``httpx2.RemoteProtocolError``.
    """


# The httpx2 flavor: what the shared shells look up instead of httpx's names.
_flavor.import_helpers("httpcore2._backends.sync", "httpx2._utils")
_FLAVOR = _flavor.Flavor.of("httpx2", httpx2, httpcore2, StreamStalled)


class WatchdogTransport(_transport.SyncWatchdog[httpx2.BaseTransport], httpx2.BaseTransport):
    """``hermes_transport.WatchdogTransport`` on httpx2: same arguments, policy and errors.

    ``inner`` defaults to an ``httpx2.HTTPTransport`` built from
    ``http_transport_kwargs``.
    """

    _flavor = _FLAVOR

    def __init__(
        self,
        inner: httpx2.BaseTransport | None = None,
        *,
        policy: _policy.StreamPolicy | None = None,
        interrupt: _interrupt.Interrupt | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = self._handle(request)
        return response


class AsyncWatchdogTransport(
    _async_transport.AsyncWatchdog[httpx2.AsyncBaseTransport], httpx2.AsyncBaseTransport
):
    """``hermes_transport.AsyncWatchdogTransport`` on httpx2: same arguments, policy and errors.

    ``inner`` defaults to an ``httpx2.AsyncHTTPTransport`` built from
    ``http_transport_kwargs``.
    """

    _flavor = _FLAVOR

    def __init__(
        self,
        inner: httpx2.AsyncBaseTransport | None = None,
        *,
        policy: _policy.StreamPolicy | None = None,
        interrupt: _interrupt.Interrupt | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        self._setup(inner, policy, interrupt, http_transport_kwargs)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response: httpx2.Response = await self._handle(request)
        return response


_clients = _factory.ClientFactory(_FLAVOR, WatchdogTransport, AsyncWatchdogTransport)


def http_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: _policy.StreamPolicy | None = None,
    interrupt: _interrupt.Interrupt | None = None,
    **httpx_client_kwargs: Any,
) -> httpx2.Client:
    """An ``httpx2.Client`` over this flavor's ``WatchdogTransport``; as
    ``hermes_transport.http_client_for``."""
    client: httpx2.Client = _clients.client(
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
    policy: _policy.StreamPolicy | None = None,
    interrupt: _interrupt.Interrupt | None = None,
    **httpx_async_client_kwargs: Any,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` over this flavor's ``AsyncWatchdogTransport``; as
    ``hermes_transport.async_http_client_for``."""
    client: httpx2.AsyncClient = _clients.client(
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
