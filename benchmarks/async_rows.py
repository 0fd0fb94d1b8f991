"""What figures 6a-6c report of their samples (``async_load``): cells, notes, data."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .async_load import CLIENTS, Load, Sample, median
from .measure import fmt_s
from .variants import Variant

__all__ = ["KIB", "Summary", "cell", "data", "fmt_us", "memory_extra", "notes", "summarize"]

KIB = 1024


@dataclass(frozen=True)
class Summary:
    """The medians of a load's samples, by client."""

    load: Load
    streams: int
    cpu: dict[Variant, float]
    wall: dict[Variant, float]
    ratio: float  # watchdog / plain, medians of CPU
    per_round: list[float]  # watchdog / plain CPU, round by round
    extra: float  # seconds of CPU the watchdog adds a stream: (watchdog - plain) / streams
    memory: dict[Variant, float | None]  # bytes a stream at the peak (None: not on Linux)
    peak: dict[Variant, int]  # the fewest streams open at once in any sample
    failed: dict[Variant, int]
    gen2: dict[Variant, float]  # full collections
    gen2_s: dict[Variant, float]  # CPU seconds in them
    gc_s: dict[Variant, float]  # CPU seconds in all collections


def summarize(load: Load, streams: int, samples: dict[Variant, list[Sample]]) -> Summary:
    def med(name: str) -> dict[Variant, float]:
        return {v: median(samples[v], name) for v in CLIENTS}

    cpu = med("cpu")
    memory: dict[Variant, float | None] = {}
    for v in CLIENTS:
        grown = [s.rss_growth / s.peak_open for s in samples[v] if s.rss_growth and s.peak_open]
        memory[v] = statistics.median(grown) if grown else None
    return Summary(
        load=load,
        streams=streams,
        cpu=cpu,
        wall=med("wall"),
        ratio=cpu["watchdog"] / cpu["plain"],
        per_round=[
            w.cpu / p.cpu for w, p in zip(samples["watchdog"], samples["plain"], strict=True)
        ],
        extra=(cpu["watchdog"] - cpu["plain"]) / streams,
        memory=memory,
        peak={v: min(s.peak_open for s in samples[v]) for v in CLIENTS},
        failed={v: sum(s.failed for s in samples[v]) for v in CLIENTS},
        gen2=med("gen2"),
        gen2_s=med("gen2_s"),
        gc_s=med("gc_s"),
    )


def fmt_us(seconds: float) -> str:
    """Seconds as microseconds, signed (an extra cost may come out below zero)."""
    return f"{seconds * 1e6:+,.0f} µs"


def memory_extra(summary: Summary) -> float | None:
    """Bytes a stream the watchdog adds at the peak (None: not measured)."""
    watchdog, plain = summary.memory["watchdog"], summary.memory["plain"]
    return None if watchdog is None or plain is None else watchdog - plain


def cell(summary: Summary, v: Variant) -> str:
    """CPU (and the ratio, the extra a stream), wall, peak, memory, the collector."""
    text = f"CPU {fmt_s(summary.cpu[v])}"
    if v == "watchdog":
        text += f" ({summary.ratio:.3f}x, {fmt_us(summary.extra)} a stream)"
    text += f", wall {fmt_s(summary.wall[v])}, peak {summary.peak[v]:,} open"
    per_stream = summary.memory[v]
    if per_stream is not None:
        text += f", {per_stream / KIB:.1f} KiB a stream"
    text += (
        f"; collector: {summary.gen2[v]:g} full collections (CPU {fmt_s(summary.gen2_s[v])}),"
        f" all CPU {fmt_s(summary.gc_s[v])}"
    )
    return text + (f", {summary.failed[v]} failed" if summary.failed[v] else "")


def notes(summary: Summary, samples: dict[Variant, list[Sample]]) -> list[str]:
    """Round by round ratios, the times to open, and what went wrong."""
    load, streams = summary.load, summary.streams

    def timings(v: Variant) -> str:
        return (
            f"{v} all open after {median(samples[v], 'open_s'):.1f} s, first done after"
            f" {median(samples[v], 'first_end_s'):.1f} s"
        )

    found = [
        "watchdog/plain CPU, round by round: " + ", ".join(f"{r:.3f}" for r in summary.per_round),
        "; ".join(timings(v) for v in CLIENTS),
    ]
    found.append(
        "memory a stream: the growth of the client process's peak resident set (VmHWM) over"
        " the run, divided by the streams open at the peak"
        + ("" if all(summary.memory.values()) else " (n/a: Linux only)")
    )
    if streams < load.streams:
        found.append(
            f"{streams:,} streams, not {load.streams:,}: the hard limit of open files"
            " (RLIMIT_NOFILE) allows no more"
        )
    if any(p < streams for p in summary.peak.values()):
        found.append(
            f"not all {streams:,} streams were open at once (the think, {load.think:g} s,"
            f" was shorter than the opening): peak {summary.peak}"
        )
    if any(summary.failed.values()):
        found.append(f"failed streams (an HTTP error), all rounds: {summary.failed}")
    return found


def data(summary: Summary, samples: dict[Variant, list[Sample]]) -> dict[str, object]:
    """The numbers behind a row, every sample included, for the JSON file."""
    return {
        "streams": summary.streams,
        "ratio": summary.ratio,
        "per_round_ratio": summary.per_round,
        "extra_cpu_per_stream_s": summary.extra,
        "memory_per_stream_bytes": summary.memory,
        "think_s": summary.load.think,
        "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
    }
