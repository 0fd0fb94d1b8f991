"""The fault server's background mode: resumes, the resume window, cancels and connection faults."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from hermes_transport.testing import MESSAGES_PATH, RESPONSES_PATH, FaultServer, Scenario

from _support import RESPONSE_EVENTS

BODY: dict[str, Any] = {"model": "m", "input": "hi", "stream": True, "background": True}
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]
# The events of a healthy default background stream, numbered 0 to 10.
BACKGROUND_EVENTS = [*RESPONSE_EVENTS[:1], "response.queued", *RESPONSE_EVENTS[1:]]
# What a client reading a body sees when the server resets the connection under it.
RESET_ERRORS = (httpx.ReadError, httpx.RemoteProtocolError, openai.APIConnectionError)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


def client_of(server: FaultServer, timeout: float = 10.0) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=timeout)


@pytest.fixture
def sdk(server: FaultServer) -> Iterator[openai.OpenAI]:
    with client_of(server) as client:
        yield client


def url(server: FaultServer, path: str) -> str:
    return f"http://127.0.0.1:{server.port}{path}"


def resume_url(server: FaultServer, response_id: str, after: int | None = None) -> str:
    query = "" if after is None else f"&starting_after={after}"
    return url(server, f"{RESPONSES_PATH}/{response_id}?stream=true{query}")


def blocks(text: str) -> list[str]:
    """The SSE blocks of a body, keepalives left out, each as its exact text."""
    found = [b for b in text.replace("\r\n", "\n").split("\n\n") if b]
    return [b for b in found if not b.startswith("event: keepalive")]


def number(block: str) -> int:
    data = block.split("\n")[1].removeprefix("data: ")
    value: int = json.loads(data)["sequence_number"]
    return value


def id_of(events: list[Any]) -> str:
    """The response id that a stream's first event, response.created, carries."""
    response_id: str = events[0].response.id
    return response_id


def created_in_background(sdk: openai.OpenAI) -> tuple[str, list[Any]]:
    """The id and every event of a fresh background stream, read to its end."""
    events: list[Any] = list(
        sdk.responses.create(model="m", input="hi", stream=True, background=True)
    )
    return id_of(events), events


# --- resumes ---------------------------------------------------------------------------


@pytest.mark.parametrize("after", [None, -1, 0, 3, 9, 10, 50])
def test_a_background_resume_gives_exactly_the_remaining_events(
    sdk: openai.OpenAI, after: int | None
) -> None:
    """responses.retrieve(id, stream=True, starting_after=N) after create(background=True, stream=True) yields exactly the events numbered above N, as they were first sent."""
    response_id, events = created_in_background(sdk)
    assert [e.type for e in events] == BACKGROUND_EVENTS
    options: dict[str, Any] = {} if after is None else {"starting_after": after}
    resumed = list(sdk.responses.retrieve(response_id, stream=True, **options))
    cursor = -1 if after is None else after
    expected = [e for e in events if e.sequence_number > cursor]
    assert [e.model_dump() for e in resumed] == [e.model_dump() for e in expected]


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(),
        Scenario(crlf=True),
        Scenario(tool_call=True),
        Scenario.healthy(gzip=True),
        Scenario.thinking(0.15, keepalive_interval=0.05),
        Scenario.error_in_stream("overloaded_error", after_events=3),
        dataclasses.replace(
            Scenario.error_in_stream(after_events=6), error_as_response_failed=True
        ),
    ],
    ids=["plain", "crlf", "tool", "gzip", "thinking", "error", "response-failed"],
)
@pytest.mark.parametrize("after", [-1, 2, 5])
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_resume_sends_the_same_bytes_as_the_creating_stream(
    server: FaultServer, scenario: Scenario, after: int
) -> None:
    """Each event a healthy resume sends is byte for byte the event the creating stream sent with that number, in-stream errors included."""
    server.scenario = scenario
    with httpx.Client(timeout=10.0) as client:
        created = blocks(client.post(url(server, RESPONSES_PATH), json=BODY).text)
        response_id = json.loads(created[0].split("\n")[1][6:])["response"]["id"]
        server.scenario = Scenario(crlf=scenario.crlf, gzip=scenario.gzip)  # the resume's
        resumed = blocks(client.get(resume_url(server, response_id, after)).text)
    assert [number(b) for b in created] == list(range(len(created)))
    assert resumed == [b for b in created if number(b) > after]


@pytest.mark.once  # no SDK: the same under every openai major
def test_background_keepalives_repeat_the_number_before_them(server: FaultServer) -> None:
    """Keepalives of a thinking background stream carry the number of the event before them, so the stored numbering never shifts."""
    server.scenario = Scenario.thinking(0.2, keepalive_interval=0.05)
    with httpx.Client(timeout=10.0) as client:
        text = client.post(url(server, RESPONSES_PATH), json=BODY).text
    found = [b for b in text.split("\n\n") if b]
    keepalives = [i for i, b in enumerate(found) if b.startswith("event: keepalive")]
    assert keepalives
    assert all(number(found[i]) == number(found[i - 1]) for i in keepalives)
    assert [number(b) for b in blocks(text)] == list(range(len(BACKGROUND_EVENTS)))


def test_a_non_streamed_background_response_can_be_streamed_by_resume(
    sdk: openai.OpenAI,
) -> None:
    """create(background=True) without stream can be streamed whole with retrieve(id, stream=True)."""
    created = sdk.responses.create(model="m", input="hi", background=True)
    resumed = list(sdk.responses.retrieve(created.id, stream=True))
    assert [e.type for e in resumed] == BACKGROUND_EVENTS
    assert [e.sequence_number for e in resumed] == list(range(len(BACKGROUND_EVENTS)))


@pytest.mark.parametrize("stream", [True, False])
def test_a_non_background_response_cannot_be_resumed_but_can_be_retrieved(
    sdk: openai.OpenAI, stream: bool
) -> None:
    """Resuming a response created without background raises NotFoundError; retrieving it without stream still works."""
    if stream:
        response_id = id_of(list(sdk.responses.create(model="m", input="hi", stream=True)))
    else:
        response_id = sdk.responses.create(model="m", input="hi").id
    with pytest.raises(openai.NotFoundError, match=f"Response with id '{response_id}' not found"):
        list(sdk.responses.retrieve(response_id, stream=True))
    assert sdk.responses.retrieve(response_id).status == "completed"


# --- the resume window -----------------------------------------------------------------


def test_a_resume_after_the_window_is_a_bad_request() -> None:
    """Past resume_window seconds after creation a resume raises BadRequestError saying the response is too old; retrieval still works."""
    with FaultServer(resume_window=0.5) as server, client_of(server) as sdk:
        with httpx.Client(timeout=10.0) as client:  # the SDK's first parse can take 0.5 s
            created = blocks(client.post(url(server, RESPONSES_PATH), json=BODY).text)
            response_id = json.loads(created[0].split("\n")[1][6:])["response"]["id"]
            assert blocks(client.get(resume_url(server, response_id)).text) == created
        time.sleep(0.6)
        expected = (
            f"Response '{response_id}' can no longer be streamed because it is more than"
            " 0.5 seconds old."
        )
        with pytest.raises(openai.BadRequestError) as caught:
            list(sdk.responses.retrieve(response_id, stream=True, starting_after=3))
        assert caught.value.body == {
            "message": expected,
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }
        assert sdk.responses.retrieve(response_id).status == "completed"


@pytest.mark.parametrize("window", [0, -1.0, math.nan, "300", None, True])
@pytest.mark.once  # no SDK: the same under every openai major
def test_resume_window_must_be_a_positive_number(window: Any) -> None:
    """FaultServer(resume_window=...) refuses anything but a number > 0, naming the argument."""
    with pytest.raises(ValueError, match="resume_window"):
        FaultServer(resume_window=window)


@pytest.mark.parametrize("window", [0.01, 1, 300.0, math.inf])
@pytest.mark.once  # no SDK: the same under every openai major
def test_resume_window_accepts_any_positive_number(window: float) -> None:
    """Any number > 0, infinity included, is a resume window, reported back as a float."""
    assert FaultServer(resume_window=window).resume_window == float(window)
    assert FaultServer().resume_window == 300.0


# --- cancel ----------------------------------------------------------------------------


def test_a_cancelled_background_response_cannot_be_resumed(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """responses.cancel(id) of a background response answers it cancelled, keeps it so, and a later resume raises BadRequestError."""
    response_id, _ = created_in_background(sdk)
    assert sdk.responses.cancel(response_id).status == "cancelled"
    assert sdk.responses.retrieve(response_id).status == "cancelled"
    with pytest.raises(openai.BadRequestError, match=f"Response '{response_id}' was cancelled."):
        list(sdk.responses.retrieve(response_id, stream=True))
    assert sdk.responses.cancel(response_id).status == "cancelled"  # again: the same answer
    cancel = server.requests[1]
    assert (cancel.method, cancel.path, cancel.attempt) == (
        "POST",
        f"{RESPONSES_PATH}/{response_id}/cancel",
        -1,
    )


@pytest.mark.parametrize("stream", [True, False])
def test_a_non_background_response_cannot_be_cancelled(sdk: openai.OpenAI, stream: bool) -> None:
    """responses.cancel(id) of a response created without background raises BadRequestError and leaves it completed."""
    if stream:
        response_id = id_of(list(sdk.responses.create(model="m", input="hi", stream=True)))
    else:
        response_id = sdk.responses.create(model="m", input="hi").id
    with pytest.raises(openai.BadRequestError, match="Only background responses can be cancelled"):
        sdk.responses.cancel(response_id)
    assert sdk.responses.retrieve(response_id).status == "completed"


# --- connection faults -----------------------------------------------------------------


@pytest.mark.parametrize("events", [1, 3, 7])
@pytest.mark.parametrize(
    "shape",
    [{}, {"mid_event": True}, {"byte_by_byte": True}],
    ids=["between-events", "mid-event", "byte-by-byte"],
)
def test_a_dropped_background_stream_resumes_with_the_rest(
    server: FaultServer, sdk: openai.OpenAI, events: int, shape: dict[str, Any]
) -> None:
    """stall_first(1, stall=dropped_after(n)) resets the creating stream after n events, and a resume from the last one delivers the rest."""
    dropped = Scenario.dropped_after(events, mid_event=shape.get("mid_event", False))
    dropped = dataclasses.replace(dropped, byte_by_byte=shape.get("byte_by_byte", False))
    server.scenario = Scenario.stall_first(1, stall=dropped)
    seen: list[Any] = []
    with pytest.raises(RESET_ERRORS):
        seen.extend(sdk.responses.create(model="m", input="hi", stream=True, background=True))
    assert [e.sequence_number for e in seen] == list(range(events))
    rest = list(
        sdk.responses.retrieve(id_of(seen), stream=True, starting_after=seen[-1].sequence_number)
    )
    assert [e.type for e in seen + rest] == BACKGROUND_EVENTS
    assert [e.sequence_number for e in rest] == list(range(events, len(BACKGROUND_EVENTS)))
    assert [r.attempt for r in server.requests] == [0, 1]


@pytest.mark.parametrize("events", [1, 3])
def test_a_stalled_background_stream_resumes_with_the_rest(
    server: FaultServer, events: int
) -> None:
    """stall_first(1, stall=silent_after(n)) stalls the creating stream after n events while a resume, from the last one, delivers the rest."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.silent_after(events))
    seen: list[Any] = []
    with client_of(server, timeout=0.5) as sdk:
        with pytest.raises((httpx.ReadTimeout, openai.APITimeoutError)):
            seen.extend(sdk.responses.create(model="m", input="hi", stream=True, background=True))
        assert [e.sequence_number for e in seen] == list(range(events))
        response_id, last = id_of(seen), seen[-1].sequence_number
        rest = list(sdk.responses.retrieve(response_id, stream=True, starting_after=last))
    assert [e.type for e in seen + rest] == BACKGROUND_EVENTS
    assert [e.sequence_number for e in rest] == list(range(events, len(BACKGROUND_EVENTS)))


def test_only_the_second_attempt_is_dropped_with_nested_stall_first(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """stall_first(2, stall=stall_first(1, then=dropped_after(2), stall=healthy)) serves the creation, drops the first resume after two events and serves the next."""
    server.scenario = Scenario.stall_first(
        2, stall=Scenario.stall_first(1, then=Scenario.dropped_after(2), stall=Scenario())
    )
    response_id, events = created_in_background(sdk)
    assert len(events) == len(BACKGROUND_EVENTS)
    first: list[Any] = []
    with pytest.raises(RESET_ERRORS):
        first.extend(sdk.responses.retrieve(response_id, stream=True, starting_after=4))
    assert [e.sequence_number for e in first] == [5, 6]
    rest = list(sdk.responses.retrieve(response_id, stream=True, starting_after=6))
    assert [e.sequence_number for e in rest] == [7, 8, 9, 10]
    assert [r.attempt for r in server.requests] == [0, 1, 2]


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"model": "m", "messages": MESSAGES, "stream": True}),
        (MESSAGES_PATH, {"model": "c", "max_tokens": 8, "messages": MESSAGES, "stream": True}),
        (RESPONSES_PATH, {"model": "m", "input": "hi", "stream": True}),
    ],
    ids=["chat", "messages", "responses"],
)
@pytest.mark.parametrize("mid_event", [False, True])
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_drop_resets_the_connection_mid_body_on_every_wire(
    server: FaultServer, path: str, body: dict[str, Any], mid_event: bool
) -> None:
    """dropped_after(2) sends two whole events (and half the third with mid_event), then resets the connection: the reader gets ReadError, not a clean end."""
    server.scenario = Scenario.dropped_after(2, mid_event=mid_event)
    received: list[bytes] = []
    with (
        httpx.Client(timeout=10.0) as client,
        client.stream("POST", url(server, path), json=body) as response,
    ):
        with pytest.raises(httpx.ReadError):
            received.extend(response.iter_raw())
    assert response.status_code == 200
    text = b"".join(received).decode()
    whole, _, partial = text.rpartition("\n\n")
    assert len([b for b in whole.split("\n\n") if b]) == 2
    assert bool(partial) == mid_event


@pytest.mark.parametrize(
    ("made", "expected"),
    [
        (Scenario.dropped_after(3), Scenario(drop_after_events=3)),
        (
            Scenario.dropped_after(0, mid_event=True),
            Scenario(drop_after_events=0, drop_mid_event=True),
        ),
    ],
    ids=["between-events", "mid-event"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_dropped_after_sets_the_documented_fields(made: Scenario, expected: Scenario) -> None:
    """dropped_after() builds the scenario its arguments describe."""
    assert made == expected


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"drop_after_events": -1}, "drop_after_events"),
        ({"drop_mid_event": True}, "drop_mid_event"),
        ({"drop_after_events": 1, "stall_after_events": 1}, "drop_after_events"),
        ({"drop_after_events": 1, "truncate_after_events": 1}, "drop_after_events"),
        ({"drop_after_events": 1, "stall_before_headers": True}, "drop_after_events"),
        ({"drop_after_events": 1, "error_event": "server_error"}, "drop_after_events"),
    ],
    ids=["negative", "mid-without-drop", "and-stall", "and-truncate", "and-silent", "and-error"],
)
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_drop_is_validated_like_the_other_faults(fields: dict[str, Any], named: str) -> None:
    """A negative drop, drop_mid_event alone or a drop with another fault raises ValueError naming the field."""
    with pytest.raises(ValueError, match=named):
        Scenario(**fields)
