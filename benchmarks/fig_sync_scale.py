"""Figure 6d: sync at scale, 1,000 streams on 1,000 threads sharing one client (#26).

What a threaded service does: one ``Client(transport=WatchdogTransport())`` shared by every
thread (as one ``openai.OpenAI()`` is), with the openai SDK's connection limits (1,000
connections, 100 kept alive: ``variants.LIMITS``) so that no stream waits for a
connection, and ``StreamPolicy()``; against the same client on the library's own
transport. Each of 1,000 threads reads one raw SSE stream (``iter_raw``) to its end. The
server thinks (8 s: longer than opening every stream takes), then sends 20 events 50 ms
apart, so all the streams are open at once (the peak is measured); at most ``BATCH`` wait
for their headers at a time (seen through the ``trace`` extension, as in ``async_load``:
the watchdog holds a response until its first event).

Each sample runs in a fresh process (thread stacks of 512 KiB), warmed up with a few
streams on a client of its own, against a fresh server process; the clients alternate,
medians. Measured: the process's CPU time (every thread's, the watchdog's included) from
the first thread's start to the last one's end, the collector's share (``gc.callbacks``),
and the threads alive beyond the callers' own while all the streams are open: the
watchdog's design is one thread for the process, however many streams.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import statistics
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import variants
from .async_load import BODY, CLIENTS, HEADERS, SPARE_FDS, WARMUP
from .flavor import http
from .measure import alternating, fmt_s, gc_stats
from .process_state import raise_fd_limit
from .report import Row, Verdict
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

BATCH = 125
STACK = 512 * 1024
TARGET = 1.05
THREADS_TARGET = 1
CALLER = "caller"
WARMUP_STREAMS = 20
SAMPLE_TIMEOUT = 600.0


@dataclass(frozen=True)
class Load:
    streams: int
    think: float
    rounds: int
    events: int = 20
    interval: float = 0.05


FULL = Load(1_000, think=8.0, rounds=3)
QUICK = Load(200, think=2.0, rounds=1)


@dataclass(frozen=True)
class Sample:
    cpu: float
    wall: float
    peak_open: int
    failed: int
    chunks: int
    open_s: float
    gen2: int
    gen2_s: float
    gc_s: float
    extra_threads: list[str] = field(default_factory=list)  # names, beyond the callers'


class _Headers:
    """One stream's ``trace`` extension (called on its thread): marks it open when its
    headers arrive."""

    def __init__(self, streams: _Streams) -> None:
        self._streams = streams
        self.waiting = True
        self.open = False

    def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == HEADERS and self.waiting:
            self._streams.opened()
            self.open = True
            self.done()

    def done(self) -> None:
        """Stop counting this stream as connecting (once)."""
        if self.waiting:
            self.waiting = False
            self._streams.connecting.release()


class _Streams:
    """The streams of one sample, each on its own thread, and how many are open."""

    def __init__(self, client: http.Client, url: str) -> None:
        self._client, self._url = client, f"{url}/chat/completions"
        self._lock = threading.Lock()
        self.connecting = threading.Semaphore(BATCH)
        self.open = self.peak = self.failed = self.chunks = 0
        self.all_open = math.nan
        self.extra_threads: list[str] = []

    def opened(self) -> None:
        with self._lock:
            self.open += 1
            self.peak = max(self.peak, self.open)

    def one(self) -> None:
        headers = _Headers(self)
        chunks = 0
        try:
            extensions = {"trace": headers}
            with self._client.stream("POST", self._url, json=BODY, extensions=extensions) as r:
                for _chunk in r.iter_raw():
                    chunks += 1
        except http.HTTPError:
            with self._lock:
                self.failed += 1
        finally:
            headers.done()
            with self._lock:
                self.chunks += chunks
                self.open -= 1 if headers.open else 0

    def all(self, n: int) -> None:
        """Start ``n`` threads, at most ``BATCH`` waiting for their headers; join them."""
        threads = [threading.Thread(target=self.one, name=CALLER) for _ in range(n)]
        for thread in threads:
            self.connecting.acquire()
            thread.start()
        for _ in range(BATCH):  # every stream has its headers (or failed)
            self.connecting.acquire()
        self.all_open = time.perf_counter()
        names = (t.name for t in threading.enumerate())
        self.extra_threads = sorted(name for name in names if name not in (CALLER, "MainThread"))
        for thread in threads:
            thread.join()


def _client(variant: Variant) -> http.Client:
    return variants.http_client(variant, policy=StreamPolicy(), limits=variants.LIMITS)


def _sample(variant: Variant, url: str, warm_url: str, n: int) -> Sample:
    """In a fresh process: warm up, then ``n`` streams on ``n`` threads, measured."""
    raise_fd_limit(n + SPARE_FDS)
    threading.stack_size(STACK)
    with contextlib.closing(_client(variant)) as warm:
        _Streams(warm, warm_url).all(WARMUP_STREAMS)
    with contextlib.closing(_client(variant)) as client:
        streams = _Streams(client, url)
        gc.collect()
        collector = gc_stats()
        cpu, wall = time.process_time(), time.perf_counter()
        streams.all(n)
        cpu, ended = time.process_time() - cpu, time.perf_counter()
        collected = gc_stats() - collector
    return Sample(
        cpu=cpu,
        wall=ended - wall,
        peak_open=streams.peak,
        failed=streams.failed,
        chunks=streams.chunks,
        open_s=streams.all_open - wall,
        gen2=collected.runs[2],
        gen2_s=collected.seconds[2],
        gc_s=collected.total_seconds,
        extra_threads=streams.extra_threads,
    )


def _in_fresh_process(variant: Variant, load: Load, n: int) -> Sample:
    scenario = Scenario(
        content=("x",) * load.events,
        event_interval=load.interval,
        usage=False,
        think=load.think,
        keepalive_interval=load.think + 3600.0,  # one wait, no keep-alive: see async_load
    )
    context = multiprocessing.get_context("spawn")
    with (
        ServerProcess(scenario) as server,
        ServerProcess(WARMUP) as warm,
        ProcessPoolExecutor(max_workers=1, mp_context=context) as pool,
    ):
        return pool.submit(_sample, variant, server.url(), warm.url(), n).result(SAMPLE_TIMEOUT)


def _row(load: Load, n: int, samples: dict[Variant, list[Sample]]) -> Row:
    def med(v: Variant, name: str) -> float:
        return float(statistics.median(getattr(s, name) for s in samples[v]))

    cpu = {v: med(v, "cpu") for v in CLIENTS}
    ratio = cpu["watchdog"] / cpu["plain"]
    threads = {v: max(len(s.extra_threads) for s in samples[v]) for v in CLIENTS}
    failed = {v: sum(s.failed for s in samples[v]) for v in CLIENTS}
    peak = {v: min(s.peak_open for s in samples[v]) for v in CLIENTS}

    def cell(v: Variant) -> str:
        text = f"CPU {fmt_s(cpu[v])}"
        if v == "watchdog":
            extra = (cpu["watchdog"] - cpu["plain"]) / n
            text += f" ({ratio:.3f}x, {extra * 1e6:+,.0f} µs a stream)"
        text += (
            f", wall {fmt_s(med(v, 'wall'))}, peak {peak[v]:,} open, {threads[v]} thread(s)"
            f" beyond the callers'; collector: {med(v, 'gen2'):g} full collections"
            f" (CPU {fmt_s(med(v, 'gen2_s'))}), all CPU {fmt_s(med(v, 'gc_s'))}"
        )
        return text + (f", {failed[v]} failed" if failed[v] else "")

    passed = ratio <= TARGET and threads["watchdog"] <= THREADS_TARGET
    verdict: Verdict = "PASS" if passed and not any(failed.values()) else "MISS"
    per_round = [w.cpu / p.cpu for w, p in zip(samples["watchdog"], samples["plain"], strict=True)]
    names = {v: sorted({name for s in samples[v] for name in s.extra_threads}) for v in CLIENTS}
    notes = [
        "watchdog/plain CPU, round by round: " + ", ".join(f"{r:.3f}" for r in per_round),
        "; ".join(f"{v} all open after {med(v, 'open_s'):.1f} s" for v in CLIENTS),
        "threads beyond the callers', by name: "
        + "; ".join(f"{v}: {', '.join(names[v]) or 'none'}" for v in CLIENTS),
    ]
    if any(p < n for p in peak.values()):
        notes.append(f"not all {n:,} streams were open at once: peak {peak}")
    if any(failed.values()):
        notes.append(f"failed streams (an HTTP error), all rounds: {failed}")
    return Row(
        key="6d",
        figure=(
            f"sync: {n:,} concurrent raw streams ({load.think:g} s to the first event, then"
            f" {load.events} events {load.interval * 1e3:g} ms apart) on {n:,} threads sharing"
            f" one client, process CPU time, threads and the collector's share, median of"
            f" {load.rounds} (x plain)"
        ),
        cells={"watchdog": cell("watchdog"), "plain": cell("plain"), "seed": "not measured"},
        target=f"watchdog/plain CPU <= {TARGET:.2f}x; <= {THREADS_TARGET} watchdog thread",
        verdict=verdict,
        data={
            "ratio": ratio,
            "per_round_ratio": per_round,
            "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Alternate the two clients, a fresh process each; one row."""
    load = QUICK if quick else FULL
    limit = raise_fd_limit(load.streams + SPARE_FDS)  # the server's process inherits it
    n = min(load.streams, limit - SPARE_FDS)

    def said(number: int, variant: Variant, sample: Sample) -> str:
        return (
            f"sync {n:,} streams, round {number + 1}/{load.rounds}, {variant}: CPU"
            f" {sample.cpu:.2f} s, all open after {sample.open_s:.1f} s, peak"
            f" {sample.peak_open:,}, threads beyond the callers' {sample.extra_threads}"
        )

    samples = alternating(
        load.rounds, CLIENTS, lambda variant: _in_fresh_process(variant, load, n), said
    )
    return [_row(load, n, samples)]
