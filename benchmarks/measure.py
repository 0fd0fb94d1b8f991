"""Small statistics and formatting helpers shared by the figures."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Iterator, Sequence

__all__ = [
    "causes",
    "distribution",
    "fmt_ms",
    "fmt_s",
    "gc_seconds",
    "percentile",
]


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), interpolating linearly between order statistics."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(samples: Sequence[float]) -> dict[str, float | int]:
    """n, min, p50, p99, max and mean of ``samples`` (seconds), for tables and JSON."""
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "min": min(samples),
        "p50": percentile(samples, 50),
        "p99": percentile(samples, 99),
        "max": max(samples),
        "mean": statistics.fmean(samples),
    }


def fmt_ms(seconds: float) -> str:
    """Seconds as milliseconds with about three significant digits."""
    ms = seconds * 1e3
    if abs(ms) >= 100:
        return f"{ms:.0f}"
    if abs(ms) >= 10:
        return f"{ms:.1f}"
    return f"{ms:.2f}"


def fmt_s(seconds: float) -> str:
    """Seconds with about three significant digits."""
    if seconds >= 10:
        return f"{seconds:.1f} s"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.1 else f"{seconds * 1e3:.1f} ms"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or during, innermost last.

    The openai SDK wraps transport errors (``APITimeoutError`` from a ``StreamStalled``,
    say); the figures classify an outcome by what is anywhere in this chain.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


class _GcClock:
    """A ``gc.callbacks`` entry adding up the time spent in the cyclic collector."""

    def __init__(self) -> None:
        self.total = 0.0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._started


_GC_CLOCK = _GcClock()


def gc_seconds() -> float:
    """Seconds this process spent in the cyclic garbage collector since the first call.

    A collection holds the GIL, whichever thread runs it: one that falls inside a
    sub-millisecond measurement (a gen-2 one took 86 ms here) is worth knowing about.
    """
    if _GC_CLOCK not in gc.callbacks:
        gc.callbacks.append(_GC_CLOCK)
    return _GC_CLOCK.total
