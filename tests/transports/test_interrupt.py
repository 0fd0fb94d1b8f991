"""The Interrupt token: any thread stops a bound request or stream at once."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import random
import ssl
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy
from hermes_transport.testing import FaultServer, Scenario

from _support import (
    OPENAI_MAJOR,
    PROMPT,
    Endpoint,
    Flavor,
    assert_prompt,
    black_hole,
    chat_body,
    deaf_server,
    interrupt_when,
    open_fds,
    threads_started_since,
)

POLICY = StreamPolicy(stale_timeout=60.0, retries=2)


def _client(
    flavor: Flavor, endpoint: Endpoint, token: Interrupt | None = None, **kwargs: object
) -> Any:
    """A client of the flavor over its WatchdogTransport with POLICY, bound to ``token``."""
    transport = flavor.WatchdogTransport(
        policy=POLICY, interrupt=token, verify=endpoint.verify, **kwargs
    )
    return flavor.http.Client(transport=transport, timeout=30.0)


def _stream(client: Any, base_url: str) -> Any:
    request = client.build_request("POST", base_url + "/chat/completions", json=chat_body())
    return client.send(request, stream=True)


# --- every stage --------------------------------------------------------------------------


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_while_connecting(flavor: Flavor) -> None:
    """A connect() that hangs is aborted by the interrupt."""
    token = Interrupt()
    with black_hole() as base_url, _client(flavor, Endpoint(base_url, True), token) as client:
        when = interrupt_when(token, lambda: True, delay=0.3)
        with pytest.raises(StreamInterrupted) as info:
            _stream(client, base_url)
    assert_prompt(when, info.value, "connecting")


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_during_the_tls_handshake(
    flavor: Flavor, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """A TLS handshake the server never answers is aborted by the interrupt."""
    token = Interrupt()
    with deaf_server(tls[0], handshake=False) as (base_url, accepted):
        with _client(flavor, Endpoint(base_url, tls[1]), token) as client:
            when = interrupt_when(token, accepted.is_set)
            with pytest.raises(StreamInterrupted) as info:
                _stream(client, base_url)
    assert_prompt(when, info.value, "connecting")


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_while_sending_the_body(
    flavor: Flavor, secure: bool, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """A request body blocked on a full socket buffer is aborted by the interrupt."""
    token = Interrupt()
    with deaf_server(tls[0] if secure else None) as (base_url, accepted):
        with _client(flavor, Endpoint(base_url, tls[1] if secure else True), token) as client:
            when = interrupt_when(token, accepted.is_set, delay=0.3)
            big = chat_body(padding="x" * (32 * 1024 * 1024))
            with pytest.raises(StreamInterrupted) as info:
                client.post(base_url + "/chat/completions", json=big)
    assert_prompt(when, info.value, "sending")


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_waiting_for_headers_on_a_new_connection(
    flavor: Flavor, fault: tuple[FaultServer, Endpoint]
) -> None:
    """A request waiting for headers on a new connection is aborted by the interrupt."""
    server, endpoint = fault
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    with _client(flavor, endpoint, token) as client:
        when = interrupt_when(token, lambda: len(server.requests) == 1)
        with pytest.raises(StreamInterrupted) as info:
            _stream(client, endpoint.base_url)
    assert_prompt(when, info.value, "headers")
    assert server.connections_opened == 1
    assert len(server.requests) == 1, "an interrupted request was re-sent"


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_waiting_for_headers_on_a_reused_connection(
    flavor: Flavor, fault: tuple[FaultServer, Endpoint]
) -> None:
    """A request waiting for headers on a pooled, reused connection is aborted by the interrupt."""
    server, endpoint = fault
    token = Interrupt()
    with _client(flavor, endpoint, token) as client:
        client.post(endpoint.base_url + "/chat/completions", json=chat_body(stream=False))
        server.scenario = Scenario.silent_before_headers()
        when = interrupt_when(token, lambda: len(server.requests) == 2)
        with pytest.raises(StreamInterrupted) as info:
            _stream(client, endpoint.base_url)
    assert_prompt(when, info.value, "headers")
    assert server.connections_opened == 1, "the second request did not reuse the connection"


@pytest.mark.parametrize("scenario", [Scenario.silent_after(1), Scenario.comments_after(1)])
@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_mid_stream(
    flavor: Flavor, fault: tuple[FaultServer, Endpoint], scenario: Scenario
) -> None:
    """A consumer blocked reading a stream is woken by the interrupt."""
    server, endpoint = fault
    server.scenario = scenario
    token = Interrupt()
    with _client(flavor, endpoint, token) as client:
        response = _stream(client, endpoint.base_url)
        chunks = response.iter_raw()
        assert next(chunks).startswith(b"data: ")
        when = interrupt_when(token, lambda: True)
        with pytest.raises(StreamInterrupted) as info:
            for _ in chunks:
                pass
        response.close()
    assert_prompt(when, info.value, "mid_stream")


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_while_reading_a_non_streaming_body(
    flavor: Flavor, fault: tuple[FaultServer, Endpoint]
) -> None:
    """A plain (non-SSE) body read in progress is interrupted as well."""
    server, endpoint = fault
    server.scenario = Scenario.trickle(delay=0.05)
    token = Interrupt()
    with _client(flavor, endpoint, token) as client:
        request = client.build_request(
            "POST", endpoint.base_url + "/chat/completions", json=chat_body(stream=False)
        )
        response = client.send(request, stream=True)
        when = interrupt_when(token, lambda: True)
        with pytest.raises(StreamInterrupted) as info:
            response.read()
        response.close()
    assert_prompt(when, info.value, "body")


# --- before, after, and who is touched ----------------------------------------------------


@pytest.mark.once  # no SDK: the same under every openai major
def test_an_interrupted_token_fails_the_next_call_at_once_and_sends_nothing(
    flavor: Flavor, server: FaultServer
) -> None:
    """A call made while its token is interrupted raises at once without connecting."""
    token = Interrupt()
    token.interrupt("cancelled before start")
    with _client(flavor, Endpoint(server.base_url, True), token) as client:
        started = time.monotonic()
        with pytest.raises(StreamInterrupted) as info:
            _stream(client, server.base_url)
    assert time.monotonic() - started < PROMPT
    assert info.value.reason == "cancelled before start"
    assert server.connections_opened == 0
    assert server.requests == []


@pytest.mark.once  # no SDK: the same under every openai major
def test_reset_rearms_the_token_for_the_next_turn(flavor: Flavor, server: FaultServer) -> None:
    """After reset() the same token lets requests through again."""
    token = Interrupt()
    token.interrupt()
    assert token.interrupted
    assert token.reason == "interrupted"
    token.reset()
    assert not token.interrupted
    assert token.reason is None
    with _client(flavor, Endpoint(server.base_url, True), token) as client:
        body = b"".join(_stream(client, server.base_url).iter_raw())
    assert b"[DONE]" in body


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_is_idempotent_and_keeps_the_first_reason() -> None:
    """A second interrupt() changes nothing."""
    token = Interrupt()
    token.interrupt("first")
    token.interrupt("second")
    assert token.reason == "first"
    assert token.wait(0)


@pytest.mark.once  # no SDK: the same under every openai major
def test_bind_scopes_the_token_to_a_context(flavor: Flavor, server: FaultServer) -> None:
    """Requests inside `with token.bind()` are bound; those outside, or on other threads, are not."""
    server.scenario = Scenario.healthy()
    token = Interrupt()
    token.interrupt()
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=POLICY)) as client:
        assert b"[DONE]" in b"".join(_stream(client, server.base_url).iter_raw())
        with token.bind():
            with pytest.raises(StreamInterrupted):
                _stream(client, server.base_url)
            elsewhere: list[bytes] = []
            thread = threading.Thread(
                target=lambda: elsewhere.append(
                    b"".join(_stream(client, server.base_url).iter_raw())
                )
            )
            thread.start()
            thread.join()
            assert b"[DONE]" in elsewhere[0]
            # A copied context carries the binding to another thread.
            copied = contextvars.copy_context()
            failures: list[BaseException] = []

            def in_copy() -> None:
                try:
                    _stream(client, server.base_url)
                except StreamInterrupted as exc:
                    failures.append(exc)

            thread = threading.Thread(target=copied.run, args=(in_copy,))
            thread.start()
            thread.join()
            assert len(failures) == 1
        assert b"[DONE]" in b"".join(_stream(client, server.base_url).iter_raw())


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_runs_on_the_interrupting_thread_and_starts_none(
    flavor: Flavor, server: FaultServer
) -> None:
    """interrupt() shuts the socket down itself: no thread is started for it."""
    server.scenario = Scenario.silent_after(1)
    token = Interrupt()
    with _client(flavor, Endpoint(server.base_url, True), token) as client:
        response = _stream(client, server.base_url)
        before = set(threading.enumerate())
        token.interrupt()
        assert not threads_started_since(before)
        with pytest.raises(StreamInterrupted):
            response.read()
        response.close()


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupts_never_touch_unbound_requests_on_the_same_pool(
    flavor: Flavor, server: FaultServer
) -> None:
    """Under concurrency, interrupting bound requests never hurts an unbound one sharing the pool."""
    content = tuple(f"<{i}>" for i in range(12))
    expected = "".join(content)
    server.scenario = Scenario(content=content, event_interval=0.005)
    transport = flavor.WatchdogTransport(
        policy=POLICY, limits=flavor.http.Limits(max_connections=4, max_keepalive_connections=4)
    )
    tokens = [Interrupt() for _ in range(3)]
    errors: list[BaseException] = []
    outcomes = {"bound_ok": 0, "bound_interrupted": 0, "unbound_ok": 0}
    lock = threading.Lock()
    stop = threading.Event()

    def text_of(body: bytes) -> str:
        parts = []
        for line in body.decode().splitlines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                parts.append(delta.get("content") or "")
        return "".join(parts)

    def worker(token: Interrupt | None, rounds: int) -> None:
        for _ in range(rounds):
            try:
                with contextlib.ExitStack() as stack:
                    if token is not None:
                        stack.enter_context(token.bind())
                    body = b"".join(_stream(client, server.base_url).iter_raw())
                assert text_of(body) == expected, body
                with lock:
                    outcomes["unbound_ok" if token is None else "bound_ok"] += 1
            except StreamInterrupted:
                if token is None:
                    raise
                with lock:
                    outcomes["bound_interrupted"] += 1
                token.reset()
            except BaseException as exc:
                errors.append(exc)
                return

    def interrupter() -> None:
        rng = random.Random(1234)
        while not stop.is_set():
            time.sleep(rng.uniform(0.0, 0.03))
            rng.choice(tokens).interrupt("chaos")

    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        workers = [threading.Thread(target=worker, args=(t, 15)) for t in tokens]
        workers += [threading.Thread(target=worker, args=(None, 15)) for _ in range(3)]
        chaos = threading.Thread(target=interrupter)
        chaos.start()
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(120)
        stop.set()
        chaos.join()
    assert errors == []
    assert outcomes["unbound_ok"] == 45
    assert outcomes["bound_interrupted"] > 0


@pytest.mark.once  # no SDK: the same under every openai major
def test_hundreds_of_interrupts_leak_no_file_descriptors(
    flavor: Flavor, server: FaultServer
) -> None:
    """Every interrupted connection is closed by its owner: the fd count returns to where it was."""
    server.scenario = Scenario.silent_after(1)
    token = Interrupt()
    baseline = open_fds()
    with _client(flavor, Endpoint(server.base_url, True), token) as client:
        for _ in range(200):
            token.reset()
            response = _stream(client, server.base_url)
            token.interrupt()
            with pytest.raises(StreamInterrupted):
                response.read()
            response.close()
    deadline = time.monotonic() + 10
    while open_fds() > baseline and time.monotonic() < deadline:
        time.sleep(0.05)  # the fault server's own handler sockets wind down
    assert open_fds() <= baseline


# --- the openai SDK on the request path ----------------------------------------------------


def _sdk_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record retry back-off sleeps the SDK makes on this thread."""
    me = threading.get_ident()
    sleeps: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        if threading.get_ident() == me:
            sleeps.append(seconds)
        real_sleep(seconds)

    # By name: the time module as the SDK's base client holds it (not re-exported).
    monkeypatch.setattr("openai._base_client.time.sleep", sleep)
    return sleeps


def test_openai_sdk_does_not_retry_an_interrupt(
    sdk_flavor: Flavor, server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through OpenAI(max_retries=2), an interrupt reaches the server once and the caller as StreamInterrupted."""
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    sleeps = _sdk_sleeps(monkeypatch)
    with _client(sdk_flavor, Endpoint(server.base_url, True), token) as http_client:
        client = openai.OpenAI(
            base_url=server.base_url, api_key="x", http_client=http_client, max_retries=2
        )
        when = interrupt_when(token, lambda: len(server.requests) == 1)
        with pytest.raises((StreamInterrupted, openai.APIConnectionError)) as info:
            client.chat.completions.create(model="m", messages=[], stream=True)
    assert len(server.requests) == 1
    if OPENAI_MAJOR == 1:
        # 1.x retries every exception: the retries fail at once, offline, and the
        # caller's error carries the interrupt as its cause.
        assert isinstance(info.value.__cause__, StreamInterrupted)
    else:
        assert isinstance(info.value, StreamInterrupted)
        assert isinstance(info.value, InterruptedError)
        assert sleeps == []
        assert_prompt(when, info.value, "headers")


def test_openai_sdk_mid_stream_interrupt(sdk_flavor: Flavor, server: FaultServer) -> None:
    """An interrupt while iterating an SDK stream surfaces as StreamInterrupted."""
    server.scenario = Scenario.comments_after(1)
    token = Interrupt()
    with _client(sdk_flavor, Endpoint(server.base_url, True), token) as http_client:
        client = openai.OpenAI(base_url=server.base_url, api_key="x", http_client=http_client)
        stream = client.chat.completions.create(model="m", messages=[], stream=True)
        chunks = iter(stream)
        assert next(chunks).choices[0].delta.content == "hello"
        when = interrupt_when(token, lambda: True)
        with pytest.raises(StreamInterrupted) as info:
            for _ in chunks:
                pass
    assert_prompt(when, info.value, "mid_stream")


@pytest.mark.once  # no SDK: the same under every openai major
def test_stall_and_interrupt_are_told_apart(flavor: Flavor, server: FaultServer) -> None:
    """A stalled stream raises StreamStalled, not StreamInterrupted, even with a token bound."""
    server.scenario = Scenario.comments_after(1)
    token = Interrupt()
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=0.3), interrupt=token)
    with flavor.http.Client(transport=transport) as client:
        with pytest.raises(flavor.StreamStalled):
            _stream(client, server.base_url).read()
    assert not token.interrupted


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupts_are_logged_with_stage_and_reason(
    flavor: Flavor, server: FaultServer, caplog: pytest.LogCaptureFixture
) -> None:
    """An interrupt is logged at INFO with its stage and reason."""
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    caplog.set_level(logging.INFO, logger="hermes_transport")
    with _client(flavor, Endpoint(server.base_url, True), token) as client:
        interrupt_when(token, lambda: len(server.requests) == 1)
        with pytest.raises(StreamInterrupted):
            _stream(client, server.base_url)
    messages = [r.getMessage() for r in caplog.records if r.name == "hermes_transport"]
    assert any("waiting for headers" in m and "user pressed stop" in m for m in messages)
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "hermes_transport")


@pytest.mark.once  # no SDK: the same under every openai major
def test_interrupt_without_a_socket_is_raised_when_the_next_bytes_arrive(flavor: Flavor) -> None:
    """With a mocked inner transport, an interrupt surfaces as soon as the next bytes arrive."""
    token = Interrupt()

    class Slow:
        def __iter__(self) -> Iterator[bytes]:
            yield b'data: {"choices": []}\n\n'
            token.interrupt("stop while the mock sleeps")
            time.sleep(0.2)
            yield b": keepalive\n\n"
            yield b'data: {"choices": []}\n\n'

    inner = flavor.http.MockTransport(
        lambda request: flavor.http.Response(
            200,
            headers={"content-type": "text/event-stream"},
            stream=flavor.byte_stream_class(Slow)(),
        )
    )
    with flavor.http.Client(
        transport=flavor.WatchdogTransport(inner, policy=POLICY, interrupt=token)
    ) as client:
        with client.stream(
            "POST", "http://mock/v1/chat/completions", json=chat_body()
        ) as response:
            chunks = response.iter_raw()
            with pytest.raises(StreamInterrupted) as info:
                for _ in chunks:
                    pass
    assert info.value.reason == "stop while the mock sleeps"
