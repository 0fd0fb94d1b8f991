"""How a watched Responses WebSocket is cut: its socket shut down, or its transport aborted.

A guard of a watched connection (``_sdk.websocket``, ``_sdk.awebsocket``) holds one of
these as its connection: ``kill`` is called under the guard's lock, from the watchdog
thread, the loop's timer or whichever thread interrupts, and never blocks. Sync
(``websockets.sync``): the socket is shut down, so the library's reading thread sees its
end and a ``recv`` blocked on any thread wakes with ``ConnectionClosedError``. Async
(``websockets.asyncio``): the transport is aborted on its own loop
(``call_soon_threadsafe``). ``caller_behind`` tells the guard a late reader from a silent
server: frames the library has and the reader has not taken, or a reader not in a read.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .loop_watchdog import LoopWatchdog
from .sockets import shutdown_socket

__all__ = ["SocketKill", "TransportAbort"]


def _queued(ws: Any) -> bool:
    """Whether the ``websockets`` connection holds frames not yet taken (best effort)."""
    frames = getattr(getattr(ws, "recv_messages", None), "frames", None)
    if frames is None:
        return False
    size = getattr(frames, "qsize", None)
    try:
        return bool(size() if callable(size) else len(frames))
    except TypeError:
        return False


class SocketKill:
    """A sync ``websockets`` connection's socket, shut down from any thread."""

    __slots__ = ("_reading", "_ws")

    def __init__(self, ws: Any, reading: Callable[[], bool]) -> None:
        self._ws, self._reading = ws, reading

    def kill(self) -> bool:
        return shutdown_socket(self._ws.socket)

    def caller_behind(self) -> bool:
        return not self._reading() or _queued(self._ws)


class TransportAbort:
    """An asyncio ``websockets`` connection's transport, aborted on its loop."""

    __slots__ = ("_reading", "_watcher", "_ws")

    def __init__(self, ws: Any, reading: Callable[[], bool], watcher: LoopWatchdog) -> None:
        self._ws, self._reading, self._watcher = ws, reading, watcher

    def kill(self) -> bool:
        self._watcher.call_soon_threadsafe(self._ws.transport.abort)
        return True

    def caller_behind(self) -> bool:
        return not self._reading() or _queued(self._ws)
