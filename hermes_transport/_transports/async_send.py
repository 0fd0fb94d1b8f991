"""``sent``: one request sent through an inner async transport under a guard.

Owns how an async attempt is stopped before it has a socket: its send runs in
a cancel scope, and a guard's kill (from any thread) cancels it on the loop
(``CancelAttempt``). The shell sends its attempts this way, and the watched
stream its resumes and cancels.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio

from .._core.attempt import GuardFired
from .._core.guard import Guard, current_guard
from .._io.backend import reach_untracked
from .._io.loop_watchdog import LoopWatchdog

__all__ = ["AsyncSend", "CancelAttempt", "cancellable", "sent"]


class CancelAttempt:
    """A guard's fallback kill: cancel the attempt's scope, on the loop's thread."""

    __slots__ = ("_scope", "_watcher", "active")

    def __init__(self, scope: anyio.CancelScope, watcher: LoopWatchdog) -> None:
        self._scope = scope
        self._watcher = watcher
        self.active = True  # loop-thread state: False once the scope has exited

    def kill(self) -> bool:
        self._watcher.call_soon_threadsafe(self._cancel)
        return True

    def _cancel(self) -> None:
        if self.active:
            self._scope.cancel()


#: How a shell sends one request under a guard (see ``sent``).
AsyncSend = Callable[[Any, Guard], Awaitable[Any]]


@contextlib.contextmanager
def cancellable(guard: Guard, watcher: LoopWatchdog) -> Iterator[anyio.CancelScope]:
    """A cancel scope that ``guard``'s kill cancels while no socket is attached (armed on
    ``watcher``); the caller raises ``GuardFired`` when it was cancelled."""
    with anyio.CancelScope() as scope:
        fallback = CancelAttempt(scope, watcher)
        guard.set_fallback(fallback)
        watcher.arm(guard)
        try:
            yield scope
        finally:
            fallback.active = False
            guard.set_fallback(None)


async def sent(
    handle: Callable[[Any], Awaitable[Any]],
    request: Any,
    guard: Guard,
    watcher: LoopWatchdog,
    *,
    untracked: bool,
) -> Any:
    """``request`` sent with ``handle`` (an inner transport's) under ``guard``: its
    response, with its headers. A kill while no socket is attached cancels the send;
    ``untracked``: the inner transport's sockets are reached through the response only."""
    if guard.fired is not None:
        raise GuardFired
    guard.stage = "headers"
    context = current_guard.set(guard)
    try:
        with cancellable(guard, watcher) as scope:
            response = await handle(request)
    finally:
        current_guard.reset(context)
    if scope.cancelled_caught:
        raise GuardFired
    if untracked:
        reach_untracked(response, guard)
    return response
