"""StreamStats on WatchdogTransport, checked against the fault server's record of what it sent."""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

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
from _support import Flavor, chat_body

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once


class Recorder:
    """An on_stats callback that keeps every StreamStats and the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[StreamStats] = []
        self.threads: list[int] = []

    def __call__(self, stats: StreamStats) -> None:
        self.calls.append(stats)
        self.threads.append(threading.get_ident())

    @property
    def one(self) -> StreamStats:
        assert len(self.calls) == 1, self.calls
        return self.calls[0]


@contextlib.contextmanager
def _client(
    flavor: Flavor, on_stats: Any, policy: StreamPolicy = POLICY, token: Interrupt | None = None
) -> Iterator[Any]:
    """A Client of the flavor over its WatchdogTransport, reporting to ``on_stats``."""
    transport = flavor.WatchdogTransport(policy=policy, interrupt=token, on_stats=on_stats)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        yield client


@pytest.mark.timing
@pytest.mark.parametrize("gzip", [False, True], ids=["identity", "gzip"])
def test_a_healthy_stream_s_statistics_match_what_the_server_sent(
    flavor: Flavor, server: FaultServer, gzip: bool
) -> None:
    """A spaced-out healthy stream reports completed, 200, the server's events and body bytes, its gaps, and times within bounds of the server's writes."""
    server.scenario = replace(Scenario(event_interval=0.15), gzip=gzip)
    recorder = Recorder()
    with _client(flavor, recorder) as client:
        before = time.monotonic()
        with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            chunks = [next(iterator := response.iter_bytes())]
            assert "stream_stats" not in response.extensions  # not over yet
            chunks += iterator
        after = time.monotonic()
    assert b"".join(chunks).endswith(b"data: [DONE]\n\n")
    stats, sent = recorder.one, ended(server)
    assert response.extensions["stream_stats"] is stats
    assert recorder.threads == [threading.get_ident()]
    assert fields(stats, "outcome status stage error") == ("completed", 200, None, None)
    assert fields(stats, "wire model method") == ("chat_completions", "m", "POST")
    assert (stats.url, stats.server_address) == (server.base_url + CHAT, "127.0.0.1")
    assert fields(stats, "attempts resends resumes") == (1, 0, 0)
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
def test_keepalive_comments_are_counted_as_the_server_wrote_them(
    flavor: Flavor, server: FaultServer
) -> None:
    """Comments while the model thinks count in comment_bytes, byte for byte; the first output comes after the thinking."""
    server.scenario = Scenario.thinking(0.3, keepalive_interval=0.05)
    recorder = Recorder()
    with _client(flavor, recorder, THINKING) as client:
        before = time.monotonic()
        with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            response.read()
        after = time.monotonic()
    stats, sent = recorder.one, ended(server)
    lines = body_of(sent).splitlines(keepends=True)
    comments = [line for line in lines if line.startswith(b":")]
    assert len(comments) >= 2
    assert stats.comment_bytes == sum(map(len, comments))
    assert fields(stats, "outcome heartbeats events") == ("completed", 0, 4)
    assert stats.bytes == sent.body_bytes
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
def test_keepalive_events_are_counted_as_heartbeats(
    flavor: Flavor, server: FaultServer, path: str, body: dict[str, Any], keepalive: str
) -> None:
    """Messages pings and Responses keepalive events count as heartbeats, one per event the server sent, not as events."""
    server.scenario = Scenario.thinking(0.2, keepalive_interval=0.05)
    recorder = Recorder()
    with _client(flavor, recorder, THINKING) as client:
        url, payload = server.base_url + path, {"model": "m", "stream": True, **body}
        with client.stream("POST", url, json=payload) as response:
            response.read()
    stats, sent = recorder.one, ended(server)
    sent_keepalives = body_of(sent).count(b"event: %s\n" % keepalive.encode())
    assert sent_keepalives >= 2
    assert stats.heartbeats == sent_keepalives
    assert stats.outcome == "completed"
    assert stats.wire == path.strip("/")
    assert stats.events is not None  # a few events a read: counted one by one
    assert 1 <= stats.events <= data_events(body_of(sent)) - sent_keepalives
    assert fields(stats, "bytes comment_bytes") == (sent.body_bytes, 0)


# Timing-bound: each attempt must reach the server within its 0.2 s budget, connecting
# included (under load, a first attempt once stalled while connecting and was never seen).
@pytest.mark.timing
@pytest.mark.parametrize(
    ("scenario", "stage"),
    [(Scenario.silent_before_headers(), "headers"), (Scenario.silent_after(0), "first_event")],
    ids=["before-headers", "before-first-event"],
)
def test_a_stall_before_the_first_event_is_reported_once_after_its_resends(
    flavor: Flavor, server: FaultServer, scenario: Scenario, stage: str
) -> None:
    """Every attempt stalls: one report, stalled at that stage, after retries + 1 attempts, with no event."""
    server.scenario = replace(scenario, hold=2.0)
    recorder = Recorder()
    with _client(flavor, recorder, StreamPolicy(stale_timeout=0.2, retries=2)) as client:
        with pytest.raises(StreamStalled):
            client.send(client.build_request("POST", server.base_url + CHAT, json=chat_body()))
    stats = recorder.one
    assert fields(stats, "outcome stage error") == ("stalled", stage, None)
    assert fields(stats, "attempts resends resumes") == (3, 2, 0)
    assert len(server.requests) == 3
    assert stats.status == (None if stage == "headers" else 200)
    assert fields(stats, "first_event first_output events bytes") == (None, None, 0, 0)
    assert recorder.threads == [threading.get_ident()]


@pytest.mark.parametrize("ending", sorted(ENDINGS))
def test_how_a_stream_that_reached_its_caller_ended_is_reported_once(
    flavor: Flavor, server: FaultServer, ending: str
) -> None:
    """A stall or an interrupt (fired from another thread) after the first event, a 500 answer, or a caller closing after its first chunk: reported once, on the caller's thread, in the response's extensions too."""
    scenario, stale, raises, expected = ENDINGS[ending]
    server.scenario = replace(scenario, hold=5.0)
    recorder, token = Recorder(), Interrupt()
    with _client(flavor, recorder, StreamPolicy(stale_timeout=stale, retries=2), token) as client:
        with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            chunks = response.iter_bytes()
            first = next(chunks)
            assert "stream_stats" not in response.extensions
            if ending == "interrupted":
                threading.Timer(0.1, token.interrupt, args=(REASON,)).start()
            if ending != "closed-early":
                with pytest.raises(raises) if raises is not None else contextlib.nullcontext():
                    list(chunks)
    stats, sent = recorder.one, ended(server)
    assert fields(stats, "outcome stage error status events") == expected
    assert fields(stats, "attempts resends gap_count") == (1, 0, 0)
    assert response.extensions["stream_stats"] is stats
    assert recorder.threads == [threading.get_ident()]
    assert response.status_code == stats.status
    assert sent.status == stats.status
    if ending != "error-status":  # a body that is not an event stream is not metered
        assert first.startswith(b"data:")
        assert stats.bytes == len(first)
    assert stats.duration >= (0.3 if ending == "stalled" else 0.0)


def test_a_raising_callback_is_logged_and_the_stream_completes(
    flavor: Flavor, server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A callback that raises is logged at ERROR on hermes_transport; the caller reads the whole stream."""
    calls: list[StreamStats] = []

    def broken(stats: StreamStats) -> None:
        calls.append(stats)
        raise RuntimeError("callback bug")

    with caplog.at_level(logging.ERROR, logger="hermes_transport"), _client(flavor, broken) as c:
        with c.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            body = response.read()
    assert body.endswith(b"data: [DONE]\n\n")
    assert [stats.outcome for stats in calls] == ["completed"]
    assert response.extensions["stream_stats"] is calls[0]
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.name, r.levelname) for r in errors] == [("hermes_transport", "ERROR")]
    assert errors[0].exc_info is not None
    assert isinstance(errors[0].exc_info[1], RuntimeError)


def test_exactly_one_report_per_streaming_request(flavor: Flavor, server: FaultServer) -> None:
    """Streams read with iter_bytes, read() or closed early get one report each, in order; a non-streaming request none."""
    recorder = Recorder()
    with _client(flavor, recorder) as client:
        url = server.base_url + CHAT
        with client.stream("POST", url, json=chat_body()) as response:
            list(response.iter_bytes())
        assert client.post(url, json=chat_body(stream=False)).status_code == 200
        with client.stream("POST", url, json=chat_body(model="second")) as response:
            response.read()
            response.close()
        with client.stream("POST", url, json=chat_body(model="third")) as response:
            next(response.iter_raw())
    assert [s.model for s in recorder.calls] == ["m", "second", "third"]
    assert [s.outcome for s in recorder.calls][:2] == ["completed", "completed"]


@pytest.mark.parametrize(
    ("policy", "first_event"),
    [(StreamPolicy(), 600.0), (StreamPolicy(stale_timeout=0.3), 0.3)],
    ids=["default", "explicit"],
)
def test_a_reasoning_model_gets_its_budget_unless_one_is_set(
    flavor: Flavor, server: FaultServer, policy: StreamPolicy, first_event: float
) -> None:
    """o3-mini's first-event budget is 600 s under the default policy; an explicit stale budget of 0.3 s wins."""
    recorder = Recorder()
    with _client(flavor, recorder, policy) as client:
        body = chat_body(model="o3-mini")
        with client.stream("POST", server.base_url + CHAT, json=body) as response:
            response.read()
    stats = recorder.one
    assert stats.outcome == "completed"
    assert stats.model == "o3-mini"
    assert stats.budgets.first_event == first_event
    assert stats.budgets == policy.budgets_for("o3-mini", len(server.requests[-1].body))


#: Thousands of events written 64 KiB at a time: most reads bring long runs of them.
BURSTS = Scenario(content=("x",) * 5000, write_size=64 * 1024, usage=False)


def test_a_burst_of_events_is_reported_without_a_count_never_a_wrong_one(
    flavor: Flavor, server: FaultServer
) -> None:
    """A stream whose reads bring long runs of events completes with its bytes exact and its event counts ``None``: not counted one by one, and not guessed."""
    server.scenario = BURSTS
    recorder = Recorder()
    with _client(flavor, recorder) as client:
        body = client.post(server.base_url + CHAT, json=chat_body()).content
    stats = recorder.one
    assert body.endswith(b"data: [DONE]\n\n")
    assert fields(stats, "outcome events heartbeats comment_bytes") == (
        "completed",
        None,
        None,
        None,
    )
    assert stats.bytes == len(body) == ended(server).body_bytes


def test_a_stall_after_a_burst_says_what_is_known_of_its_events(
    flavor: Flavor, server: FaultServer
) -> None:
    """A stall after long runs of events says how many at least, and in how many bytes: never a count it did not make."""
    server.scenario = replace(BURSTS, stall_after_events=4000, hold=5.0)
    with (
        _client(flavor, None, policy=StreamPolicy(stale_timeout=0.5)) as client,
        pytest.raises(StreamStalled) as info,
    ):
        client.post(server.base_url + CHAT, json=chat_body())
    message = str(info.value)
    found = re.search(r"after at least (\d+) event\(s\) in (\d+) bytes", message)
    assert found is not None, message
    assert 1 <= int(found.group(1)) < 4000
    assert int(found.group(2)) == ended(server).body_bytes


def test_a_body_whose_end_does_not_follow_done_in_time_is_reported_completed(
    flavor: Flavor, server: FaultServer
) -> None:
    """A caller that closes after [DONE] while the server holds the body open past the drain's bound gets a stream reported completed, not stalled: the answer was whole."""
    server.scenario = replace(Scenario.healthy(), linger_after_done=2.0)
    recorder = Recorder()
    with _client(flavor, recorder, StreamPolicy(stale_timeout=5.0), Interrupt()) as client:
        with client.stream("POST", server.base_url + CHAT, json=chat_body()) as response:
            read = b""
            for chunk in response.iter_bytes():
                read += chunk
                if b"[DONE]" in read:
                    break  # closed here: the close drains what follows, for at most 50 ms
    assert fields(recorder.one, "outcome stage error") == ("completed", None, None)
