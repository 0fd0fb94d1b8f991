"""stream_response / astream_response: the Responses API through the runner, every mode, one budget."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseStreamEvent,
)

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    astream_response,
    async_openai_client_for,
    openai_client_for,
    stream_response,
)
from hermes_transport.testing import (
    RESPONSES_PATH,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    FaultServer,
    Scenario,
)

from _support import (
    OPENAI_MAJOR,
    PROMPT,
    RESPONSE_EVENTS,
    Flavor,
    ignore_abandoned_async_generators,
    record_sdk_sleeps,
)

REQUEST: dict[str, Any] = {"model": "m", "input": "hi"}
#: inline and worker: stream_response on a "cron" or a "cli" client; asyncio and trio:
#: astream_response on that event loop.
MODES = ["inline", "worker", "asyncio", "trio"]
TEXT_EVENTS = RESPONSE_EVENTS
#: How many events reach the first text delta (lifecycle, item and part opened, delta).
TO_FIRST_DELTA = 5
PATIENT = StreamPolicy(stale_timeout=30.0, retries=2)
#: A short stale budget for the stalls tested, a long first-event one: a loaded machine
#: must not make a healthy attempt stall before its first event.
STALLING = StreamPolicy(stale_timeout=0.5, first_event_timeout=10.0, retries=2)


@pytest.fixture
def sdk_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The SDK's retry back-offs (sync and async clients), recorded and skipped."""
    import openai._base_client as base_client

    return record_sdk_sleeps(monkeypatch, base_client)


def _respond(
    mode: str,
    server: FaultServer,
    flavor: Flavor,
    *,
    policy: StreamPolicy | None = None,
    on_event: Callable[[ResponseStreamEvent], Any] | None = None,
    interrupt: Interrupt | None = None,
    **kwargs: Any,
) -> Response:
    """One call of the runner in `mode` on a factory client of `flavor`, closed after it."""
    factory: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "x",
        "flavor": flavor.name,
        "policy": policy or StreamPolicy(stale_timeout=10.0, retries=2),
    }
    if mode in ("inline", "worker"):
        with openai_client_for("cron" if mode == "inline" else "cli", **factory) as client:
            return stream_response(
                client, interrupt=interrupt, on_event=on_event, **REQUEST, **kwargs
            )
    if mode == "trio" and OPENAI_MAJOR >= 2:
        ignore_abandoned_async_generators()

    async def main() -> Response:
        async with async_openai_client_for("cron", **factory) as client:
            return await astream_response(
                client, interrupt=interrupt, on_event=on_event, **REQUEST, **kwargs
            )

    return anyio.run(main, backend=mode)


def _when(ready: Callable[[], bool], then: Callable[[], None]) -> None:
    """Call `then` on another thread once `ready()` holds (and a moment more)."""

    def wait() -> None:
        deadline = time.monotonic() + 10.0
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.05)
        then()

    threading.Thread(target=wait, daemon=True).start()


# --- the result and the events ---------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_the_response_is_assembled_by_the_sdks_accumulator(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """The runner returns the final response as a plain Response: text, tool call, usage and status."""
    server.scenario = replace(Scenario.healthy(), tool_call=True)
    response = _respond(mode, server, sdk_flavor)
    assert type(response) is Response
    assert response.status == "completed"
    assert response.output_text == "hello world"
    message, call = response.output
    assert type(message) is ResponseOutputMessage
    assert type(call) is ResponseFunctionToolCall
    assert (call.name, call.arguments) == (TOOL_CALL_NAME, TOOL_CALL_ARGUMENTS)
    assert response.usage is not None
    assert response.usage.output_tokens > 0
    assert [(r.method, r.path, r.stream) for r in server.requests] == [
        ("POST", RESPONSES_PATH, True)
    ]


@pytest.mark.parametrize("mode", MODES)
def test_on_event_sees_every_event_in_order(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """on_event is called once per event, in the order sent, before the call returns."""
    seen: list[ResponseStreamEvent] = []
    response = _respond(mode, server, sdk_flavor, on_event=seen.append)
    assert [event.type for event in seen] == TEXT_EVENTS
    assert [event.sequence_number for event in seen] == list(range(len(TEXT_EVENTS)))
    deltas = [getattr(event, "delta", "") for event in seen if event.type.endswith(".delta")]
    assert "".join(deltas) == response.output_text == "hello world"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_an_async_on_event_is_awaited_before_the_next_event(
    server: FaultServer, sdk_flavor: Flavor, backend: str
) -> None:
    """A coroutine function as on_event is awaited to its end before the next event is handed on."""
    log: list[str] = []

    async def on_event(event: ResponseStreamEvent) -> None:
        log.append("<")
        await anyio.sleep(0.005)
        log.append(event.type)

    _respond(backend, server, sdk_flavor, on_event=on_event)
    assert log[0::2] == ["<"] * len(TEXT_EVENTS)
    assert log[1::2] == TEXT_EVENTS


def test_keepalive_events_reach_on_event_and_not_the_accumulator(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Responses keepalive events while the model thinks are shown to on_event and do not upset the SDK's accumulator."""
    server.scenario = Scenario.thinking(0.2, keepalive_interval=0.04)
    seen: list[str] = []
    response = _respond("inline", server, sdk_flavor, on_event=lambda e: seen.append(e.type))
    assert response.output_text == "hello world"
    assert "keepalive" in seen
    assert [kind for kind in seen if kind != "keepalive"] == TEXT_EVENTS


# --- re-sends and their one budget -------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_mid_stream_stall_nobody_saw_content_of_is_re_sent(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stall after events without content (an empty text delta) is re-sent: one call, two requests, the text once."""
    stall = replace(Scenario.silent_after(TO_FIRST_DELTA), content=("", "x"))
    server.scenario = Scenario.stall_first(1, stall=stall)
    seen: list[ResponseStreamEvent] = []
    response = _respond(mode, server, sdk_flavor, policy=STALLING, on_event=seen.append)
    assert response.output_text == "hello world"
    assert len(server.requests) == 2
    first_attempt = [event.type for event in seen[:TO_FIRST_DELTA]]
    assert first_attempt == TEXT_EVENTS[:TO_FIRST_DELTA]  # the stall came after them
    assert [event.type for event in seen[TO_FIRST_DELTA:]] == TEXT_EVENTS


@pytest.mark.parametrize("mode", MODES)
def test_a_mid_stream_stall_after_content_was_delivered_raises(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Text handed to on_event is never shown twice: the stall raises StreamStalled, nothing is re-sent."""
    server.scenario = Scenario.silent_after(TO_FIRST_DELTA)
    deltas: list[str] = []

    def on_event(event: ResponseStreamEvent) -> None:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)

    with pytest.raises(StreamStalled) as info:
        _respond(mode, server, sdk_flavor, policy=STALLING, on_event=on_event)
    assert info.value.stage == "mid_stream"
    assert isinstance(info.value, sdk_flavor.StreamStalled)
    assert deltas == ["hello"]
    assert len(server.requests) == 1


@pytest.mark.parametrize("mode", MODES)
def test_a_stall_whose_re_sends_are_spent_raises_without_sdk_back_off(
    server: FaultServer, sdk_flavor: Flavor, sdk_sleeps: list[int], mode: str
) -> None:
    """With the SDK's default max_retries, a stall past the budget reaches the caller as StreamStalled, the SDK never sleeping to retry it."""
    server.scenario = Scenario.silent_before_headers()
    with pytest.raises(StreamStalled) as info:
        _respond(mode, server, sdk_flavor, policy=StreamPolicy(stale_timeout=0.2, retries=1))
    assert (info.value.stage, info.value.attempts) == ("first_event", 2)
    assert type(info.value) is sdk_flavor.StreamStalled
    assert not isinstance(info.value, openai.OpenAIError)
    assert len(server.requests) == 2
    assert sdk_sleeps == []


# --- interrupts ------------------------------------------------------------------------------


@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_from_another_thread_ends_the_call(
    server: FaultServer, sdk_flavor: Flavor, sdk_sleeps: list[int], mode: str, stage: str
) -> None:
    """An interrupt fired on another thread ends the call with StreamInterrupted, long before any budget, re-sent and retried by nobody."""
    events: list[str] = []
    if stage == "headers":
        server.scenario = Scenario.silent_before_headers()
        ready = lambda: len(server.requests) > 0  # noqa: E731
    else:
        server.scenario = Scenario.silent_after(TO_FIRST_DELTA)
        ready = lambda: len(events) >= TO_FIRST_DELTA  # noqa: E731
    token = Interrupt()
    _when(ready, lambda: token.interrupt("user pressed stop"))
    started = time.monotonic()
    with pytest.raises(StreamInterrupted) as info:
        _respond(
            mode,
            server,
            sdk_flavor,
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
@pytest.mark.parametrize("mode", ["inline", "worker"])
def test_an_interrupt_before_the_response_reaches_the_caller_at_once(
    server: FaultServer, sdk_flavor: Flavor, mode: str
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
        _respond(mode, server, sdk_flavor, policy=PATIENT, interrupt=token)
    latency = time.monotonic() - fired[0]
    assert latency < 0.25, f"the interrupt took {latency:.3f} s"  # a back-off is >= 0.375 s


@pytest.mark.timing
def test_a_spent_stall_reaches_the_caller_one_budget_per_attempt_later(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Two attempts of a 0.2 s budget take about 0.4 s in all: no SDK back-off comes between or after them."""
    server.scenario = Scenario.silent_before_headers()
    started = time.monotonic()
    with pytest.raises(StreamStalled):
        _respond("inline", server, sdk_flavor, policy=StreamPolicy(stale_timeout=0.2, retries=1))
    took = time.monotonic() - started
    assert 0.4 <= took < 0.4 + PROMPT


# --- what the stream said --------------------------------------------------------------------


@pytest.mark.parametrize("failed", [False, True], ids=["error-event", "response-failed"])
def test_an_error_the_stream_reports_is_an_api_error(
    server: FaultServer, sdk_flavor: Flavor, failed: bool
) -> None:
    """An `error` or `response.failed` event after output raises openai.APIError with the server's message, and is not re-sent."""
    scenario = Scenario.error_in_stream("invalid_prompt", after_events=TO_FIRST_DELTA)
    server.scenario = replace(scenario, error_as_response_failed=failed, message="no, thanks")
    with pytest.raises(openai.APIError, match="no, thanks") as info:
        _respond("inline", server, sdk_flavor)
    assert isinstance(info.value.body, dict)
    assert info.value.body["code"] == "invalid_prompt"
    assert len(server.requests) == 1


def _mock_client(flavor: Flavor, events: list[dict[str, Any]]) -> openai.OpenAI:
    """An OpenAI client whose every stream is these events, over the flavor's watchdog."""

    def handler(request: Any) -> Any:
        body = b"".join(
            f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n".encode()
            for n, e in enumerate(events)
        )
        headers = {"content-type": "text/event-stream"}
        return flavor.http.Response(200, headers=headers, content=body)

    transport = flavor.WatchdogTransport(flavor.http.MockTransport(handler))
    return openai.OpenAI(
        base_url="http://provider.test/v1",
        api_key="x",
        http_client=flavor.http.Client(transport=transport),
        max_retries=0,
    )


def _lifecycle(kind: str, status: str, **extra: Any) -> dict[str, Any]:
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": status,
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **extra,
    }
    return {"type": kind, "response": response}


@pytest.fixture
def mock_clients() -> Iterator[list[openai.OpenAI]]:
    clients: list[openai.OpenAI] = []
    yield clients
    for client in clients:
        client.close()


@pytest.mark.parametrize(
    ("events", "match"),
    [
        ([], "without a single event"),
        ([_lifecycle("response.created", "in_progress")], r"after 1 event\(s\) without a final"),
    ],
    ids=["no-event", "no-final-event"],
)
def test_a_stream_that_ends_unfinished_is_the_librarys_protocol_error(
    sdk_flavor: Flavor, mock_clients: list[openai.OpenAI], events: list[Any], match: str
) -> None:
    """A stream that ends without an event, or without its final one, raises its HTTP library's RemoteProtocolError."""
    client = _mock_client(sdk_flavor, events)
    mock_clients.append(client)
    with pytest.raises(sdk_flavor.http.RemoteProtocolError, match=match):
        stream_response(client, **REQUEST)


def test_an_incomplete_response_is_returned_not_raised(
    sdk_flavor: Flavor, mock_clients: list[openai.OpenAI]
) -> None:
    """A response that ended `incomplete` (max_output_tokens reached) is the result, as it came."""
    details = {"incomplete_details": {"reason": "max_output_tokens"}}
    client = _mock_client(
        sdk_flavor,
        [
            _lifecycle("response.created", "in_progress"),
            _lifecycle("response.incomplete", "incomplete", **details),
        ],
    )
    mock_clients.append(client)
    response = stream_response(client, **REQUEST)
    assert type(response) is Response
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


# --- arguments -------------------------------------------------------------------------------


def test_the_wrong_client_or_stream_false_is_refused_before_sending(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Each runner names the right runner for another kind of client, and refuses stream=False; nothing is sent."""
    factory: dict[str, Any] = {"base_url": server.base_url, "api_key": "x"}
    async_client: Any = async_openai_client_for("cron", flavor=sdk_flavor.name, **factory)
    with openai_client_for("cron", flavor=sdk_flavor.name, **factory) as client:
        with pytest.raises(TypeError, match=r"openai\.OpenAI.*astream_response\(\)"):
            stream_response(async_client, **REQUEST)
        with pytest.raises(TypeError, match=r"openai\.AsyncOpenAI.*stream_response\(\)"):
            anyio.run(lambda: astream_response(client, **REQUEST))  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="always streams"):
            stream_response(client, stream=False, **REQUEST)
        with pytest.raises(TypeError, match="Interrupt"):
            stream_response(client, interrupt="stop", **REQUEST)  # type: ignore[arg-type]
    anyio.run(async_client.close)
    assert server.requests == []
