"""The gaps between one stream's progress, summed up in fixed size: ``GapSummary``.

Owned by the stream's ``stats.StreamRecord``, written on the hot path (one ``add`` per
chunk that carried progress); pure arithmetic, no clock of its own.
"""

from __future__ import annotations

import math
from array import array

__all__ = ["GAP_RESOLUTION", "GapSummary"]

#: The gap summary's resolution: buckets a quarter octave wide, so a percentile
#: is within 12.5 % of the true gap (and never outside the smallest and
#: largest gap seen).
GAP_RESOLUTION = 0.125
_SMALLEST = 1e-4  # seconds: gaps shorter than this share the first bucket
_OCTAVES = 28  # from 0.1 ms to about 7.5 hours; longer ones share the last bucket
_BUCKETS = 1 + 4 * _OCTAVES
_LAST = _BUCKETS - 1
_ITEM = array("I").itemsize
_PER_SMALLEST = 1 / _SMALLEST
_frexp = math.frexp


class GapSummary:
    """The gaps between progress chunks of one stream, in fixed space.

    ``add(now)`` is called on each chunk that carried progress, with the time
    the watch already read for its deadline: a subtraction, a comparison and
    one bucket's increment. Exact: ``largest``; ``count`` and the percentiles
    from quarter-octave buckets (``GAP_RESOLUTION``).
    """

    __slots__ = ("_bins", "_last", "largest")

    def __init__(self) -> None:
        # +inf until the first progress: the first "gap" is negative, and starts the count.
        self._last = math.inf
        self._bins: array[int] | None = None  # allocated at the first progress
        self.largest = 0.0

    def add(self, now: float) -> None:
        """Progress at ``now``: the gap since the last progress is summed up."""
        gap = now - self._last
        self._last = now
        if gap < _SMALLEST:
            if gap < 0:  # the first progress of this stream (or attempt): no gap yet
                if self._bins is None:
                    self._bins = array("I", bytes(_BUCKETS * _ITEM))
                return
            self._bins[0] += 1  # type: ignore[index]
            return
        if gap > self.largest:
            self.largest = gap
        mantissa, exponent = _frexp(gap * _PER_SMALLEST)  # mantissa in [0.5, 1), exponent >= 1
        index = 4 * exponent - 3 + int((mantissa - 0.5) * 8)
        self._bins[index if index < _BUCKETS else _LAST] += 1  # type: ignore[index]

    def restart(self) -> None:
        """A new attempt's stream: no gap spans the two."""
        self._last = math.inf

    @property
    def count(self) -> int:
        """How many gaps were summed up."""
        return sum(self._bins) if self._bins is not None else 0

    def percentile(self, fraction: float) -> float | None:
        """The gap below which ``fraction`` (0 to 1) of the gaps fall (``None``: no gap)."""
        bins, count = self._bins, self.count
        if bins is None or not count:
            return None
        rank = max(1, math.ceil(fraction * count))
        seen = 0
        for index, number in enumerate(bins):
            seen += number
            if seen >= rank:
                return min(_middle(index), self.largest)
        return self.largest


def _middle(index: int) -> float:
    """The middle of bucket ``index``, in seconds."""
    if index == 0:
        return _SMALLEST / 2
    octave, quarter = divmod(index - 1, 4)
    low: float = _SMALLEST * 2.0**octave * (1 + quarter / 4)
    return low * (1 + 1 / 8)
