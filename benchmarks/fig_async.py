"""Figure 6: many concurrent async streams in one event loop, CPU time and memory.

6a: 1,000 streams of 50 events 0.1 s apart; 6b: 10,000 streams of fewer events, further
apart (so that the fault server can keep up and the run fits the suite's time). Each
stream is a raw SSE stream read with the run's HTTP library alone (httpx or httpx2, no
SDK), long enough for all of them to be open at once (the peak is measured). They are
opened in batches of 125, each batch once the previous one has its headers: a burst of
1,000 connects overflows the server's accept queue (128), and the kernel then drops
connections outright.

Every sample runs in a fresh process (warmed up with a few streams, untimed), against a
fresh server in another one, so that the client's ``time.process_time()`` is its own CPU
alone, and its memory starts from the same state: the memory per stream is the growth of
the process's peak resident set (``VmHWM``, reset before the run, minus ``VmRSS`` before
it; Linux only) divided by the streams open at the peak. Clients alternate round by
round. 10,000 sockets need as many file descriptors in the client and in the server: both
raise their soft limit (``RLIMIT_NOFILE``) to what the figure needs, up to the hard limit
(the figure opens fewer streams, and says so, if the hard limit is too low).

Connections are not kept alive after their stream (``max_keepalive_connections=0``), and
the streams are spread over one client per 1,000 (``POOL``, the openai SDK's own connection
limit): httpcore's pool walks all its connections and requests each time it assigns a
request or one closes, so one pool of 10,000 is quadratic, and with 1,000 idle connections
that bookkeeping was most of the CPU time of both clients, which would hide what the
watchdog itself costs. All the clients share the loop, hence the watchdog's one loop timer
and deadline heap.

The seed's design has no async path (a monitor thread per call), so it has no column.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import multiprocessing
import resource
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import variants
from .flavor import http
from .measure import fmt_s
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

INTERVAL = 0.1
BATCH = 125
#: Streams per client (pool): the openai SDK's DEFAULT_CONNECTION_LIMITS.max_connections.
POOL = 1000
POLICY = StreamPolicy(stale_timeout=30.0)
LIMITS = http.Limits(max_connections=None, max_keepalive_connections=0)
BODY = {**variants.CHAT, "stream": True}
CLIENTS: tuple[Variant, Variant] = ("plain", "watchdog")
#: watchdog/plain, client CPU (#18), on both rows.
TARGET = 1.03
WARMUP_STREAMS = 20
#: File descriptors beyond one per stream (the interpreter's, the pipes, the listener).
SPARE_FDS = 200
SAMPLE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Load:
    key: str
    streams: int
    events: int
    interval: float
    rounds: int


FULL = (Load("6a", 1_000, 50, 0.1, 2), Load("6b", 10_000, 8, 1.5, 2))
QUICK = (Load("6a", 200, 20, 0.1, 1), Load("6b", 2_000, 5, 0.5, 1))


@dataclass(frozen=True)
class Sample:
    cpu: float
    wall: float
    peak_open: int
    failed: int
    bytes_read: int
    rss_growth: int | None = None  # bytes: the peak resident set minus the one before


class _Streams:
    """The streams of one run, spread over ``clients`` (``POOL`` each), and how many are
    open."""

    def __init__(self, clients: list[http.AsyncClient], url: str) -> None:
        self._clients = clients
        self._url = f"{url}/chat/completions"
        self.open = 0
        self.peak = 0
        self.failed = 0
        self.bytes_read = 0

    async def one(self, index: int, opened: asyncio.Event) -> None:
        client = self._clients[index // POOL]
        try:
            async with client.stream("POST", self._url, json=BODY) as response:
                self.open += 1
                self.peak = max(self.peak, self.open)
                opened.set()
                try:
                    async for chunk in response.aiter_raw():
                        self.bytes_read += len(chunk)
                finally:
                    self.open -= 1
        except http.HTTPError:
            self.failed += 1
        finally:
            opened.set()

    async def all(self, n: int) -> None:
        tasks: list[asyncio.Task[None]] = []
        for start in range(0, n, BATCH):
            batch = [asyncio.Event() for _ in range(min(BATCH, n - start))]
            tasks += [
                asyncio.create_task(self.one(start + i, event)) for i, event in enumerate(batch)
            ]
            for event in batch:
                await event.wait()
        await asyncio.gather(*tasks)


async def _run_streams(variant: Variant, url: str, n: int) -> _Streams:
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                variants.async_http_client(variant, policy=POLICY, limits=LIMITS)
            )
            for _ in range(-(-n // POOL))
        ]
        streams = _Streams(clients, url)
        await streams.all(n)
    return streams


def _once(variant: Variant, url: str, n: int) -> Sample:
    """``n`` streams in this process: CPU, wall clock, peak open (no memory)."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    streams = asyncio.run(_run_streams(variant, url, n))
    return Sample(
        cpu=time.process_time() - cpu,
        wall=time.perf_counter() - wall,
        peak_open=streams.peak,
        failed=streams.failed,
        bytes_read=streams.bytes_read,
    )


def _fd_limit(needed: int) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` towards ``needed``; the new soft limit.

    Processes spawned afterwards (the server's, the samples') inherit it.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY:
        needed = min(needed, hard)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
        soft = needed
    return int(soft)


def _status_bytes(field: str) -> int | None:
    """``field`` of /proc/self/status (``VmRSS``, ``VmHWM``) in bytes; None off Linux."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> None:
    """Reset ``VmHWM`` to the current resident set (Linux 4.0+; else it stays as it is:
    the run's peak is higher than the warm-up's anyway)."""
    with contextlib.suppress(OSError), open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")


def _sample(variant: Variant, url: str, n: int) -> Sample:
    """In a fresh process: warm up, then ``n`` streams, CPU, wall clock and memory."""
    _fd_limit(n + SPARE_FDS)
    _once(variant, url, WARMUP_STREAMS)  # first use of each code path, untimed
    gc.collect()
    before = _status_bytes("VmRSS")
    _reset_peak_rss()
    sample = _once(variant, url, n)
    peak = _status_bytes("VmHWM")
    growth = None if before is None or peak is None else peak - before
    return dataclasses.replace(sample, rss_growth=growth)


def _in_fresh_process(variant: Variant, scenario: Scenario, n: int) -> Sample:
    context = multiprocessing.get_context("spawn")
    with (
        ServerProcess(scenario) as server,
        ProcessPoolExecutor(max_workers=1, mp_context=context) as pool,
    ):
        return pool.submit(_sample, variant, server.url(), n).result(timeout=SAMPLE_TIMEOUT)


def _measure(load: Load, streams: int) -> dict[Variant, list[Sample]]:
    scenario = Scenario(content=("x",) * load.events, event_interval=load.interval, usage=False)
    samples: dict[Variant, list[Sample]] = {v: [] for v in CLIENTS}
    for number in range(load.rounds):
        for variant in CLIENTS if number % 2 == 0 else CLIENTS[::-1]:
            samples[variant].append(_in_fresh_process(variant, scenario, streams))
            say(f"async {load.key} round {number + 1}/{load.rounds}: {variant} done")
    return samples


def _row(load: Load, streams: int, samples: dict[Variant, list[Sample]]) -> Row:
    cpu = {v: statistics.median(s.cpu for s in runs) for v, runs in samples.items()}
    wall = {v: statistics.median(s.wall for s in runs) for v, runs in samples.items()}
    peak = {v: min(s.peak_open for s in runs) for v, runs in samples.items()}
    failed = {v: sum(s.failed for s in runs) for v, runs in samples.items()}
    per_stream: dict[Variant, float | None] = {}
    for v, runs in samples.items():
        grown = [s.rss_growth / s.peak_open for s in runs if s.rss_growth and s.peak_open]
        per_stream[v] = statistics.median(grown) if grown else None
    ratio = cpu["watchdog"] / cpu["plain"]

    def cell(v: Variant) -> str:
        text = f"CPU {fmt_s(cpu[v])}"
        text += f" ({ratio:.3f}x)" if v == "watchdog" else ""
        text += f", wall {fmt_s(wall[v])}, peak {peak[v]:,} open"
        memory = per_stream[v]
        text += f", {memory / 1024:.1f} KiB a stream" if memory is not None else ""
        return text + (f", {failed[v]} failed" if failed[v] else "")

    verdict: Verdict = "PASS" if ratio <= TARGET and not any(failed.values()) else "MISS"
    per_round = [w.cpu / p.cpu for w, p in zip(samples["watchdog"], samples["plain"], strict=True)]
    notes = [
        "watchdog/plain CPU, round by round: " + ", ".join(f"{r:.3f}" for r in per_round),
        "memory a stream: the growth of the client process's peak resident set (VmHWM)"
        " over the run, divided by the streams open at the peak; median over the rounds",
    ]
    if streams < load.streams:
        notes.append(
            f"{streams:,} streams, not {load.streams:,}: the hard limit of open files"
            " (RLIMIT_NOFILE) allows no more"
        )
    if any(p < streams for p in peak.values()):
        notes.append(f"not all {streams:,} streams were open at once: peak {peak}")
    clients = -(-streams // POOL)
    return Row(
        key=load.key,
        figure=(
            f"async: {streams:,} concurrent raw streams ({load.events} events"
            f" {load.interval:g} s apart) in one loop on {clients} client"
            f"{'s' if clients > 1 else ''}, client CPU time and memory, median of"
            f" {load.rounds} (x plain)"
        ),
        cells={
            "watchdog": cell("watchdog"),
            "plain": cell("plain"),
            "seed": "n/a: sync-only design (a thread per call)",
        },
        target=f"watchdog/plain CPU <= {TARGET:.2f}x",
        verdict=verdict,
        data={
            "ratio": ratio,
            "per_round_ratio": per_round,
            "memory_per_stream_bytes": per_stream,
            "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Alternate the two clients for a few rounds per load; one row per load."""
    rows = []
    for load in QUICK if quick else FULL:
        # Before the first server starts: the server and the samples inherit it.
        limit = _fd_limit(load.streams + WARMUP_STREAMS + SPARE_FDS)
        streams = min(load.streams, limit - WARMUP_STREAMS - SPARE_FDS)
        rows.append(_row(load, streams, _measure(load, streams)))
    return rows
