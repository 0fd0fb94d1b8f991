"""Figures 6a and 6b: many concurrent async streams on shared clients, in one event loop.

Each stream is a raw SSE stream read with the run's HTTP library alone (httpx or httpx2,
no SDK), watchdog against plain, all in one asyncio loop: the shape of figure 6c
(``async_load``: the server thinks, then sends 20 events 50 ms apart; every stream is
open before the first event comes), on clients shared by many streams. 6a: 1,000 streams
on one client, as a service sharing one client for all its calls. 6b: 10,000 streams on
100 clients of 100, against four server processes of 2,500 (one FaultServer process
serving 10,000 threads fell behind the client), one round (one sample per client, about
80 s each). The figure takes about four minutes.

Shared clients keep no connection alive after its stream (``max_keepalive_connections=0``)
and 6b's hold 100 streams each: httpcore's pool walks all its connections each time it
assigns a request or one closes, quadratic in the streams a client holds (with 1,000 idle
connections that bookkeeping was most of the CPU time of both clients; one client of
10,000 streams took 90 s of CPU and never had more than 1,500 open at once), which would
hide what the watchdog itself costs. All the clients share the loop, hence the watchdog's
one loop timer and deadline heap.

10,000 sockets need as many file descriptors in the client and in the servers: the figure
raises the soft limit (``RLIMIT_NOFILE``) to what it needs, up to the hard limit, before it
starts them (it opens fewer streams, and says so, if the hard limit is too low).

The seed's design has no async path (a monitor thread per call), so it has no column.
"""

from __future__ import annotations

from . import async_rows
from .async_load import SPARE_FDS, Load, Sample, measure
from .process_state import raise_fd_limit
from .report import Row, Verdict
from .variants import Variant

__all__ = ["run"]

#: watchdog/plain, client CPU (#26), on both rows.
TARGET = 1.05
FULL = (
    Load("6a", 1_000, per_client=1_000, servers=1, think=8.0, rounds=2),
    Load("6b", 10_000, per_client=100, servers=4, think=45.0, rounds=1),
)
QUICK = (
    Load("6a", 200, per_client=200, servers=1, think=1.5, rounds=1),
    Load("6b", 1_000, per_client=100, servers=2, think=5.0, rounds=1),
)


def description(load: Load, streams: int) -> str:
    """The figure column of a row of figure 6."""
    clients = -(-streams // load.per_client)
    if load.per_client == 1:
        on = "a client of its own each (closed after its stream)"
    elif clients > 1:
        on = f"{clients} clients of {load.per_client:,} streams"
    else:
        on = "one client"
    return (
        f"async: {streams:,} concurrent raw streams ({load.think:g} s to the first event,"
        f" then {load.events} events {load.interval * 1e3:g} ms apart) in one loop on {on},"
        f" client CPU time, memory a stream and the collector's share, median of"
        f" {load.rounds} (x plain)"
    )


def row(load: Load, streams: int, samples: dict[Variant, list[Sample]]) -> Row:
    """A row of 6a or 6b: the CPU ratio is the target."""
    summary = async_rows.summarize(load, streams, samples)
    passed = summary.ratio <= TARGET and not any(summary.failed.values())
    verdict: Verdict = "PASS" if passed else "MISS"
    return Row(
        key=load.key,
        figure=description(load, streams),
        cells={
            "watchdog": async_rows.cell(summary, "watchdog"),
            "plain": async_rows.cell(summary, "plain"),
            "seed": "n/a: sync-only design (a thread per call)",
        },
        target=f"watchdog/plain CPU <= {TARGET:.2f}x",
        verdict=verdict,
        data=async_rows.data(summary, samples),
        notes=async_rows.notes(summary, samples),
    )


def streams_allowed(load: Load) -> int:
    """``load.streams``, or fewer if the hard limit of open files allows no more.

    Call it before the servers start: they and the samples' processes inherit the limit.
    """
    limit = raise_fd_limit(load.streams + SPARE_FDS)
    return min(load.streams, limit - SPARE_FDS)


def run(quick: bool) -> list[Row]:
    """Alternate the two clients for a few rounds per load; one row per load."""
    rows = []
    for load in QUICK if quick else FULL:
        streams = streams_allowed(load)
        rows.append(row(load, streams, measure(load, streams)))
    return rows
