"""Figure 6e: no reference cycles of our own: what the cyclic collector finds after streams.

A stream whose objects form reference cycles leaves them for the cyclic collector, which
scans every tracked object of the process when it runs a full collection: the more
streams, the more there is to scan, and the more often (figure 6c). Here the collector is
off while ``N`` streams run: after a ``gc.collect()``, ``gc.disable()``; the streams open
together (at most ``BATCH`` waiting at a time), each is held at its first chunk until all
are open, then read to the end and closed; then ``gc.collect()``'s return value (the
unreachable objects it found) is divided by ``N``, watchdog against plain. Target:
watchdog <= plain + 5 objects a stream, in each of three shapes: sync, ``N`` threads
sharing one client (figure 6d's); async, one client for all (6a's); async, a client per
stream, entered and closed by its stream's task (6c's; those clients share one SSL
context, as there). In every shape the clients are closed and dropped before the count,
so what a transport leaves behind when it is closed counts too (over ``N`` streams, where
they share one client). The server sends 20 events 50 ms apart, so the first streams find
the rest of theirs waiting when they go on: this is a count, not a time, and the hold
changes how many reads a stream makes, not what a read leaves behind.

Informational: the objects the collector tracks alive a stream while all are open (held at
their first chunk): ``len(gc.get_objects())`` then, minus before the streams, over ``N``.
Each count runs once in a fresh process, after a few streams of warm-up.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import threading
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Literal

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import variants
from .async_load import BODY, CLIENTS, SPARE_FDS, WARMUP, ssl_context
from .flavor import http
from .process_state import raise_fd_limit
from .progress import say
from .report import Row
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

Shape = Literal["sync", "async", "async, a client per stream"]
SHAPES: tuple[Shape, ...] = ("sync", "async", "async, a client per stream")
BATCH = 125
TARGET = 5
WARMUP_STREAMS = 10
SCENARIO = Scenario(content=("x",) * 20, event_interval=0.05, usage=False)
TIMEOUT = 300.0


@dataclass(frozen=True)
class Count:
    found: int  # gc.collect()'s return value after the streams
    alive: int  # objects tracked while all the streams were open, beyond those before
    failed: int
    kinds: dict[str, int]  # what it found, by type


class _Gate:
    """Counts the objects the collector tracks once every stream is at its first chunk."""

    def __init__(self, before: int) -> None:
        self._before = before
        self.alive = 0

    def count(self) -> None:
        self.alive = len(gc.get_objects()) - self._before


def _sync_streams(client: http.Client, url: str, n: int, gate: _Gate | None) -> int:
    """``n`` streams on ``n`` threads; the failed ones."""
    connecting = threading.Semaphore(BATCH)
    everyone = threading.Barrier(n, action=None if gate is None else gate.count)
    failed = [0]

    def one() -> None:
        waiting = True
        try:
            with client.stream("POST", f"{url}/chat/completions", json=BODY) as response:
                for _chunk in response.iter_raw():
                    if waiting:
                        waiting = False
                        connecting.release()
                        everyone.wait(TIMEOUT)
        except (http.HTTPError, threading.BrokenBarrierError):
            failed[0] += 1
            everyone.abort()
        finally:
            if waiting:
                connecting.release()

    threads = [threading.Thread(target=one) for _ in range(n)]
    for thread in threads:
        connecting.acquire()
        thread.start()
    for thread in threads:
        thread.join()
    return failed[0]


async def _async_streams(
    clients: list[http.AsyncClient], url: str, n: int, gate: _Gate | None
) -> int:
    """``n`` streams in this loop, on ``clients`` (one, or one each); the failed ones."""
    connecting = asyncio.Semaphore(BATCH)
    everyone = asyncio.Event()
    arrived = [0]
    failed = [0]

    async def one(client: http.AsyncClient) -> None:
        waiting = True
        try:
            async with contextlib.AsyncExitStack() as stack:
                if len(clients) > 1:  # the stream's own client, closed after it
                    await stack.enter_async_context(client)
                async with client.stream("POST", f"{url}/chat/completions", json=BODY) as r:
                    async for _chunk in r.aiter_raw():
                        if waiting:
                            waiting = False
                            connecting.release()
                            arrived[0] += 1
                            if arrived[0] == n:
                                if gate is not None:
                                    gate.count()
                                everyone.set()
                            await everyone.wait()
        except http.HTTPError:
            failed[0] += 1
            everyone.set()  # the count is void: go on
        finally:
            if waiting:
                connecting.release()

    tasks = []
    for index in range(n):
        await connecting.acquire()
        tasks.append(asyncio.create_task(one(clients[index % len(clients)])))
    await asyncio.gather(*tasks)
    return failed[0]


def _streams(variant: Variant, shape: Shape, url: str, n: int, gate: _Gate | None) -> int:
    """One run of ``n`` streams in ``shape``; the failed ones. The clients are gone after."""
    policy = StreamPolicy()
    if shape == "sync":
        with contextlib.closing(variants.http_client(variant, policy=policy)) as client:
            return _sync_streams(client, url, n, gate)
    own = shape != "async"
    limits = None if own else http.Limits(max_connections=None, max_keepalive_connections=0)
    clients = [
        variants.async_http_client(variant, policy=policy, limits=limits, verify=ssl_context())
        for _ in range(n if own else 1)
    ]

    async def main() -> int:
        if own:
            return await _async_streams(clients, url, n, gate)
        async with clients[0]:
            return await _async_streams(clients, url, n, gate)

    try:
        return asyncio.run(main())
    finally:
        clients.clear()


def _measure(variant: Variant, shape: Shape, url: str, warm_url: str, n: int) -> Count:
    """In a fresh process: warm up, then count with the collector off."""
    raise_fd_limit(n + SPARE_FDS)
    threading.stack_size(512 * 1024)
    _streams(variant, shape, warm_url, WARMUP_STREAMS, None)
    gc.collect()
    gc.disable()
    try:
        gate = _Gate(len(gc.get_objects()))
        failed = _streams(variant, shape, url, n, gate)
        gc.set_debug(gc.DEBUG_SAVEALL)  # keeps what it finds in gc.garbage, to name them
        found = gc.collect()
        kinds = Counter(_kind(thing) for thing in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    return Count(found=found, alive=gate.alive, failed=failed, kinds=dict(kinds))


def _kind(thing: object) -> str:
    kind = type(thing)
    return f"{kind.__module__.rpartition('.')[2]}.{kind.__qualname__}"


def _in_fresh_process(variant: Variant, shape: Shape, url: str, warm_url: str, n: int) -> Count:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_measure, variant, shape, url, warm_url, n).result(TIMEOUT)


def _row(shape: Shape, n: int, counts: dict[Variant, Count]) -> Row:
    found = {v: counts[v].found / n for v in CLIENTS}
    alive = {v: counts[v].alive / n for v in CLIENTS}
    failed = {v: counts[v].failed for v in CLIENTS}
    passed = found["watchdog"] <= found["plain"] + TARGET and not any(failed.values())

    def cell(v: Variant) -> str:
        text = (
            f"{found[v]:.1f} found a stream ({counts[v].found:,} in all); alive while open:"
            f" {alive[v]:.0f} a stream"
        )
        return text + (f", {failed[v]} failed" if failed[v] else "")

    clients = {"sync": "threads sharing one client", "async": "tasks sharing one client"}
    on = clients.get(shape, "tasks, a client of its own each")
    key = {"sync": "6e/sync", "async": "6e/async"}.get(shape, "6e/async-own")
    return Row(
        key=key,
        figure=(
            f"{shape.split(',')[0]}: objects the cyclic collector finds after {n} raw streams"
            f" on {on}, read to the end and closed with the collector off (gc.collect()'s"
            " count over the streams), and objects tracked alive a stream while open"
        ),
        cells={"watchdog": cell("watchdog"), "plain": cell("plain"), "seed": "not measured"},
        target=f"watchdog <= plain + {TARGET} found a stream",
        verdict="PASS" if passed else "MISS",
        data={v: counts[v].__dict__ for v in CLIENTS},
        notes=[_beyond(counts, n)]
        + ([f"failed streams (the counts are void): {failed}"] if any(failed.values()) else []),
    )


def _beyond(counts: dict[Variant, Count], n: int, shown: int = 10) -> str:
    """The types the watchdog's streams leave in cycles beyond plain's, most first."""
    watchdog, plain = counts["watchdog"].kinds, counts["plain"].kinds
    more = {k: (watchdog.get(k, 0) - plain.get(k, 0)) / n for k in {*watchdog, *plain}}
    top = sorted((k for k in more if more[k] >= 0.1), key=lambda k: -more[k])[:shown]
    listed = ", ".join(f"{k} {more[k]:.2f}" for k in top) or "none"
    return f"found beyond plain's, by type, 0.1 a stream or more (DEBUG_SAVEALL): {listed}"


def run(quick: bool) -> list[Row]:
    """Each shape, each client once, in fresh processes; a row per shape."""
    n = 50 if quick else 200
    rows = []
    with ServerProcess(SCENARIO) as server, ServerProcess(WARMUP) as warm:
        for shape in SHAPES:
            counts = {}
            for variant in CLIENTS:
                counts[variant] = _in_fresh_process(variant, shape, server.url(), warm.url(), n)
                say(f"cycles, {shape}, {variant}: {counts[variant]}")
            rows.append(_row(shape, n, counts))
    return rows
