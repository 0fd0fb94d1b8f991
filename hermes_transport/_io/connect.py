"""Guarded connect and TLS handshake: httpcore's, with each socket reachable by the guard.

httpcore's sync backend connects and shakes hands inside calls no other
thread can stop. These do the same steps with the socket attached to the
attempt's guard while they run, so an interrupt (or a first-event budget
that runs out) shuts it down and the blocked call returns at once.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import Iterable
from typing import Any

from .._core.guard import Guard
from .sockets import shutdown_socket

__all__ = ["connect_guarded", "handshake_guarded"]


class _Connecting:
    """Kill switch for a socket that is still connecting: shutdown aborts connect()."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def kill(self) -> bool:
        return shutdown_socket(self._sock)


def connect_guarded(
    guard: Guard,
    host: str,
    port: int,
    timeout: float | None,
    local_address: str | None,
    socket_options: Iterable[Any] | None,
    core: Any,
) -> socket.socket:
    """``socket.create_connection`` as httpcore's SyncBackend uses it, but with each
    socket attached to the guard while it connects, so an interrupt aborts it."""
    error: OSError | None = None
    try:
        # Name resolution cannot be interrupted; it is bounded by the resolver.
        addresses = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)
    except OSError as exc:
        raise core.ConnectError(str(exc)) from exc
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        connecting = _Connecting(sock)
        guard.attach(connecting)
        try:
            sock.settimeout(timeout)
            if local_address is not None:
                sock.bind((local_address, 0))
            sock.connect(address)
            for option in socket_options or ():
                sock.setsockopt(*option)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException as exc:
            guard.detach(connecting)  # before close: see the invariants in _core.guard
            sock.close()
            if isinstance(exc, socket.timeout):
                raise core.ConnectTimeout(str(exc)) from exc
            if not isinstance(exc, OSError):
                raise  # KeyboardInterrupt and the like: the socket is closed, nothing else
            error = exc
            if guard.fired is not None:
                break
            continue
        guard.detach(connecting)
        guard.stage = "sending"
        return sock
    raise core.ConnectError(str(error or f"no address found for {host!r}")) from error


def handshake_guarded(
    guard: Guard,
    sock: socket.socket,
    ssl_context: ssl.SSLContext,
    server_hostname: str | None,
    timeout: float | None,
    core: Any,
) -> ssl.SSLSocket:
    """The TLS handshake of httpcore's SyncStream.start_tls, reachable by the guard.

    ``wrap_socket`` moves the file descriptor into a new SSLSocket object (the
    plain one is left empty), so the guard must hold that new object while the
    handshake runs; hence the handshake is not done inside ``wrap_socket``.
    """
    try:
        sock.settimeout(timeout)
        tls = ssl_context.wrap_socket(
            sock, server_hostname=server_hostname, do_handshake_on_connect=False
        )
    except OSError as exc:
        sock.close()
        raise core.ConnectError(str(exc)) from exc
    handshaking = _Connecting(tls)
    guard.attach(handshaking)  # kills at once if the guard fired meanwhile
    try:
        tls.do_handshake()
    except BaseException as exc:
        guard.detach(handshaking)  # before close: see the invariants in _core.guard
        tls.close()
        if isinstance(exc, socket.timeout):
            raise core.ConnectTimeout(str(exc)) from exc
        if not isinstance(exc, OSError):
            raise
        raise core.ConnectError(str(exc)) from exc
    guard.detach(handshaking)
    return tls
