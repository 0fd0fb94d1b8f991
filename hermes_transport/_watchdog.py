"""The one process-wide deadline watcher.

A single daemon thread, started on first use, sleeps until the earliest
deadline in a heap and expires whatever is overdue. However many streams are
open there is one thread, and it wakes only when something may be due.

Re-arming is lazy: a target moves its own ``deadline`` attribute later (one
attribute write per progress event, no lock, no heap push). When the watcher
pops an entry whose target's deadline has moved, it pushes it back with the
new deadline instead of expiring it. Only moving a deadline *earlier* needs
``arm()`` again.

Invariant: a target is expired only when ``monotonic() >= target.deadline`` at
the moment the watcher looks, so nothing is ever expired early.

Nothing a target or a clock does can leave the process without a watcher:
every sleep is at most ``MAX_WAIT`` (a far deadline is slept towards in steps,
never handed to ``Condition.wait``, which refuses more than
``threading.TIMEOUT_MAX``), an exception in the loop is logged and the loop
goes on, and ``arm()`` starts a new thread if the last one died.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import os
import threading
import time
from typing import Protocol

from ._clock import monotonic

__all__ = [
    "MAX_WAIT",
    "DeadlineHeap",
    "Target",
    "Watchdog",
    "bounded_wait",
    "expire_all",
    "watchdog",
]

logger = logging.getLogger("hermes_transport")

# Below this size the heap is never compacted; above it, compaction runs once
# the heap has doubled since the last one, so its cost is amortised O(1).
_COMPACT_FLOOR = 1024

#: The longest single sleep of a watcher (thread or event-loop timer), in seconds:
#: far below ``threading.TIMEOUT_MAX`` and any loop's timer range, and long
#: enough that waking once an hour towards a far deadline costs nothing.
MAX_WAIT = 3600.0

# After an unexpected error in the watcher loop: first pause, and the longest one.
_ERROR_PAUSE = 0.01
_MAX_ERROR_PAUSE = 1.0


def bounded_wait(delay: float) -> float:
    """``delay`` clamped to ``[0, MAX_WAIT]``; NaN (a broken deadline) waits ``MAX_WAIT``."""
    if delay < MAX_WAIT:  # False for NaN
        return max(0.0, delay)
    return MAX_WAIT


def _key(deadline: float) -> float:
    # A NaN deadline would corrupt the heap's order (it compares false with
    # everything) and so hide others' deadlines: it sorts last, as "never".
    return math.inf if math.isnan(deadline) else deadline


class Target(Protocol):
    """What the watchdog watches: a mutable deadline and what to do when it passes."""

    # monotonic() seconds, or None once the target is disarmed.
    deadline: float | None

    def expire(self) -> None: ...


class DeadlineHeap:
    """Targets ordered by deadline, with lazy re-arming. Pure: no clock, no lock, no I/O.

    Entries are never moved: a target whose ``deadline`` moved later is pushed
    back when its old entry comes due, and a disarmed one (``deadline`` is
    ``None``) is dropped then. Compaction keeps the heap from filling up with
    disarmed entries; its cost is amortised O(1) per push.
    """

    __slots__ = ("_compact_at", "_heap", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Target]] = []
        self._seq = itertools.count()
        self._compact_at = _COMPACT_FLOOR

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, target: Target) -> bool:
        """Add ``target`` at its current deadline; whether it is now the earliest entry."""
        deadline = target.deadline
        if deadline is None:
            return False
        heapq.heappush(self._heap, (_key(deadline), next(self._seq), target))
        if len(self._heap) >= self._compact_at:
            self._compact()
        return self._heap[0][2] is target

    def earliest(self) -> float | None:
        """The deadline of the first entry (possibly a stale one), or ``None`` if empty."""
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> list[Target]:
        """Remove and return the targets whose current deadline is ``<= now``."""
        heap, due = self._heap, []
        while heap and heap[0][0] <= now:
            _, _, target = heapq.heappop(heap)
            current = target.deadline
            if current is None:
                continue
            if not current <= now:  # moved later (or NaN: never)
                heapq.heappush(heap, (_key(current), next(self._seq), target))
                continue
            due.append(target)
        return due

    def clear(self) -> None:
        self._heap.clear()
        self._compact_at = _COMPACT_FLOOR

    def _compact(self) -> None:
        # Disarmed targets otherwise linger until their old deadline pops.
        self._heap = [entry for entry in self._heap if entry[2].deadline is not None]
        heapq.heapify(self._heap)
        self._compact_at = max(_COMPACT_FLOOR, 2 * len(self._heap))


class Watchdog:
    """A heap of deadlines served by one lazily started daemon thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap = DeadlineHeap()
        self._thread: threading.Thread | None = None

    def arm(self, target: Target) -> None:
        """Watch ``target`` until its ``deadline`` passes or becomes ``None``."""
        with self._cond:
            earliest = self._heap.push(target)
            thread = self._thread
            if thread is None or not thread.is_alive():
                if not self._heap:
                    return
                # First use, or the last thread died (it should not: see _run):
                # either way the heap, kept intact, gets a watcher again.
                thread = threading.Thread(
                    target=self._run, name="hermes-transport-watchdog", daemon=True
                )
                thread.start()
                self._thread = thread
            elif earliest:
                # Only an earlier deadline than the one being slept on needs a wake-up.
                self._cond.notify()

    @property
    def thread(self) -> threading.Thread | None:
        """The watcher thread, once started."""
        return self._thread

    def pending(self) -> int:
        """Entries in the heap, disarmed ones not yet dropped included."""
        with self._cond:
            return len(self._heap)

    def _run(self) -> None:
        pause = _ERROR_PAUSE
        while True:
            try:
                due = self._wait_for_due()
                # Expire outside the lock: expiry shuts sockets down, and arm()
                # must never wait behind I/O.
                for target in expire_all(due):
                    self.arm(target)
            except Exception:
                # A bug, but every stall in the process depends on this thread:
                # log it and go on, pausing (longer each time) so a failure that
                # repeats cannot spin.
                logger.exception("watchdog: the watcher loop failed; it goes on")
                time.sleep(pause)
                pause = min(2 * pause, _MAX_ERROR_PAUSE)
            else:
                pause = _ERROR_PAUSE

    def _wait_for_due(self) -> list[Target]:
        with self._cond:
            while True:
                now = monotonic()
                due = self._heap.pop_due(now)
                if due:
                    return due
                earliest = self._heap.earliest()
                self._cond.wait(None if earliest is None else bounded_wait(earliest - now))

    def _after_fork(self) -> None:
        # The thread does not exist in a forked child; the lock may be held by it.
        self._cond = threading.Condition(threading.Lock())
        self._heap = DeadlineHeap()
        self._thread = None


def expire_all(due: list[Target]) -> list[Target]:
    """Expire each target; one that fails is logged and does not stop the others.

    Returns the targets still armed afterwards: a guard whose caller is behind
    moves its own deadline instead of firing, and must be watched again.
    """
    again = []
    for target in due:
        try:
            target.expire()
        except Exception:  # a bug, but the watcher must live on for the others
            logger.exception("watchdog: expiring %r failed", target)
        if target.deadline is not None:
            again.append(target)
    return again


watchdog = Watchdog()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=watchdog._after_fork)
