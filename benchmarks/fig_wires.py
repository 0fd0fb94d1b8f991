"""Figure 7: the watch's cost per chunk and per event on each wire, raw bytes.

A long stream of small events is read through the run's HTTP library (``iter_raw``), plain
transport against ``WatchdogTransport`` (180 s stale budget), on three wires: Chat
Completions (``POST /v1/chat/completions``), Responses (``POST /v1/responses``: ``event:
response.output_text.delta`` and data with its ``type`` and ``sequence_number``),
Anthropic Messages (``POST /v1/messages``: ``content_block_delta`` events) and Gemini
(``POST /v1/models/bench:streamGenerateContent?alt=sse``: untyped data events, each a
``GenerateContentResponse``), all from the fault server in another process, coalesced
into 64 KiB writes. On Responses, Messages and Gemini the watchdog's scanner classifies
the events it reads (past the first output, a read's last one: on Gemini a JSON parse);
on Chat Completions it keeps its per-chunk fast path after the first output
(``hermes_transport._core.sse``).

The discipline is figure 1's: each round opens one stream per client, takes each to its
first chunk untimed, then reads them in alternating turns on this one thread, each turn
timed (wall clock and CPU) for its own client, the order of the clients alternating from
round to round; the figure is the ratio of the medians over the rounds. One difference:
the fault server builds Responses events as it sends them (about 13 MB/s here, slower
than either client reads), so an ungated turn would time the server: each turn first
waits, untimed, for the bytes it will read to be in the socket (``gated_reads``). Every
round has a fresh server, since the fault server keeps every Responses stream it sent
(about 80 MB for one of these).

Targets, watchdog/plain for wall time and for CPU time: Chat Completions keeps figure
1a's (1.15x, ``fig_throughput.TARGETS["raw"]``); Responses and Messages, whose every event
the scanner classifies, have 1.25x. ``scan_cost`` adds the scanner's own cost, without any
I/O (reported only).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from hermes_transport import StreamPolicy
from hermes_transport._core.wires import Wire
from hermes_transport.testing import Scenario

from . import scan_cost, variants
from .fig_throughput import TARGETS
from .flavor import FLAVOR
from .gated_reads import EVENT_END, GatedStream, Sample, read_round
from .measure import fmt_s
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess
from .variants import Variant

__all__ = ["SPECS", "WireSpec", "run"]

POLICY = StreamPolicy(stale_timeout=180.0)
CLIENTS: tuple[Variant, ...] = ("plain", "watchdog")
#: Requests each server answers before the measured ones, so that every measured stream
#: carries ids of the same number of digits (the Responses ids are in every event).
SETTLE_REQUESTS = 10
WARMUP_EVENTS = 2_000
#: watchdog/plain, wall and CPU, on the wires whose every event is classified (#26;
#: 1.25 before).
WIRE_TARGET = 1.35


@dataclass(frozen=True)
class WireSpec:
    key: str
    wire: Wire
    title: str
    path: str
    body: dict[str, Any]
    target: float | None  # watchdog/plain, wall and CPU; None: reported only


_USER = [{"role": "user", "content": "hi"}]
SPECS = (
    WireSpec(
        "7a",
        "chat_completions",
        "Chat Completions",
        "/chat/completions",
        {**variants.CHAT, "stream": True},
        TARGETS["raw"],
    ),
    WireSpec(
        "7b",
        "responses",
        "Responses",
        "/responses",
        {"model": "bench", "input": "hi", "stream": True},
        WIRE_TARGET,
    ),
    WireSpec(
        "7c",
        "messages",
        "Anthropic Messages",
        "/messages",
        {"model": "bench", "max_tokens": 1024, "messages": _USER, "stream": True},
        WIRE_TARGET,
    ),
    WireSpec(
        "7g",
        "gemini",
        "Gemini",
        "/models/bench:streamGenerateContent?alt=sse",  # the Gemini API's, under /v1
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        WIRE_TARGET,
    ),
)


@dataclass(frozen=True)
class Sizes:
    events: int
    rounds: int
    scan_rounds: int


FULL = Sizes(events=200_000, rounds=5, scan_rounds=5)
QUICK = Sizes(events=20_000, rounds=2, scan_rounds=2)


def _settle(server: ServerProcess, spec: WireSpec) -> None:
    """Warm both clients up on small streams until the server's ids have two digits."""
    server.set_scenario(_scenario(WARMUP_EVENTS))
    while server.request_count() < SETTLE_REQUESTS:
        for stream in (
            GatedStream(v, server.url() + spec.path, spec.body, POLICY) for v in CLIENTS
        ):
            for _ in stream.units:
                pass


def _scenario(events: int) -> Scenario:
    return Scenario(content=("x",) * events, write_size=64 * 1024, usage=False)


def _calibrate(spec: WireSpec, sizes: Sizes) -> bytes:
    """The whole body of one measured-size stream, read plain and untimed."""
    with ServerProcess(_scenario(WARMUP_EVENTS)) as server:
        _settle(server, spec)
        server.set_scenario(_scenario(sizes.events))
        with (
            variants.http_client("plain") as client,
            client.stream("POST", server.url() + spec.path, json=spec.body) as response,
        ):
            return b"".join(response.iter_raw())


def _measure(spec: WireSpec, sizes: Sizes, events: int) -> dict[Variant, list[Sample]]:
    samples: dict[Variant, list[Sample]] = {v: [] for v in CLIENTS}
    for number in range(sizes.rounds):
        order = CLIENTS if number % 2 == 0 else CLIENTS[::-1]
        with ServerProcess(_scenario(WARMUP_EVENTS)) as server:
            _settle(server, spec)
            server.set_scenario(_scenario(sizes.events))
            streams = {
                v: GatedStream(v, server.url() + spec.path, spec.body, POLICY) for v in order
            }
            for variant, sample in read_round(streams, order, events).items():
                samples[variant].append(sample)
        say(f"wires: {spec.wire} round {number + 1}/{sizes.rounds}")
    return samples


def _rate(amount: float, seconds: float, unit: str) -> str:
    value = amount / seconds if seconds > 0 else float("nan")
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.3g} {prefix}{unit}/s"
    return f"{value:.3g} {unit}/s"


def _row(spec: WireSpec, sizes: Sizes, body: bytes, samples: dict[Variant, list[Sample]]) -> Row:
    def med(v: Variant, name: str) -> float:
        return float(statistics.median(getattr(s, name) for s in samples[v]))

    wall = {v: med(v, "wall") for v in CLIENTS}
    cpu = {v: med(v, "cpu") for v in CLIENTS}
    amount = {v: {k: med(v, k) for k in ("bytes", "chunks", "events")} for v in CLIENTS}
    ratio = wall["watchdog"] / wall["plain"]
    cpu_ratio = cpu["watchdog"] / cpu["plain"]

    def added(times: dict[Variant, float], per: str) -> float:
        """Microseconds the watch adds per ``per`` (each client's time over its own count)."""
        w, p = (times[v] / amount[v][per] for v in ("watchdog", "plain"))
        return (w - p) * 1e6

    per_event, per_chunk = added(wall, "events"), added(wall, "chunks")
    cpu_event, cpu_chunk = added(cpu, "events"), added(cpu, "chunks")

    def speed(v: Variant) -> str:
        rates = f"{_rate(amount[v]['events'], wall[v], 'events')}"
        return f"{fmt_s(wall[v])}: {rates}, {_rate(amount[v]['bytes'], wall[v], 'B')}"

    plain_cell = f"{speed('plain')}; CPU {fmt_s(cpu['plain'])}"
    watch_cell = (
        f"{speed('watchdog')} ({ratio:.3f}x); CPU {fmt_s(cpu['watchdog'])} ({cpu_ratio:.3f}x);"
        f" adds {per_event:.2f} µs/event, {per_chunk:.1f} µs/chunk"
        f" (CPU {cpu_event:.2f}, {cpu_chunk:.1f})"
    )
    exact = {
        name: sorted({getattr(s, name) for runs in samples.values() for s in runs})
        for name in ("total",)
    }
    same = all(len(values) == 1 for values in exact.values())
    if spec.target is None:
        verdict: Verdict = "info"
        target = "none set (reported only)"
    else:
        good = max(ratio, cpu_ratio) <= spec.target and same
        verdict = "PASS" if good else "MISS"
        target = f"watchdog/plain <= {spec.target:.2f}x"
    per_round = [
        w.wall / p.wall for w, p in zip(samples["watchdog"], samples["plain"], strict=True)
    ]
    per_round_cpu = [
        w.cpu / p.cpu for w, p in zip(samples["watchdog"], samples["plain"], strict=True)
    ]
    chunk_size = amount["plain"]["bytes"] / amount["plain"]["chunks"]
    turns = statistics.median(s.turns for runs in samples.values() for s in runs)
    notes = [
        "watchdog/plain, round by round: wall "
        + ", ".join(f"{r:.3f}" for r in per_round)
        + "; CPU "
        + ", ".join(f"{r:.3f}" for r in per_round_cpu),
        f"{amount['plain']['chunks']:,.0f} chunks of {chunk_size / 1024:.1f} KiB on average,"
        f" {len(body) / body.count(EVENT_END):.0f} bytes an event, read in {turns:.0f} turns",
    ]
    switches = {
        v: " / ".join(f"{sum(getattr(s, k) for s in samples[v])}" for k in ("waits", "preempted"))
        for v in CLIENTS
    }
    notes.append(
        "context switches of the reading thread inside the timed turns, voluntary (a wait)"
        f" / involuntary (preempted), all rounds: plain {switches['plain']},"
        f" watchdog {switches['watchdog']}"
    )
    if not same:
        notes.append(f"the clients read different amounts: {exact}")
    n = f"{sizes.events:,}"
    return Row(
        key=spec.key,
        figure=f"{spec.title} ({spec.path.lstrip('/')}), raw SSE through {FLAVOR} (iter_raw):"
        f" {n} events ({len(body) / 1e6:.0f} MB) after the first chunk, median of"
        f" {sizes.rounds} (x plain)",
        cells={"watchdog": watch_cell, "plain": plain_cell, "seed": "n/a"},
        target=target,
        verdict=verdict,
        data={
            "wire": spec.wire,
            "ratio": ratio,
            "cpu_ratio": cpu_ratio,
            "median_wall_s": wall,
            "median_cpu_s": cpu,
            "median_amounts": amount,
            "added_us_per_event": {"wall": per_event, "cpu": cpu_event},
            "added_us_per_chunk": {"wall": per_chunk, "cpu": cpu_chunk},
            "per_round_ratio": per_round,
            "per_round_cpu_ratio": per_round_cpu,
            "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """One row per wire through HTTP, then ``scan_cost``'s rows (the scanner alone)."""
    sizes = QUICK if quick else FULL
    rows: list[Row] = []
    bodies: dict[Wire, bytes] = {}
    for spec in SPECS:
        body = _calibrate(spec, sizes)
        bodies[spec.wire] = body
        samples = _measure(spec, sizes, body.count(EVENT_END))
        rows.append(_row(spec, sizes, body, samples))
    rows += scan_cost.rows(bodies, POLICY, sizes.scan_rounds)
    return rows
