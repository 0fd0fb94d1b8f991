"""Many concurrent async streams in one loop, measured in a fresh process: figure 6a-6c.

One sample: ``Load.streams`` raw SSE streams (``aiter_raw``, the run's HTTP library alone,
no SDK) of the chat-completions wire, ``Load.per_client`` to a client, all in one asyncio
loop, in a fresh process against fresh server processes. The server waits ``Load.think``
seconds after the headers (a first-event delay, as a model's time to first token), then
sends ``Load.events`` content events ``Load.interval`` apart. The think outlasts the
opening of every stream, so all are open at once (their headers in, their body not done:
``Sample.peak_open`` counts them), and each stream then gets its events spaced as sent.

Streams open with at most ``BATCH`` to a server waiting for their response headers (a
burst of connects overflows a server's accept queue of 128, and the kernel then drops
connections). The watchdog holds a stream's response until its first event, so the
headers are seen through httpcore's ``trace`` extension, the same for both clients.

Only the streams are timed: building the clients (and their one shared SSL context) is
not, and a ``gc.collect()`` precedes the timed part. A client of its own per stream
(``per_client == 1``) is opened and closed by its stream's task (``async with client``,
timed), as a caller who builds one per call does, with the library's default limits;
shared clients have no keep-alive (``max_keepalive_connections=0``, see fig_async) and are
closed after the timed part.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import multiprocessing
import ssl
import statistics
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import variants
from .flavor import http
from .measure import alternating, gc_stats
from .process_state import raise_fd_limit, reset_peak_rss, status_bytes
from .server import ServerProcess
from .variants import Variant

__all__ = [
    "BODY",
    "CLIENTS",
    "HEADERS",
    "SPARE_FDS",
    "WARMUP",
    "Load",
    "Sample",
    "measure",
    "median",
    "scenario",
    "ssl_context",
]

BATCH = 125
CLIENTS: tuple[Variant, Variant] = ("plain", "watchdog")
BODY = {**variants.CHAT, "stream": True}
#: Shared clients: no connection outlives its stream (httpcore's pool walks them all).
SHARED_LIMITS = http.Limits(max_connections=None, max_keepalive_connections=0)
WARMUP = Scenario(content=("x",) * 3, usage=False)
WARMUP_STREAMS = 20
#: File descriptors beyond one per stream (the interpreter's, the pipes, the listeners).
SPARE_FDS = 200
SAMPLE_TIMEOUT = 900.0
HEADERS = "http11.receive_response_headers.complete"


@dataclass(frozen=True)
class Load:
    key: str
    streams: int
    per_client: int  # streams a client (1: each stream its own client)
    servers: int  # server processes (the clients take turns)
    think: float  # seconds from the headers to the first event
    rounds: int
    events: int = 20
    interval: float = 0.05  # seconds between events


@dataclass(frozen=True)
class Sample:
    cpu: float
    wall: float
    peak_open: int
    failed: int
    chunks: int
    open_s: float  # from the start until every stream had its headers
    first_end_s: float  # from the start until the first stream ended
    gc_s: float  # CPU seconds in the cyclic garbage collector (all generations)
    gen2: int  # full (generation 2) collections
    gen2_s: float  # CPU seconds in them
    rss_growth: int | None = None  # bytes: the peak resident set minus the one before


def scenario(load: Load) -> Scenario:
    """The server's answer: ``think`` seconds of silence, then the events.

    A keep-alive interval longer than the think makes the server's thread sleep through
    it in one wait (no keep-alive is sent): with none, it polls its socket every 50 ms,
    which with 10,000 streams is more CPU than the machine has.
    """
    return Scenario(
        content=("x",) * load.events,
        event_interval=load.interval,
        usage=False,
        think=load.think,
        keepalive_interval=load.think + 3600.0,
    )


class _Headers:
    """One stream's ``trace`` extension: marks it open when its headers arrive."""

    def __init__(self, streams: _Streams, connecting: asyncio.Semaphore) -> None:
        self._streams = streams
        self._connecting: asyncio.Semaphore | None = connecting
        self.open = False

    async def __call__(self, name: str, info: dict[str, Any]) -> None:
        if name == HEADERS and self._connecting is not None:
            self._streams.opened()
            self.open = True
            self.done()

    def done(self) -> None:
        """Stop counting this stream as connecting (once)."""
        if self._connecting is not None:
            self._connecting.release()
            self._connecting = None


class _Streams:
    """The streams of one run and how many are open: ``per_client`` streams to a client,
    the clients taking turns over ``urls``."""

    def __init__(
        self, clients: list[http.AsyncClient], urls: Sequence[str], per_client: int
    ) -> None:
        self._clients = clients
        self._urls = [f"{url}/chat/completions" for url in urls]
        self._per_client = per_client
        self.open = 0
        self.peak = 0
        self.failed = 0
        self.chunks = 0
        self.all_open = math.nan  # perf_counter() when every stream had its headers
        self.first_end = math.nan  # perf_counter() when the first stream ended

    def opened(self) -> None:
        self.open += 1
        self.peak = max(self.peak, self.open)

    def _lane(self, index: int) -> tuple[http.AsyncClient, int]:
        """Stream ``index``'s client and server."""
        lane = index // self._per_client
        return self._clients[lane], lane % len(self._urls)

    async def one(self, index: int, connecting: asyncio.Semaphore) -> None:
        client, server = self._lane(index)
        url = self._urls[server]
        headers = _Headers(self, connecting)
        try:
            async with contextlib.AsyncExitStack() as stack:
                if self._per_client == 1:  # the stream's own client, closed after it
                    await stack.enter_async_context(client)
                extensions = {"trace": headers}
                async with client.stream("POST", url, json=BODY, extensions=extensions) as body:
                    async for _chunk in body.aiter_raw():
                        self.chunks += 1
        except http.HTTPError:
            self.failed += 1
        finally:
            headers.done()
            if headers.open:
                self.open -= 1
                if math.isnan(self.first_end):
                    self.first_end = time.perf_counter()

    async def all(self, n: int) -> None:
        """Open ``n`` streams, at most ``BATCH`` to a server waiting for their headers."""
        connecting = [asyncio.Semaphore(BATCH) for _ in self._urls]
        tasks: list[asyncio.Task[None]] = []
        for index in range(n):
            gate = connecting[self._lane(index)[1]]
            await gate.acquire()
            tasks.append(asyncio.create_task(self.one(index, gate)))
        for gate in connecting:  # every stream has its headers (or failed)
            for _ in range(BATCH):
                await gate.acquire()
        self.all_open = time.perf_counter()
        await asyncio.gather(*tasks)


_SSL: list[ssl.SSLContext] = []


def ssl_context() -> ssl.SSLContext:
    """One SSL context for every client of this process (building one takes ~25 ms)."""
    if not _SSL:
        _SSL.append(http.create_ssl_context())
    return _SSL[0]


def _client(variant: Variant, per_client: int) -> http.AsyncClient:
    limits = None if per_client == 1 else SHARED_LIMITS
    return variants.async_http_client(
        variant, policy=StreamPolicy(), limits=limits, verify=ssl_context()
    )


async def _run(variant: Variant, urls: Sequence[str], n: int, per_client: int) -> Sample:
    """``n`` streams, ``per_client`` to a client, the clients spread over ``urls``."""
    clients = [_client(variant, per_client) for _ in range(-(-n // per_client))]
    async with contextlib.AsyncExitStack() as stack:
        if per_client > 1:
            for client in clients:
                await stack.enter_async_context(client)
        streams = _Streams(clients, urls, per_client)
        gc.collect()
        before = status_bytes("VmRSS")
        reset_peak_rss()
        collector = gc_stats()
        cpu, wall = time.process_time(), time.perf_counter()
        await streams.all(n)
        cpu, ended = time.process_time() - cpu, time.perf_counter()
        collected = gc_stats() - collector
        peak = status_bytes("VmHWM")
    return Sample(
        cpu=cpu,
        wall=ended - wall,
        peak_open=streams.peak,
        failed=streams.failed,
        chunks=streams.chunks,
        open_s=streams.all_open - wall,
        first_end_s=streams.first_end - wall,
        gc_s=collected.total_seconds,
        gen2=collected.runs[2],
        gen2_s=collected.seconds[2],
        rss_growth=None if before is None or peak is None else peak - before,
    )


def _warm(variant: Variant, urls: list[str], per_client: int) -> None:
    """In the sample's process: the first use of each code path, untimed."""
    per_client = 1 if per_client == 1 else WARMUP_STREAMS // 4
    asyncio.run(_run(variant, urls, WARMUP_STREAMS, per_client))


def _sample(variant: Variant, urls: list[str], load: Load, n: int) -> Sample:
    """In the sample's process, after ``_warm``: ``n`` streams, measured."""
    raise_fd_limit(n + SPARE_FDS)
    return asyncio.run(_run(variant, urls, n, load.per_client))


def _in_fresh_process(variant: Variant, load: Load, n: int) -> Sample:
    """A sample in a fresh process, against ``load.servers`` fresh server processes."""
    servers = [ServerProcess(WARMUP) for _ in range(load.servers)]
    context = multiprocessing.get_context("spawn")
    with contextlib.ExitStack() as stack:
        for server in servers:
            stack.callback(server.stop)
        with ThreadPoolExecutor(len(servers)) as starting:  # about a second each
            list(starting.map(ServerProcess.__enter__, servers))
        pool = stack.enter_context(ProcessPoolExecutor(max_workers=1, mp_context=context))
        urls = [server.url() for server in servers]
        pool.submit(_warm, variant, urls, load.per_client).result(SAMPLE_TIMEOUT)
        for server in servers:
            server.set_scenario(scenario(load))
        return pool.submit(_sample, variant, urls, load, n).result(SAMPLE_TIMEOUT)


def measure(load: Load, streams: int) -> dict[Variant, list[Sample]]:
    """``load.rounds`` samples of each client, alternating (the first turning each round)."""

    def said(number: int, variant: Variant, sample: Sample) -> str:
        return (
            f"async {load.key} {streams:,} streams, round {number + 1}/{load.rounds},"
            f" {variant}: CPU {sample.cpu:.2f} s, all open after {sample.open_s:.1f} s,"
            f" first done after {sample.first_end_s:.1f} s, peak {sample.peak_open:,},"
            f" gen-2 {sample.gen2} ({sample.gen2_s:.2f} s)"
        )

    return alternating(
        load.rounds, CLIENTS, lambda variant: _in_fresh_process(variant, load, streams), said
    )


def median(samples: list[Sample], name: str) -> float:
    """The median of one ``Sample`` field over ``samples``."""
    return float(statistics.median(getattr(s, name) for s in samples))
