"""stream_chat_completion: assembly, inline vs worker, one error vocabulary, one re-send budget."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    openai_client_for,
    stream_chat_completion,
)
from hermes_transport.testing import TOOL_CALL_ARGUMENTS, TOOL_CALL_NAME, FaultServer, Scenario

from _support import NATIVE, OPENAI_MAJOR, Flavor

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]


_open_clients: list[openai.OpenAI] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    """Every client a test makes is closed after it, so no pooled socket outlives it."""
    yield
    while _open_clients:
        _open_clients.pop().close()


def _client(
    server: FaultServer, flavor: Flavor, platform: str = "cron", **kwargs: Any
) -> openai.OpenAI:
    """A factory client of `flavor` on the fault server, closed after the test."""
    kwargs.setdefault("policy", StreamPolicy(stale_timeout=0.4, retries=2))
    client = openai_client_for(
        platform, base_url=server.base_url, api_key="x", flavor=flavor.name, **kwargs
    )
    _open_clients.append(client)
    return client


def _sdk_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the SDK's retry back-off sleeps (any thread)."""
    sleeps: list[float] = []
    real_sleep = time.sleep

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        real_sleep(seconds)

    # By name: the time module as the SDK's base client holds it (not re-exported).
    monkeypatch.setattr("openai._base_client.time.sleep", sleep)
    return sleeps


@pytest.fixture
def sdk_retries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The sync SDK's retries, recorded; their back-off sleeps are skipped."""
    import openai._base_client as base_client

    retries: list[int] = []

    def sleep(self: object, *, retries_taken: int, **kwargs: object) -> None:
        retries.append(retries_taken)

    monkeypatch.setattr(base_client.SyncAPIClient, "_sleep_for_retry", sleep)
    return retries


# --- assembly --------------------------------------------------------------------------


@pytest.mark.parametrize("platform", ["cron", "cli"])
def test_content_tool_calls_finish_and_usage_are_assembled(
    server: FaultServer, sdk_flavor: Flavor, platform: str
) -> None:
    """The SDK's accumulator assembles content, tool calls, finish reason and usage."""
    server.scenario = replace(Scenario.healthy(), tool_call=True)
    completion = stream_chat_completion(
        _client(server, sdk_flavor, platform), model="m", messages=MESSAGES
    )
    message = completion.choices[0].message
    assert message.content == "hello world"
    assert message.tool_calls is not None
    call = message.tool_calls[0]
    assert call.type == "function"
    assert call.function.name == TOOL_CALL_NAME
    assert call.function.arguments == TOOL_CALL_ARGUMENTS
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0
    assert type(completion) is openai.types.chat.ChatCompletion


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
def test_truncated_finishes_are_returned_not_raised(
    server: FaultServer, sdk_flavor: Flavor, finish_reason: str
) -> None:
    """A `length` or `content_filter` finish is a result, unlike in the SDK's parse helpers."""
    server.scenario = replace(Scenario.healthy(), finish_reason=finish_reason)
    completion = stream_chat_completion(_client(server, sdk_flavor), model="m", messages=MESSAGES)
    assert completion.choices[0].finish_reason == finish_reason


def test_always_streams_on_the_wire(server: FaultServer, sdk_flavor: Flavor) -> None:
    """The request says stream=True whatever the caller passed; stream=False is refused."""
    stream_chat_completion(_client(server, sdk_flavor), model="m", messages=MESSAGES)
    assert server.requests[0].stream is True
    with pytest.raises(ValueError, match="always streams"):
        stream_chat_completion(
            _client(server, sdk_flavor), model="m", messages=MESSAGES, stream=False
        )


def test_on_delta_sees_every_chunk_as_it_arrives(server: FaultServer, sdk_flavor: Flavor) -> None:
    """on_delta is called once per chunk, in order, before the call returns."""
    server.scenario = Scenario.healthy(content=("a", "b", "c"))
    seen: list[str] = []
    completion = stream_chat_completion(
        _client(server, sdk_flavor),
        model="m",
        messages=MESSAGES,
        on_delta=lambda chunk: seen.append(
            chunk.choices[0].delta.content or "" if chunk.choices else ""
        ),
    )
    assert "".join(seen) == completion.choices[0].message.content == "abc"
    assert len(seen) == 4  # three pieces, then the finish chunk carrying usage


def test_a_plain_openai_client_works_inline(server: FaultServer, sdk_flavor: Flavor) -> None:
    """Any OpenAI client can be used (the SDK's own, or one over a plain client of the flavor's library); without a factory profile it streams inline."""
    plain = {} if sdk_flavor.name == NATIVE else {"http_client": sdk_flavor.http.Client()}
    client = openai.OpenAI(base_url=server.base_url, api_key="x", **plain)
    assert isinstance(client._client, sdk_flavor.http.Client)
    _open_clients.append(client)
    threads: list[int] = []
    stream_chat_completion(
        client,
        model="m",
        messages=MESSAGES,
        on_delta=lambda c: threads.append(threading.get_ident()),
    )
    assert set(threads) == {threading.get_ident()}


# --- inline and worker -------------------------------------------------------------------


def test_inline_starts_no_thread(
    server: FaultServer, sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline mode issues and reads the request on the calling thread and starts none."""
    client = _client(server, sdk_flavor, "cron")
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    monkeypatch.setattr(threading.Thread, "start", start)
    stream_chat_completion(client, model="m", messages=MESSAGES)
    assert [name for name in started if not name.startswith("FaultServer")] == []


@pytest.mark.parametrize(("platform", "inline"), [("cli", True), ("cron", False)])
def test_inline_can_be_forced_either_way(
    server: FaultServer, sdk_flavor: Flavor, platform: str, inline: bool
) -> None:
    """inline= overrides the mode the factory chose for the platform."""
    threads: list[int] = []
    stream_chat_completion(
        _client(server, sdk_flavor, platform),
        inline=inline,
        model="m",
        messages=MESSAGES,
        on_delta=lambda chunk: threads.append(threading.get_ident()),
    )
    assert (set(threads) == {threading.get_ident()}) is inline


def test_worker_mode_carries_the_callers_context(server: FaultServer, sdk_flavor: Flavor) -> None:
    """A token bound in the caller reaches the worker's request (contextvars are copied)."""
    server.scenario = Scenario.silent_after(1)
    token = Interrupt()
    client = _client(server, sdk_flavor, "cli", policy=StreamPolicy(stale_timeout=30.0, retries=0))
    threading.Timer(0.3, token.interrupt, args=("stop from the UI",)).start()
    started = time.monotonic()
    with token.bind(), pytest.raises(StreamInterrupted) as info:
        stream_chat_completion(client, model="m", messages=MESSAGES)
    assert time.monotonic() - started < 3.0
    assert info.value.reason == "stop from the UI"


@pytest.mark.parametrize("platform", ["cron", "cli"])
def test_an_interrupt_ends_the_call_at_once(
    server: FaultServer, sdk_flavor: Flavor, platform: str
) -> None:
    """The interrupt token given to the runner stops the call promptly, inline or on a worker."""
    server.scenario = Scenario.comments_after(1)
    token = Interrupt()
    client = _client(
        server, sdk_flavor, platform, policy=StreamPolicy(stale_timeout=30.0, retries=2)
    )
    threading.Timer(0.3, token.interrupt, args=("enough",)).start()
    started = time.monotonic()
    with pytest.raises(StreamInterrupted):
        stream_chat_completion(client, interrupt=token, model="m", messages=MESSAGES)
    assert time.monotonic() - started < 3.0
    assert len(server.requests) == 1


def test_keyboard_interrupt_in_the_waiting_caller_stops_the_worker(
    server: FaultServer, sdk_flavor: Flavor, request: pytest.FixtureRequest
) -> None:
    """Ctrl+C while waiting on the worker ends the wait, stops the worker's request, and re-raises."""
    server.scenario = Scenario.comments_after(1)
    client = _client(server, sdk_flavor, "cli", policy=StreamPolicy(stale_timeout=30.0, retries=2))
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("KeyboardInterrupt is delivered to the main thread only")
    # A shell that starts pytest in the background ignores SIGINT; Ctrl+C must work here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))

    def press_ctrl_c() -> None:
        if server.wait_for_requests(1, timeout=10.0):
            time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press_ctrl_c, daemon=True).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        stream_chat_completion(client, model="m", messages=MESSAGES)
    assert time.monotonic() - started < 10.0
    deadline = time.monotonic() + 3.0
    while any(t.name == "hermes-transport-call" for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the worker outlived the call"
        time.sleep(0.01)
    assert len(server.requests) == 1


def test_worker_errors_reach_the_caller(server: FaultServer, sdk_flavor: Flavor) -> None:
    """Whatever the worker raised is raised in the caller."""
    server.scenario = Scenario.error(400)
    with pytest.raises(openai.BadRequestError):
        stream_chat_completion(
            _client(server, sdk_flavor, "cli", max_retries=0), model="m", messages=MESSAGES
        )


# --- one error vocabulary, one budget ------------------------------------------------------


@pytest.mark.parametrize("platform", ["cron", "cli"])
def test_a_stall_before_the_first_event_raises_stream_stalled_after_the_budget(
    server: FaultServer, sdk_flavor: Flavor, platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With retries=2 and the SDK's default max_retries, the server sees 3 requests and the caller StreamStalled."""
    server.scenario = Scenario.silent_before_headers()
    sleeps = _sdk_sleeps(monkeypatch)
    client = _client(
        server, sdk_flavor, platform, policy=StreamPolicy(stale_timeout=0.3, retries=2)
    )
    with pytest.raises(StreamStalled) as info:
        stream_chat_completion(client, model="m", messages=MESSAGES)
    assert info.value.stage == "first_event"
    assert len(server.requests) == 3
    assert isinstance(info.value, openai.OpenAIError) is False
    assert type(info.value) is sdk_flavor.StreamStalled
    assert sleeps == [], "the SDK retried a stall the transport had already re-sent"


def test_a_stall_after_the_first_event_with_nothing_delivered_is_resent(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """No consumer saw content: the runner re-sends, within the same budget, and then raises."""
    server.scenario = Scenario.comments_after(1)
    with pytest.raises(StreamStalled) as info:
        stream_chat_completion(_client(server, sdk_flavor), model="m", messages=MESSAGES)
    assert info.value.stage == "mid_stream"
    assert len(server.requests) == 3
    assert info.value.attempts == 3
    assert type(info.value) is sdk_flavor.StreamStalled


def test_a_stall_after_content_reached_the_consumer_is_not_resent(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Content shown to the caller is never duplicated: the stall raises at once."""
    server.scenario = Scenario.comments_after(1)
    seen: list[str] = []
    with pytest.raises(StreamStalled):
        stream_chat_completion(
            _client(server, sdk_flavor),
            model="m",
            messages=MESSAGES,
            on_delta=lambda chunk: seen.append(chunk.choices[0].delta.content or ""),
        )
    assert seen == ["hello"]
    assert len(server.requests) == 1


def test_a_consumer_that_saw_no_content_still_allows_a_resend(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Chunks without content (a bare role delta) do not count as delivered."""
    server.scenario = replace(Scenario.comments_after(1), content=("",))
    completion_calls: list[int] = []
    with pytest.raises(StreamStalled):
        stream_chat_completion(
            _client(server, sdk_flavor, policy=StreamPolicy(stale_timeout=0.3, retries=1)),
            model="m",
            messages=MESSAGES,
            on_delta=lambda chunk: completion_calls.append(1),
        )
    assert completion_calls
    assert len(server.requests) == 2


def test_transport_and_runner_resends_share_one_budget(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """An early stall re-sent by the transport and a late stall re-sent by the runner count together."""
    late = Scenario.comments_after(1)
    server.scenario = Scenario.stall_first(1, then=late)
    with pytest.raises(StreamStalled):
        stream_chat_completion(_client(server, sdk_flavor), model="m", messages=MESSAGES)
    assert len(server.requests) == 3  # retries=2: one early stall, two late ones


def test_status_errors_pass_through(server: FaultServer, sdk_flavor: Flavor) -> None:
    """SDK errors that are not stalls or interrupts reach the caller as the SDK raised them."""
    server.scenario = Scenario.error(500)
    with pytest.raises(openai.InternalServerError):
        stream_chat_completion(
            _client(server, sdk_flavor, max_retries=0), model="m", messages=MESSAGES
        )


def test_bare_factory_clients_do_not_multiply_resends(
    server: FaultServer, sdk_flavor: Flavor, sdk_retries: list[int]
) -> None:
    """Without the runner, the SDK's retries of a spent stall reach neither the network nor,
    on openai 2.x and 3.x, the SDK's back-off: the transport ends the call as the SDK would."""
    server.scenario = Scenario.silent_before_headers()
    client = _client(
        server, sdk_flavor, policy=StreamPolicy(stale_timeout=0.2, retries=1), max_retries=2
    )
    with pytest.raises((StreamStalled, openai.APITimeoutError)) as info:
        client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert len(server.requests) == 2
    # 1.x retries every exception (each retry fails at once, offline); 2.x and 3.x get the
    # APITimeoutError they would raise after their retries, and let it through at once.
    assert sdk_retries == ([0, 1] if OPENAI_MAJOR < 2 else [])
    if OPENAI_MAJOR >= 2:
        assert type(info.value) is openai.APITimeoutError
    stall = info.value if isinstance(info.value, StreamStalled) else info.value.__cause__
    assert isinstance(stall, StreamStalled)
    assert isinstance(stall, sdk_flavor.StreamStalled)


def test_a_new_call_gets_a_fresh_budget(server: FaultServer, sdk_flavor: Flavor) -> None:
    """The re-send budget belongs to one call: the next call may re-send again."""
    server.scenario = Scenario.stall_first(1)
    client = _client(server, sdk_flavor, policy=StreamPolicy(stale_timeout=0.3, retries=1))
    stream_chat_completion(client, model="m", messages=MESSAGES)
    server.scenario = Scenario.stall_first(3)  # attempts 2 stalls; 3 would be healthy
    stream_chat_completion(client, model="m", messages=MESSAGES)
    assert len(server.requests) == 4


def test_a_stream_without_a_single_chunk_is_the_librarys_protocol_error(
    sdk_flavor: Flavor,
) -> None:
    """A stream that ends without a chunk raises its HTTP library's RemoteProtocolError, saying so."""

    def only_done(request: Any) -> Any:
        headers = {"content-type": "text/event-stream"}
        return sdk_flavor.http.Response(200, headers=headers, content=b"data: [DONE]\n\n")

    transport = sdk_flavor.WatchdogTransport(sdk_flavor.http.MockTransport(only_done))
    client = openai.OpenAI(
        base_url="http://provider.test/v1",
        api_key="x",
        http_client=sdk_flavor.http.Client(transport=transport),
        max_retries=0,
    )
    _open_clients.append(client)
    with pytest.raises(sdk_flavor.http.RemoteProtocolError, match="without a single chunk"):
        stream_chat_completion(client, model="m", messages=MESSAGES)
