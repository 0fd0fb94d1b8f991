"""Figure 7's pure-CPU half: the SSE scanner alone, no I/O, per wire.

``SSEScanner(heartbeats, wire).feed(chunk)`` over one whole recorded body (what the fault
server sent for figure 7's stream on that wire), cut into 64 KiB chunks, timed from the
first feed to the last: nanoseconds per event of the body (every event, progress or not)
and megabytes per second. Each body is fed to the scanner of its own wire and to the
``generic`` one (what any other path gets), alternately, a fresh scanner per feed; the
figure is the median over the repetitions. ``heartbeats`` are the policy's for that wire.
The scanner is private (``hermes_transport._core.sse``): what is timed here is what the
transport runs once per chunk, without the transport around it.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from hermes_transport import StreamPolicy
from hermes_transport._core.sse import SSEScanner
from hermes_transport._core.wires import Wire

from .progress import say
from .report import Row

__all__ = ["CHUNK", "Scan", "rows"]

CHUNK = 64 * 1024
_KEYS: dict[Wire, str] = {
    "chat_completions": "7d",
    "responses": "7e",
    "messages": "7f",
    "gemini": "7h",
}


def _feed(body: bytes, scanner: SSEScanner) -> tuple[float, float]:
    """Seconds (wall, CPU) to feed ``body`` to ``scanner`` in ``CHUNK``-byte chunks."""
    chunks = [body[i : i + CHUNK] for i in range(0, len(body), CHUNK)]
    feed = scanner.feed
    started, started_cpu = time.perf_counter(), time.process_time()
    for chunk in chunks:
        feed(chunk)
    return time.perf_counter() - started, time.process_time() - started_cpu


@dataclass
class Scan:
    """One scanner's feeds of one body: seconds per feed, and the progress it counted."""

    wall_s: list[float] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)
    progress_events: set[int] = field(default_factory=set)

    @property
    def median_wall_s(self) -> float:
        return float(statistics.median(self.wall_s))


def _measure(body: bytes, wire: Wire, policy: StreamPolicy, rounds: int) -> dict[Wire, Scan]:
    scanners: tuple[Wire, ...] = (wire, "generic")
    scans = {w: Scan() for w in scanners}
    gc.collect()
    for number in range(rounds):
        for scanned in scanners if number % 2 == 0 else scanners[::-1]:
            scanner = SSEScanner(policy.heartbeats_for(scanned), scanned)
            wall, cpu = _feed(body, scanner)
            scans[scanned].wall_s.append(wall)
            scans[scanned].cpu_s.append(cpu)
            # A lower bound once a run was not read one by one: marked so, never taken as exact.
            scans[scanned].progress_events.add(scanner.events if scanner.counted else -1)
    return scans


def _row(wire: Wire, body: bytes, measured: dict[Wire, Scan], rounds: int) -> Row:
    events = body.count(b"\n\n")
    ns = {w: scan.median_wall_s / events * 1e9 for w, scan in measured.items()}
    mbs = {w: len(body) / scan.median_wall_s / 1e6 for w, scan in measured.items()}
    cell = (
        f"{wire}: {ns[wire]:,.0f} ns/event, {mbs[wire]:,.0f} MB/s; generic: {ns['generic']:,.0f}"
        f" ns/event, {mbs['generic']:,.0f} MB/s ({ns[wire] / ns['generic']:.1f}x generic)"
    )
    counted = "; ".join(
        f"{scanned} counts "
        + ", ".join("not one by one" if n < 0 else f"{n:,}" for n in sorted(scan.progress_events))
        for scanned, scan in measured.items()
    )
    return Row(
        key=_KEYS.get(wire, wire),
        figure=f"SSEScanner.feed alone on the {wire} stream's {events:,} events"
        f" ({len(body) / 1e6:.0f} MB) in 64 KiB chunks, pure CPU, median of {rounds}",
        cells={"watchdog": cell, "plain": "n/a: no scanner", "seed": "n/a"},
        target="none set (reported only)",
        verdict="info",
        data={
            "wire": wire,
            "events": events,
            "bytes": len(body),
            "ns_per_event": ns,
            "mb_per_s": mbs,
            "scanners": {
                w: {**asdict(scan), "progress_events": sorted(scan.progress_events)}
                for w, scan in measured.items()
            },
        },
        notes=[f"progress events of {events:,}: {counted}"],
    )


def rows(bodies: Mapping[Wire, bytes], policy: StreamPolicy, rounds: int) -> list[Row]:
    """One row per recorded body: its own wire's scanner against the generic one."""
    result: list[Row] = []
    for wire, body in bodies.items():
        measured = _measure(body, wire, policy, rounds)
        say(f"wires: scanner on {wire} events, {rounds} rounds")
        result.append(_row(wire, body, measured, rounds))
    return result
