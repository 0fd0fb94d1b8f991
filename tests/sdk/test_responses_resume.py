"""A background response resumed by the transport is the response an unbroken stream gives.

stream_response / astream_response and the SDK's own ``client.responses.stream``
helper, with ``background=True``, on a fault server whose first attempt
stalls after the first output, is reset mid-event or ends truncated: the
transport resumes the response from the last whole event, and the caller
gets the same final Response, each event once, as on a healthy server. The
healthy run is made on a fresh fault server, so that ids match; only the
creation clock (``created_at``, whole seconds) may differ between the two runs.
An interrupt while a resume is under way ends the runner's call and cancels
the response once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    astream_response,
    async_openai_client_for,
    openai_client_for,
    stream_response,
)
from hermes_transport.testing import RESPONSES_PATH, FaultServer, RecordedRequest, Scenario

from _support import (
    OPENAI_MAJOR,
    RESPONSE_EVENTS,
    Flavor,
    ignore_abandoned_async_generators,
    interrupt_when,
)

REQUEST: dict[str, Any] = {"model": "m", "input": "hi", "background": True}
#: inline and worker: stream_response on a "cron" or a "cli" client; asyncio and trio:
#: astream_response on that event loop.
# The worker thread and trio add nothing an openai major changes: newest major only.
MODES = [
    "inline",
    pytest.param("worker", marks=pytest.mark.once),
    "asyncio",
    pytest.param("trio", marks=pytest.mark.once),
]
#: The events of a healthy background stream, numbered 0 to 10.
BACKGROUND_EVENTS = [RESPONSE_EVENTS[0], "response.queued", *RESPONSE_EVENTS[1:]]
#: Events sent before the fault: up to and with the first output (the "hello" delta, 5).
BEFORE_FAULT = 6
#: A stale budget the stalls tested take; a first-event one no loaded machine reaches.
POLICY = StreamPolicy(stale_timeout=1.0, first_event_timeout=10.0, retries=2)
#: Faults of the first attempt (the creation) after its first output; the resume is healthy.
FAULTS = {
    "stall": Scenario.silent_after(BEFORE_FAULT),
    "reset-mid-event": Scenario.dropped_after(BEFORE_FAULT, mid_event=True),
    "truncated": Scenario.truncated(BEFORE_FAULT),
}


@pytest.fixture(params=sorted(FAULTS))
def faulty(request: pytest.FixtureRequest) -> Iterator[FaultServer]:
    """A fault server whose first attempt breaks after the first output, in each way."""
    with FaultServer(Scenario.stall_first(1, stall=FAULTS[request.param])) as server:
        yield server


@pytest.fixture
def healthy() -> Iterator[FaultServer]:
    """A fresh fault server for the uninterrupted run: its first response has the same id."""
    with FaultServer() as server:
        yield server


def _respond(
    mode: str,
    server: FaultServer,
    flavor: Flavor,
    on_event: Callable[[ResponseStreamEvent], None],
    *,
    policy: StreamPolicy = POLICY,
    interrupt: Interrupt | None = None,
) -> Response:
    """One call of the runner in ``mode`` on a factory client of ``flavor``, closed after it."""
    factory: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "x",
        "flavor": flavor.name,
        "policy": policy,
    }
    run: dict[str, Any] = {"on_event": on_event, "interrupt": interrupt, **REQUEST}
    if mode in ("inline", "worker"):
        with openai_client_for("cron" if mode == "inline" else "cli", **factory) as client:
            return stream_response(client, **run)
    if mode == "trio" and OPENAI_MAJOR >= 2:
        ignore_abandoned_async_generators()

    async def main() -> Response:
        async with async_openai_client_for("cron", **factory) as client:
            return await astream_response(client, **run)

    return anyio.run(main, backend=mode)


def _clockless(response: Any) -> dict[str, Any]:
    """``response.model_dump()`` without its creation time, which two runs may not share."""
    dumped: dict[str, Any] = response.model_dump()
    del dumped["created_at"]
    return dumped


def _one_resume(requests: list[RecordedRequest], response_id: str, after: int) -> None:
    """The server got the creation, then one resume of ``response_id`` after event ``after``."""
    assert [(r.method, urlsplit(r.path).path) for r in requests] == [
        ("POST", RESPONSES_PATH),
        ("GET", f"{RESPONSES_PATH}/{response_id}"),
    ]
    query = parse_qs(urlsplit(requests[1].path).query)
    assert query == {"stream": ["true"], "starting_after": [str(after)]}
    assert requests[1].body == b""


def _stored(server: FaultServer, response_id: str) -> Response:
    """The response as the server keeps it, retrieved by a plain SDK client."""
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        return client.responses.retrieve(response_id)


# --- the runners -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_resumed_background_response_is_the_one_an_unbroken_stream_gives(
    faulty: FaultServer, healthy: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Broken after its first output and resumed, a background response comes back from the runner as a healthy run's, and as the server keeps it."""
    expected = _respond(mode, healthy, sdk_flavor, lambda event: None)
    response = _respond(mode, faulty, sdk_flavor, lambda event: None)
    assert type(response) is Response
    assert response.status == "completed"
    assert response.output_text == "hello world"
    assert _clockless(response) == _clockless(expected)
    _one_resume(faulty.requests, response.id, BEFORE_FAULT - 1)
    assert response.model_dump() == _stored(faulty, response.id).model_dump()


@pytest.mark.parametrize("mode", MODES)
def test_on_event_sees_every_event_of_a_resumed_response_once(
    faulty: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """on_event sees each event of the resumed response once, in order, numbered 0 to 10 without a gap or a repeat."""
    seen: list[ResponseStreamEvent] = []
    response = _respond(mode, faulty, sdk_flavor, seen.append)
    assert [event.type for event in seen] == BACKGROUND_EVENTS
    assert [event.sequence_number for event in seen] == list(range(len(BACKGROUND_EVENTS)))
    deltas = [getattr(event, "delta", "") for event in seen if event.type.endswith(".delta")]
    assert deltas == ["hello", " world"]
    assert response.output_text == "hello world"
    _one_resume(faulty.requests, response.id, BEFORE_FAULT - 1)


#: What the resume meets (the creation was reset after the first output), and where the
#: interrupt then finds the call.
RESUME_FAULTS = {
    "headers": Scenario.silent_before_headers(),
    "mid_stream": Scenario.silent_after(2),
}


@pytest.mark.parametrize("stage", sorted(RESUME_FAULTS))
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_while_a_resume_is_under_way_ends_the_call_and_cancels_once(
    server: FaultServer, sdk_flavor: Flavor, mode: str, stage: str
) -> None:
    """Interrupted while the resume waits for its headers or streams, the runner raises StreamInterrupted, and the response is cancelled once, nothing resumed again."""
    fault = Scenario.dropped_after(BEFORE_FAULT)
    resume = Scenario.stall_first(1, stall=fault, then=RESUME_FAULTS[stage])
    server.scenario = Scenario.stall_first(2, stall=resume)  # the attempts after: healthy
    seen: list[ResponseStreamEvent] = []
    delivered = BEFORE_FAULT + (2 if stage == "mid_stream" else 0)
    token = Interrupt()
    if stage == "headers":
        interrupt_when(token, lambda: len(server.requests) == 2, delay=0.5)
    else:
        interrupt_when(token, lambda: len(seen) == delivered)
    patient = StreamPolicy(stale_timeout=30.0, retries=2)
    with pytest.raises(StreamInterrupted) as info:
        _respond(mode, server, sdk_flavor, seen.append, policy=patient, interrupt=token)
    assert (info.value.reason, info.value.stage) == ("user pressed stop", stage)
    assert [event.sequence_number for event in seen] == list(range(delivered))
    cancel = ("POST", f"{RESPONSES_PATH}/resp_hermes0/cancel")
    assert [(r.method, r.path) for r in server.requests][2:] == [cancel]
    _one_resume(server.requests[:2], "resp_hermes0", BEFORE_FAULT - 1)


# --- the SDK's own stream helper ---------------------------------------------------------------


def _helper_run(server: FaultServer, flavor: Flavor) -> tuple[Any, list[Any]]:
    """``client.responses.stream(background=True)`` read to its end: the final response
    (``get_final_response()``) and every event."""
    http_client = flavor.http_client_for("cron", policy=POLICY)
    with (
        openai.OpenAI(
            base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
        ) as client,
        client.responses.stream(**REQUEST) as stream,
    ):
        events = list(stream)
        return stream.get_final_response(), events


def test_the_sdks_stream_helper_gets_the_healthy_final_response_from_a_resumed_stream(
    faulty: FaultServer, healthy: FaultServer, sdk_flavor: Flavor
) -> None:
    """client.responses.stream(background=True), broken after its first output and resumed: the same events and get_final_response() as a healthy run."""
    expected, expected_events = _helper_run(healthy, sdk_flavor)
    final, events = _helper_run(faulty, sdk_flavor)
    assert final.output_text == "hello world"
    assert _clockless(final) == _clockless(expected)
    assert [e.type for e in events] == [e.type for e in expected_events]
    assert [e.sequence_number for e in events] == list(range(len(BACKGROUND_EVENTS)))
    _one_resume(faulty.requests, final.id, BEFORE_FAULT - 1)


async def _async_helper_run(server: FaultServer, flavor: Flavor) -> tuple[Any, list[Any]]:
    """As ``_helper_run``, with ``openai.AsyncOpenAI`` on the running event loop."""
    http_client = flavor.async_http_client_for("cron", policy=POLICY)
    async with (
        openai.AsyncOpenAI(
            base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
        ) as client,
        client.responses.stream(**REQUEST) as stream,
    ):
        events = [event async for event in stream]
        return await stream.get_final_response(), events


@pytest.mark.anyio
async def test_async_the_sdks_stream_helper_gets_the_healthy_final_response_from_a_resumed_stream(
    faulty: FaultServer,
    healthy: FaultServer,
    sdk_flavor: Flavor,
    sdk_abandons_async_generators: None,
) -> None:
    """On an event loop too, the SDK's stream helper resumed after a break gives a healthy run's events and final response."""
    expected, expected_events = await _async_helper_run(healthy, sdk_flavor)
    final, events = await _async_helper_run(faulty, sdk_flavor)
    assert final.output_text == "hello world"
    assert _clockless(final) == _clockless(expected)
    assert [e.type for e in events] == [e.type for e in expected_events]
    assert [e.sequence_number for e in events] == list(range(len(BACKGROUND_EVENTS)))
    _one_resume(faulty.requests, final.id, BEFORE_FAULT - 1)
