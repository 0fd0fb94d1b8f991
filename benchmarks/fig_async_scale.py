"""Figure 6c: async at scale, a client per stream, at 250, 1,000 and 10,000 streams (#26).

How a new user runs many streams: one ``AsyncClient(transport=AsyncWatchdogTransport())``
per stream (so each stream opens its own connection), entered and closed by the stream's
task, with the library's default limits and ``StreamPolicy()``; against the same code on
the library's own transport. The shape is ``async_load``'s: the server thinks (3 s, 8 s,
45 s: longer than opening every stream takes), then sends 20 events 50 ms apart; all the
streams are open at once (the peak is measured), in one asyncio loop, in a fresh process
per sample, the clients alternating, medians.

Building 10,000 clients, each loading its own SSL context (about 25 ms each here), would
take minutes: every client of both variants gets the same one ``ssl.SSLContext``
(``verify=``), built untimed, as are the clients (a context is one object to the
collector, so sharing it changes nothing it scans).

Per size: the CPU of each client and their ratio (target <= 1.05x), what the watchdog adds
a stream (``(watchdog - plain) / streams``), the memory a stream (target: at most 4 KiB
more than plain's) and the collector's share: full (generation 2) collections and their
time, through ``gc.callbacks`` (``measure.gc_stats``). Then one row for the cost's shape:
the extra a stream at 10,000 is at most 1.5 times the extra at 250 (a flat cost; the
issue saw it grow 8 times from 250 to 1,000, mostly in the collector).

Rounds: 5 at 250, 3 at 1,000 and one at 10,000 (each sample takes about 80 s there), so
the figure takes about six minutes.
"""

from __future__ import annotations

from . import async_rows
from .async_load import Load, Sample, measure
from .async_rows import KIB, Summary, fmt_us
from .fig_async import TARGET, description, streams_allowed
from .measure import fmt_s
from .report import Row, Verdict
from .variants import Variant

__all__ = ["run"]

#: Bytes a stream the watchdog may add to plain's, at the peak.
MEMORY_TARGET = 4 * KIB
#: The extra CPU a stream at the largest size, at most this many times the smallest's.
FLAT_TARGET = 1.5
FULL = (
    Load("6c/250", 250, per_client=1, servers=1, think=3.0, rounds=5),
    Load("6c/1,000", 1_000, per_client=1, servers=1, think=8.0, rounds=3),
    Load("6c/10,000", 10_000, per_client=1, servers=4, think=45.0, rounds=1),
)
QUICK = (
    Load("6c/100", 100, per_client=1, servers=1, think=1.5, rounds=1),
    Load("6c/250", 250, per_client=1, servers=1, think=3.0, rounds=1),
    Load("6c/1,000", 1_000, per_client=1, servers=1, think=8.0, rounds=1),
)


def _size_row(summary: Summary, samples: dict[Variant, list[Sample]]) -> Row:
    load, streams = summary.load, summary.streams
    memory = async_rows.memory_extra(summary)
    failed = any(summary.failed.values())
    memory_ok = memory is None or memory <= MEMORY_TARGET
    verdict: Verdict = "PASS" if summary.ratio <= TARGET and memory_ok and not failed else "MISS"
    found = async_rows.notes(summary, samples)
    if memory is not None:
        found.append(f"memory the watchdog adds a stream: {memory / KIB:+.1f} KiB")
    return Row(
        key=load.key,
        figure=description(load, streams),
        cells={
            "watchdog": async_rows.cell(summary, "watchdog"),
            "plain": async_rows.cell(summary, "plain"),
            "seed": "n/a: sync-only design (a thread per call)",
        },
        target=(
            f"watchdog/plain CPU <= {TARGET:.2f}x; memory <= plain +"
            f" {MEMORY_TARGET // KIB} KiB a stream"
        ),
        verdict=verdict,
        data=async_rows.data(summary, samples),
        notes=found,
    )


def _flat_row(summaries: list[Summary]) -> Row:
    """Whether the extra CPU a stream stays flat from the smallest size to the largest."""
    small, large = summaries[0], summaries[-1]
    sizes = " / ".join(f"{s.streams:,}" for s in summaries)

    def per_stream(v: Variant) -> str:
        return " / ".join(fmt_s(s.cpu[v] / s.streams) for s in summaries)

    growth = large.extra / small.extra if small.extra > 0 else None
    if growth is not None:
        passed = growth <= FLAT_TARGET
        shown = f"{large.streams:,} vs {small.streams:,}: {growth:.2f}x"
    else:  # no extra to grow from (noise, or none): only none at the largest passes
        passed = large.extra <= 0
        shown = f"no extra at {small.streams:,}: n/a"
    extras = " / ".join(fmt_us(s.extra) for s in summaries)
    collections = "; ".join(
        f"{s.streams:,}: {s.gen2['plain']:g} / {s.gen2['watchdog']:g}"
        f" ({fmt_s(s.gen2_s['plain'])} / {fmt_s(s.gen2_s['watchdog'])})"
        for s in summaries
    )
    return Row(
        key="6c",
        figure=(
            f"async, a client per stream: the CPU the watchdog adds a stream,"
            f" (watchdog - plain) / streams, at {sizes} streams (rows above)"
        ),
        cells={
            "watchdog": f"adds {extras} a stream ({shown}); CPU a stream {per_stream('watchdog')}",
            "plain": f"CPU a stream {per_stream('plain')}",
            "seed": "n/a: sync-only design (a thread per call)",
        },
        target=f"extra at {large.streams:,} <= {FLAT_TARGET:g}x extra at {small.streams:,}",
        verdict="PASS" if passed else "MISS",
        data={"extra_cpu_per_stream_s": {s.streams: s.extra for s in summaries}},
        notes=[
            "full collections plain / watchdog (their CPU), by size: " + collections,
        ],
    )


def run(quick: bool) -> list[Row]:
    """Each size in turn, the clients alternating; a row per size, then the flat-cost row."""
    rows, summaries = [], []
    for load in QUICK if quick else FULL:
        streams = streams_allowed(load)
        samples = measure(load, streams)
        summary = async_rows.summarize(load, streams, samples)
        summaries.append(summary)
        rows.append(_size_row(summary, samples))
    return [*rows, _flat_row(summaries)]
