"""Figure 6: many concurrent async streams in one event loop, client CPU time and memory.

Each stream is a raw SSE stream read with the run's HTTP library alone (httpx or httpx2,
no SDK), watchdog against plain, all in one asyncio loop. 6a: 1,000 streams of 50 events
the fault server sends 0.2 s apart, read as they come, on one client; they last about
10 s, longer than opening 1,000 takes (4-11 s here), so all are open at once (the peak is
measured). 6b: 10,000 streams of 10 events the server writes at once, each held at its
first chunk until all 10,000 are open, then read to the end, on one client per 100
streams: so the peak is all of them without streams that must outlast the opening
(opening 10,000 took the client 21-29 s of CPU here), and one round (one sample per
client) keeps the figure near 90 s. Streams open with at most 125 waiting for their
headers at any time: a burst of 1,000 connects overflows the server's accept queue
(128), and the kernel then drops connections outright.

Every sample runs in a fresh process (warmed up with a few streams, untimed), against
fresh servers in processes of their own (6b: four, 2,500 streams each: one FaultServer
process serving 10,000 threads fell behind the client), so that the client's
``time.process_time()`` is its own CPU alone and its memory starts from the same state.
Only the streams are timed, not building the clients (each loads its TLS context). The
memory a stream is the growth of the client process's peak resident set over the run
(``VmHWM``, reset before it, minus ``VmRSS`` before it; Linux only), divided by the
streams open at the peak. The clients alternate round by round. 10,000 sockets need as
many file descriptors in the client and in the servers: the figure raises the soft limit
(``RLIMIT_NOFILE``) to what it needs, up to the hard limit, before it starts them (it
opens fewer streams, and says so, if the hard limit is too low).

Connections are not kept alive after their stream (``max_keepalive_connections=0``), and
6b's clients hold 100 streams each: httpcore's pool walks all its connections each time
it assigns a request or one closes, quadratic in the streams a client holds (with 1,000
idle connections that bookkeeping was most of the CPU time of both clients; one client of
10,000 streams took 90 s of CPU and never had more than 1,500 open at once), which would
hide what the watchdog itself costs. All the clients share the loop, hence the watchdog's
one loop timer and deadline heap.

The seed's design has no async path (a monitor thread per call), so it has no column.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import multiprocessing
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import variants
from .flavor import http
from .measure import fmt_s, gc_seconds
from .process_state import raise_fd_limit, reset_peak_rss, status_bytes
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

BATCH = 125
#: A budget no stream reaches, not even one held while 10,000 open.
POLICY = StreamPolicy(stale_timeout=300.0)
LIMITS = http.Limits(max_connections=None, max_keepalive_connections=0)
BODY = {**variants.CHAT, "stream": True}
CLIENTS: tuple[Variant, Variant] = ("plain", "watchdog")
#: watchdog/plain, client CPU (#18), on both rows.
TARGET = 1.03
WARMUP = Scenario(content=("x",) * 3, usage=False)
WARMUP_STREAMS = 20
#: File descriptors beyond one per stream (the interpreter's, the pipes, the listeners).
SPARE_FDS = 200
SAMPLE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Load:
    key: str
    streams: int
    events: int
    interval: float  # seconds between the server's events (0: all at once)
    hold: bool  # each stream waits at its first chunk until all are open
    pool: int  # streams a client
    servers: int  # server processes (the clients take turns)
    rounds: int


FULL = (
    Load("6a", 1_000, 50, 0.2, hold=False, pool=1_000, servers=1, rounds=2),
    Load("6b", 10_000, 10, 0.0, hold=True, pool=100, servers=4, rounds=1),
)
QUICK = (
    Load("6a", 200, 20, 0.1, hold=False, pool=200, servers=1, rounds=1),
    Load("6b", 2_000, 10, 0.0, hold=True, pool=100, servers=4, rounds=1),
)


@dataclass(frozen=True)
class Sample:
    cpu: float
    wall: float
    peak_open: int
    failed: int
    bytes_read: int
    open_s: float  # from the start until every stream had its headers
    gc_s: float  # of the CPU time, in the cyclic garbage collector
    rss_growth: int | None = None  # bytes: the peak resident set minus the one before


class _Streams:
    """The streams of one run, ``pool`` to a lane (a client and its server), and how many
    are open."""

    def __init__(self, lanes: list[tuple[http.AsyncClient, str]], pool: int, hold: bool) -> None:
        self._lanes = [(client, f"{url}/chat/completions") for client, url in lanes]
        self._pool = pool
        self._everyone = asyncio.Event() if hold else None
        self.open = 0
        self.peak = 0
        self.failed = 0
        self.bytes_read = 0
        self.all_open = math.nan  # perf_counter() when every stream had its headers

    async def one(self, index: int, connecting: asyncio.Semaphore) -> None:
        client, url = self._lanes[index // self._pool]
        waiting = True
        try:
            async with client.stream("POST", url, json=BODY) as response:
                self.open += 1
                self.peak = max(self.peak, self.open)
                waiting = False
                connecting.release()
                held = self._everyone
                try:
                    async for chunk in response.aiter_raw():
                        self.bytes_read += len(chunk)
                        if held is not None:  # at the first chunk
                            await held.wait()
                            held = None
                finally:
                    self.open -= 1
        except http.HTTPError:
            self.failed += 1
        finally:
            if waiting:
                connecting.release()

    async def all(self, n: int) -> None:
        """Open ``n`` streams, at most ``BATCH`` waiting for their headers at any time."""
        connecting = asyncio.Semaphore(BATCH)
        tasks: list[asyncio.Task[None]] = []
        for index in range(n):
            await connecting.acquire()
            tasks.append(asyncio.create_task(self.one(index, connecting)))
        for _ in range(BATCH):  # every stream has its headers (or failed)
            await connecting.acquire()
        self.all_open = time.perf_counter()
        if self._everyone is not None:
            self._everyone.set()
        await asyncio.gather(*tasks)


async def _run_streams(
    variant: Variant, urls: Sequence[str], n: int, pool: int, hold: bool
) -> Sample:
    """``n`` streams, ``pool`` to a client, the clients spread over ``urls``; only the
    streams are timed and measured (building a client loads its TLS context)."""
    async with contextlib.AsyncExitStack() as stack:
        lanes = []
        for lane in range(-(-n // pool)):
            client = variants.async_http_client(variant, policy=POLICY, limits=LIMITS)
            lanes.append((await stack.enter_async_context(client), urls[lane % len(urls)]))
        streams = _Streams(lanes, pool, hold)
        gc.collect()
        before = status_bytes("VmRSS")
        reset_peak_rss()
        collecting = gc_seconds()
        cpu, wall = time.process_time(), time.perf_counter()
        await streams.all(n)
        cpu, ended = time.process_time() - cpu, time.perf_counter()
        collecting = gc_seconds() - collecting
        peak = status_bytes("VmHWM")
    return Sample(
        cpu=cpu,
        wall=ended - wall,
        peak_open=streams.peak,
        failed=streams.failed,
        bytes_read=streams.bytes_read,
        open_s=streams.all_open - wall,
        gc_s=collecting,
        rss_growth=None if before is None or peak is None else peak - before,
    )


def _once(
    variant: Variant,
    urls: str | Sequence[str],
    n: int,
    pool: int | None = None,
    hold: bool = False,
) -> Sample:
    """``n`` streams in this process, ``pool`` to a client (default: one client)."""
    urls = [urls] if isinstance(urls, str) else urls
    return asyncio.run(_run_streams(variant, urls, n, pool or n, hold))


def _warm(variant: Variant, urls: list[str]) -> None:
    """In the sample's process: the first use of each code path, untimed (on four clients,
    one to each server of 6b)."""
    _once(variant, urls, WARMUP_STREAMS, WARMUP_STREAMS // 4)


def _sample(variant: Variant, urls: list[str], n: int, load: Load) -> Sample:
    """In the sample's process, after ``_warm``: ``n`` streams, measured."""
    raise_fd_limit(n + SPARE_FDS)
    return _once(variant, urls, n, load.pool, load.hold)


def _in_fresh_process(variant: Variant, load: Load, n: int) -> Sample:
    """A sample in a fresh process, against ``load.servers`` fresh server processes."""
    scenario = Scenario(content=("x",) * load.events, event_interval=load.interval, usage=False)
    servers = [ServerProcess(WARMUP) for _ in range(load.servers)]
    context = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.callback(server.stop)
        with ThreadPoolExecutor(len(servers)) as starting:  # about a second each
            list(starting.map(ServerProcess.__enter__, servers))
        pool = stack.enter_context(ProcessPoolExecutor(max_workers=1, mp_context=context))
        urls = [server.url() for server in servers]
        pool.submit(_warm, variant, urls).result(SAMPLE_TIMEOUT)
        for server in servers:
            server.set_scenario(scenario)
        return pool.submit(_sample, variant, urls, n, load).result(SAMPLE_TIMEOUT)


def _measure(load: Load, streams: int) -> dict[Variant, list[Sample]]:
    samples: dict[Variant, list[Sample]] = {v: [] for v in CLIENTS}
    for number in range(load.rounds):
        for variant in CLIENTS if number % 2 == 0 else CLIENTS[::-1]:
            sample = _in_fresh_process(variant, load, streams)
            samples[variant].append(sample)
            say(
                f"async {load.key} round {number + 1}/{load.rounds}, {variant}: CPU"
                f" {sample.cpu:.2f} s, all open after {sample.open_s:.1f} s, peak"
                f" {sample.peak_open:,}"
            )
    return samples


def _description(load: Load, streams: int) -> str:
    clients = -(-streams // load.pool)
    on = f"{clients} clients of {load.pool:,} streams" if clients > 1 else "one client"
    if load.hold:
        how = f"{load.events} events each, written at once, held at the first chunk until all open"
    else:
        how = f"{load.events} events each, {load.interval:g} s apart"
    return (
        f"async: {streams:,} concurrent raw streams ({how}) in one loop on {on}, client CPU"
        f" time and memory a stream, median of {load.rounds} (x plain)"
    )


def _row(load: Load, streams: int, samples: dict[Variant, list[Sample]]) -> Row:
    def med(v: Variant, name: str) -> float:
        return float(statistics.median(getattr(s, name) for s in samples[v]))

    cpu = {v: med(v, "cpu") for v in CLIENTS}
    wall = {v: med(v, "wall") for v in CLIENTS}
    peak = {v: min(s.peak_open for s in samples[v]) for v in CLIENTS}
    failed = {v: sum(s.failed for s in samples[v]) for v in CLIENTS}
    memory: dict[Variant, float | None] = {}
    for v in CLIENTS:
        grown = [s.rss_growth / s.peak_open for s in samples[v] if s.rss_growth and s.peak_open]
        memory[v] = statistics.median(grown) if grown else None
    ratio = cpu["watchdog"] / cpu["plain"]

    def cell(v: Variant) -> str:
        text = f"CPU {fmt_s(cpu[v])}" + (f" ({ratio:.3f}x)" if v == "watchdog" else "")
        text += f", wall {fmt_s(wall[v])}, peak {peak[v]:,} open"
        per_stream = memory[v]
        text += f", {per_stream / 1024:.1f} KiB a stream" if per_stream is not None else ""
        return text + (f", {failed[v]} failed" if failed[v] else "")

    verdict: Verdict = "PASS" if ratio <= TARGET and not any(failed.values()) else "MISS"
    per_round = [w.cpu / p.cpu for w, p in zip(samples["watchdog"], samples["plain"], strict=True)]

    def timings(v: Variant) -> str:
        return (
            f"{v} all open after {med(v, 'open_s'):.1f} s,"
            f" {med(v, 'gc_s'):.2f} s of its CPU in the garbage collector"
        )

    notes = [
        "watchdog/plain CPU, round by round: " + ", ".join(f"{r:.3f}" for r in per_round),
        "; ".join(timings(v) for v in CLIENTS),
        "memory a stream: the growth of the client process's peak resident set (VmHWM) over"
        " the run, divided by the streams open at the peak"
        + ("" if all(memory.values()) else " (n/a: Linux only)"),
    ]
    if streams < load.streams:
        notes.append(
            f"{streams:,} streams, not {load.streams:,}: the hard limit of open files"
            " (RLIMIT_NOFILE) allows no more"
        )
    if any(p < streams for p in peak.values()):
        notes.append(f"not all {streams:,} streams were open at once: peak {peak}")
    if any(failed.values()):
        notes.append(f"failed streams (an HTTP error), all rounds: {failed}")
    return Row(
        key=load.key,
        figure=_description(load, streams),
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
            "memory_per_stream_bytes": memory,
            "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Alternate the two clients for a few rounds per load; one row per load."""
    rows = []
    for load in QUICK if quick else FULL:
        # Before the servers start: they and the samples' processes inherit it.
        limit = raise_fd_limit(load.streams + SPARE_FDS)
        streams = min(load.streams, limit - SPARE_FDS)
        rows.append(_row(load, streams, _measure(load, streams)))
    return rows
