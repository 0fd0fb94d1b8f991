"""Deadlines in order: the heap both watchdogs (thread and event loop) serve.

Pure: no clock read, no lock, no I/O. ``DeadlineHeap`` orders targets by
deadline with lazy re-arming (a target moves its own ``deadline`` later with
one attribute write; the heap notices when the old entry comes due);
``expire_all`` expires what came due and says what is still armed. The
watchers in ``_io`` own the thread or the loop timer, the lock and the clock.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import math
from typing import Protocol

__all__ = ["MAX_WAIT", "DeadlineHeap", "Target", "bounded_wait", "expire_all"]

logger = logging.getLogger("hermes_transport")

# Below this size the heap is never compacted; above it, compaction runs once
# the heap has doubled since the last one, so its cost is amortised O(1).
_COMPACT_FLOOR = 1024

#: The longest single sleep of a watcher (thread or event-loop timer), in seconds:
#: far below ``threading.TIMEOUT_MAX`` and any loop's timer range, and long
#: enough that waking once an hour towards a far deadline costs nothing.
MAX_WAIT = 3600.0


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
