"""Tests for hermes_transport.testing, the embedded OpenAI-compatible fault server."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import socket
import ssl
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any, cast

import httpx
import openai
import pytest
import trustme

from hermes_transport.testing import (
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    FaultServer,
    RecordedRequest,
    Scenario,
)

from _support import threads_started_since

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
STREAM_BODY = {"model": "test-model", "messages": MESSAGES, "stream": True}
JSON_BODY = {"model": "test-model", "messages": MESSAGES}
READ_TIMEOUT = 0.5


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


@pytest.fixture
def sdk(server: FaultServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.base_url, api_key="x", max_retries=0, timeout=10.0
    ) as client:
        yield client


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=httpx.Timeout(10.0, read=READ_TIMEOUT)) as client:
        yield client


def chat_url(server: FaultServer) -> str:
    return server.base_url + "/chat/completions"


def read_lines(response: httpx.Response, into: list[str]) -> None:
    """Append every non-blank SSE line to `into`, so lines survive a read error."""
    into.extend(line for line in response.iter_lines() if line)


def _handlers_alive(server: FaultServer) -> int:
    """This server's connection threads still running (not the process's: other tests'
    threads may come and go meanwhile)."""
    return sum(thread.is_alive() for thread in server._threads)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def data_payloads(lines: list[str]) -> list[Any]:
    return [
        json.loads(line[6:])
        for line in lines
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


# --- healthy responses through the openai SDK -------------------------------------------


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.healthy(),
        Scenario.healthy(gzip=True),
        Scenario(crlf=True),
        Scenario.trickle(),
        Scenario(crlf=True, gzip=True, byte_by_byte=True),
        Scenario(event_interval=0.02),
        Scenario.healthy(content=["hel", "lo", " wor", "ld"]),
    ],
    ids=["plain", "gzip", "crlf", "trickle", "crlf-gzip-trickle", "interval", "four-pieces"],
)
def test_sdk_stream_assembles_content(
    server: FaultServer, sdk: openai.OpenAI, scenario: Scenario
) -> None:
    """A healthy stream assembles to "hello world" with finish_reason stop and usage."""
    server.scenario = scenario
    chunks = list(sdk.chat.completions.create(model="test-model", messages=MESSAGES, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "hello world"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason == "stop"
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.completion_tokens == len(scenario.content)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert {c.model for c in chunks} == {"test-model"}
    assert len({c.id for c in chunks}) == 1


@pytest.mark.parametrize(
    ("scenario", "has_usage"),
    [
        (Scenario.healthy(), True),
        (Scenario.healthy(gzip=True), True),
        (Scenario.trickle(), True),
        (Scenario(usage=False), False),
        (Scenario(finish_reason="length"), True),
    ],
    ids=["plain", "gzip", "trickle", "no-usage", "length"],
)
def test_sdk_non_stream_completion(
    server: FaultServer, sdk: openai.OpenAI, scenario: Scenario, has_usage: bool
) -> None:
    """A non-streaming request gets a complete chat.completion with the joined content."""
    server.scenario = scenario
    completion = sdk.chat.completions.create(model="test-model", messages=MESSAGES)
    assert completion.object == "chat.completion"
    assert completion.model == "test-model"
    assert completion.choices[0].message.content == "hello world"
    assert completion.choices[0].finish_reason == (scenario.finish_reason or "stop")
    assert (completion.usage is not None) == has_usage
    assert server.requests[-1].stream is None


@pytest.mark.parametrize("content", [(), ("Let me check.",)], ids=["tool-only", "with-text"])
@pytest.mark.parametrize("stream", [True, False])
def test_sdk_tool_call(
    server: FaultServer, sdk: openai.OpenAI, stream: bool, content: tuple[str, ...]
) -> None:
    """tool_call emits one tool call whose name and arguments assemble through the SDK."""
    server.scenario = Scenario(content=content, tool_call=True)
    if stream:
        chunks = list(sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True))
        calls = [call for c in chunks if c.choices for call in c.choices[0].delta.tool_calls or []]
        assert len(calls) > 2  # split across chunks, like OpenAI
        assert {call.index for call in calls} == {0}
        name = "".join(call.function.name or "" for call in calls if call.function)
        arguments = "".join(call.function.arguments or "" for call in calls if call.function)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        finish_reason = chunks[-1].choices[0].finish_reason
    else:
        message = sdk.chat.completions.create(model="m", messages=MESSAGES).choices[0]
        assert message.message.tool_calls is not None
        (call,) = message.message.tool_calls
        assert call.type == "function"
        name, arguments = call.function.name, call.function.arguments
        text = message.message.content or ""
        finish_reason = message.finish_reason
    assert name == TOOL_CALL_NAME
    assert json.loads(arguments) == json.loads(TOOL_CALL_ARGUMENTS)
    assert text == "".join(content)
    assert finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
        (429, openai.RateLimitError),
        (400, openai.BadRequestError),
    ],
)
@pytest.mark.parametrize("stream", [True, False])
def test_sdk_error_status(
    server: FaultServer,
    sdk: openai.OpenAI,
    status: int,
    error: type[openai.APIStatusError],
    stream: bool,
) -> None:
    """Scenario.error answers with that status and an OpenAI-style error body."""
    server.scenario = Scenario.error(status, message="boom")
    with pytest.raises(error, match="boom") as excinfo:
        sdk.chat.completions.create(model="m", messages=MESSAGES, stream=stream)
    assert excinfo.value.status_code == status


# --- wire format -------------------------------------------------------------------------


@pytest.mark.parametrize("content", [("hello", " world"), ("a", "b", "c", "d"), ()])
@pytest.mark.parametrize("crlf", [False, True])
def test_stream_wire_format(
    server: FaultServer, http: httpx.Client, content: tuple[str, ...], crlf: bool
) -> None:
    """The stream is chunked SSE of OpenAI chunk objects, a usage chunk and [DONE]."""
    server.scenario = Scenario(content=content, crlf=crlf)
    response = http.post(chat_url(server), json=STREAM_BODY)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert response.headers["transfer-encoding"] == "chunked"
    assert "content-length" not in response.headers
    raw = response.content
    assert raw.count(b"\r\n\r\n" if crlf else b"\n\n") == len(content or [""]) + 2
    if crlf:
        assert raw.replace(b"\r\n", b"").count(b"\n") == 0
    lines = [line for line in response.text.splitlines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = data_payloads(lines)
    assert len(chunks) == len(content or [""]) + 1
    for chunk in chunks:
        assert chunk["object"] == "chat.completion.chunk"
        assert chunk["model"] == "test-model"
        assert chunk["id"] == chunks[0]["id"]
        (choice,) = chunk["choices"]
        assert set(choice) == {"index", "delta", "finish_reason", "logprobs"}
    assert chunks[0]["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "".join(content[:1]),
    }
    assert [c["choices"][0]["delta"].get("content") for c in chunks[1:-1]] == list(content[1:])
    assert chunks[-1]["choices"][0] == {
        "index": 0,
        "delta": {},
        "finish_reason": "stop",
        "logprobs": None,
    }
    assert set(chunks[-1]["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}


def _http_chunk_sizes(server: FaultServer) -> list[int]:
    """The sizes of the HTTP chunks of one streamed answer, read off the wire."""
    body = json.dumps(STREAM_BODY).encode()
    with socket.create_connection(("127.0.0.1", server.port)) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        raw = b""
        while data := sock.recv(65536):
            raw += data
    rest = raw.split(b"\r\n\r\n", 1)[1]
    sizes = []
    while (size := int(rest.split(b"\r\n", 1)[0], 16)) > 0:
        sizes.append(size)
        rest = rest.split(b"\r\n", 1)[1][size + 2 :]
    return sizes


@pytest.mark.once  # no SDK: the same under every openai major
def test_write_size_coalesces_events_into_fewer_writes(server: FaultServer) -> None:
    """write_size=N sends the events in HTTP chunks of at least N bytes (the last may be less)."""
    content = tuple(f"piece {i}" for i in range(500))
    server.scenario = Scenario(content=content)
    separate = _http_chunk_sizes(server)
    server.scenario = Scenario(content=content, write_size=16 * 1024)
    coalesced = _http_chunk_sizes(server)
    assert len(separate) == 502  # one per event
    assert sum(coalesced) == sum(separate)
    assert 1 < len(coalesced) < 10
    assert min(coalesced[:-1]) >= 16 * 1024


@pytest.mark.once  # no SDK: the same under every openai major
def test_linger_after_done_delays_the_end_of_the_body(server: FaultServer) -> None:
    """[DONE] arrives at once; the end of the body only linger_after_done seconds later."""
    server.scenario = Scenario(linger_after_done=0.5)
    started = time.monotonic()
    # Not the http fixture: its read timeout is as long as the linger, a race.
    with (
        httpx.Client(timeout=10.0) as http,
        http.stream("POST", chat_url(server), json=STREAM_BODY) as response,
    ):
        seen_done = None
        for chunk in response.iter_raw():
            if b"[DONE]" in chunk:
                seen_done = time.monotonic() - started
    ended = time.monotonic() - started
    assert seen_done is not None
    assert seen_done < 0.4
    assert ended >= 0.5


@pytest.mark.once  # no SDK: the same under every openai major
def test_trickle_arrives_one_byte_per_chunk(server: FaultServer, http: httpx.Client) -> None:
    """trickle writes every body byte as its own HTTP chunk and the stream still parses."""
    server.scenario = Scenario.trickle()
    with http.stream("POST", chat_url(server), json=STREAM_BODY) as response:
        pieces = list(response.iter_raw())
    assert {len(piece) for piece in pieces} == {1}
    lines = b"".join(pieces).decode().splitlines()
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in data_payloads(lines)) == (
        "hello world"
    )


@pytest.mark.once  # no SDK: the same under every openai major
def test_trickle_delay_spaces_the_bytes(server: FaultServer, http: httpx.Client) -> None:
    """trickle(delay=d) spaces consecutive body bytes at least d seconds apart."""
    server.scenario = dataclasses.replace(
        Scenario.trickle(delay=0.001), content=("x",), usage=False
    )
    started = time.monotonic()
    response = http.post(chat_url(server), json=STREAM_BODY)
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert elapsed >= 0.001 * (len(response.content) - 1)


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.once  # no SDK: the same under every openai major
def test_gzip_is_declared_and_decodes(
    server: FaultServer, http: httpx.Client, stream: bool
) -> None:
    """gzip=True sets content-encoding gzip and httpx decodes the body transparently."""
    server.scenario = Scenario.healthy(gzip=True)
    response = http.post(chat_url(server), json=STREAM_BODY if stream else JSON_BODY)
    assert response.headers["content-encoding"] == "gzip"
    assert "hello" in response.text
    assert response.text.endswith("data: [DONE]\n\n") == stream


@pytest.mark.once  # no SDK: the same under every openai major
def test_json_delay_postpones_non_stream_answers(server: FaultServer, http: httpx.Client) -> None:
    """json_delay delays a non-streaming answer but not a streaming one."""
    server.scenario = Scenario(json_delay=0.3)
    started = time.monotonic()
    assert http.post(chat_url(server), json=JSON_BODY).status_code == 200
    assert time.monotonic() - started >= 0.3
    started = time.monotonic()
    assert http.post(chat_url(server), json=STREAM_BODY).status_code == 200
    assert time.monotonic() - started < 0.3


# --- stalls ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "gzip"), [(STREAM_BODY, False), (JSON_BODY, False), (STREAM_BODY, True)]
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_silent_before_headers_times_out_before_headers(
    server: FaultServer, http: httpx.Client, body: dict[str, Any], gzip: bool
) -> None:
    """silent_before_headers reads the request, then sends nothing, not even a status."""
    server.scenario = Scenario.silent_before_headers(gzip=gzip)
    with pytest.raises(httpx.ReadTimeout):
        http.post(chat_url(server), json=body)
    assert server.requests[0].json == body


@pytest.mark.parametrize(("events", "gzip"), [(0, False), (1, False), (2, True)])
@pytest.mark.once  # no SDK: the same under every openai major
def test_silent_after_sends_n_events_then_nothing(
    server: FaultServer, http: httpx.Client, events: int, gzip: bool
) -> None:
    """silent_after(n) sends the headers and exactly n data events, then goes silent."""
    server.scenario = Scenario.silent_after(events, gzip=gzip)
    lines: list[str] = []
    with http.stream("POST", chat_url(server), json=STREAM_BODY) as response:
        assert response.status_code == 200
        with pytest.raises(httpx.ReadTimeout):
            read_lines(response, lines)
    assert len(lines) == events
    assert all(line.startswith("data: {") for line in lines)


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.comments_after(1),
        dataclasses.replace(Scenario.comments_after(1, interval=0.1, gzip=True), crlf=True),
    ],
    ids=["plain", "gzip-crlf"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_comments_after_keeps_sending_comments(
    server: FaultServer, http: httpx.Client, scenario: Scenario
) -> None:
    """comments_after(1) sends one data event, then only keepalive comments, never timing out."""
    server.scenario = scenario
    lines: list[str] = []
    deadline = time.monotonic() + READ_TIMEOUT * 1.5
    with http.stream("POST", chat_url(server), json=STREAM_BODY) as response:
        for line in response.iter_lines():
            if line:
                lines.append(line)
            if time.monotonic() > deadline:
                break
    assert lines[0].startswith("data: {")
    assert lines[1:] == [": keepalive"] * (len(lines) - 1)
    assert len(lines) >= 4


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(stall_before_headers=True, hold=0.2),
        Scenario(stall_after_events=1, hold=0.2),
        Scenario(stall_after_events=1, comment_interval=0.05, hold=0.3),
    ],
    ids=["before-headers", "after-events", "comments"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_hold_bounds_every_stall(server: FaultServer, scenario: Scenario) -> None:
    """When hold runs out the server hangs up without completing the response."""
    server.scenario = scenario
    started = time.monotonic()
    with httpx.Client(timeout=10.0) as client, pytest.raises(httpx.RemoteProtocolError):
        client.post(chat_url(server), json=STREAM_BODY)
    assert time.monotonic() - started < 5.0


@pytest.mark.parametrize(
    "stall",
    [None, Scenario.silent_after(1), Scenario.error(500)],
    ids=["default", "silent-after-1", "error"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_stall_first_stalls_only_the_first_attempts(
    server: FaultServer, stall: Scenario | None
) -> None:
    """stall_first(2) answers attempts 0 and 1 like `stall`, attempt 2 healthy."""
    server.scenario = Scenario.stall_first(2, stall=stall)
    before = time.monotonic()
    outcomes: list[object] = []
    with httpx.Client(timeout=httpx.Timeout(10.0, read=0.3)) as client:
        for _ in range(3):
            try:
                response = client.post(chat_url(server), json=STREAM_BODY)
                outcomes.append(response.status_code)
            except httpx.ReadTimeout as exc:
                outcomes.append(type(exc))
    stalled = httpx.ReadTimeout if stall is None or stall.status == 200 else 500
    assert outcomes == [stalled, stalled, 200]
    requests = server.requests
    assert [r.attempt for r in requests] == [0, 1, 2]
    assert all(r.stream is True and r.json == STREAM_BODY for r in requests)
    assert all(json.loads(r.body) == STREAM_BODY for r in requests)
    times = [r.time for r in requests]
    assert before <= times[0] <= times[1] <= times[2] <= time.monotonic()


@pytest.mark.parametrize("events", [0, 1, 3, 4, 10])
@pytest.mark.once  # no SDK: the same under every openai major
def test_truncated_raises_protocol_error(
    server: FaultServer, http: httpx.Client, events: int
) -> None:
    """truncated(n) sends n data events then closes without the terminating chunk."""
    server.scenario = Scenario.truncated(events)
    lines: list[str] = []
    with (
        http.stream("POST", chat_url(server), json=STREAM_BODY) as response,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        read_lines(response, lines)
    assert len(lines) == min(events, 4)  # 2 content events, the final chunk, [DONE]


# --- connections, recording, scenario swaps ----------------------------------------------


@pytest.mark.parametrize(
    ("first", "body", "connections"),
    [
        (Scenario.healthy(), JSON_BODY, 1),
        (Scenario.healthy(), STREAM_BODY, 1),
        (Scenario.healthy(gzip=True), STREAM_BODY, 1),
        (Scenario.error(500), JSON_BODY, 1),
        (Scenario.truncated(1), STREAM_BODY, 2),
    ],
    ids=["json", "stream", "gzip-stream", "error", "truncated"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_keep_alive_reuses_connections_after_complete_bodies(
    server: FaultServer,
    http: httpx.Client,
    first: Scenario,
    body: dict[str, Any],
    connections: int,
) -> None:
    """A second request reuses the connection unless the first body was cut off."""
    server.scenario = first
    with contextlib.suppress(httpx.RemoteProtocolError):
        http.post(chat_url(server), json=body)
    server.scenario = Scenario.healthy()
    assert http.post(chat_url(server), json=body).status_code == 200
    assert server.connections_opened == connections


@pytest.mark.once  # no SDK: the same under every openai major
def test_other_paths_get_404_and_do_not_count_as_attempts(
    server: FaultServer, http: httpx.Client
) -> None:
    """Any other path answers 404 JSON and is recorded with attempt -1."""
    response = http.get(server.base_url + "/models")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
    http.post(chat_url(server), json=JSON_BODY)
    assert [(r.method, r.path, r.attempt) for r in server.requests] == [
        ("GET", "/v1/models", -1),
        ("POST", "/v1/chat/completions", 0),
    ]


@pytest.mark.once  # no SDK: the same under every openai major
def test_requests_are_recorded_faithfully(server: FaultServer, http: httpx.Client) -> None:
    """Recorded requests keep lower-cased headers, raw body, parsed JSON and stream flag."""
    http.post(chat_url(server), content=b"not json", headers={"X-Trace": "abc"})
    http.post(chat_url(server), content=iter([b'{"stream": ', b"false}"]))  # chunked body
    recorded: list[RecordedRequest] = server.requests
    first, second = recorded
    assert first.headers["x-trace"] == "abc"
    assert first.body == b"not json"
    assert (first.json, first.stream) == (None, None)
    assert second.headers["transfer-encoding"] == "chunked"
    assert (second.json, second.stream) == ({"stream": False}, False)
    snapshot = server.requests
    snapshot.clear()
    assert len(server.requests) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.attempt = 5  # type: ignore[misc]


@pytest.mark.once  # no SDK: the same under every openai major
def test_scenario_can_be_swapped_between_requests(server: FaultServer, http: httpx.Client) -> None:
    """Each request is answered by the scenario current when it arrives."""
    server.scenario = Scenario.error(503)
    assert http.post(chat_url(server), json=JSON_BODY).status_code == 503
    server.scenario = Scenario.healthy(content=("swapped",))
    reply = http.post(chat_url(server), json=JSON_BODY).json()
    assert reply["choices"][0]["message"]["content"] == "swapped"
    with pytest.raises(TypeError):
        server.scenario = "healthy"  # type: ignore[assignment]


@pytest.mark.once  # no SDK: the same under every openai major
def test_wait_for_requests(server: FaultServer) -> None:
    """wait_for_requests returns True once n requests arrived and False on timeout."""
    assert not server.wait_for_requests(1, timeout=0.1)
    thread = threading.Thread(target=httpx.post, args=(chat_url(server),), kwargs={"json": {}})
    thread.start()
    assert server.wait_for_requests(1, timeout=5.0)
    thread.join()
    assert not server.wait_for_requests(2, timeout=0.1)


@pytest.mark.once  # no SDK: the same under every openai major
def test_lifecycle_errors() -> None:
    """base_url needs a started server, a server starts once, and stop() is idempotent."""
    fault_server = FaultServer()
    fault_server.stop()
    with pytest.raises(RuntimeError):
        _ = fault_server.base_url
    fault_server.start()
    assert fault_server.base_url == f"http://127.0.0.1:{fault_server.port}/v1"
    with pytest.raises(RuntimeError):
        fault_server.start()
    fault_server.stop()
    fault_server.stop()


# --- shutdown and disconnects ------------------------------------------------------------


def _stream_forever(url: str, outcome: list[object], verify: ssl.SSLContext | bool = True) -> None:
    try:
        with (
            httpx.Client(timeout=30.0, verify=verify) as client,
            client.stream("POST", url, json=STREAM_BODY) as response,
        ):
            for _ in response.iter_raw():
                pass
        outcome.append("completed")
    except httpx.HTTPError as exc:
        outcome.append(exc)


@pytest.mark.timing
@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.silent_before_headers(),
        Scenario.silent_after(1),
        Scenario.silent_after(1, gzip=True),
        Scenario.comments_after(1),
        Scenario.trickle(delay=0.05),
        Scenario(event_interval=10.0),
    ],
    ids=["before-headers", "silent-after", "silent-after-gzip", "comments", "trickle", "slow"],
)
def test_stop_is_prompt_with_stalled_clients(scenario: Scenario) -> None:
    """stop() ends stalled handlers fast, unblocks the clients and leaks no threads."""
    baseline = set(threading.enumerate())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fault_server = FaultServer(scenario).start()
        outcomes: list[object] = []
        clients = [
            threading.Thread(target=_stream_forever, args=(chat_url(fault_server), outcomes))
            for _ in range(3)
        ]
        for client in clients:
            client.start()
        assert fault_server.wait_for_requests(3, timeout=10.0)
        time.sleep(0.1)  # let the handlers reach their stall
        started = time.monotonic()
        fault_server.stop()
        assert time.monotonic() - started < 1.0
        for client in clients:
            client.join(timeout=10.0)
        assert len(outcomes) == 3
        assert "completed" not in outcomes
        assert not threads_started_since(baseline)
        fault_server.stop()  # idempotent
        del fault_server
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


@pytest.mark.once  # no SDK: the same under every openai major
def test_stop_closes_idle_keep_alive_connections() -> None:
    """stop() also ends handlers waiting for the next request on a kept-alive connection."""
    baseline = set(threading.enumerate())
    with FaultServer() as fault_server, httpx.Client(timeout=10.0) as client:
        for _ in range(2):
            assert client.post(chat_url(fault_server), json=JSON_BODY).status_code == 200
        assert fault_server.connections_opened == 1
        started = time.monotonic()
        fault_server.stop()
        assert time.monotonic() - started < 1.0
        assert not threads_started_since(baseline)


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.comments_after(1, interval=0.01),
        Scenario.trickle(delay=0.001),
        Scenario.silent_after(1),
        Scenario(event_interval=0.05),
    ],
    ids=["comments", "trickle", "silent", "slow"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_client_disconnect_mid_stream_is_quiet(
    scenario: Scenario, capfd: pytest.CaptureFixture[str]
) -> None:
    """A client hanging up mid-stream frees its handler quietly and the server keeps serving."""
    with FaultServer(scenario) as fault_server:
        with (
            httpx.Client(timeout=10.0) as client,
            client.stream("POST", chat_url(fault_server), json=STREAM_BODY) as response,
        ):
            next(response.iter_raw())
        # Only the accept loop is left once the hang-up was noticed.
        assert wait_until(lambda: _handlers_alive(fault_server) == 0)
        fault_server.scenario = Scenario.healthy()
        assert httpx.post(chat_url(fault_server), json=JSON_BODY).status_code == 200
    assert capfd.readouterr().err == ""


# --- TLS ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A throwaway CA: (server context, client context)."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


@pytest.mark.parametrize("scenario", [Scenario.healthy(), Scenario.healthy(gzip=True)])
@pytest.mark.parametrize("stream", [True, False])
def test_tls_serves_the_sdk(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], scenario: Scenario, stream: bool
) -> None:
    """With an ssl_context the server speaks HTTPS and base_url says so."""
    with (
        FaultServer(scenario, ssl_context=tls[0]) as fault_server,
        httpx.Client(verify=tls[1]) as http_client,
        openai.OpenAI(
            base_url=fault_server.base_url,
            api_key="x",
            max_retries=0,
            # openai 3.x types http_client as an httpx2 client; it takes an httpx one too.
            http_client=cast(Any, http_client),
        ) as client,
    ):
        assert fault_server.base_url.startswith("https://127.0.0.1:")
        if stream:
            chunks = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            reply = client.chat.completions.create(model="m", messages=MESSAGES)
            text = reply.choices[0].message.content or ""
    assert text == "hello world"


@pytest.mark.once  # no SDK: the same under every openai major
def test_tls_silent_after_and_stop(tls: tuple[ssl.SSLContext, ssl.SSLContext]) -> None:
    """Over TLS a stall is a stall, and stop() also ends a never-finished handshake."""
    baseline = set(threading.enumerate())
    fault_server = FaultServer(Scenario.silent_after(1), ssl_context=tls[0]).start()
    lines: list[str] = []
    with httpx.Client(verify=tls[1], timeout=httpx.Timeout(10.0, read=READ_TIMEOUT)) as client:
        with (
            client.stream("POST", chat_url(fault_server), json=STREAM_BODY) as response,
            pytest.raises(httpx.ReadTimeout),
        ):
            read_lines(response, lines)
        assert len(lines) == 1
        assert wait_until(lambda: _handlers_alive(fault_server) == 0)  # hang-up noticed
        stalled: list[object] = []
        streamer = threading.Thread(
            target=_stream_forever, args=(chat_url(fault_server), stalled, tls[1])
        )
        streamer.start()
        assert fault_server.wait_for_requests(2, timeout=10.0)
        with socket.create_connection(("127.0.0.1", fault_server.port)):  # no ClientHello
            assert wait_until(lambda: fault_server.connections_opened == 3)
            started = time.monotonic()
            fault_server.stop()
            assert time.monotonic() - started < 1.0
        streamer.join(timeout=10.0)
    assert len(stalled) == 1
    assert "completed" not in stalled
    assert not threads_started_since(baseline)


# --- Scenario ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Scenario(hold=-1), "hold"),
        (lambda: Scenario(event_interval=-0.1), "event_interval"),
        (lambda: Scenario(json_delay=-1), "json_delay"),
        (lambda: Scenario.trickle(delay=-1), "byte_delay"),
        (lambda: Scenario(byte_delay=0.1), "byte_delay"),
        (lambda: Scenario.silent_after(-1), "stall_after_events"),
        (lambda: Scenario.truncated(-1), "truncate_after_events"),
        (lambda: Scenario.stall_first(-1), "stall_attempts"),
        (lambda: Scenario.error(302), "status"),
        (lambda: Scenario.error(700), "status"),
        (lambda: Scenario(content="hello"), "content"),  # type: ignore[arg-type]
        (lambda: Scenario(content=(1, 2)), "content"),  # type: ignore[arg-type]
        (lambda: Scenario.comments_after(1, interval=0), "comment_interval"),
        (lambda: Scenario(comment_interval=0.1), "comment_interval"),
        (lambda: Scenario(stall_before_headers=True, stall_after_events=1), "stall_after_events"),
        (lambda: Scenario(stall_after_events=0, truncate_after_events=1), "truncate_after_events"),
        (lambda: Scenario(stall_scenario="x"), "stall_scenario"),  # type: ignore[arg-type]
        (lambda: Scenario(linger_after_done=-1), "linger_after_done"),
        (lambda: Scenario(write_size=-1), "write_size"),
        (lambda: Scenario(write_size=10, event_interval=0.1), "write_size"),
        (lambda: Scenario(write_size=10, gzip=True), "write_size"),
        (lambda: Scenario(think=-1), "think"),
        (lambda: Scenario.thinking(-0.1), "think"),
        (lambda: Scenario.thinking(1.0, keepalive_interval=0), "keepalive_interval"),
        (lambda: Scenario(keepalive_interval=0.1), "keepalive_interval"),
        (lambda: Scenario.error_in_stream(""), "error_event"),
        (lambda: Scenario(error_event=5), "error_event"),  # type: ignore[arg-type]
        (lambda: Scenario.error_in_stream(after_events=-1), "error_after_events"),
        (lambda: Scenario(error_after_events=2), "error_after_events"),
        (lambda: Scenario(error_as_response_failed=True), "error_as_response_failed"),
        (lambda: Scenario(error_event="x", stall_before_headers=True), "error_event"),
        (lambda: Scenario(error_event="x", stall_after_events=1), "error_event"),
        (lambda: Scenario(error_event="x", truncate_after_events=1), "error_event"),
    ],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_scenario_validation_names_the_field(make: Callable[[], Scenario], field: str) -> None:
    """Invalid Scenario fields raise ValueError naming the offending field."""
    with pytest.raises(ValueError, match=rf"Scenario\.{field}\b"):
        make()


@pytest.mark.parametrize(
    ("attempt", "expected"),
    [
        (-1, Scenario.healthy(gzip=True)),
        (0, Scenario.truncated(2)),
        (1, Scenario.truncated(2)),
        (2, Scenario.healthy(gzip=True)),
        (99, Scenario.healthy(gzip=True)),
    ],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_stall_first_composes(attempt: int, expected: Scenario) -> None:
    """stall_first resolves per attempt to `stall` or to the `then` scenario's behaviour."""
    scenario = Scenario.stall_first(
        2, then=Scenario.healthy(gzip=True), stall=Scenario.truncated(2)
    )
    resolved = scenario.for_attempt(attempt)
    assert dataclasses.replace(resolved, stall_attempts=0, stall_scenario=None) == expected


@pytest.mark.once  # no SDK: the same under every openai major
def test_scenario_is_hashable_and_accepts_lists() -> None:
    """Scenarios are frozen and hashable; list content is stored as a tuple."""
    scenario = Scenario.healthy(content=["a", "b"])
    assert scenario.content == ("a", "b")
    assert hash(scenario) == hash(Scenario(content=("a", "b")))
