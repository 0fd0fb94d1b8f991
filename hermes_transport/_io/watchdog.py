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
goes on, and ``arm()`` starts a new thread if the last one died. A child
process after ``fork()`` starts with an empty heap and, on first use, its own
thread. Async code never uses it: each event loop has its own watcher
(``loop_watchdog``).
"""

from __future__ import annotations

import logging
import os
import threading
import time

from .._core.clock import monotonic
from .._core.deadlines import DeadlineHeap, Target, bounded_wait, expire_all

__all__ = ["Watchdog", "watchdog"]

logger = logging.getLogger("hermes_transport")

# After an unexpected error in the watcher loop: first pause, and the longest one.
_ERROR_PAUSE = 0.01
_MAX_ERROR_PAUSE = 1.0


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


watchdog = Watchdog()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=watchdog._after_fork)
