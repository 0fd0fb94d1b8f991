"""httpcore async network backend that lets a guard reach the socket of its request.

The async twin of ``backend``: every stream attaches itself to the guard of
the request that writes to it (new or pooled connection alike), so a kill can
shut its socket down from any thread. Connecting and the TLS handshake have
no tracked socket; there a kill cancels the attempt's cancel scope instead
(see ``_transports.async_shell``).

There is no deferred close here: an event loop runs its requests on one
thread, so httpcore's pool cannot close a socket under a read in progress.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from typing import Any

import anyio
import httpcore

from .._core.clock import monotonic
from .._core.guard import Guard, current_guard
from .backend import Tracked, Tracking

__all__ = ["AsyncTrackingBackend", "AsyncTrackingStream"]


class AsyncTrackingStream(Tracked, httpcore.AsyncNetworkStream):
    """An async network stream that attaches itself to the guard of whoever uses it."""

    _inner: httpcore.AsyncNetworkStream

    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner
        self._guard: Guard | None = None
        self._follow()

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        guard = self._guard  # _reading(), inlined: this is every read of every body
        if guard is not None and guard.stage == "sending":
            guard.stage = "headers"
        self._in_read = True
        try:
            return await self._inner.read(max_bytes, timeout)
        finally:
            self._in_read = False

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._follow()
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        self._detach()  # before close: see the invariants in _core.guard
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # While the handshake runs, a kill cancels the attempt's scope.
        self._detach()
        guard = current_guard.get()
        if guard is not None:
            guard.stage = "connecting"
        started = monotonic()
        try:
            tls = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        except BaseException:
            # httpcore's trio stream closes itself on an Exception but not on a
            # cancellation, which would leave the socket open until collected.
            with anyio.CancelScope(shield=True):
                await self._inner.aclose()
            raise
        if guard is not None:
            guard.tls_seconds = monotonic() - started
        return AsyncTrackingStream(tls)


class AsyncTrackingBackend(Tracking, httpcore.AsyncNetworkBackend):
    """Wraps another async backend; every stream it opens is an ``AsyncTrackingStream``."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend) -> None:
        self._inner = inner

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        guard = current_guard.get()
        if guard is not None:
            guard.stage = "connecting"
            guard.start_budget()  # a new connection: the pool wait is over
        started = monotonic()
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        if guard is not None:
            guard.connect_seconds = monotonic() - started
        return AsyncTrackingStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        return AsyncTrackingStream(
            await self._inner.connect_unix_socket(path, timeout, socket_options)
        )

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
