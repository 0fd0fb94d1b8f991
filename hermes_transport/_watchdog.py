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
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
import time
from typing import Protocol

__all__ = ["Target", "Watchdog", "watchdog"]

logger = logging.getLogger("hermes_transport")

# Below this size the heap is never compacted; above it, compaction runs once
# the heap has doubled since the last one, so its cost is amortised O(1).
_COMPACT_FLOOR = 1024


class Target(Protocol):
    """What the watchdog watches: a mutable deadline and what to do when it passes."""

    # time.monotonic() seconds, or None once the target is disarmed.
    deadline: float | None

    def expire(self) -> None: ...


class Watchdog:
    """A heap of deadlines served by one lazily started daemon thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Target]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None
        self._compact_at = _COMPACT_FLOOR

    def arm(self, target: Target) -> None:
        """Watch ``target`` until its ``deadline`` passes or becomes ``None``."""
        deadline = target.deadline
        if deadline is None:
            return
        with self._cond:
            heapq.heappush(self._heap, (deadline, next(self._seq), target))
            if len(self._heap) >= self._compact_at:
                self._compact()
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="hermes-transport-watchdog", daemon=True
                )
                self._thread.start()
            elif self._heap[0][2] is target:
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

    def _compact(self) -> None:
        # Disarmed targets otherwise linger until their old deadline pops.
        self._heap = [entry for entry in self._heap if entry[2].deadline is not None]
        heapq.heapify(self._heap)
        self._compact_at = max(_COMPACT_FLOOR, 2 * len(self._heap))

    def _run(self) -> None:
        while True:
            due = self._wait_for_due()
            # Expire outside the lock: expiry shuts sockets down, and arm()
            # must never wait behind I/O.
            for target in due:
                try:
                    target.expire()
                except Exception:  # a bug, but the watcher must live on for the others
                    logger.exception("watchdog: expiring %r failed", target)

    def _wait_for_due(self) -> list[Target]:
        due: list[Target] = []
        with self._cond:
            while True:
                heap = self._heap
                if not heap:
                    if due:
                        return due
                    self._cond.wait()
                    continue
                deadline, _, target = heap[0]
                now = time.monotonic()
                if deadline > now:
                    if due:
                        return due
                    self._cond.wait(deadline - now)
                    continue
                heapq.heappop(heap)
                current = target.deadline
                if current is None:
                    continue
                if current > now:
                    heapq.heappush(heap, (current, next(self._seq), target))
                    continue
                due.append(target)

    def _after_fork(self) -> None:
        # The thread does not exist in a forked child; the lock may be held by it.
        self._cond = threading.Condition(threading.Lock())
        self._heap = []
        self._thread = None
        self._compact_at = _COMPACT_FLOOR


watchdog = Watchdog()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=watchdog._after_fork)
