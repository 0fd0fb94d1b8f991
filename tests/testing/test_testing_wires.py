"""The fault server's Responses API, its silent thinking and its in-stream errors on every wire."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterable, Iterator
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseCompletedEvent, ResponseErrorEvent, ResponseFailedEvent

from hermes_transport.testing import (
    MESSAGES_PATH,
    RESPONSES_PATH,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    FaultServer,
    Scenario,
)

from _support import RESPONSE_EVENTS

MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
BODIES: dict[str, dict[str, Any]] = {
    "chat": {"model": "m", "messages": MESSAGES, "stream": True},
    "messages": {"model": "c", "max_tokens": 8, "messages": MESSAGES, "stream": True},
    "responses": {"model": "m", "input": "hi", "stream": True},
}
PATHS = {"chat": "/v1/chat/completions", "messages": MESSAGES_PATH, "responses": RESPONSES_PATH}
# The first output event of each wire, which `think` waits for.
FIRST_OUTPUT = {
    "chat": "data",
    "messages": "content_block_delta",
    "responses": "response.output_text.delta",
}
KEEPALIVE = {"chat": ":", "messages": "ping", "responses": "keepalive"}
# How many events a healthy default stream has ([DONE] included for chat).
HEALTHY_EVENTS = {"chat": 4, "messages": 8, "responses": 10}
TEXT_EVENTS = RESPONSE_EVENTS
TOOL_EVENTS = [
    "response.output_item.added",
    *["response.function_call_arguments.delta"] * 5,
    "response.function_call_arguments.done",
    "response.output_item.done",
]


@dataclasses.dataclass(frozen=True)
class Event:
    """One SSE block as it arrived: its event name (data for chat, ':' for a comment)."""

    name: str
    data: Any
    at: float


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


def url(server: FaultServer, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def parse(lines: Iterable[str], started: float) -> Iterator[Event]:
    """The SSE blocks of `lines`, each stamped with its arrival since `started`."""
    name, data = "data", None
    for line in lines:
        if line.startswith(":"):
            yield Event(":", line, time.monotonic() - started)
        elif line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            data = line[6:] if line == "data: [DONE]" else json.loads(line[6:])
        elif not line and data is not None:
            yield Event(name, data, time.monotonic() - started)
            name, data = "data", None


def stream(server: FaultServer, wire: str, **body: Any) -> tuple[httpx.Response, list[Event]]:
    """POST one streaming request of `wire` and read every event of its answer."""
    started = time.monotonic()
    with (
        httpx.Client(timeout=10.0) as client,
        client.stream("POST", url(server, PATHS[wire]), json=BODIES[wire] | body) as response,
    ):
        return response, list(parse(response.iter_lines(), started))


def output(events: list[Event]) -> list[Event]:
    """The events without keepalives (comments, pings, keepalive events) or [DONE]."""
    return [e for e in events if e.name not in (":", "ping", "keepalive") and e.data != "[DONE]"]


def assert_numbered(events: list[Event]) -> None:
    assert [e.data["sequence_number"] for e in events] == list(range(len(events)))
    assert all(e.data["type"] == e.name for e in events)


# --- Responses through the openai SDK ----------------------------------------------------


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(),
        Scenario.healthy(gzip=True),
        Scenario(crlf=True),
        Scenario.trickle(),
        Scenario(write_size=4096),
        Scenario.healthy(content=["hel", "lo", " wor", "ld"]),
    ],
    ids=["plain", "gzip", "crlf", "trickle", "coalesced", "four-pieces"],
)
def test_a_responses_stream_iterates_through_the_sdk(
    server: FaultServer, sdk: openai.OpenAI, scenario: Scenario
) -> None:
    """responses.create(stream=True) yields the lifecycle, item and text events numbered from 0, ending completed."""
    server.scenario = scenario
    events = list(sdk.responses.create(model="m", input="hi", stream=True))
    deltas = len(scenario.content)
    expected = TEXT_EVENTS[:4] + ["response.output_text.delta"] * deltas + TEXT_EVENTS[6:]
    assert [e.type for e in events] == expected
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
        "hello world"
    )
    final = events[-1]
    assert final.type == "response.completed"
    assert final.response.status == "completed"
    assert final.response.output_text == "hello world"
    assert final.response.usage is not None
    assert final.response.usage.total_tokens == final.response.usage.input_tokens + deltas


@pytest.mark.parametrize(
    ("content", "tool_call"),
    [(("hello", " world"), False), (("hello", " world"), True), ((), True), ((), False)],
    ids=["text", "text-and-tool", "tool-only", "empty"],
)
def test_the_stream_helper_assembles_the_final_response(
    server: FaultServer, sdk: openai.OpenAI, content: tuple[str, ...], tool_call: bool
) -> None:
    """responses.stream() accumulates the text and the function call into get_final_response()."""
    server.scenario = Scenario(content=content, tool_call=tool_call)
    with sdk.responses.stream(model="m", input="hi") as events:
        kinds = [event.type for event in events]
        final = events.get_final_response()
    assert final.output_text == "".join(content)
    calls = [item for item in final.output if item.type == "function_call"]
    if tool_call:
        (call,) = calls
        assert (call.name, call.arguments) == (TOOL_CALL_NAME, TOOL_CALL_ARGUMENTS)
        assert kinds[-len(TOOL_EVENTS) - 1 : -1] == TOOL_EVENTS
    else:
        assert not calls
    assert ("response.output_text.delta" in kinds) == bool(content)


@pytest.mark.parametrize(
    "scenario",
    [Scenario(), Scenario.healthy(gzip=True), Scenario(usage=False), Scenario(tool_call=True)],
    ids=["plain", "gzip", "no-usage", "tool"],
)
def test_a_non_streamed_response_parses_through_the_sdk(
    server: FaultServer, sdk: openai.OpenAI, scenario: Scenario
) -> None:
    """responses.create() without stream gets a completed Response whose output_text is the content."""
    server.scenario = scenario
    response = sdk.responses.create(model="test-model", input="hi")
    assert (response.object, response.status, response.model) == (
        "response",
        "completed",
        "test-model",
    )
    assert response.id == "resp_hermes0"
    assert response.output_text == "hello world"
    assert (response.usage is not None) == scenario.usage
    assert [item.type for item in response.output] == ["message"] + (
        ["function_call"] if scenario.tool_call else []
    )


@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.once  # no SDK: the same under every openai major
def test_every_responses_event_names_its_type_and_no_done_follows(
    server: FaultServer, crlf: bool
) -> None:
    """On the wire each event is `event: <type>` plus data of that type with its number, and no [DONE] ends it."""
    server.scenario = Scenario(crlf=crlf, tool_call=True)
    response, events = stream(server, "responses")
    assert response.headers["content-type"] == "text/event-stream"
    assert_numbered(events)
    assert [e.name for e in events] == TEXT_EVENTS[:-1] + TOOL_EVENTS + TEXT_EVENTS[-1:]
    delta = next(e.data for e in events if e.name == "response.output_text.delta")
    assert delta["logprobs"] == []
    assert {"item_id", "output_index", "content_index"} <= set(delta)
    assert "[DONE]" not in [e.data for e in events]


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_background_stream_is_queued_after_it_is_created(server: FaultServer) -> None:
    """With background true, response.queued follows response.created, and the response says so."""
    _, events = stream(server, "responses", background=True)
    assert_numbered(events)
    names = [e.name for e in events]
    assert names[:3] == ["response.created", "response.queued", "response.in_progress"]
    assert [e.data["response"]["status"] for e in events[:3]] == [
        "queued",
        "queued",
        "in_progress",
    ]
    assert events[-1].data["response"]["background"] is True
    _, plain = stream(server, "responses")
    assert "response.queued" not in [e.name for e in plain]


@pytest.mark.parametrize("events", [0, 3, 5])
@pytest.mark.once  # no SDK: the same under every openai major
def test_responses_keepalives_during_a_stall_are_numbered_events(
    server: FaultServer, events: int
) -> None:
    """comments_after(n) on Responses sends n events, then keepalive events whose numbers go on from n."""
    server.scenario = dataclasses.replace(Scenario.comments_after(events), hold=0.3)
    seen: list[Event] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with (
            httpx.Client(timeout=10.0) as client,
            client.stream("POST", url(server, RESPONSES_PATH), json=BODIES["responses"]) as r,
        ):
            seen.extend(parse(r.iter_lines(), time.monotonic()))
    assert_numbered(seen)
    assert [e.name for e in seen[:events]] == TEXT_EVENTS[:events]
    assert len(seen) > events + 1
    assert {e.name for e in seen[events:]} == {"keepalive"}
    assert set(seen[-1].data) == {"type", "sequence_number"}


# --- Responses: retrieve, resume, cancel -------------------------------------------------


def _created(sdk: openai.OpenAI) -> str:
    """The id of a fresh streamed background response, read to its end."""
    *_, last = sdk.responses.create(model="m", input="hi", stream=True, background=True)
    assert isinstance(last, ResponseCompletedEvent)
    return last.response.id


@pytest.mark.parametrize("after", [None, 0, 4, 9, 10, 99])
def test_a_resume_streams_the_stored_events_after_the_cursor(
    server: FaultServer, sdk: openai.OpenAI, after: int | None
) -> None:
    """responses.retrieve(id, stream=True, starting_after=N) sends the stored events numbered above N."""
    response_id = _created(sdk)
    options: dict[str, Any] = {} if after is None else {"starting_after": after}
    resumed = list(sdk.responses.retrieve(response_id, stream=True, **options))
    first = 0 if after is None else after + 1
    assert [e.sequence_number for e in resumed] == list(range(first, 11))
    if resumed:
        assert resumed[-1].type == "response.completed"
    resume = server.requests[-1]
    assert (resume.method, resume.body, resume.attempt) == ("GET", b"", 1)
    assert "accept" not in resume.headers or "event-stream" not in resume.headers["accept"]


@pytest.mark.parametrize("after", [None, 3, 6])
def test_the_stream_helper_resumes_by_id(
    server: FaultServer, sdk: openai.OpenAI, after: int | None
) -> None:
    """responses.stream(response_id=..., starting_after=N) re-streams the response and its final response is whole."""
    response_id = _created(sdk)
    options: dict[str, Any] = {} if after is None else {"starting_after": after}
    with sdk.responses.stream(response_id=response_id, **options) as events:
        numbers = [event.sequence_number for event in events]
        assert events.get_final_response().output_text == "hello world"
    assert numbers == list(range(0 if after is None else after + 1, 11))


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_stalled_stream_resumes_where_it_stopped(server: FaultServer) -> None:
    """After a live background stream stalls with keepalives, a resume from its last number gets the rest of the response, under the scenario then current."""
    server.scenario = dataclasses.replace(Scenario.comments_after(5), hold=0.3)
    seen: list[Event] = []
    with pytest.raises(httpx.RemoteProtocolError):
        with (
            httpx.Client(timeout=10.0) as client,
            client.stream(
                "POST",
                url(server, RESPONSES_PATH),
                json=BODIES["responses"] | {"background": True},
            ) as r,
        ):
            seen.extend(parse(r.iter_lines(), time.monotonic()))
    assert_numbered(seen[:5])
    assert {e.data["sequence_number"] for e in seen[5:] if e.name == "keepalive"} == {4}
    last = seen[-1].data["sequence_number"]
    response_id = seen[0].data["response"]["id"]
    resume_url = url(server, f"{RESPONSES_PATH}/{response_id}?stream=true&starting_after={last}")
    server.scenario = Scenario.silent_after(2)
    with (
        httpx.Client(timeout=httpx.Timeout(10.0, read=0.5)) as client,
        client.stream("GET", resume_url) as r,
    ):
        stalled: list[Event] = []
        with pytest.raises(httpx.ReadTimeout):
            stalled.extend(parse(r.iter_lines(), time.monotonic()))
    assert [e.data["sequence_number"] for e in stalled] == [5, 6]
    server.scenario = Scenario()
    with httpx.Client(timeout=10.0) as client:
        rest = list(parse(client.get(resume_url).text.splitlines(), time.monotonic()))
    names = [e.name for e in rest]
    assert names == TEXT_EVENTS[4:]  # the first delta onwards (queued took a number)
    assert [e.data["sequence_number"] for e in rest] == list(range(5, 11))
    assert [r.attempt for r in server.requests] == [0, 1, 2]


def test_retrieve_and_cancel_answer_the_stored_response(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """responses.retrieve(id) returns the stored response and responses.cancel(id) marks it cancelled; neither is an attempt."""
    response_id = _created(sdk)
    assert sdk.responses.retrieve(response_id).output_text == "hello world"
    assert sdk.responses.cancel(response_id).status == "cancelled"
    assert sdk.responses.retrieve(response_id).status == "cancelled"
    created = sdk.responses.create(model="m", input="hi")
    assert sdk.responses.retrieve(created.id).status == "completed"
    assert [r.attempt for r in server.requests] == [0, -1, -1, -1, 1, -1]


@pytest.mark.parametrize(
    ("method", "suffix"),
    [("GET", "?stream=true"), ("GET", ""), ("POST", "/cancel")],
    ids=["resume", "retrieve", "cancel"],
)
def test_an_unknown_response_id_is_an_openai_404(
    server: FaultServer, method: str, suffix: str
) -> None:
    """Resuming, retrieving or cancelling an unknown response answers 404 with an OpenAI error body."""
    response = httpx.request(method, url(server, f"{RESPONSES_PATH}/resp_nope{suffix}"))
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "invalid_request_error"
    assert "resp_nope" in response.json()["error"]["message"]


def test_a_non_streamed_response_cannot_be_resumed(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """A response created without stream or background cannot be resumed: resuming it raises NotFoundError."""
    created = sdk.responses.create(model="m", input="hi")
    with pytest.raises(openai.NotFoundError):
        list(sdk.responses.retrieve(created.id, stream=True))


# --- in-stream error events ----------------------------------------------------------------


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
@pytest.mark.parametrize("after", [0, 1, 3, 99])
@pytest.mark.parametrize("crlf", [False, True])
@pytest.mark.once  # no SDK: the same under every openai major
def test_an_error_event_follows_the_first_events_and_the_body_ends_cleanly(
    server: FaultServer, wire: str, after: int, crlf: bool
) -> None:
    """error_in_stream(kind, after_events=n) answers 200 with n events (at most all but the last), the wire's error event, and a clean end."""
    server.scenario = dataclasses.replace(
        Scenario.error_in_stream("overloaded_error", after_events=after, message="busy"),
        crlf=crlf,
    )
    response, events = stream(server, wire)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    *before, error = events
    assert len(before) == min(after, HEALTHY_EVENTS[wire] - 1)
    if wire == "chat":
        assert error.name == "data"
        assert error.data == {
            "error": {
                "message": "busy",
                "type": "overloaded_error",
                "param": None,
                "code": "overloaded_error",
            }
        }
    elif wire == "messages":
        assert (error.name, error.data) == (
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}},
        )
    else:
        assert_numbered(events)
        parsed = ResponseErrorEvent.model_validate(error.data)  # the documented, flat shape
        assert (parsed.code, parsed.message, parsed.param) == ("overloaded_error", "busy", None)
        assert error.data["error"]["code"] == "overloaded_error"  # the live API's nested shape


@pytest.mark.parametrize("kind", ["server_error", "overloaded_error", "invalid_request_error"])
@pytest.mark.parametrize("after", [0, 2])
def test_the_openai_sdk_raises_an_in_stream_error(
    server: FaultServer, sdk: openai.OpenAI, kind: str, after: int
) -> None:
    """Chat and Responses streams with an error event raise openai.APIError carrying the message and the kind."""
    server.scenario = Scenario.error_in_stream(kind, after_events=after, message="boom")
    seen: list[Any] = []
    with pytest.raises(openai.APIError, match="boom") as chat:
        seen.extend(sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True))
    assert len(seen) == after
    assert isinstance(chat.value.body, dict)
    assert chat.value.body["code"] == kind
    events: list[Any] = []
    with pytest.raises(openai.APIError, match="boom") as responses:
        events.extend(sdk.responses.create(model="m", input="hi", stream=True))
    assert [event.type for event in events] == TEXT_EVENTS[:after]
    assert isinstance(responses.value.body, dict)
    assert responses.value.body["code"] == kind
    with (
        pytest.raises(openai.APIError, match="boom"),
        sdk.responses.stream(model="m", input="hi") as s,
    ):
        for _ in s:
            pass


@pytest.mark.parametrize("after", [0, 4])
def test_response_failed_replaces_the_error_event_on_request(
    server: FaultServer, sdk: openai.OpenAI, after: int
) -> None:
    """error_as_response_failed ends a Responses stream with response.failed, status failed and the error's code, kept for retrieval."""
    server.scenario = dataclasses.replace(
        Scenario.error_in_stream("server_error", after_events=after, message="boom"),
        error_as_response_failed=True,
    )
    events = list(sdk.responses.create(model="m", input="hi", stream=True))
    *before, failed = events
    assert [e.type for e in before] == TEXT_EVENTS[:after]
    assert isinstance(failed, ResponseFailedEvent)
    assert failed.sequence_number == after
    assert failed.response.status == "failed"
    assert failed.response.error is not None
    assert (failed.response.error.code, failed.response.error.message) == ("server_error", "boom")
    if before:
        assert sdk.responses.retrieve(failed.response.id).status == "failed"


@pytest.mark.parametrize("after", [0, 2, 5])
@pytest.mark.parametrize("kind", ["overloaded_error", "api_error"])
def test_the_anthropic_sdk_raises_an_in_stream_error(
    server: FaultServer, after: int, kind: str
) -> None:
    """messages.stream() raises APIStatusError on an error event, after the events before it, with the error's type."""
    anthropic = pytest.importorskip("anthropic")  # needs Python 3.11+ and httpx2
    server.scenario = Scenario.error_in_stream(kind, after_events=after, message="busy")
    client = anthropic.Anthropic(
        base_url=server.base_url.removesuffix("/v1"), api_key="k", max_retries=0
    )
    seen: list[str] = []
    with client, pytest.raises(anthropic.APIStatusError) as caught:
        with client.messages.stream(model="c", max_tokens=8, messages=MESSAGES) as events:
            seen.extend(event.type for event in events)
    assert caught.value.body == {"type": "error", "error": {"type": kind, "message": "busy"}}
    assert "ping" not in seen  # the SDK drops pings
    assert seen[:1] == (["message_start"] if after else [])


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
@pytest.mark.once  # no SDK: the same under every openai major
def test_stall_first_can_fail_the_first_attempts_in_stream(server: FaultServer, wire: str) -> None:
    """stall_first(2, stall=error_in_stream(...)) fails the first two attempts with an error event and answers the third healthy."""
    server.scenario = Scenario.stall_first(2, stall=Scenario.error_in_stream("overloaded_error"))
    answers = [stream(server, wire) for _ in range(3)]
    assert {response.status_code for response, _ in answers} == {200}
    errors = [[e.data for e in events if "error" in e.data] for _, events in answers]
    assert [len(found) for found in errors] == [1, 1, 0]
    assert len(answers[2][1]) == HEALTHY_EVENTS[wire]
    assert [r.attempt for r in server.requests] == [0, 1, 2]


def test_an_error_event_leaves_non_streamed_answers_whole(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """error_event shapes streams only: a non-streaming request gets the whole JSON."""
    server.scenario = Scenario.error_in_stream("overloaded_error")
    assert sdk.responses.create(model="m", input="hi").output_text == "hello world"
    reply = sdk.chat.completions.create(model="m", messages=MESSAGES)
    assert reply.choices[0].message.content == "hello world"


# --- thinking ----------------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
@pytest.mark.parametrize("interval", [None, 0.05])
@pytest.mark.once  # no SDK: the same under every openai major
def test_thinking_is_silent_between_the_preamble_and_the_first_output_event(
    server: FaultServer, wire: str, interval: float | None
) -> None:
    """thinking(s) sends the preamble, then nothing but keepalives (at most one per interval), then the output."""
    server.scenario = Scenario.thinking(0.3, keepalive_interval=interval)
    _, events = stream(server, wire)
    first = next(i for i, e in enumerate(events) if e.name == FIRST_OUTPUT[wire])
    keepalives = [i for i, e in enumerate(events) if e.name == KEEPALIVE[wire]]
    if wire == "messages":
        keepalives = keepalives[1:]  # the ping of the preamble
    assert events[first].at >= 0.3
    if interval is None:
        assert not keepalives
    else:
        assert 1 <= len(keepalives) <= 6
        assert keepalives == list(range(first - len(keepalives), first))
    if wire == "responses":
        assert_numbered(events)
        assert [e.name for e in output(events)] == TEXT_EVENTS


@pytest.mark.timing
@pytest.mark.parametrize("wire", ["chat", "messages", "responses"])
def test_the_preamble_arrives_at_once_and_the_output_after_thinking(
    server: FaultServer, wire: str
) -> None:
    """Under thinking(0.5), the preamble arrives well before 0.5 s and the first output event no earlier."""
    server.scenario = Scenario.thinking(0.5, keepalive_interval=0.1)
    _, events = stream(server, wire)
    first = next(i for i, e in enumerate(events) if e.name == FIRST_OUTPUT[wire])
    preamble = [e for e in events[:first] if e.name != KEEPALIVE[wire]]
    assert all(e.at < 0.4 for e in preamble)
    assert 0.5 <= events[first].at < 3.0


def test_the_sdks_read_through_thinking_keepalives(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """Keepalives during thinking do not disturb openai's chat stream, Responses iteration or responses.stream()."""
    server.scenario = Scenario.thinking(0.2, keepalive_interval=0.05)
    chunks = sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hello world"
    events = list(sdk.responses.create(model="m", input="hi", stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "keepalive" in {e.type for e in events}
    with sdk.responses.stream(model="m", input="hi") as stream_events:
        assert stream_events.get_final_response().output_text == "hello world"


# --- the new Scenario classmethods ---------------------------------------------------------


@pytest.mark.parametrize(
    ("made", "expected"),
    [
        (Scenario.thinking(2.0), Scenario(think=2.0)),
        (
            Scenario.thinking(2.0, keepalive_interval=0.5, content=["a"]),
            Scenario(think=2.0, keepalive_interval=0.5, content=("a",)),
        ),
        (Scenario.error_in_stream(), Scenario(error_event="server_error")),
        (
            Scenario.error_in_stream("overloaded_error", after_events=3, message="busy"),
            Scenario(error_event="overloaded_error", error_after_events=3, message="busy"),
        ),
    ],
    ids=["thinking", "thinking-keepalive", "error", "error-after"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_the_classmethods_set_the_documented_fields(made: Scenario, expected: Scenario) -> None:
    """thinking() and error_in_stream() build the scenario their arguments describe."""
    assert made == expected


@pytest.mark.parametrize("attempt", [0, 1, 2])
@pytest.mark.once  # no SDK: the same under every openai major
def test_stall_first_resolves_an_in_stream_error_per_attempt(attempt: int) -> None:
    """stall_first(2, stall=error_in_stream(kind)) answers attempts 0 and 1 with the error, later ones healthy."""
    scenario = Scenario.stall_first(2, stall=Scenario.error_in_stream("overloaded_error"))
    resolved = scenario.for_attempt(attempt).error_event
    assert resolved == ("overloaded_error" if attempt < 2 else None)
