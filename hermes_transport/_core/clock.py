"""The one clock every budget and deadline is read from.

Pure: no I/O, no threads. Test tools that freeze time replace ``time.monotonic``
(freezegun does, in every module that holds it, for the frozen thread only),
which would make a healthy stream look stalled at once, or a stall never
expire: the caller's thread and the watchdog would read different clocks. So
the deadline clock is the system's monotonic clock read through
``time.clock_gettime``, which such tools leave alone; where that call does not
exist (Windows), it is ``time.monotonic`` as found when this module was first
imported. Every deadline is compared only with this clock, and event-loop
timers are set through delays computed from it, never from the loop's own clock.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

__all__ = ["monotonic"]


def _system_monotonic() -> Callable[[], float]:
    clock_gettime = getattr(time, "clock_gettime", None)
    clock_id = getattr(time, "CLOCK_MONOTONIC", None)
    if clock_gettime is not None and clock_id is not None:
        # A partial, not a module attribute holding time.monotonic: freezegun
        # swaps any module attribute that *is* one of the real clock functions.
        return functools.partial(clock_gettime, clock_id)
    return functools.partial(time.monotonic)


#: Seconds of the system's monotonic clock; what ``time.monotonic()`` returns unpatched.
monotonic: Callable[[], float] = _system_monotonic()
