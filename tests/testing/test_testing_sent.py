"""FaultServer.sent: what the fault server sent for each request, and when."""

from __future__ import annotations

import itertools
import time
import zlib
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from typing import Any

import httpx
import pytest

from hermes_transport.testing import FaultServer, Scenario
from hermes_transport.testing.scenarios import SENT_LIMIT, SENT_WRITES_LIMIT, SentResponse

# The fault server's own record, no SDK: the same under every openai major.
pytestmark = pytest.mark.once

BODY: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


def _raw_stream(server: FaultServer, **body: Any) -> tuple[float, bytes, float]:
    """(time sent, the raw body as received, time read to its end) of one streaming request."""
    with httpx.Client(timeout=10.0) as client:
        started = time.monotonic()
        url = server.base_url + "/chat/completions"
        with client.stream("POST", url, json=BODY | {"stream": True} | body) as response:
            raw = b"".join(response.iter_raw())
        return started, raw, time.monotonic()


def _ended(server: FaultServer, index: int = -1) -> SentResponse:
    """The record of request ``index`` once the server is done with it."""
    deadline = time.monotonic() + 5.0
    while (sent := server.sent[index]).ended_at is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return sent


@pytest.mark.parametrize(
    "scenario", [Scenario(), Scenario(crlf=True), Scenario.trickle(), Scenario(write_size=4096)]
)
def test_a_stream_s_writes_are_the_body_as_received_in_order(
    server: FaultServer, scenario: Scenario
) -> None:
    """The writes, joined, are the body the client read, timed in order between its request and end."""
    server.scenario = scenario
    started, raw, finished = _raw_stream(server)
    sent = _ended(server)
    assert sent.request == server.requests[-1]
    assert sent.status == 200
    assert b"".join(data for _, data in sent.writes) == raw
    assert sent.body_bytes == len(raw)
    assert sent.headers_at is not None
    assert sent.ended_at is not None
    times = [sent.request.time, sent.headers_at, *(at for at, _ in sent.writes), sent.ended_at]
    assert started <= times[0]
    assert times == sorted(times)
    assert sent.writes[-1][0] <= finished
    if scenario.byte_by_byte:
        assert all(len(data) == 1 for _, data in sent.writes)
    elif not scenario.write_size:
        assert [data.count(b"data:") for _, data in sent.writes] == [1] * len(sent.writes)


def test_a_gzip_stream_s_writes_are_the_compressed_bytes(server: FaultServer) -> None:
    """With gzip, the writes hold the compressed bytes, which decompress to the events."""
    server.scenario = Scenario.healthy(gzip=True)
    _, raw, _ = _raw_stream(server)
    written = b"".join(data for _, data in _ended(server).writes)
    assert written == raw
    assert zlib.decompress(written, wbits=31).endswith(b"data: [DONE]\n\n")


@pytest.mark.timing
def test_writes_are_timed_as_the_scenario_spaces_them(server: FaultServer) -> None:
    """With event_interval 0.1, each write comes at least 0.1 s after the one before it."""
    server.scenario = Scenario(event_interval=0.1)
    _raw_stream(server)
    times = [at for at, _ in _ended(server).writes]
    assert len(times) == 4
    assert all(later - earlier >= 0.1 for earlier, later in itertools.pairwise(times))


def test_keepalive_comments_are_recorded_as_writes(server: FaultServer) -> None:
    """A stall with comments records each keepalive comment as a write of its own."""
    server.scenario = Scenario.comments_after(1, interval=0.05)
    with httpx.Client(timeout=10.0) as client:
        url = server.base_url + "/chat/completions"
        with client.stream("POST", url, json=BODY | {"stream": True}) as response:
            for chunk in response.iter_raw():
                if chunk.count(b": keepalive") >= 1 and b"data:" not in chunk:
                    break
    writes = [data for _, data in _ended(server).writes]
    assert writes[0].startswith(b"data: ")
    assert b": keepalive\n\n" in writes[1:]


@pytest.mark.parametrize(
    ("scenario", "status"), [(Scenario.error(503), 503), (Scenario(json_delay=0.01), 200)]
)
def test_a_json_answer_is_one_write_with_its_status(
    server: FaultServer, scenario: Scenario, status: int
) -> None:
    """A JSON answer (an error status, or a non-streaming one) is its status and one write of the JSON."""
    server.scenario = scenario
    with httpx.Client(timeout=10.0) as client:
        response = client.post(server.base_url + "/chat/completions", json=BODY)
    sent = _ended(server)
    assert (sent.status, response.status_code) == (status, status)
    assert [data for _, data in sent.writes] == [response.content]


def test_a_stall_before_headers_sends_nothing(server: FaultServer) -> None:
    """A stall before the headers leaves no status, no headers and no writes, and an end."""
    server.scenario = Scenario.silent_before_headers()
    with httpx.Client(timeout=0.2) as client, pytest.raises(httpx.ReadTimeout):
        client.post(server.base_url + "/chat/completions", json=BODY | {"stream": True})
    sent = _ended(server)
    assert (sent.status, sent.headers_at, sent.writes, sent.body_bytes) == (None, None, (), 0)
    assert sent.ended_at is not None


def test_other_requests_are_recorded_too(server: FaultServer) -> None:
    """A 404 and a retrieval are recorded in arrival order, one record per request."""
    with httpx.Client(timeout=10.0) as client:
        assert client.get(server.base_url + "/nowhere").status_code == 404
        assert client.get(server.base_url + "/responses/resp_none").status_code == 404
    assert [s.request for s in server.sent] == server.requests
    assert [s.status for s in server.sent] == [404, 404]


def test_the_record_is_bounded(server: FaultServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """At most SENT_WRITES_LIMIT writes are kept per response, all counted; the latest SENT_LIMIT responses are kept."""
    assert SENT_LIMIT >= 100
    assert SENT_WRITES_LIMIT >= 1000
    import hermes_transport.testing.server as server_module

    monkeypatch.setattr(server_module, "SENT_WRITES_LIMIT", 5)
    server.scenario = Scenario.trickle()
    _, raw, _ = _raw_stream(server)
    sent = _ended(server)
    assert len(sent.writes) == 5
    assert sent.body_bytes == len(raw) > 5
    monkeypatch.setattr(server_module, "SENT_LIMIT", 2)
    with FaultServer() as small:
        for _ in range(3):
            _raw_stream(small)
        assert len(small.requests) == 3
        assert [s.request for s in small.sent] == small.requests[-2:]


def test_a_record_is_a_frozen_snapshot(server: FaultServer) -> None:
    """A SentResponse does not change as the server writes on, and cannot be changed."""
    server.scenario = Scenario(event_interval=0.05)
    with httpx.Client(timeout=10.0) as client:
        url = server.base_url + "/chat/completions"
        with client.stream("POST", url, json=BODY | {"stream": True}) as response:
            chunks = response.iter_raw()
            next(chunks)
            early = server.sent[-1]
            for _ in chunks:
                pass
    assert len(_ended(server).writes) > len(early.writes) >= 1
    with pytest.raises(FrozenInstanceError):
        early.status = 500  # type: ignore[misc]
