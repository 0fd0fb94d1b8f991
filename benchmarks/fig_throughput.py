"""Figure 1: reading a long stream of small SSE events, with and without the watchdog.

(a) raw bytes through the run's HTTP library, httpx or httpx2 (``iter_raw``), the strictest
case: nothing else costs anything;
(b) chat-completion chunks through the openai SDK, the real use.

Each round opens one stream per client (plain, watchdog, seed model) and takes each to its
first chunk, untimed: the server builds all its events and joins them into 64 KiB writes
before its first body byte, and that is its work, not the client's. (The watchdog reads
and scans that first chunk, one of about 1,200, before this point.) Then the three streams
are read to the end in turns, a slice at a time, on this one thread, each slice timed for
its own client, wall clock and CPU: whatever the machine does meanwhile (it is shared, and
drifts over seconds) falls on the three clients alike. The server runs in another process,
so this process's CPU time is the client's own. The figure is the ratio of the medians
over the rounds; the target must hold for wall time and for CPU time.
"""

from __future__ import annotations

import gc
import itertools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import seed_model, variants
from .flavor import FLAVOR
from .measure import fmt_s
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess
from .variants import VARIANTS, Variant

__all__ = ["run"]

#: The library's default budget; the seed's default was the same 180 s.
POLICY = StreamPolicy(stale_timeout=180.0)
SEED_STALE = 180.0
BODY = {**variants.CHAT, "stream": True}
WARMUP_EVENTS = 2_000
#: watchdog/plain, for wall time and for CPU time (#18: raw 1.15x in 64 KiB writes).
#: watchdog/plain (#26): 64 KiB reads, and through the openai SDK.
TARGETS = {"raw": 1.20, "openai": 1.02}
#: Units read per turn: raw reads (about 64 KiB each), or SDK chunks. Short turns cancel
#: the machine's drift better (with 5,000 chunks a turn, rounds still differed by 3%); the
#: four clock reads of a turn cost well under 1% of it.
SLICES = {"raw": 8, "openai": 100}


@dataclass(frozen=True)
class Sizes:
    events: int
    raw_rounds: int
    openai_rounds: int


FULL = Sizes(events=200_000, raw_rounds=5, openai_rounds=2)
QUICK = Sizes(events=20_000, raw_rounds=2, openai_rounds=1)


@dataclass(frozen=True)
class Sample:
    """One whole stream after its first chunk: seconds of reading, and what was read."""

    wall: float
    cpu: float
    amount: int  # bytes (raw) or chunks (openai)


class _Stream:
    """One client's stream as a generator of read units, and how much it has read.

    The generator yields once per unit and then ``END`` (before closing anything, so that
    closing is not timed).
    """

    END = object()

    def __init__(self, open_units: Callable[[_Stream], Iterator[object]]) -> None:
        self.amount = 0
        self.units = open_units(self)


def _raw(variant: Variant, url: str) -> Callable[[_Stream], Iterator[object]]:
    def units(stream: _Stream) -> Iterator[object]:
        with (
            variants.http_client(variant, policy=POLICY) as client,
            client.stream("POST", f"{url}/chat/completions", json=BODY) as response,
        ):
            if variant == "seed":
                # The seed watched SDK chunks; on raw bytes its model stamps each read.
                with seed_model.SeedCall(SEED_STALE).running() as call:
                    call.attach_response(response)
                    for chunk in response.iter_raw():
                        call.progressed()
                        stream.amount += len(chunk)
                        yield None
                    yield _Stream.END
            else:
                for chunk in response.iter_raw():
                    stream.amount += len(chunk)
                    yield None
                yield _Stream.END

    return units


def _openai(variant: Variant, url: str) -> Callable[[_Stream], Iterator[object]]:
    def units(stream: _Stream) -> Iterator[object]:
        with variants.openai_client(variant, url, policy=POLICY) as client:
            if variant == "seed":
                call = seed_model.SeedCall(SEED_STALE)
                chunks = seed_model.seed_chunks(client, call, **variants.CHAT)
            else:
                chunks = iter(variants.open_stream(client))
            for _chunk in chunks:
                stream.amount += 1
                yield None
            yield _Stream.END

    return units


Opener = Callable[[Variant, str], Callable[[_Stream], Iterator[object]]]


def _round(
    open_units: Opener, url: str, order: tuple[Variant, ...], size: int
) -> dict[Variant, Sample]:
    """Read one stream per client, in turns of ``size`` units; each turn timed for its own."""
    gc.collect()
    streams = {v: _Stream(open_units(v, url)) for v in order}
    for stream in streams.values():
        next(stream.units)  # open, and wait for the first chunk: untimed
    wall = dict.fromkeys(order, 0.0)
    cpu = dict.fromkeys(order, 0.0)
    reading = list(order)
    while reading:
        for variant in list(reading):
            units = streams[variant].units
            started, started_cpu = time.perf_counter(), time.process_time()
            ended = any(unit is _Stream.END for unit in itertools.islice(units, size))
            wall[variant] += time.perf_counter() - started
            cpu[variant] += time.process_time() - started_cpu
            if ended:
                reading.remove(variant)
                for _ in units:  # closes the stream and its client, untimed
                    pass
    return {v: Sample(wall[v], cpu[v], streams[v].amount) for v in order}


def _rounds(open_units: Opener, url: str, rounds: int, kind: str) -> dict[Variant, list[Sample]]:
    samples: dict[Variant, list[Sample]] = {v: [] for v in VARIANTS}
    for number in range(rounds):
        shift = number % len(VARIANTS)
        order = VARIANTS[shift:] + VARIANTS[:shift]
        for variant, sample in _round(open_units, url, order, SLICES[kind]).items():
            samples[variant].append(sample)
        say(f"{kind} round {number + 1}/{rounds}")
    return samples


def _row(key: str, figure: str, kind: str, samples: dict[Variant, list[Sample]]) -> Row:
    amounts = {sample.amount for runs in samples.values() for sample in runs}
    wall = {v: statistics.median(s.wall for s in runs) for v, runs in samples.items()}
    cpu = {v: statistics.median(s.cpu for s in runs) for v, runs in samples.items()}
    ratio = {v: wall[v] / wall["plain"] for v in VARIANTS}
    cpu_ratio = {v: cpu[v] / cpu["plain"] for v in VARIANTS}
    per_round = [
        w.wall / p.wall for w, p in zip(samples["watchdog"], samples["plain"], strict=True)
    ]
    target = TARGETS[kind]
    worst = max(ratio["watchdog"], cpu_ratio["watchdog"])
    verdict: Verdict = "PASS" if worst <= target and len(amounts) == 1 else "MISS"

    def cell(v: Variant) -> str:
        if v == "plain":
            return f"{fmt_s(wall[v])}; CPU {fmt_s(cpu[v])}"
        return f"{fmt_s(wall[v])} ({ratio[v]:.3f}x); CPU {fmt_s(cpu[v])} ({cpu_ratio[v]:.3f}x)"

    rounds = ", ".join(f"{r:.3f}" for r in per_round)
    notes = [f"watchdog/plain wall time, round by round: {rounds}"]
    if len(amounts) != 1:
        notes.append(f"the clients read different amounts: {sorted(amounts)}")
    return Row(
        key=key,
        figure=figure,
        cells={v: cell(v) for v in VARIANTS},
        target=f"watchdog/plain <= {target:.2f}x",
        verdict=verdict,
        data={
            "ratio": ratio,
            "cpu_ratio": cpu_ratio,
            "median_wall_s": wall,
            "median_cpu_s": cpu,
            "per_round_ratio": per_round,
            "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
            "unit": "bytes" if kind == "raw" else "chunks",
        },
        notes=notes,
    )


def _prepare(server: ServerProcess, warmup: Scenario) -> None:
    """Warm every code path up, untimed, and move the server's response ids to two digits.

    Each response's id counts the server's requests (``chatcmpl-hermes9``, then
    ``...hermes10``): a digit more in each of 200,000 events would make some streams longer.
    """
    server.set_scenario(warmup)
    _round(_raw, server.url(), VARIANTS, SLICES["raw"])
    _round(_openai, server.url(), VARIANTS, SLICES["openai"])
    while server.request_count() < 10:
        _round(_raw, server.url(), ("plain",), SLICES["raw"])


def run(quick: bool) -> list[Row]:
    """Measure both halves of figure 1; one row each."""
    sizes = QUICK if quick else FULL
    scenario = Scenario(content=("x",) * sizes.events, write_size=64 * 1024, usage=False)
    warmup = Scenario(content=("x",) * WARMUP_EVENTS, write_size=64 * 1024, usage=False)
    with ServerProcess(scenario) as server:
        _prepare(server, warmup)
        server.set_scenario(scenario)
        raw = _rounds(_raw, server.url(), sizes.raw_rounds, "raw")
        sdk = _rounds(_openai, server.url(), sizes.openai_rounds, "openai")
    n = f"{sizes.events:,}"
    megabytes = raw["plain"][0].amount / 1e6
    return [
        _row(
            "1a",
            f"raw SSE through {FLAVOR} (iter_raw): {n} events ({megabytes:.0f} MB) after the first"
            f" chunk, median of {sizes.raw_rounds} (x plain)",
            "raw",
            raw,
        ),
        _row(
            "1b",
            f"openai chat-completion streaming: {n} chunks after the first, median of"
            f" {sizes.openai_rounds} (x plain)",
            "openai",
            sdk,
        ),
    ]
