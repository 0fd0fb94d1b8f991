"""stream_message / astream_message: Anthropic's Messages API through the runner, every mode, one budget."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import anyio
import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    astream_message,
    openai_client_for,
    stream_message,
    stream_response,
)
from hermes_transport.testing import MESSAGES_PATH, FaultServer, Scenario

from _support import PROMPT, ignore_abandoned_async_generators, record_sdk_sleeps

# anthropic 2.x and httpx2 need Python 3.11+.
anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")
ht2 = pytest.importorskip("hermes_transport.httpx2")

from anthropic.types import Message, RawMessageStreamEvent, TextBlock  # noqa: E402

REQUEST: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}
#: inline and worker: stream_message(inline=...) on a sync client; asyncio and trio:
#: astream_message on that event loop.
MODES = ["inline", "worker", "asyncio", "trio"]
#: The events of a healthy text stream as the SDK yields them (it drops the ping).
TEXT_EVENTS = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
]
#: How many events the server sends up to the first text delta (a ping among them).
TO_FIRST_DELTA = 4
#: ... and how many of them the SDK yields.
YIELDED_TO_FIRST_DELTA = 3
PATIENT = StreamPolicy(stale_timeout=30.0, retries=2)
#: A short stale budget for the stalls tested, a long first-event one: a loaded machine
#: must not make a healthy attempt stall before its first event.
STALLING = StreamPolicy(stale_timeout=0.5, first_event_timeout=10.0, retries=2)


@pytest.fixture
def sdk_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The anthropic SDK's retry back-offs (sync and async clients), recorded and skipped."""
    import anthropic._base_client as base_client

    return record_sdk_sleeps(monkeypatch, base_client)


def _message(
    mode: str,
    server: FaultServer,
    *,
    policy: StreamPolicy | None = None,
    on_event: Callable[[RawMessageStreamEvent], Any] | None = None,
    interrupt: Interrupt | None = None,
    **kwargs: Any,
) -> Message:
    """One call of the runner in `mode`, on an anthropic client over ht2's factory, closed after it."""
    policy = policy or StreamPolicy(stale_timeout=10.0, retries=2)
    sdk: dict[str, Any] = {"base_url": server.base_url.removesuffix("/v1"), "api_key": "k"}
    if mode in ("inline", "worker"):
        with anthropic.Anthropic(
            http_client=ht2.http_client_for("cron", policy=policy), **sdk
        ) as client:
            return stream_message(
                client,
                inline=mode == "inline",
                interrupt=interrupt,
                on_event=on_event,
                **REQUEST,
                **kwargs,
            )
    if mode == "trio":
        ignore_abandoned_async_generators()

    async def main() -> Message:
        http_client = ht2.async_http_client_for("cron", policy=policy)
        async with anthropic.AsyncAnthropic(http_client=http_client, **sdk) as client:
            return await astream_message(
                client, interrupt=interrupt, on_event=on_event, **REQUEST, **kwargs
            )

    result: Message = anyio.run(main, backend=mode)
    return result


def _when(ready: Callable[[], bool], then: Callable[[], None]) -> None:
    """Call `then` on another thread once `ready()` holds (and a moment more)."""

    def wait() -> None:
        deadline = time.monotonic() + 10.0
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
        then()

    threading.Thread(target=wait, daemon=True).start()


def _text(event: RawMessageStreamEvent) -> str | None:
    """The text of a text delta event, else None."""
    if event.type == "content_block_delta" and event.delta.type == "text_delta":
        return event.delta.text
    return None


# --- the result and the events ---------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_message_is_assembled_by_the_sdks_accumulator(server: FaultServer, mode: str) -> None:
    """The runner returns the final message as a plain Message: its text, stop reason and usage."""
    message = _message(mode, server)
    assert type(message) is Message
    (block,) = message.content
    assert type(block) is TextBlock  # the SDK's ParsedTextBlock made plain
    assert block.text == "hello world"
    assert message.stop_reason == "end_turn"
    assert message.usage.output_tokens == 2
    assert [(r.method, r.path, r.stream) for r in server.requests] == [
        ("POST", MESSAGES_PATH, True)
    ]


@pytest.mark.parametrize("finish", ["length"])
def test_a_max_tokens_stop_is_returned_not_raised(server: FaultServer, finish: str) -> None:
    """A message cut at max_tokens is a result, with its stop reason."""
    server.scenario = replace(Scenario.healthy(), finish_reason=finish)
    assert _message("inline", server).stop_reason == "max_tokens"


@pytest.mark.parametrize("mode", MODES)
def test_on_event_sees_every_event_in_order(server: FaultServer, mode: str) -> None:
    """on_event is called once per event the SDK yields, in order, before the call returns."""
    seen: list[RawMessageStreamEvent] = []
    message = _message(mode, server, on_event=seen.append)
    assert [event.type for event in seen] == TEXT_EVENTS
    assert "".join(filter(None, map(_text, seen))) == "hello world"
    assert isinstance(message.content[0], TextBlock)


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_on_event_is_awaited_before_the_next_event(
    server: FaultServer, backend: str
) -> None:
    """A coroutine function as on_event is awaited to its end before the next event is handed on."""
    log: list[str] = []

    async def on_event(event: RawMessageStreamEvent) -> None:
        log.append("<")
        await anyio.sleep(0.005)
        log.append(event.type)

    _message(backend, server, on_event=on_event)
    assert log[0::2] == ["<"] * len(TEXT_EVENTS)
    assert log[1::2] == TEXT_EVENTS


# --- re-sends and their one budget -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_mid_stream_stall_nobody_saw_content_of_is_re_sent(
    server: FaultServer, mode: str
) -> None:
    """A stall after events without content (an empty text delta) is re-sent: one call, two requests, the text once."""
    stall = replace(Scenario.silent_after(TO_FIRST_DELTA), content=("", "x"))
    server.scenario = Scenario.stall_first(1, stall=stall)
    seen: list[RawMessageStreamEvent] = []
    message = _message(mode, server, policy=STALLING, on_event=seen.append)
    assert isinstance(message.content[0], TextBlock)
    assert message.content[0].text == "hello world"
    assert len(server.requests) == 2
    first_attempt = [event.type for event in seen[:YIELDED_TO_FIRST_DELTA]]
    assert first_attempt == TEXT_EVENTS[:YIELDED_TO_FIRST_DELTA]  # the stall came after them
    assert [event.type for event in seen[YIELDED_TO_FIRST_DELTA:]] == TEXT_EVENTS


@pytest.mark.parametrize("mode", MODES)
def test_a_mid_stream_stall_after_content_was_delivered_raises(
    server: FaultServer, mode: str
) -> None:
    """Text handed to on_event is never shown twice: the stall raises StreamStalled, nothing is re-sent."""
    server.scenario = Scenario.silent_after(TO_FIRST_DELTA)
    texts: list[str] = []

    def on_event(event: RawMessageStreamEvent) -> None:
        text = _text(event)
        if text is not None:
            texts.append(text)

    with pytest.raises(StreamStalled) as info:
        _message(mode, server, policy=STALLING, on_event=on_event)
    assert type(info.value) is ht2.StreamStalled
    assert info.value.stage == "mid_stream"
    assert texts == ["hello"]
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_stall_whose_re_sends_are_spent_raises_without_sdk_back_off(
    server: FaultServer, sdk_sleeps: list[int], mode: str
) -> None:
    """With the SDK's default max_retries, a stall past the budget reaches the caller as StreamStalled, the SDK never sleeping to retry it."""
    server.scenario = Scenario.silent_before_headers()
    with pytest.raises(StreamStalled) as info:
        _message(mode, server, policy=StreamPolicy(stale_timeout=0.2, retries=1))
    assert (info.value.stage, info.value.attempts) == ("first_event", 2)
    assert isinstance(info.value, ht2.StreamStalled)
    assert len(server.requests) == 2
    assert sdk_sleeps == []


# --- interrupts ------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_from_another_thread_ends_the_call(
    server: FaultServer, sdk_sleeps: list[int], mode: str, stage: str
) -> None:
    """An interrupt fired on another thread ends the call with StreamInterrupted, long before any budget, re-sent and retried by nobody."""
    events: list[str] = []
    if stage == "headers":
        server.scenario = Scenario.silent_before_headers()
        ready = lambda: len(server.requests) > 0  # noqa: E731
    else:
        server.scenario = Scenario.silent_after(TO_FIRST_DELTA)
        ready = lambda: len(events) >= YIELDED_TO_FIRST_DELTA  # noqa: E731
    token = Interrupt()
    _when(ready, lambda: token.interrupt("user pressed stop"))
    started = time.monotonic()
    with pytest.raises(StreamInterrupted) as info:
        _message(
            mode,
            server,
            policy=PATIENT,
            interrupt=token,
            on_event=lambda event: events.append(event.type),
        )
    assert time.monotonic() - started < 10.0  # the budgets are 30 s
    assert info.value.reason == "user pressed stop"
    assert info.value.stage == stage
    assert len(server.requests) == 1
    assert sdk_sleeps == []


@pytest.mark.timing
@pytest.mark.parametrize("mode", ["inline", "worker", "asyncio"])
def test_an_interrupt_before_the_response_reaches_the_caller_at_once(
    server: FaultServer, mode: str
) -> None:
    """With the SDK's default max_retries, an interrupt while waiting for headers raises within milliseconds, not after a back-off."""
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.monotonic())
        token.interrupt("stop")

    _when(lambda: len(server.requests) > 0, fire)
    with pytest.raises(StreamInterrupted):
        _message(mode, server, policy=PATIENT, interrupt=token)
    latency = time.monotonic() - fired[0]
    assert latency < 0.25, f"the interrupt took {latency:.3f} s"  # a back-off is >= 0.375 s


@pytest.mark.timing
@pytest.mark.parametrize("mode", ["inline", "asyncio"])
def test_a_spent_stall_reaches_the_caller_one_budget_per_attempt_later(
    server: FaultServer, mode: str
) -> None:
    """Two attempts of a 0.2 s budget take about 0.4 s in all: no SDK back-off comes between or after them."""
    server.scenario = Scenario.silent_before_headers()
    started = time.monotonic()
    with pytest.raises(StreamStalled):
        _message(mode, server, policy=StreamPolicy(stale_timeout=0.2, retries=1))
    took = time.monotonic() - started
    assert 0.4 <= took < 0.4 + PROMPT


# --- what the stream said --------------------------------------------------------------------


def test_an_error_event_in_the_stream_is_the_sdks_error(server: FaultServer) -> None:
    """An `event: error` after output raises the SDK's APIStatusError as the SDK raised it, and is not re-sent."""
    scenario = Scenario.error_in_stream("invalid_request_error", after_events=TO_FIRST_DELTA)
    server.scenario = replace(scenario, message="no, thanks")
    with pytest.raises(anthropic.APIStatusError, match="no, thanks"):
        _message("inline", server)
    assert len(server.requests) == 1


@pytest.fixture
def mock_clients() -> Iterator[list[Any]]:
    clients: list[Any] = []
    yield clients
    for client in clients:
        client.close()


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (b"", "without a single event"),
        (
            b'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1",'
            b' "type": "message", "role": "assistant", "model": "m", "content": [],'
            b' "stop_reason": null, "stop_sequence": null,'
            b' "usage": {"input_tokens": 1, "output_tokens": 1}}}\n\n',
            r"after 1 event\(s\) without message_stop",
        ),
    ],
    ids=["no-event", "no-message-stop"],
)
def test_a_stream_that_ends_unfinished_is_the_librarys_protocol_error(
    mock_clients: list[Any], body: bytes, match: str
) -> None:
    """A stream that ends without an event, or without message_stop, raises httpx2's RemoteProtocolError."""

    def handler(request: Any) -> Any:
        headers = {"content-type": "text/event-stream"}
        return httpx2.Response(200, headers=headers, content=body)

    transport = ht2.WatchdogTransport(httpx2.MockTransport(handler))
    client = anthropic.Anthropic(
        base_url="http://provider.test",
        api_key="k",
        http_client=httpx2.Client(transport=transport),
        max_retries=0,
    )
    mock_clients.append(client)
    with pytest.raises(httpx2.RemoteProtocolError, match=match):
        stream_message(client, **REQUEST)


# --- arguments -------------------------------------------------------------------------------


def test_the_wrong_client_or_stream_false_is_refused_before_sending(server: FaultServer) -> None:
    """Each runner names the right runner for another kind of client, and refuses stream=False; nothing is sent."""
    sdk: dict[str, Any] = {"base_url": server.base_url.removesuffix("/v1"), "api_key": "k"}
    async_client: Any = anthropic.AsyncAnthropic(
        http_client=ht2.async_http_client_for("cron"), **sdk
    )
    with (
        anthropic.Anthropic(http_client=ht2.http_client_for("cron"), **sdk) as client,
        openai_client_for("cron", base_url=server.base_url, api_key="x") as openai_client,
    ):
        with pytest.raises(TypeError, match=r"anthropic\.Anthropic.*astream_message\(\)"):
            stream_message(async_client, **REQUEST)
        with pytest.raises(TypeError, match=r"anthropic\.AsyncAnthropic.*stream_message\(\)"):
            anyio.run(lambda: astream_message(client, **REQUEST))
        with pytest.raises(TypeError, match=r"openai\.OpenAI.*stream_response\(\)"):
            stream_message(openai_client, **REQUEST)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"anthropic\.Anthropic.*stream_message\(\)"):
            stream_response(client, model="m", input="hi")
        with pytest.raises(ValueError, match="always streams"):
            stream_message(client, stream=False, **REQUEST)
    anyio.run(async_client.close)
    assert server.requests == []


@pytest.mark.parametrize(("platform", "on_worker"), [("cron", False), ("cli", True)])
def test_without_inline_the_http_clients_factory_decides_where_the_message_streams(
    server: FaultServer, platform: str, on_worker: bool
) -> None:
    """inline=None follows the factory that built the anthropic client's http client: cron inline, cli on a worker with its token."""
    token = Interrupt()
    threads: list[threading.Thread] = []
    http_client = ht2.http_client_for(platform, policy=PATIENT, interrupt=token)
    sdk: dict[str, Any] = {"base_url": server.base_url.removesuffix("/v1"), "api_key": "k"}
    with anthropic.Anthropic(http_client=http_client, **sdk) as client:
        message = stream_message(
            client, on_event=lambda _: threads.append(threading.current_thread()), **REQUEST
        )
        assert isinstance(message.content[0], TextBlock)
        assert {thread is threading.current_thread() for thread in threads} == {not on_worker}
        server.scenario = Scenario(stall_after_events=TO_FIRST_DELTA)
        _when(lambda: len(server.requests) == 2, lambda: token.interrupt("stop"))
        started = time.monotonic()
        with pytest.raises(StreamInterrupted, match="stop"):
            stream_message(client, **REQUEST)
    assert time.monotonic() - started < 10.0
