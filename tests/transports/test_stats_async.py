"""StreamStats on AsyncWatchdogTransport (asyncio and trio), checked against the fault server's record."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
import trio

from hermes_transport import Interrupt, StreamPolicy, StreamStalled, StreamStats
from hermes_transport.testing import FaultServer, Scenario

from _stats_support import (
    CHAT,
    ENDINGS,
    POLICY,
    REASON,
    THINKING,
    assert_timed_by,
    body_of,
    data_events,
    ended,
    fields,
    known,
)
from _support import Flavor, chat_body, ignore_abandoned_async_generators

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = [pytest.mark.anyio, pytest.mark.once]


def _current_task(backend: str) -> object:
    return asyncio.current_task() if backend == "asyncio" else trio.lowlevel.current_task()


class Recorder:
    """An on_stats callback that keeps every StreamStats, with the thread and task it ran on."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.calls: list[StreamStats] = []
        self.where: list[tuple[int, object]] = []

    def __call__(self, stats: StreamStats) -> None:
        self.calls.append(stats)
        self.where.append((threading.get_ident(), _current_task(self.backend)))

    @property
    def one(self) -> StreamStats:
        assert len(self.calls) == 1, self.calls
        return self.calls[0]

    def assert_ran_here(self) -> None:
        """Every call ran on this thread, in the task calling this."""
        here = (threading.get_ident(), _current_task(self.backend))
        assert set(self.where) == {here}


@contextlib.asynccontextmanager
async def _client(
    flavor: Flavor, on_stats: Any, policy: StreamPolicy = POLICY, token: Interrupt | None = None
) -> AsyncIterator[Any]:
    """An AsyncClient of the flavor over its AsyncWatchdogTransport, reporting to ``on_stats``."""
    transport = flavor.AsyncWatchdogTransport(policy=policy, interrupt=token, on_stats=on_stats)
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        yield client


@pytest.mark.timing
@pytest.mark.parametrize("gzip", [False, True], ids=["identity", "gzip"])
async def test_a_healthy_stream_s_statistics_match_what_the_server_sent(
    flavor: Flavor, server: FaultServer, anyio_backend: str, gzip: bool
) -> None:
    """A spaced-out healthy stream reports completed, 200, the server's events and body bytes, its gaps, and times within bounds, from the reading task."""
    server.scenario = replace(Scenario(event_interval=0.15), gzip=gzip)
    recorder = Recorder(anyio_backend)
    async with _client(flavor, recorder) as client:
        before = time.monotonic()
        async with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            async with contextlib.aclosing(response.aiter_bytes()) as iterator:
                chunks = [await iterator.__anext__()]
                assert "stream_stats" not in response.extensions  # not over yet
                chunks += [chunk async for chunk in iterator]
        after = time.monotonic()
    assert b"".join(chunks).endswith(b"data: [DONE]\n\n")
    stats, sent = recorder.one, ended(server)
    assert response.extensions["stream_stats"] is stats
    recorder.assert_ran_here()
    assert fields(stats, "outcome status stage error") == ("completed", 200, None, None)
    assert fields(stats, "wire model attempts resends") == ("chat_completions", "m", 1, 0)
    assert stats.url == server.base_url + CHAT
    assert stats.events == data_events(body_of(sent, gzip)) == 4
    assert stats.bytes == sent.body_bytes == len(body_of(sent))
    assert fields(stats, "heartbeats comment_bytes") == (0, 0)
    assert stats.gap_count == stats.events - 1
    assert_timed_by(stats, sent, before, after)
    spacings = [b[0] - a[0] for a, b in itertools.pairwise(sent.writes)]
    largest, p50, p90, p99 = known(stats.largest_gap, stats.gap_p50, stats.gap_p90, stats.gap_p99)
    assert max(spacings) - 0.1 <= largest <= stats.duration
    assert p50 <= p90 <= p99 <= largest


@pytest.mark.timing
async def test_keepalive_comments_are_counted_as_the_server_wrote_them(
    flavor: Flavor, server: FaultServer, anyio_backend: str
) -> None:
    """Comments while the model thinks count in comment_bytes, byte for byte; the first output comes after the thinking."""
    server.scenario = Scenario.thinking(0.3, keepalive_interval=0.05)
    recorder = Recorder(anyio_backend)
    async with _client(flavor, recorder, THINKING) as client:
        before = time.monotonic()
        async with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            await response.aread()
        after = time.monotonic()
    stats, sent = recorder.one, ended(server)
    comments = [line for line in body_of(sent).splitlines(keepends=True) if line.startswith(b":")]
    assert len(comments) >= 2
    assert stats.comment_bytes == sum(map(len, comments))
    assert fields(stats, "outcome heartbeats events") == ("completed", 0, 4)
    assert_timed_by(stats, sent, before, after)
    assert known(stats.first_output)[0] >= 0.3  # after the thinking


@pytest.mark.parametrize(
    ("path", "body", "keepalive"),
    [
        ("/messages", {"max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}, "ping"),
        ("/responses", {"input": "hi"}, "keepalive"),
    ],
    ids=["messages", "responses"],
)
async def test_keepalive_events_are_counted_as_heartbeats(
    flavor: Flavor,
    server: FaultServer,
    anyio_backend: str,
    path: str,
    body: dict[str, Any],
    keepalive: str,
) -> None:
    """Messages pings and Responses keepalive events count as heartbeats, one per event the server sent."""
    server.scenario = Scenario.thinking(0.2, keepalive_interval=0.05)
    recorder = Recorder(anyio_backend)
    async with _client(flavor, recorder, THINKING) as client:
        url, payload = server.base_url + path, {"model": "m", "stream": True, **body}
        async with client.stream("POST", url, json=payload) as response:
            await response.aread()
    stats, sent = recorder.one, ended(server)
    sent_keepalives = body_of(sent).count(b"event: %s\n" % keepalive.encode())
    assert sent_keepalives >= 2
    assert fields(stats, "outcome heartbeats bytes") == (
        "completed",
        sent_keepalives,
        sent.body_bytes,
    )
    assert stats.events is not None  # a few events a read: counted one by one
    assert 1 <= stats.events <= data_events(body_of(sent)) - sent_keepalives


@pytest.mark.parametrize(
    ("scenario", "stage"),
    [(Scenario.silent_before_headers(), "headers"), (Scenario.silent_after(0), "first_event")],
    ids=["before-headers", "before-first-event"],
)
async def test_a_stall_before_the_first_event_is_reported_once_after_its_resends(
    flavor: Flavor, server: FaultServer, anyio_backend: str, scenario: Scenario, stage: str
) -> None:
    """Every attempt stalls: one report from the calling task, stalled at that stage, after retries + 1 attempts."""
    server.scenario = replace(scenario, hold=2.0)
    recorder = Recorder(anyio_backend)
    async with _client(flavor, recorder, StreamPolicy(stale_timeout=0.2, retries=2)) as client:
        request = client.build_request("POST", server.base_url + CHAT, json=chat_body())
        with pytest.raises(StreamStalled):
            await client.send(request)
    stats = recorder.one
    recorder.assert_ran_here()
    assert fields(stats, "outcome stage error") == ("stalled", stage, None)
    assert fields(stats, "attempts resends resumes") == (3, 2, 0)
    assert len(server.requests) == 3
    assert fields(stats, "first_event events bytes") == (None, 0, 0)


@pytest.mark.parametrize("ending", sorted(ENDINGS))
async def test_how_a_stream_that_reached_its_caller_ended_is_reported_once(
    flavor: Flavor, server: FaultServer, anyio_backend: str, ending: str
) -> None:
    """A stall or an interrupt (fired from another thread) after the first event, a 500 answer, or a caller closing after its first chunk: reported once, from the reading task, in the response's extensions too."""
    if ending == "closed-early":
        ignore_abandoned_async_generators()  # httpx's own chain, unexhausted on trio, as without us
    scenario, stale, raises, expected = ENDINGS[ending]
    server.scenario = replace(scenario, hold=5.0)
    recorder, token = Recorder(anyio_backend), Interrupt()
    async with _client(
        flavor, recorder, StreamPolicy(stale_timeout=stale, retries=2), token
    ) as client:
        async with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            async with contextlib.aclosing(response.aiter_bytes()) as chunks:
                first = await chunks.__anext__()
                assert "stream_stats" not in response.extensions
                if ending == "interrupted":
                    threading.Timer(0.1, token.interrupt, args=(REASON,)).start()
                if ending != "closed-early":
                    with pytest.raises(raises) if raises is not None else contextlib.nullcontext():
                        [chunk async for chunk in chunks]
    stats, sent = recorder.one, ended(server)
    assert fields(stats, "outcome stage error status events") == expected
    assert fields(stats, "attempts resends gap_count") == (1, 0, 0)
    assert response.extensions["stream_stats"] is stats
    recorder.assert_ran_here()
    assert response.status_code == stats.status
    assert sent.status == stats.status
    if ending != "error-status":  # a body that is not an event stream is not metered
        assert first.startswith(b"data:")
        assert stats.bytes == len(first)
    assert stats.duration >= (0.3 if ending == "stalled" else 0.0)


async def test_a_raising_callback_is_logged_and_the_stream_completes(
    flavor: Flavor, server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A callback that raises is logged at ERROR on hermes_transport; the caller reads the whole stream."""
    calls: list[StreamStats] = []

    def broken(stats: StreamStats) -> None:
        calls.append(stats)
        raise RuntimeError("callback bug")

    with caplog.at_level(logging.ERROR, logger="hermes_transport"):
        async with _client(flavor, broken) as client:
            url = server.base_url + CHAT
            async with client.stream("POST", url, json=chat_body()) as response:
                body = await response.aread()
    assert body.endswith(b"data: [DONE]\n\n")
    assert [stats.outcome for stats in calls] == ["completed"]
    assert response.extensions["stream_stats"] is calls[0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.levelname) for r in errors] == [("hermes_transport", "ERROR")]
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], RuntimeError)


async def test_exactly_one_report_per_streaming_request(
    flavor: Flavor, server: FaultServer, anyio_backend: str
) -> None:
    """Streams read with aiter_bytes, aread() or closed early get one report each; a non-streaming request none; o3-mini gets 600 s."""
    ignore_abandoned_async_generators()  # httpx's own chain, unexhausted on trio, as without us
    recorder = Recorder(anyio_backend)
    async with _client(flavor, recorder, StreamPolicy()) as client:
        url = server.base_url + CHAT
        async with client.stream("POST", url, json=chat_body()) as response:
            [chunk async for chunk in response.aiter_bytes()]
        assert (await client.post(url, json=chat_body(stream=False))).status_code == 200
        async with client.stream("POST", url, json=chat_body(model="o3-mini")) as response:
            await response.aread()
            await response.aclose()
        async with client.stream("POST", url, json=chat_body(model="third")) as response:
            async with contextlib.aclosing(response.aiter_raw()) as raw:
                await raw.__anext__()
    assert [s.model for s in recorder.calls] == ["m", "o3-mini", "third"]
    assert [s.outcome for s in recorder.calls][:2] == ["completed", "completed"]
    assert [s.budgets.first_event for s in recorder.calls][:2] == [180.0, 600.0]
    recorder.assert_ran_here()
