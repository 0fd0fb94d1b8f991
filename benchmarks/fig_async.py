"""Figure 6: 1,000 concurrent async streams in one event loop, CPU time with and without.

Each stream is a raw SSE stream of 50 events, 0.1 s apart, read with the run's HTTP library
alone (httpx or httpx2, no SDK), so that all of them are open at once for a few seconds
(the peak is measured). They are opened in batches of 125, each batch once the previous
one has its headers: a burst of 1,000 connects overflows the server's accept queue (128),
and the kernel then drops connections outright. The server runs in another process, so
``time.process_time()`` of this process is the client's CPU alone. Clients alternate round
by round.

Connections are not kept alive after their stream (``max_keepalive_connections=0``):
httpcore's pool re-counts its connections for every idle one each time it assigns a
request (quadratic), and with 1,000 idle connections that bookkeeping was most of the
CPU time of both clients, which would hide what the watchdog itself costs.

The seed's design has no async path (a monitor thread per call), so it has no column.
"""

from __future__ import annotations

import asyncio
import gc
import statistics
import time
from dataclasses import dataclass

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import variants
from .flavor import http
from .measure import fmt_s
from .progress import say
from .report import Row
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

INTERVAL = 0.1
BATCH = 125
POLICY = StreamPolicy(stale_timeout=30.0)
LIMITS = http.Limits(max_connections=None, max_keepalive_connections=0)
BODY = {**variants.CHAT, "stream": True}
CLIENTS: tuple[Variant, Variant] = ("plain", "watchdog")


@dataclass(frozen=True)
class Sizes:
    streams: int
    events: int
    rounds: int


FULL = Sizes(streams=1000, events=50, rounds=2)
QUICK = Sizes(streams=200, events=20, rounds=1)


@dataclass(frozen=True)
class Sample:
    cpu: float
    wall: float
    peak_open: int
    failed: int
    bytes_read: int


class _Streams:
    """The streams of one run, and how many are open."""

    def __init__(self, client: http.AsyncClient, url: str) -> None:
        self._client = client
        self._url = f"{url}/chat/completions"
        self.open = 0
        self.peak = 0
        self.failed = 0
        self.bytes_read = 0

    async def one(self, opened: asyncio.Event) -> None:
        try:
            async with self._client.stream("POST", self._url, json=BODY) as response:
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
            tasks += [asyncio.create_task(self.one(event)) for event in batch]
            for event in batch:
                await event.wait()
        await asyncio.gather(*tasks)


async def _run_streams(variant: Variant, url: str, n: int) -> _Streams:
    async with variants.async_http_client(variant, policy=POLICY, limits=LIMITS) as client:
        streams = _Streams(client, url)
        await streams.all(n)
    return streams


def _once(variant: Variant, url: str, n: int) -> Sample:
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


def run(quick: bool) -> list[Row]:
    """Alternate the two clients for a few rounds; one row."""
    sizes = QUICK if quick else FULL
    scenario = Scenario(content=("x",) * sizes.events, event_interval=INTERVAL, usage=False)
    samples: dict[Variant, list[Sample]] = {v: [] for v in CLIENTS}
    with ServerProcess(scenario) as server:
        _once("watchdog", server.url(), 20)  # first use of each code path, untimed
        _once("plain", server.url(), 20)
        for number in range(sizes.rounds):
            for variant in CLIENTS if number % 2 == 0 else CLIENTS[::-1]:
                samples[variant].append(_once(variant, server.url(), sizes.streams))
            say(f"async round {number + 1}/{sizes.rounds}")
    cpu = {v: statistics.median(s.cpu for s in runs) for v, runs in samples.items()}
    wall = {v: statistics.median(s.wall for s in runs) for v, runs in samples.items()}
    peak = {v: min(s.peak_open for s in runs) for v, runs in samples.items()}
    failed = {v: sum(s.failed for s in runs) for v, runs in samples.items()}
    ratio = cpu["watchdog"] / cpu["plain"]

    def cell(v: Variant) -> str:
        text = f"CPU {fmt_s(cpu[v])}"
        text += f" ({ratio:.3f}x)" if v == "watchdog" else ""
        text += f", wall {fmt_s(wall[v])}, peak {peak[v]} open"
        return text + (f", {failed[v]} failed" if failed[v] else "")

    return [
        Row(
            key="6",
            figure=(
                f"async: {sizes.streams:,} concurrent raw streams ({sizes.events} events each)"
                f" in one loop, client CPU time, median of {sizes.rounds} (x plain)"
            ),
            cells={
                "watchdog": cell("watchdog"),
                "plain": cell("plain"),
                "seed": "n/a: sync-only design (a thread per call)",
            },
            target="none set",
            verdict="info",
            data={
                "ratio": ratio,
                "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
            },
        )
    ]
