"""``sent``: one request sent through an inner async transport under a guard.

Owns how an async attempt is stopped before it has a socket: its send runs in
a cancel scope (``Cancellable``), and a guard's kill (from any thread) cancels
it on the loop (``CancelAttempt``). The shell sends its attempts this way, and the watched
stream its resumes and cancels. Also how a shell waits before sending again
(``apause``), and the work of a transport nobody waits for, a cancel after an
interrupt (``Detached``): a task on the caller's loop, which the transport's
close waits for.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any

import anyio

from .._core.attempt import GuardFired
from .._core.clock import monotonic
from .._core.guard import Guard, current_guard
from .._core.interrupt import Interrupt
from .._core.resume import CANCEL_TIMEOUT
from .._io.backend import reach_untracked
from .._io.loop_watchdog import LoopWatchdog, loop_watchdog

__all__ = [
    "AsyncSend",
    "CancelAttempt",
    "Cancellable",
    "Detached",
    "apause",
    "cancel_response",
    "sent",
]

logger = logging.getLogger("hermes_transport")


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


class Cancellable:
    """A cancel scope that ``guard``'s kill cancels while no socket is attached (armed on
    ``watcher``); the caller raises ``GuardFired`` when it was cancelled.

    A class rather than a generator-based context manager: one is open per request
    waiting for its first event, and thousands may wait at once.
    """

    __slots__ = ("_fallback", "_guard", "_scope", "_watcher")

    def __init__(self, guard: Guard, watcher: LoopWatchdog) -> None:
        self._guard = guard
        self._watcher = watcher
        self._scope = anyio.CancelScope()
        self._fallback = CancelAttempt(self._scope, watcher)

    def __enter__(self) -> anyio.CancelScope:
        scope = self._scope.__enter__()
        try:
            self._guard.set_fallback(self._fallback)
            self._watcher.arm(self._guard)
        except BaseException as exc:  # the scope never stays entered past its with
            self.__exit__(type(exc), exc, exc.__traceback__)
            raise
        return scope

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        self._fallback.active = False
        self._guard.set_fallback(None)
        return bool(self._scope.__exit__(exc_type, exc_value, traceback))


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
        with Cancellable(guard, watcher) as scope:
            response = await handle(request)
    finally:
        current_guard.reset(context)
    if scope.cancelled_caught:
        raise GuardFired
    if untracked:
        reach_untracked(response, guard)
    return response


async def apause(
    seconds: float,
    tokens: Sequence[Interrupt],
    watcher: LoopWatchdog,
    woken: anyio.Event | None = None,
) -> None:
    """Wait ``seconds`` before a re-send or a resume, or until one of ``tokens`` fires (from
    any thread; the next attempt then fails at once, sending nothing) or ``woken`` is set
    (on the loop)."""
    woken = woken if woken is not None else anyio.Event()
    removers = [
        token._add_listener(lambda _reason: watcher.call_soon_threadsafe(woken.set))
        for token in tokens
    ]
    try:
        with anyio.move_on_after(seconds):
            await woken.wait()
    finally:
        for remove in removers:
            remove()


class Detached:
    """One transport's work that its caller does not wait for (a cancel after an
    interrupt): each piece a task on the loop that started it (``LoopWatchdog.spawn``),
    no thread. ``wait()`` (the transport's close) waits for what is still running on
    its loop, at most ``CANCEL_TIMEOUT`` seconds and a little: each piece bounds itself
    too. Started while the caller's task is being cancelled (its loop may be ending),
    a piece is done there and then instead, shielded: a task started then might never run.
    """

    def __init__(self) -> None:
        self._running: dict[anyio.Event, LoopWatchdog] = {}

    async def start(self, watcher: LoopWatchdog, work: Callable[[], Awaitable[None]]) -> None:
        """Run ``work()`` (which never raises) on ``watcher``'s loop, from now on."""
        if watcher.unwinding():
            with anyio.CancelScope(shield=True):
                await work()
            return
        done = anyio.Event()
        self._running[done] = watcher

        async def tracked() -> None:
            try:
                await work()
            finally:
                done.set()
                self._running.pop(done, None)

        watcher.spawn(tracked, "hermes-transport-cancel")

    async def wait(self) -> None:
        """Wait for the work still running on this loop (another loop's is not waited for,
        and forgotten: that loop may be gone, its work with it)."""
        here = loop_watchdog()
        for done, watcher in list(self._running.items()):
            if watcher is not here:
                self._running.pop(done, None)
        with anyio.move_on_after(CANCEL_TIMEOUT + 1.0):
            for done in list(self._running):
                await done.wait()


async def cancel_response(send: AsyncSend, watcher: LoopWatchdog, request: Any) -> None:
    """Cancel the response on the server, within ``CANCEL_TIMEOUT`` seconds; never
    raises (a cancel that fails is logged, and so is one the loop's end cut short)."""
    guard = Guard("connecting")
    guard.deadline = monotonic() + CANCEL_TIMEOUT
    try:
        response = await send(request, guard)
        try:
            await response.aread()
        finally:
            await response.aclose()
    except Exception as exc:
        logger.warning("cancelling %s failed: %r", request.url.path, exc)
    except BaseException:
        logger.warning("cancelling %s given up: its event loop is ending", request.url.path)
        raise
    else:
        logger.info("cancelled %s: %d", request.url.path, response.status_code)
    finally:
        guard.close()
        watcher.release(guard)
