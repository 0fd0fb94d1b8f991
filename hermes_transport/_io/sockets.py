"""Shutting a socket down from any thread: how every kill reaches the network.

No state but a record of the socket types already warned about; two functions,
called by guards (under their lock) on whichever thread fires them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
from collections.abc import Callable

__all__ = ["shutdown_socket", "socket_has_input"]

logger = logging.getLogger("hermes_transport")

# Names of the socket types already warned about: one warning per type per process.
# No lock: at worst two threads racing on a first kill both warn.
_warned: set[str] = set()


def shutdown_socket(sock: object) -> bool:
    """Shut ``sock`` down from any thread, waking a reader blocked on it.

    ``ssl.SSLSocket.shutdown`` would tear the TLS session down from this
    thread; the plain socket call only stops the transport underneath. The
    socket objects of event loops (asyncio's ``TransportSocket``, trio's
    socket) wrap a plain socket, which is shut down the same way. Others
    (uvloop's ``PseudoSocket``) only expose a file descriptor: the socket is
    shut down through a duplicate of it (``shutdown`` acts on the socket,
    whichever descriptor names it; closing the duplicate leaves the original
    open).

    Returns whether the socket was reached (already closed counts: nothing is
    left to wake). ``False`` (logged once per socket type) when it cannot be:
    the caller must stop the request some other way.
    """
    if not isinstance(sock, socket.socket):
        inner = getattr(sock, "_sock", None)
        if isinstance(inner, socket.socket):
            sock = inner
    if isinstance(sock, socket.socket):
        # OSError: already closed or never connected, so nothing is left to wake.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        return True
    fileno = getattr(sock, "fileno", None)
    if callable(fileno):
        try:
            fd = fileno()
        except (OSError, ValueError):
            return True  # closed: its fileno() refuses
        if isinstance(fd, int) and not isinstance(fd, bool):
            return _shutdown_fd(sock, fileno, fd)
    _warn_unreachable(sock)
    return False


def _shutdown_fd(owner: object, fileno: Callable[[], object], fd: int) -> bool:
    """Shut down the socket ``owner`` holds as descriptor ``fd``, through a duplicate.

    The duplicate pins the socket: once it exists, the socket cannot go away
    (nor its number be given to another) until the duplicate is closed. But
    the owner may have closed ``fd`` just before the duplicate was taken, and
    the number been reused by an unrelated socket; so the owner is asked
    again afterwards. uvloop's ``PseudoSocket`` (like ``socket.socket``) sets
    its descriptor to -1 *before* closing it: if it still reports ``fd`` after
    the duplicate was taken, the duplicate is of the owner's socket.
    """
    if fd < 0:
        return True  # closed: nothing left to wake
    try:
        dup = os.dup(fd)
    except OSError:
        return True  # EBADF: closed meanwhile
    try:
        try:
            still = fileno()
        except (OSError, ValueError):
            still = -1
        if still != fd:
            return True  # closed meanwhile: `dup` may be someone else's socket
        try:
            twin = socket.socket(fileno=dup)
        except OSError:
            # Not a socket at all (ENOTSOCK): nothing a shutdown could reach.
            _warn_unreachable(owner)
            return False
        dup = -1  # owned by `twin` now
        with twin, contextlib.suppress(OSError):
            twin.shutdown(socket.SHUT_RDWR)
        return True
    finally:
        if dup >= 0:
            os.close(dup)


def _warn_unreachable(sock: object) -> None:
    kind = type(sock)
    name = f"{kind.__module__}.{kind.__qualname__}"
    if name in _warned:
        return
    _warned.add(name)
    logger.warning(
        "cannot shut down a socket of type %s (neither a socket nor a file descriptor"
        " to reach): a stall or interrupt cannot cut its connections",
        name,
    )


def socket_has_input(sock: object) -> bool:
    """Whether ``sock`` has input waiting that its reader has not taken yet (or its end).

    From any thread, never blocking and never consuming: a zero-timeout poll of
    its descriptor. TLS counts raw bytes, decrypted or not. ``False`` when the
    descriptor cannot be had (the caller then cannot be shown to be behind).
    """
    fileno = getattr(sock, "fileno", None)
    if not callable(fileno):
        return False
    try:
        fd = fileno()
        if not isinstance(fd, int) or isinstance(fd, bool) or fd < 0:
            return False
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except (OSError, ValueError):
        return False
