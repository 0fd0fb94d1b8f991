"""httpcore network backend that lets a guard reach the socket of its request.

httpx gives no handle on the socket a request uses until its headers have
arrived, and a pooled connection fires no trace event when it is reused. This
backend wraps every network stream so that whenever a request writes to it
(every request starts by writing its request line, on a new or a reused
connection) the stream attaches itself to that request's guard. The same
classes serve httpcore2 (httpx2's core), whose shapes are httpcore's.
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any

import httpcore

from .._core.clock import monotonic
from .._core.flavor import Flavor
from .._core.guard import Guard, current_guard
from .connect import connect_guarded, handshake_guarded
from .sockets import shutdown_socket, socket_has_input

__all__ = [
    "Tracked",
    "Tracking",
    "TrackingBackend",
    "TrackingStream",
    "reach_untracked",
    "refuse_http2",
    "track_sockets",
]


def refuse_http2(enabled: object, transport: str) -> None:
    if enabled:
        raise ValueError(
            f"http2=True is not supported by {transport}: HTTP/2 multiplexes"
            " streams over one socket, and shutting that socket down to stop one"
            " stalled or interrupted stream would kill every sibling stream; use HTTP/1.1"
        )


class Tracked:
    """A network stream that attaches itself to the guard of whichever request writes to it.

    Owner state: ``_guard`` is the guard it is attached to, changed only by
    the request using the stream.
    """

    _guard: Guard | None
    _inner: httpcore.NetworkStream | httpcore.AsyncNetworkStream
    _in_read = False  # the owner is inside a read of this stream (owner-written)

    def _follow(self) -> Guard | None:
        guard = current_guard.get()
        if guard is not None:
            guard.stage = "sending"
            guard.start_budget()  # a pooled connection: the pool wait is over
        if guard is not self._guard:
            if self._guard is not None:
                self._guard.detach(self)
            self._guard = guard
            if guard is not None:
                guard.attach(self)
        return guard

    def _reading(self) -> None:
        guard = self._guard
        if guard is not None and guard.stage == "sending":
            guard.stage = "headers"

    def _detach(self) -> None:
        if self._guard is not None:
            self._guard.detach(self)
            self._guard = None

    def kill(self) -> bool:
        return shutdown_socket(self._inner.get_extra_info("socket"))

    def caller_behind(self) -> bool:
        # The server is shown silent only while its reader waits in a read with
        # nothing pending; a reader elsewhere (judging bytes it took, or in the
        # caller's own code) has not looked yet.
        return not self._in_read or socket_has_input(self._inner.get_extra_info("socket"))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class TrackingStream(Tracked, httpcore.NetworkStream):
    """A sync network stream that attaches itself to the guard of whoever uses it.

    It also refuses to have its socket closed under a live request by another
    thread: httpcore's pool can decide, on one thread, to close a connection
    it has just handed to a request on another (encode/httpcore#1110), which
    leaves that request reading a closed socket (EBADF, or a hang until its
    read timeout). Such a close is deferred until the request's guard closes.

    ``flavor`` is the core library whose pool holds it (its exceptions and
    stream class are used); it is typed as httpcore's, whose shape httpcore2 shares.
    """

    _inner: httpcore.NetworkStream

    def __init__(self, inner: httpcore.NetworkStream, flavor: Flavor) -> None:
        self._inner = inner
        self._flavor = flavor
        self._guard: Guard | None = None
        # The thread of the request that last wrote to it.
        self._owner = 0
        self._follow()

    def _follow(self) -> Guard | None:
        self._owner = threading.get_ident()
        return super()._follow()

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        guard = self._guard  # _reading(), inlined: this is every read of every body
        if guard is not None and guard.stage == "sending":
            guard.stage = "headers"
        self._in_read = True
        try:
            return self._inner.read(max_bytes, timeout)
        finally:
            self._in_read = False

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._follow()
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        guard = self._guard
        if guard is not None and self._owner != threading.get_ident() and guard.defer_close(self):
            return  # another thread's live request reads this socket: it closes it later
        self._detach()
        self._inner.close()

    def finish_close(self) -> None:
        """Run a close that was deferred; called on the owner's thread."""
        self._guard = None
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        guard, sock = self._guard, self._inner.get_extra_info("socket")
        flavor = self._flavor
        sync_stream = flavor.sync_stream
        self._detach()
        if (
            guard is None
            or sync_stream is None
            or not isinstance(self._inner, sync_stream)
            or not isinstance(sock, socket.socket)
            or isinstance(sock, ssl.SSLSocket)  # TLS in TLS: left to httpcore, unguarded
        ):
            tls = self._inner.start_tls(ssl_context, server_hostname, timeout)
            return TrackingStream(tls, flavor)
        guard.stage = "connecting"
        started = monotonic()
        tls_sock = handshake_guarded(
            guard, sock, ssl_context, server_hostname, timeout, flavor.core
        )
        guard.tls_seconds = monotonic() - started
        return TrackingStream(sync_stream(tls_sock), flavor)


class Tracking:
    """Marks a network backend whose streams attach to guards."""


class TrackingBackend(Tracking, httpcore.NetworkBackend):
    """Wraps another backend; every stream it opens is a ``TrackingStream``."""

    def __init__(self, inner: httpcore.NetworkBackend, flavor: Flavor) -> None:
        self._inner = inner
        self._flavor = flavor

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        guard, flavor = current_guard.get(), self._flavor
        if guard is not None:
            guard.start_budget()  # a new connection: the pool wait is over
        sync_stream: Any = flavor.sync_stream
        if (
            guard is None
            or sync_stream is None
            or type(self._inner) is not flavor.core.SyncBackend
        ):
            stream = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            return TrackingStream(stream, flavor)
        guard.stage = "connecting"
        started = monotonic()
        sock = connect_guarded(
            guard, host, port, timeout, local_address, socket_options, flavor.core
        )
        guard.connect_seconds = monotonic() - started
        return TrackingStream(sync_stream(sock), flavor)

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_unix_socket(path, timeout, socket_options)
        return TrackingStream(stream, self._flavor)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def track_sockets(
    inner: object,
    http_transport: type[Any],
    pool_class: type[Any],
    tracking_backend: Callable[[Any], Any],
    transport_name: str,
) -> bool:
    """Let guards reach the sockets of ``inner`` before headers arrive, if possible.

    Possible when ``inner`` is the flavor's own (async) HTTP transport over
    its core's pool (httpx over httpcore, httpx2 over httpcore2): its network
    backend is wrapped in ``tracking_backend``. An HTTP/2 pool is refused.
    """
    pool = getattr(inner, "_pool", None) if isinstance(inner, http_transport) else None
    if not isinstance(pool, pool_class):
        return False
    refuse_http2(getattr(pool, "_http2", False), transport_name)
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        return False
    if not isinstance(backend, Tracking):
        pool._network_backend = tracking_backend(backend)
    return True


class _ForeignConnection:
    """Kill switch for a socket found in ``network_stream`` of an untracked transport."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def kill(self) -> bool:
        return shutdown_socket(self._stream.get_extra_info("socket"))

    def caller_behind(self) -> bool:
        return socket_has_input(self._stream.get_extra_info("socket"))


def reach_untracked(response: Any, guard: Guard) -> None:
    """Let ``guard`` reach the socket of a response from an untracked inner transport.

    Found in the response's ``network_stream`` extension, if it has one. One
    HTTP/2 socket carries sibling streams: shutting it down to stop this one
    would kill them too, so such a body is stopped when its next bytes arrive
    (or by its read timeout) instead.
    """
    network_stream = response.extensions.get("network_stream")
    if (
        network_stream is not None
        and not isinstance(network_stream, Tracked)
        and response.extensions.get("http_version") != b"HTTP/2"
    ):
        guard.attach(_ForeignConnection(network_stream))
