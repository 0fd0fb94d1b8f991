"""The watch makes no reference cycles of its own: what it holds for a stream is freed by
reference counting as the stream closes, never left to the cyclic garbage collector.

Each test reads streams to the end with the collector off, then counts what one
collection finds: the watchdog's streams leave no more cyclic garbage than plain
transport's (the HTTP library's own cycle between a response and its stream), and none of
the watch's per-stream state (exchange, call, meter, scanner, record) is in it.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from hermes_transport import StreamPolicy
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, chat_body

pytestmark = pytest.mark.once  # no SDK: the same under every openai major

STREAMS = 40
#: Cyclic garbage a stream may leave beyond the plain transport's (the issue's bound).
SLACK = 5
#: What the watch holds for a stream only while it is open: none of it may outlive the
#: close in a cycle (the response keeps the watched stream, its guard and attempt, and the
#: statistics it reports; those go with the HTTP library's own cycle).
PER_STREAM_STATE = {
    "Call",
    "Exchange",
    "GapSummary",
    "ProgressMeter",
    "SSEScanner",
    "StreamRecord",
    "WholeEvents",
}
POLICY = StreamPolicy(stale_timeout=30.0, retries=0)


class Garbage:
    """What one collection found, after the streams run under ``collecting()``."""

    def __init__(self) -> None:
        self.count = 0
        self.ours: Counter[str] = Counter()


@contextmanager
def collecting() -> Iterator[Garbage]:
    """The collector off inside, then one collection that saves what it finds."""
    garbage = Garbage()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield garbage
        garbage.count = gc.collect()
        garbage.ours.update(
            type(found).__name__
            for found in gc.garbage
            if type(found).__module__.startswith("hermes_transport")
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def _sync_streams(client: Any, url: str) -> Garbage:
    def one() -> None:
        with client.stream("POST", url, json=chat_body()) as response:
            for _ in response.iter_raw():
                pass

    one()  # the first use of each code path, outside the count
    with collecting() as garbage:
        for _ in range(STREAMS):
            one()
    return garbage


async def _async_streams(client: Any, url: str) -> Garbage:
    async def one() -> None:
        async with client.stream("POST", url, json=chat_body()) as response:
            async for _ in response.aiter_raw():
                pass

    await one()
    with collecting() as garbage:
        for _ in range(STREAMS):
            await one()
    return garbage


def _check(plain: Garbage, watched: Garbage) -> None:
    assert watched.count <= plain.count + SLACK * STREAMS, (
        f"{watched.count / STREAMS:.1f} objects of cyclic garbage a stream against plain's"
        f" {plain.count / STREAMS:.1f}; ours: {dict(watched.ours)}"
    )
    left = PER_STREAM_STATE & set(watched.ours)
    assert not left, f"the watch's per-stream state was left to the collector: {sorted(left)}"


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(Scenario(content=("x",) * 20, usage=False)) as fault_server:
        yield fault_server


def test_sync_streams_leave_no_cycles_of_the_watchs_own(
    flavor: Flavor, server: FaultServer
) -> None:
    """Sync streams read to the end leave no more cyclic garbage than the plain transport's, and none of the watch's per-stream state."""
    url = server.base_url + "/chat/completions"
    with flavor.http.Client(transport=flavor.http.HTTPTransport()) as client:
        plain = _sync_streams(client, url)
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=POLICY)) as client:
        watched = _sync_streams(client, url)
    _check(plain, watched)


@pytest.mark.anyio
async def test_async_streams_leave_no_cycles_of_the_watchs_own(
    flavor: Flavor, server: FaultServer
) -> None:
    """Async streams read to the end leave no more cyclic garbage than the plain transport's, and none of the watch's per-stream state."""
    url = server.base_url + "/chat/completions"
    async with flavor.http.AsyncClient(transport=flavor.http.AsyncHTTPTransport()) as client:
        plain = await _async_streams(client, url)
    transport = flavor.AsyncWatchdogTransport(policy=POLICY)
    async with flavor.http.AsyncClient(transport=transport) as client:
        watched = await _async_streams(client, url)
    _check(plain, watched)


def test_a_stream_closed_early_leaves_none_of_the_watchs_state(
    flavor: Flavor, server: FaultServer
) -> None:
    """A sync stream the caller closes after its first chunk frees the watch's per-stream state without the collector."""
    url = server.base_url + "/chat/completions"

    def one(client: Any) -> None:
        with client.stream("POST", url, json=chat_body()) as response:
            next(response.iter_raw())

    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=POLICY)) as client:
        one(client)
        with collecting() as garbage:
            for _ in range(STREAMS):
                one(client)
    left = PER_STREAM_STATE & set(garbage.ours)
    assert not left, f"the watch's per-stream state was left to the collector: {sorted(left)}"
