"""Deadline watchers that run on an event loop's own timers: one per loop, no thread.

The async twin of ``watchdog``, with the same heap and the same lazy
re-arming (a progress event moves ``guard.deadline``; nothing else). The
loop holds one alarm, set for the earliest deadline; when it rings the
watcher expires what is overdue and sets it again.

- asyncio: the alarm is a ``loop.call_at`` timer handle.
- trio: there are no timer callbacks, so a system task started on first use
  sleeps in a cancel scope whose deadline is the alarm.

Everything here runs on the loop's thread, except ``call_soon_threadsafe``,
which is how a kill from another thread reaches the loop. ``spawn`` runs
work the caller must not wait for (a cancel after an interrupt) as a task of
the same loop: asyncio's ``create_task`` (held until done), trio's system
nursery. No thread either way.

Invariant: as in ``watchdog``, nothing is expired before
``monotonic() >= target.deadline``. Every timer is set at most ``MAX_WAIT``
ahead; a farther deadline is reached in steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import sys
import weakref
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from .._core.clock import monotonic
from .._core.deadlines import DeadlineHeap, Target, bounded_wait, expire_all

__all__ = ["LoopWatchdog", "loop_watchdog"]

logger = logging.getLogger("hermes_transport")


class _Alarm(Protocol):
    def set(self, when: float) -> None:
        """Ring at ``monotonic()`` ``when`` (replacing any earlier setting)."""

    def cancel(self) -> None: ...

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None: ...

    def spawn(self, work: Callable[[], Coroutine[Any, Any, None]], name: str) -> None: ...

    def unwinding(self) -> bool: ...


class LoopWatchdog:
    """The deadline heap of one event loop, served by the loop's alarm."""

    def __init__(self, make_alarm: Callable[[Callable[[], None]], _Alarm]) -> None:
        self._heap = DeadlineHeap()
        # Targets armed and not yet released or dropped: the alarm is set while any is.
        self._live: set[Target] = set()
        self._alarm_at: float | None = None
        self._alarm = make_alarm(self._ring)  # rings on the loop: calls _ring

    def arm(self, target: Target) -> None:
        """Watch ``target`` until its ``deadline`` passes, becomes ``None`` or it is released."""
        if target.deadline is None:
            return
        self._heap.push(target)
        self._live.add(target)
        earliest = self._heap.earliest()
        assert earliest is not None
        if self._alarm_at is None or earliest < self._alarm_at:
            self._set_alarm(earliest)

    def release(self, target: Target) -> None:
        """``target`` is done; with nothing left to watch, the alarm is taken down."""
        self._live.discard(target)
        if not self._live:
            self._heap.clear()
            if self._alarm_at is not None:
                self._alarm_at = None
                self._alarm.cancel()

    def live(self) -> int:
        """Targets watched now (armed, not released)."""
        return len(self._live)

    @property
    def alarm_set(self) -> bool:
        """Whether a timer (or the trio task's deadline) is set on the loop."""
        return self._alarm_at is not None

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` on the loop soon; from any thread. Dropped if the loop is gone."""
        self._alarm.call_soon_threadsafe(callback)

    def spawn(self, work: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run ``work()`` as a task of this loop, now, on the loop's thread; not awaited.
        ``work`` must not raise: an error it lets out is logged (trio's run would crash)."""

        async def run() -> None:
            try:
                await work()
            except Exception:
                logger.exception("watchdog: %s failed", name)

        self._alarm.spawn(run, name)

    def unwinding(self) -> bool:
        """Whether the current task is being cancelled (asyncio 3.11+: ``cancelling()``;
        trio: its deadline has passed). Its loop may then be ending, and a task spawned now
        might never run: asyncio.run() cancels only the tasks there were."""
        return self._alarm.unwinding()

    def _set_alarm(self, when: float) -> None:
        self._alarm_at = when
        self._alarm.set(when)

    def _ring(self) -> None:
        self._alarm_at = None
        try:
            due = self._heap.pop_due(monotonic())
            self._live.difference_update(due)
            if not self._heap:
                self._live.clear()  # whatever is left was disarmed before its deadline
            for target in expire_all(due):  # a guard whose caller is behind: again
                self.arm(target)
        except Exception:
            # A bug. Raised here it would crash trio's run (the alarm is a system
            # task there). The alarm stays down until the next arm(), so a failure
            # that repeats cannot spin the loop.
            logger.exception("watchdog: the event-loop watcher failed")
            return
        earliest = self._heap.earliest()
        if earliest is not None and self._alarm_at is None:
            self._set_alarm(earliest)


class _AsyncioAlarm:
    """The alarm as a timer handle on an asyncio loop (held weakly: the loop owns us)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ring: Callable[[], None]) -> None:
        self._loop = weakref.ref(loop)
        self._ring = ring
        self._handle: asyncio.TimerHandle | None = None
        # Spawned tasks, held until done: the loop itself holds its tasks weakly.
        self._tasks: set[asyncio.Task[None]] = set()

    def set(self, when: float) -> None:
        loop = self._loop()
        if loop is None:
            return
        if self._handle is not None:
            self._handle.cancel()
        # The loop's clock need not be monotonic(); convert through a delay,
        # bounded (uvloop's timers overflow on huge ones): a far deadline is
        # reached in steps, the watcher re-setting the alarm each time.
        self._handle = loop.call_later(bounded_wait(when - monotonic()), self._rung)

    def _rung(self) -> None:
        self._handle = None
        # One more pass of the loop first. A loop that was behind takes the
        # bytes that arrived meanwhile off the socket in this same pass, before
        # this timer runs, and wakes their reader only in the next: looking now
        # would take that caller's lag for a silent server.
        loop = self._loop()
        if loop is not None:
            loop.call_soon(self._ring)

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        loop = self._loop()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # closed: nothing left to stop
                loop.call_soon_threadsafe(callback)

    def spawn(self, work: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        loop = self._loop()
        if loop is None:
            return
        task = loop.create_task(work(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def unwinding(self) -> bool:
        task = asyncio.current_task()
        cancelling = getattr(task, "cancelling", None)  # Python 3.11+
        return bool(cancelling is not None and cancelling())


class _TrioAlarm:
    """The alarm as the deadline of a cancel scope a system task sleeps in."""

    def __init__(self, ring: Callable[[], None]) -> None:
        import trio

        self._trio: Any = trio
        self._ring = ring
        self._token = trio.lowlevel.current_trio_token()
        self._when = math.inf  # monotonic
        self._scope: Any = None
        trio.lowlevel.spawn_system_task(self._run, name="hermes-transport-watchdog")

    def _deadline(self) -> float:
        if self._when == math.inf:
            return math.inf
        now: float = self._trio.current_time()
        return now + bounded_wait(self._when - monotonic())

    def set(self, when: float) -> None:
        self._when = when
        if self._scope is not None:
            self._scope.deadline = self._deadline()

    def cancel(self) -> None:
        self.set(math.inf)

    def call_soon_threadsafe(self, callback: Callable[[], None]) -> None:
        with contextlib.suppress(self._trio.RunFinishedError):
            self._token.run_sync_soon(callback)

    def spawn(self, work: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        # A system task: trio's only nursery that outlives the caller's task. Cancelled
        # when the run's main task ends, as asyncio.run() cancels what is left.
        self._trio.lowlevel.spawn_system_task(work, name=name)

    def unwinding(self) -> bool:
        return bool(self._trio.current_effective_deadline() == -math.inf)

    async def _run(self) -> None:
        trio = self._trio
        while True:
            with trio.CancelScope(deadline=self._deadline()) as scope:
                self._scope = scope
                await trio.sleep_forever()
            self._scope = None
            if self._when != math.inf and monotonic() >= self._when:
                # Two more scheduling passes first: a reader that trio woke in the
                # same pass takes its bytes off the socket and then yields once
                # more inside receive_some() before it can judge them; looking
                # now would take that caller's lag for a silent server.
                await trio.lowlevel.cancel_shielded_checkpoint()
                await trio.lowlevel.cancel_shielded_checkpoint()
                self._when = math.inf
                self._ring()


_asyncio_watchdogs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopWatchdog] = (
    weakref.WeakKeyDictionary()
)
_trio_watchdog: Any = None  # a trio RunVar, made on first use under trio


def loop_watchdog() -> LoopWatchdog:
    """The watcher of the running event loop (asyncio or trio), made on first use."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return _for_trio()
    watcher = _asyncio_watchdogs.get(loop)
    if watcher is None:
        watcher = LoopWatchdog(lambda ring: _AsyncioAlarm(loop, ring))
        _asyncio_watchdogs[loop] = watcher
    return watcher


def _for_trio() -> LoopWatchdog:
    global _trio_watchdog
    trio = sys.modules.get("trio")
    try:
        if trio is None:
            raise RuntimeError("trio is not imported")
        trio.lowlevel.current_trio_token()
    except RuntimeError:
        raise RuntimeError(
            "hermes_transport's async transport needs a running asyncio or trio event loop"
        ) from None
    if _trio_watchdog is None:
        _trio_watchdog = trio.lowlevel.RunVar("hermes_transport_watchdog")
    try:
        watcher: LoopWatchdog = _trio_watchdog.get()
    except LookupError:
        watcher = LoopWatchdog(_TrioAlarm)
        _trio_watchdog.set(watcher)
    return watcher
