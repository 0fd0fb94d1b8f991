"""Small statistics and formatting helpers shared by the figures."""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from .progress import say

__all__ = [
    "GcStats",
    "alternating",
    "causes",
    "distribution",
    "fmt_ms",
    "fmt_s",
    "gc_seconds",
    "gc_stats",
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
    """A ``gc.callbacks`` entry adding up the time spent in the cyclic collector (wall
    clock), and its runs and CPU time by generation."""

    def __init__(self) -> None:
        self.total = 0.0
        self.runs = [0, 0, 0]
        self.cpu = [0.0, 0.0, 0.0]
        self._started = 0.0
        self._started_cpu = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            self._started_cpu = time.thread_time()  # a collection runs on one thread
        else:
            self.total += time.perf_counter() - self._started
            generation = min(max(info.get("generation", 2), 0), 2)
            self.runs[generation] += 1
            self.cpu[generation] += time.thread_time() - self._started_cpu


_GC_CLOCK = _GcClock()


def _clock() -> _GcClock:
    if _GC_CLOCK not in gc.callbacks:
        gc.callbacks.append(_GC_CLOCK)
    return _GC_CLOCK


def gc_seconds() -> float:
    """Seconds this process spent in the cyclic garbage collector since the first call.

    A collection holds the GIL, whichever thread runs it: one that falls inside a
    sub-millisecond measurement (a gen-2 one took 86 ms here) is worth knowing about.
    """
    return _clock().total


@dataclass(frozen=True)
class GcStats:
    """The cyclic collector's runs and CPU seconds (of the thread that ran each), by
    generation (0, 1, 2), since the first call of ``gc_stats()``; subtract two to get what
    happened between them. A ``gc.collect()`` counts as a run of generation 2, so measure
    between your own calls. CPU time, unlike ``gc_seconds()``: on a busy machine a
    collection's wall time includes the time the process was not running."""

    runs: tuple[int, int, int] = (0, 0, 0)
    seconds: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def total_seconds(self) -> float:
        return sum(self.seconds)

    def __sub__(self, other: GcStats) -> GcStats:
        (r0, r1, r2), (o0, o1, o2) = self.runs, other.runs
        (s0, s1, s2), (p0, p1, p2) = self.seconds, other.seconds
        return GcStats((r0 - o0, r1 - o1, r2 - o2), (s0 - p0, s1 - p1, s2 - p2))


def gc_stats() -> GcStats:
    """The collector's runs and CPU seconds by generation so far (see ``GcStats``)."""
    clock = _clock()
    runs, seconds = clock.runs, clock.cpu
    return GcStats((runs[0], runs[1], runs[2]), (seconds[0], seconds[1], seconds[2]))


_Variant = TypeVar("_Variant")
_Sample = TypeVar("_Sample")


def alternating(
    rounds: int,
    clients: tuple[_Variant, _Variant],
    sample: Callable[[_Variant], _Sample],
    said: Callable[[int, _Variant, _Sample], str],
) -> dict[_Variant, list[_Sample]]:
    """``rounds`` samples of each client, the first of them turning each round, each
    reported as it comes (``said(round, client, sample)``)."""
    samples: dict[_Variant, list[_Sample]] = {client: [] for client in clients}
    for number in range(rounds):
        for client in clients if number % 2 == 0 else clients[::-1]:
            samples[client].append(one := sample(client))
            say(said(number, client, one))
    return samples
