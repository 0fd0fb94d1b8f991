"""WatchdogTransport against real loopback sockets (and mocks where plumbing is the point)."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import logging
import socket
import ssl
import threading
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import replace
from typing import Any, cast

import httpx
import pytest
import respx

import hermes_transport._core.body as body_module
import hermes_transport._transports.sync_body as transport_module
from hermes_transport import StreamPolicy, StreamStalled, WatchdogTransport
from hermes_transport._io.watchdog import watchdog
from hermes_transport.testing import FaultServer, Scenario

from _support import (
    FLAVORS,
    ClientFactory,
    Flavor,
    FlavorName,
    chat_body,
    gunzip,
    load_flavor,
    normalised,
)

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

# Generous upper bounds: the machines are shared and noisy.
SLACK = 3.0

SSE_HEADERS = {"content-type": "text/event-stream"}


def _event(content: str) -> bytes:
    chunk = {"choices": [{"index": 0, "delta": {"content": content}}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _post_stream(client: Any, target: FaultServer | str, **body: Any) -> Any:
    """POST a streaming chat request to a fault server, or to a full URL; return it unread."""
    url = target if isinstance(target, str) else target.base_url + "/chat/completions"
    return client.send(client.build_request("POST", url, json=chat_body(**body)), stream=True)


def _read_all(response: Any) -> bytes:
    try:
        return b"".join(response.iter_raw())
    finally:
        response.close()


def _assert_flavor_stall(flavor: Flavor, stall: BaseException) -> None:
    """The stall is the flavor's own StreamStalled, in the flavor's httpx error hierarchy."""
    assert type(stall) is flavor.StreamStalled
    assert isinstance(stall, StreamStalled)
    assert isinstance(stall, flavor.http.ReadTimeout)
    assert isinstance(stall, flavor.http.RemoteProtocolError)


# --- healthy streams and pass-through -------------------------------------------------


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.healthy(),
        Scenario.healthy(gzip=True),
        Scenario.trickle(),
        replace(Scenario.healthy(), crlf=True),
        replace(Scenario.healthy(), tool_call=True),
    ],
    ids=["plain", "gzip", "byte-at-a-time", "crlf", "tool-call"],
)
def test_healthy_stream_bytes_are_passed_up_untouched(
    flavor: Flavor, server: FaultServer, watchdog_client: ClientFactory, scenario: Scenario
) -> None:
    """A healthy stream reaches the caller byte for byte as a plain client of its library gets it."""
    server.scenario = scenario
    with flavor.http.Client() as plain:
        expected = _read_all(_post_stream(plain, server))
    got = _read_all(_post_stream(watchdog_client(stale=5.0), server))
    if scenario.gzip:
        assert got[:2] == b"\x1f\x8b", "compressed bytes must be passed up still compressed"
        got, expected = gunzip(got), gunzip(expected)
    assert normalised(got) == normalised(expected)
    assert b"data: [DONE]" in got


@pytest.mark.parametrize(
    "scenario", [Scenario.healthy(), Scenario.error(500), Scenario.error(429)]
)
def test_non_sse_responses_pass_through_untouched(
    flavor: Flavor, server: FaultServer, watchdog_client: ClientFactory, scenario: Scenario
) -> None:
    """JSON completions and error bodies come back exactly as from a plain client of the same library."""
    server.scenario = scenario
    request: dict[str, Any] = {"json": chat_body(stream=False)}
    with flavor.http.Client() as plain:
        expected = plain.post(server.base_url + "/chat/completions", **request)
    got = watchdog_client(stale=5.0).post(server.base_url + "/chat/completions", **request)
    assert got.status_code == expected.status_code
    assert normalised(got.content) == normalised(expected.content)
    assert got.headers["content-type"] == expected.headers["content-type"]


def test_slow_non_streaming_request_keeps_only_its_own_timeouts(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """A non-streaming completion slower than every budget is neither cut nor re-sent."""
    server.scenario = replace(Scenario.healthy(), json_delay=1.2)
    client = watchdog_client(stale=0.3, first=0.3, retries=2)
    response = client.post(server.base_url + "/chat/completions", json=chat_body(stream=False))
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "hello world"
    assert len(server.requests) == 1


# --- stalls after the first event ------------------------------------------------------


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario.silent_after(1),
        Scenario.comments_after(1, interval=0.05),
        Scenario.silent_after(1, gzip=True),
        Scenario.comments_after(1, interval=0.05, gzip=True),
        replace(Scenario.comments_after(2, interval=0.05), crlf=True),
    ],
    ids=["silent", "comments", "silent-gzip", "comments-gzip", "comments-crlf"],
)
def test_stall_after_first_event_raises_stream_stalled_promptly(
    flavor: Flavor, server: FaultServer, watchdog_client: ClientFactory, scenario: Scenario
) -> None:
    """A stream that stops making progress is cut and its reader raises StreamStalled soon after the budget."""
    server.scenario = scenario
    stale = 0.5
    client = watchdog_client(stale=stale, first=5.0, retries=2)
    sent = time.monotonic()
    response = _post_stream(client, server)
    first_seen = time.monotonic()  # the first event is in: the stale budget runs
    with pytest.raises(StreamStalled) as info:
        for _ in response.iter_raw():
            pass
    raised = time.monotonic()
    response.close()
    _assert_flavor_stall(flavor, info.value)
    assert info.value.stage == "mid_stream"
    assert info.value.budget == stale
    assert raised - sent >= stale, "stalled before the budget ran out"
    assert raised - first_seen < stale + SLACK
    assert len(server.requests) == 1, "a stream that stalled after its first event was re-sent"


def test_stall_error_is_both_read_timeout_and_remote_protocol_error(
    flavor: Flavor, server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """Existing handlers for the library's ReadTimeout or RemoteProtocolError catch a stall."""
    server.scenario = Scenario.comments_after(1)
    response = _post_stream(watchdog_client(stale=0.3), server)
    with pytest.raises(flavor.http.ReadTimeout) as as_timeout:
        _read_all(response)
    assert isinstance(as_timeout.value, flavor.http.RemoteProtocolError)
    _assert_flavor_stall(flavor, as_timeout.value)
    assert "0.3 s" in str(as_timeout.value)
    assert isinstance(as_timeout.value.request, flavor.http.Request)
    assert as_timeout.value.request.url.path == "/v1/chat/completions"


def test_progress_events_keep_a_slow_stream_alive(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """Events spaced closer than the budget never trip it, however long the stream runs."""
    server.scenario = replace(Scenario.healthy(content=tuple("abcdefgh")), event_interval=0.15)
    body = _read_all(_post_stream(watchdog_client(stale=0.5), server))
    assert body.count(b"data: ") == 10  # 8 content events, the finish chunk and [DONE]


def test_next_request_on_the_same_client_works_on_a_new_connection(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """A killed connection is not pooled: the next request opens a new one and succeeds."""
    client = watchdog_client(stale=0.3)
    server.scenario = Scenario.comments_after(1)
    with pytest.raises(StreamStalled):
        _read_all(_post_stream(client, server))
    server.scenario = Scenario.healthy()
    for _ in range(2):
        assert b"[DONE]" in _read_all(_post_stream(client, server))
    # One for the killed stream, one reused by both healthy streams.
    assert server.connections_opened == 2


# --- the first event -------------------------------------------------------------------


@pytest.mark.parametrize(
    "stall",
    [Scenario.silent_before_headers(), Scenario.silent_after(0), Scenario.comments_after(0)],
    ids=["before-headers", "headers-then-silence", "headers-then-comments"],
)
@pytest.mark.parametrize("retries", [0, 2])
def test_stall_before_first_event_is_resent_then_raised_from_send(
    flavor: Flavor,
    server: FaultServer,
    watchdog_client: ClientFactory,
    stall: Scenario,
    retries: int,
) -> None:
    """Before its first event a stalled stream is re-sent `retries` times, then send() raises."""
    server.scenario = stall
    budget = 0.4
    client = watchdog_client(stale=30.0, first=budget, retries=retries)
    started = time.monotonic()
    with pytest.raises(StreamStalled) as info:
        _post_stream(client, server)
    elapsed = time.monotonic() - started
    _assert_flavor_stall(flavor, info.value)
    assert info.value.stage == "first_event"
    assert info.value.attempts == retries + 1
    assert len(server.requests) == retries + 1
    assert (retries + 1) * budget - 0.05 <= elapsed < (retries + 1) * budget + SLACK
    # Every re-send went out on a fresh connection: the stalled ones were killed.
    assert server.connections_opened == retries + 1


def test_stall_on_early_attempts_then_healthy_stream_succeeds(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """A stream that stalls on its first two attempts is served by the third, transparently."""
    server.scenario = Scenario.stall_first(2)
    body = _read_all(_post_stream(watchdog_client(stale=30.0, first=0.3, retries=2), server))
    assert b"hello" in body
    assert b"[DONE]" in body
    assert [r.attempt for r in server.requests] == [0, 1, 2]
    assert all(r.body == server.requests[0].body for r in server.requests)


def test_first_event_is_held_back_and_handed_up_intact(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """send() returns once the first event arrived, and the caller still reads it first."""
    server.scenario = Scenario.silent_after(1)
    response = _post_stream(watchdog_client(stale=0.5, first=5.0), server)
    # The first event is already here, held: reading it does not wait on the (silent) socket.
    watched = response.stream._stream  # the client's BoundSyncStream wraps ours
    assert isinstance(watched, transport_module.WatchedStream)
    assert b"".join(watched._held).startswith(b"data: ")
    started = time.monotonic()
    first = next(response.iter_raw())
    assert time.monotonic() - started < 0.4  # well before the 0.5 s budget could cut it
    assert first.startswith(b"data: ")
    assert b'"hello"' in first
    response.close()


def test_stale_timeout_is_the_first_event_budget_when_unset(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """Without first_event_timeout, the stale budget also bounds the wait for the first event."""
    server.scenario = Scenario.silent_before_headers()
    with pytest.raises(StreamStalled) as info:
        _post_stream(watchdog_client(stale=0.3, retries=0), server)
    assert info.value.budget == 0.3


def test_first_event_bound_off_keeps_the_stale_watch(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """first_event_timeout=inf lets a stream think before its first event, then watches it."""
    server.scenario = replace(Scenario.comments_after(1), event_interval=0.0)
    client = watchdog_client(stale=0.4, first=float("inf"))
    with pytest.raises(StreamStalled) as info:
        _read_all(_post_stream(client, server))
    assert info.value.stage == "mid_stream"


@pytest.mark.parametrize(
    ("headers", "body_stream", "streaming"),
    [
        ({"accept": "text/event-stream"}, False, True),
        ({}, True, True),
        ({}, False, False),
    ],
)
def test_streaming_requests_are_recognised_from_the_request(
    flavor: Flavor,
    server: FaultServer,
    watchdog_client: ClientFactory,
    headers: dict[str, str],
    body_stream: bool,
    streaming: bool,
) -> None:
    """The first-event budget applies to requests with `"stream": true` or Accept: text/event-stream only."""
    server.scenario = Scenario.silent_before_headers()
    client = watchdog_client(stale=0.3, retries=0, timeout=1.5)
    request = client.build_request(
        "POST",
        server.base_url + "/chat/completions",
        json=chat_body(stream=body_stream),
        headers=headers,
    )
    expected = flavor.StreamStalled if streaming else flavor.http.ReadTimeout
    with pytest.raises(flavor.http.ReadTimeout) as info:
        client.send(request)
    assert type(info.value) is expected


def test_request_body_that_cannot_be_replayed_is_not_resent(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """A streaming request whose body was a one-shot iterator is sent once, then raises."""
    server.scenario = Scenario.silent_before_headers()
    client = watchdog_client(stale=0.3, retries=2)
    payload = json.dumps(chat_body()).encode()
    request = client.build_request(
        "POST",
        server.base_url + "/chat/completions",
        content=iter([payload]),
        headers={"content-type": "application/json", "accept": "text/event-stream"},
    )
    with pytest.raises(StreamStalled) as info:
        client.send(request)
    assert info.value.attempts == 1
    assert len(server.requests) == 1


# --- mocked inner transports: no socket --------------------------------------------------


class _SlowStream:
    """A response body that yields parts with pauses in between."""

    def __init__(self, parts: list[bytes | float]) -> None:
        self._parts = parts
        self.closed = False

    def __iter__(self) -> Iterator[bytes]:
        for part in self._parts:
            if isinstance(part, float):
                time.sleep(part)
            else:
                yield part

    def close(self) -> None:
        self.closed = True


@functools.cache
def _slow_stream_type(http: Any) -> type[_SlowStream]:
    """_SlowStream made the library's SyncByteStream: a client accepts only its own library's."""
    return type("_SlowStream", (_SlowStream, http.SyncByteStream), {})


def _slow_stream(http: Any, parts: list[bytes | float]) -> _SlowStream:
    return _slow_stream_type(http)(parts)


def _mock(
    flavor: Flavor, parts: list[bytes | float], headers: dict[str, str] = SSE_HEADERS
) -> Any:
    """The flavor's MockTransport answering every request with `parts`, paused as given."""
    http = flavor.http
    return http.MockTransport(
        lambda request: http.Response(200, headers=headers, stream=_slow_stream(http, parts))
    )


def test_stall_without_a_socket_is_raised_when_the_next_bytes_arrive(
    flavor: Flavor, watchdog_client: ClientFactory
) -> None:
    """With a mocked inner transport a stall cannot be cut, but the next bytes raise it."""
    inner = _mock(flavor, [_event("a"), 0.8, b": keepalive\n\n", _event("b")])
    client = watchdog_client(stale=0.3, inner=inner)
    with client.stream("POST", "http://mock/v1/chat/completions", json=chat_body()) as response:
        with pytest.raises(StreamStalled) as info:
            for _ in response.iter_raw():
                pass
    _assert_flavor_stall(flavor, info.value)


# httpx only: respx patches httpcore, never httpcore2. The behaviour itself (a stall
# raised with no socket to cut) runs on both flavors in the MockTransport test above.
@pytest.mark.parametrize("flavor", ["httpx"], indirect=True)
def test_respx_mock_below_the_transport_sees_the_watchdog_run(
    watchdog_client: ClientFactory,
) -> None:
    """Under respx (which patches httpcore), streams are still scanned and stalls still raised."""
    with respx.mock:
        respx.post("http://api.test/v1/chat/completions").mock(
            return_value=httpx.Response(
                200,
                headers=SSE_HEADERS,
                # _slow_stream(httpx, ...) is an httpx.SyncByteStream too.
                stream=cast(
                    httpx.SyncByteStream, _slow_stream(httpx, [_event("a"), 0.8, _event("b")])
                ),
            )
        )
        client = watchdog_client(stale=0.3)
        with client.stream("POST", "http://api.test/v1/chat/completions", json=chat_body()) as r:
            with pytest.raises(StreamStalled):
                for _ in r.iter_raw():
                    pass


def test_malformed_sse_passes_up_and_never_crashes_the_watchdog(
    flavor: Flavor, watchdog_client: ClientFactory
) -> None:
    """Garbage in an event-stream body reaches the caller unchanged."""
    garbage = [bytes(range(256)), b"\r\r\n\n:::\x00data", b"\xff\xfe" * 1000, _event("ok")]
    client = watchdog_client(stale=5.0, inner=_mock(flavor, list(garbage)))
    with client.stream("POST", "http://mock/v1/chat/completions", json=chat_body()) as response:
        assert b"".join(response.iter_raw()) == b"".join(garbage)


def test_held_bytes_are_capped_before_the_first_event(
    flavor: Flavor, watchdog_client: ClientFactory
) -> None:
    """A body that sends megabytes before any event is handed up once the hold limit is reached."""
    filler = b":" + b"x" * (64 * 1024 - 1)  # one endless comment line
    parts: list[bytes | float] = [filler] * 64  # 4 MiB
    client = watchdog_client(stale=5.0, inner=_mock(flavor, parts))
    seen = []
    original = transport_module.WatchedStream.await_first_event

    def spy(self: transport_module.WatchedStream) -> None:
        original(self)
        seen.append(sum(len(c) for c in self._held))

    transport_module.WatchedStream.await_first_event = spy  # type: ignore[method-assign]
    try:
        with client.stream("POST", "http://mock/v1/chat/completions", json=chat_body()) as r:
            assert len(b"".join(r.iter_raw())) == 64 * len(filler)
    finally:
        transport_module.WatchedStream.await_first_event = original  # type: ignore[method-assign]
    assert seen == [body_module.HOLD_LIMIT]


def test_a_huge_line_does_not_grow_memory(flavor: Flavor, watchdog_client: ClientFactory) -> None:
    """100 MB of one unterminated line stream through with small, bounded memory."""
    block = b"y" * (1024 * 1024)
    http = flavor.http

    class Endless:
        def __iter__(self) -> Iterator[bytes]:
            yield _event("first")
            yield b"data: "
            for _ in range(100):
                yield block

    stream_class = flavor.byte_stream_class(Endless)
    inner = http.MockTransport(
        lambda request: http.Response(200, headers=SSE_HEADERS, stream=stream_class())
    )
    client = watchdog_client(stale=30.0, inner=inner)
    tracemalloc.start()
    try:
        with client.stream("POST", "http://mock/v1/chat/completions", json=chat_body()) as r:
            total = sum(len(chunk) for chunk in r.iter_raw())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert total > 100 * len(block)
    assert peak < 8 * len(block), f"peak {peak / 1e6:.1f} MB"


# --- sockets and threads -----------------------------------------------------------------


def test_the_watchdog_thread_never_closes_a_socket(
    server: FaultServer, watchdog_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killing a stream shuts its socket down from the watchdog; only the owner closes it."""
    closers: list[str] = []
    shutdowns: list[str] = []
    real_close, real_shutdown = socket.socket.close, socket.socket.shutdown

    def close(sock: socket.socket) -> None:
        closers.append(threading.current_thread().name)
        real_close(sock)

    def shutdown(sock: socket.socket, how: int) -> None:
        shutdowns.append(threading.current_thread().name)
        real_shutdown(sock, how)

    client = watchdog_client(stale=0.3)
    server.scenario = Scenario.comments_after(1)
    monkeypatch.setattr(socket.socket, "close", close)
    monkeypatch.setattr(socket.socket, "shutdown", shutdown)
    with pytest.raises(StreamStalled):
        _read_all(_post_stream(client, server))
    monkeypatch.undo()
    assert "hermes-transport-watchdog" in shutdowns
    assert "hermes-transport-watchdog" not in closers
    assert threading.current_thread().name in closers


def test_many_open_streams_share_one_watchdog_thread(flavor: Flavor, server: FaultServer) -> None:
    """Thirty streams open at once add one thread to the process at most: the watchdog."""
    server.scenario = Scenario.comments_after(1, interval=0.1)
    transport = flavor.WatchdogTransport(
        policy=StreamPolicy(stale_timeout=1.0), limits=flavor.http.Limits(max_connections=40)
    )
    before = {t.ident for t in threading.enumerate()}
    with flavor.http.Client(transport=transport) as client:
        responses = [_post_stream(client, server) for _ in range(30)]
        added = [
            t
            for t in threading.enumerate()
            if t.ident not in before and not t.name.startswith("FaultServer")
        ]
        assert [t.name for t in added if t.name != "hermes-transport-watchdog"] == []
        for response in responses:
            with pytest.raises(StreamStalled):
                _read_all(response)


def test_progress_is_lazy_rearming_not_a_heap_push_per_event(
    server: FaultServer, watchdog_client: ClientFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long stream costs at most three watchdog pushes per attempt (first-event, stale and after-[DONE] deadlines), however many events it has."""
    pushes = []
    real_arm = watchdog.arm

    def arm(target: Any) -> None:
        if target.deadline is not None:  # one without a deadline pushes nothing
            pushes.append(target)
        real_arm(target)

    monkeypatch.setattr(watchdog, "arm", arm)
    server.scenario = Scenario.healthy(content=tuple("x" * 200))
    body = _read_all(_post_stream(watchdog_client(stale=5.0), server))
    assert body.count(b"data: ") == 202
    assert len(pushes) <= 3


# --- configuration and logging -----------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda flavor: flavor.WatchdogTransport(http2=True),
        lambda flavor: flavor.WatchdogTransport(flavor.http.HTTPTransport(http2=True)),
    ],
    ids=["kwarg", "inner"],
)
def test_http2_is_refused_with_a_reason(flavor: Flavor, build: Any) -> None:
    """HTTP/2 is refused: one socket shutdown would kill every sibling stream."""
    with pytest.raises(ValueError, match="HTTP/2"):
        build(flavor)


@pytest.mark.parametrize("inner_library", FLAVORS)
@pytest.mark.parametrize("outer_is_async", [False, True], ids=["sync", "async"])
@pytest.mark.parametrize("inner_is_async", [False, True], ids=["sync-inner", "async-inner"])
@pytest.mark.parametrize("inner_is_ours", [False, True], ids=["http", "watchdog"])
def test_an_inner_transport_of_the_other_library_or_kind_is_refused_by_name(
    flavor: Flavor,
    inner_library: FlavorName,
    outer_is_async: bool,
    inner_is_async: bool,
    inner_is_ours: bool,
) -> None:
    """An inner transport of the other HTTP library, or of the other kind (sync/async), is a
    TypeError naming both, not a bare assertion deep in the client at the first request."""
    other = load_flavor(inner_library)
    if inner_is_ours:
        inner = (other.AsyncWatchdogTransport if inner_is_async else other.WatchdogTransport)()
    else:
        inner = (other.http.AsyncHTTPTransport if inner_is_async else other.http.HTTPTransport)()
    outer = flavor.AsyncWatchdogTransport if outer_is_async else flavor.WatchdogTransport
    if inner_library == flavor.name and inner_is_async == outer_is_async:
        assert outer(inner).inner is inner  # the right library and kind: accepted
    elif inner_library != flavor.name:
        home = "hermes_transport" if inner_library == "httpx" else "hermes_transport.httpx2"
        with pytest.raises(TypeError) as info:
            outer(inner)
        message = str(info.value)
        assert f"runs on {flavor.name}, but inner is an {inner_library} transport" in message
        assert f"{home}.{outer.__name__}" in message
    else:
        method = "handle_async_request" if outer_is_async else "handle_request"
        with pytest.raises(TypeError, match=rf"inner must be a transport with {method}\(\)"):
            outer(inner)


def test_transport_settings_with_an_inner_transport_are_refused() -> None:
    """TLS/connection settings meant for the built transport are an error next to an inner one."""
    with pytest.raises(TypeError, match="verify"):
        WatchdogTransport(httpx.HTTPTransport(), verify=False)


def test_policy_of_the_wrong_type_is_refused() -> None:
    """A policy that is not a StreamPolicy is named in the error."""
    with pytest.raises(TypeError, match="policy"):
        WatchdogTransport(policy={"stale_timeout": 1})  # type: ignore[arg-type]


def test_policy_defaults_to_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a policy the transport reads HERMES_STREAM_* at construction."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "7")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "0")
    transport = WatchdogTransport()
    assert transport.policy == StreamPolicy(stale_timeout=7.0, retries=0)
    transport.close()


def test_settings_reach_the_built_transport(flavor: Flavor, server: FaultServer) -> None:
    """Connection settings such as limits and socket options configure the inner transport."""
    transport = flavor.WatchdogTransport(
        limits=flavor.http.Limits(max_connections=1, max_keepalive_connections=0),
        policy=StreamPolicy(stale_timeout=5.0),
    )
    with flavor.http.Client(transport=transport) as client:
        for _ in range(2):
            client.post(server.base_url + "/chat/completions", json=chat_body(stream=False))
    assert server.connections_opened == 2  # no keep-alive allowed


def test_stalls_and_resends_are_logged_without_secrets(
    server: FaultServer, watchdog_client: ClientFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """Stall logs carry attempt numbers and seconds, never headers, query strings or bodies."""
    server.scenario = Scenario.silent_before_headers()
    client = watchdog_client(stale=0.2, retries=1)
    caplog.set_level(logging.DEBUG, logger="hermes_transport")
    with pytest.raises(StreamStalled):
        client.post(
            server.base_url + "/chat/completions?key=sk-query-secret",
            json=chat_body(secret="body-secret"),
            headers={"authorization": "Bearer sk-header-secret"},
        )
    records = [r for r in caplog.records if r.name == "hermes_transport"]
    text = "\n".join(r.getMessage() for r in records)
    assert "on attempt 1; re-sending; that connection is closed (0 re-send(s) left)" in text
    assert "re-sending" in text
    assert "attempt 2; no re-send left" in text
    assert "0.2 s" in text
    assert all(r.levelno == logging.WARNING for r in records)
    for secret in ("sk-query-secret", "body-secret", "sk-header-secret"):
        assert secret not in text


# --- TLS: the guarded handshake keeps every check -------------------------------------------


def test_tls_stream_is_watched_and_verified(
    flavor: Flavor, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """Over TLS a stall is cut as over TCP, with the certificate verified as usual."""
    with FaultServer(Scenario.comments_after(1), ssl_context=tls[0]) as server:
        client = flavor.http.Client(
            transport=flavor.WatchdogTransport(
                policy=StreamPolicy(stale_timeout=0.3), verify=tls[1]
            )
        )
        with client, pytest.raises(StreamStalled) as info:
            _read_all(_post_stream(client, server))
    _assert_flavor_stall(flavor, info.value)


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_tls_certificate_errors_still_fail_the_connection(
    flavor: Flavor, tls: tuple[ssl.SSLContext, ssl.SSLContext], hostname: str
) -> None:
    """An untrusted certificate fails with the library's ConnectError, exactly as without the watchdog."""
    http = flavor.http
    with FaultServer(Scenario.healthy(), ssl_context=tls[0]) as server:
        url = server.base_url.replace("127.0.0.1", hostname) + "/chat/completions"
        with http.Client(transport=flavor.WatchdogTransport(verify=True)) as client:
            with pytest.raises(http.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                client.post(url, json=chat_body())
        with http.Client(transport=flavor.WatchdogTransport(verify=tls[1])) as client:
            assert b"[DONE]" in client.post(url, json=chat_body()).content


def _close_on_another_thread(network_stream: object) -> None:
    """Close a connection the way httpcore's pool does in encode/httpcore#1110: from elsewhere."""
    closer = threading.Thread(target=network_stream.close)  # type: ignore[attr-defined]
    closer.start()
    closer.join()


def test_a_socket_closed_by_another_thread_mid_request_is_closed_after_it(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """A close from a foreign thread (httpcore's pool race, encode/httpcore#1110) waits for the live request to end."""
    server.scenario = Scenario(content=tuple("abcdef"), event_interval=0.05)
    response = _post_stream(watchdog_client(stale=5.0), server)
    network_stream = response.extensions["network_stream"]
    _close_on_another_thread(network_stream)
    assert _read_all(response).count(b"data: ") == 8, "the request was hurt by the foreign close"
    assert network_stream.get_extra_info("socket").fileno() == -1, "the deferred close never ran"


def test_a_close_by_the_owner_thread_is_immediate(
    flavor: Flavor, server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """The owner thread closing its own connection is never deferred."""
    server.scenario = Scenario.silent_after(1)
    response = _post_stream(watchdog_client(stale=5.0), server)
    network_stream = response.extensions["network_stream"]
    network_stream.close()
    assert network_stream.get_extra_info("socket").fileno() == -1
    with pytest.raises(flavor.http.ReadError):
        _read_all(response)


@contextlib.contextmanager
def _close_delimited_server(events: int) -> Iterator[str]:
    """An HTTP/1.0-style SSE server: no length, no chunking; sends `events` events, then keepalives."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n"
            )
            for _ in range(events):
                conn.sendall(_event("hello"))
            with contextlib.suppress(OSError):
                while not stop.wait(0.05):
                    conn.sendall(b": keepalive\n\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1/chat/completions"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@pytest.mark.parametrize(("events", "stage"), [(0, "first_event"), (1, "mid_stream")])
def test_a_killed_close_delimited_body_raises_instead_of_ending(
    flavor: Flavor, watchdog_client: ClientFactory, events: int, stage: str
) -> None:
    """A body delimited by the connection close does not pass for complete when the watchdog cut it."""
    with _close_delimited_server(events) as url:
        client = watchdog_client(stale=0.4, retries=0)
        with pytest.raises(StreamStalled) as info:
            _read_all(_post_stream(client, url))
    _assert_flavor_stall(flavor, info.value)
    assert info.value.stage == stage


def test_a_stream_that_raised_is_released_without_being_closed(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """After a stall, the socket is closed at once, even though iter_raw() leaves the response open."""
    server.scenario = Scenario.comments_after(1)
    response = _post_stream(watchdog_client(stale=0.3), server)
    network_stream = response.extensions["network_stream"]
    with pytest.raises(StreamStalled):
        for _ in response.iter_raw():
            pass
    assert network_stream.get_extra_info("socket").fileno() == -1


def test_a_dropped_response_runs_its_deferred_close(
    server: FaultServer, watchdog_client: ClientFactory
) -> None:
    """A response dropped unclosed still closes a socket whose close another thread deferred."""
    server.scenario = Scenario.silent_after(1)
    response = _post_stream(watchdog_client(stale=30.0), server)
    network_stream = response.extensions["network_stream"]
    sock = network_stream.get_extra_info("socket")
    _close_on_another_thread(network_stream)
    assert sock.fileno() != -1, "the close was not deferred"
    del response
    gc.collect()
    assert sock.fileno() == -1


def test_a_streaming_request_answered_without_an_event_stream_is_not_timed(
    flavor: Flavor, watchdog_client: ClientFactory
) -> None:
    """A JSON answer to a streaming request is read at its own pace: no budget applies to it."""
    inner = _mock(
        flavor, [b'{"error": ', 0.5, b'"slow"}'], headers={"content-type": "application/json"}
    )
    client = watchdog_client(stale=0.2, first=0.2, inner=inner)
    response = client.post("http://mock/v1/chat/completions", json=chat_body())
    assert response.json() == {"error": "slow"}


def test_the_libraries_private_helpers_are_found(flavor: Flavor) -> None:
    """The core's own sync stream (guarded connect and TLS) and the library's proxy reader are
    found on each installed flavor, so neither degrades silently on this release."""
    from hermes_transport._flavors import flavor_named

    found = flavor_named(flavor.name)
    assert found.http is flavor.http
    assert found.sync_stream is not None
    assert found.sync_stream.__module__ == f"{found.core.__name__}._backends.sync"
    assert found.environment_proxies is not None
    assert found.stalled is flavor.StreamStalled
