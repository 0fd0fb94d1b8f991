"""Resuming a background Responses stream through the real openai SDK: one unbroken stream.

Each test runs openai.OpenAI or openai.AsyncOpenAI over a watchdog transport on
loopback against the fault server. A streaming ``background=True`` creation
that stalls, or whose connection dies, once it has named its response is
continued with ``GET /responses/{id}?stream=true&starting_after=N`` in the
same response body: the caller sees every event once, in order, and the same
final Response as a healthy run. The resumes of one call share the
``StreamPolicy.resumes`` budget; once it is spent, the stall is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import openai
import pytest

from hermes_transport import StreamPolicy, StreamStalled
from hermes_transport.testing import RESPONSES_PATH, FaultServer, Scenario

from _support import RESPONSE_EVENTS, SDK_FLAVORS, Flavor, build_responses_models

RESPONSE: dict[str, Any] = {"model": "gpt-test", "input": "hi"}
# The (type, sequence_number) of every event of a healthy background stream, 0 to 10.
BACKGROUND_EVENTS = [RESPONSE_EVENTS[0], "response.queued", *RESPONSE_EVENTS[1:]]
HEALTHY = [(kind, number) for number, kind in enumerate(BACKGROUND_EVENTS)]
ID = "resp_hermes0"  # the fault server's first response
STALE, FIRST = 0.5, 1.0
# A stall after the first output is cut by the stale budget alone: the first-event one is generous.
AFTER_OUTPUT = StreamPolicy(stale_timeout=STALE, first_event_timeout=10.0, retries=0)
# A stall before it is cut by the first-event budget, kept short.
ANYWHERE = StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST, retries=0)
STALLS = (StreamStalled, openai.APITimeoutError)  # openai 3.x wraps a stall mid-body
FAULTS: dict[str, Callable[[int], Scenario]] = {
    "silent": Scenario.silent_after,
    "keepalives": Scenario.comments_after,
    "truncated": Scenario.truncated,
    "reset": lambda k: Scenario.dropped_after(k, mid_event=True),
}


@pytest.fixture(scope="module", autouse=True)
def _models_built() -> None:
    """The SDK builds its event models once, slowly (longer than STALE): not in a test."""
    build_responses_models()


@pytest.fixture
def sdk(server: FaultServer, sdk_flavor: Flavor) -> Iterator[Any]:
    """Builds sync openai clients of the SDK's flavor on the fault server; closes them."""
    clients: list[openai.OpenAI] = []

    def build(policy: StreamPolicy | None, **kwargs: Any) -> openai.OpenAI:
        client = openai.OpenAI(
            base_url=server.base_url,
            api_key="sk-test-key",
            max_retries=0,
            http_client=sdk_flavor.http_client_for("cron", policy=policy),
            **kwargs,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def async_sdk(server: FaultServer, flavor: Flavor, policy: StreamPolicy) -> openai.AsyncOpenAI:
    http_client = flavor.async_http_client_for("cron", policy=policy)
    return openai.AsyncOpenAI(
        base_url=server.base_url, api_key="sk-test-key", http_client=http_client, max_retries=0
    )


def created(client: openai.OpenAI, into: list[Any] | None = None) -> list[Any]:
    """Every event of responses.create(stream=True, background=True), read to the end
    (into ``into``, which keeps those read before an error)."""
    events = [] if into is None else into
    with client.responses.create(stream=True, background=True, **RESPONSE) as stream:
        events.extend(stream)
    return events


def streamed(client: openai.OpenAI) -> tuple[list[Any], Any]:
    """Every event of the responses.stream() helper, and its final Response as compared."""
    with client.responses.stream(**RESPONSE, background=True) as stream:
        events = list(stream)
        return events, comparable(stream.get_final_response())


def comparable(model: Any) -> Any:
    """A model's model_dump() without creation times (a clock, not content)."""
    return unclocked(model.model_dump(warnings=False))


def unclocked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unclocked(v) for k, v in value.items() if k != "created_at"}
    if isinstance(value, list):
        return [unclocked(v) for v in value]
    return value


def numbered(events: list[Any]) -> list[tuple[str, int]]:
    """(type, sequence_number) of each event, keepalives (which repeat a number) left out."""
    return [(e.type, e.sequence_number) for e in events if e.type != "keepalive"]


def deltas(events: list[Any]) -> list[str]:
    return [e.delta for e in events if e.type == "response.output_text.delta"]


def requests(server: FaultServer) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in server.requests]


def resume(after: int) -> tuple[str, str]:
    """The resume request the server sees for a cut after event ``after``."""
    return "GET", f"{RESPONSES_PATH}/{ID}?stream=true&starting_after={after}"


CREATE = ("POST", RESPONSES_PATH)


def stall_in(error: BaseException, flavor: Flavor) -> StreamStalled:
    """The stall itself: raised bare, or as the cause of openai's timeout error."""
    stall = error if isinstance(error, StreamStalled) else error.__cause__
    assert isinstance(stall, flavor.StreamStalled), repr(error)
    return stall


def healthy_run(flavor: Flavor, helper: bool) -> tuple[list[Any], Any]:
    """A healthy run on a server of its own: its events, and the helper's final Response."""
    with FaultServer() as other:
        http_client = flavor.http_client_for("cron", policy=AFTER_OUTPUT)
        with openai.OpenAI(base_url=other.base_url, api_key="x", http_client=http_client) as sdk:
            return streamed(sdk) if helper else (created(sdk), None)


# --- one stall, mid-stream --------------------------------------------------------------


@pytest.mark.parametrize("helper", [False, True], ids=["create", "stream"])
def test_a_stalled_background_stream_is_resumed_into_the_same_stream(
    server: FaultServer, sdk: Any, sdk_flavor: Flavor, helper: bool
) -> None:
    """A background stream silent after event 6 is resumed after 6: the caller gets the events, deltas and final Response of a healthy run, each event once."""
    expected, final = healthy_run(sdk_flavor, helper)
    server.scenario = Scenario.stall_first(1, stall=Scenario.silent_after(7), then=Scenario())
    client = sdk(AFTER_OUTPUT)
    got, got_final = streamed(client) if helper else (created(client), None)
    assert numbered(got) == numbered(expected) == HEALTHY
    assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    assert deltas(got) == ["hello", " world"]
    assert got_final == final
    assert requests(server) == [CREATE, resume(6)]


async def async_run(target: FaultServer, flavor: Flavor, helper: bool) -> tuple[list[Any], Any]:
    """Every event of an async background stream on ``target``, and its final Response."""
    async with async_sdk(target, flavor, AFTER_OUTPUT) as client:
        if helper:
            async with client.responses.stream(**RESPONSE, background=True) as stream:
                return [event async for event in stream], await stream.get_final_response()
        stream = await client.responses.create(stream=True, background=True, **RESPONSE)
        async with stream:
            events = [event async for event in stream]
        return events, events[-1].response


@pytest.mark.anyio
@pytest.mark.parametrize("helper", [False, True], ids=["create", "stream"])
async def test_async_a_stalled_background_stream_is_resumed_into_the_same_stream(
    server: FaultServer, sdk_flavor: Flavor, helper: bool, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, a background stream silent after event 6 is resumed after 6 into one unbroken stream with a healthy run's events and final Response."""
    with FaultServer() as other:
        expected, expected_final = await async_run(other, sdk_flavor, helper)
    server.scenario = Scenario.stall_first(1, stall=Scenario.silent_after(7), then=Scenario())
    got, final = await async_run(server, sdk_flavor, helper)
    assert numbered(got) == numbered(expected) == HEALTHY
    assert [comparable(e) for e in got] == [comparable(e) for e in expected]
    assert deltas(got) == ["hello", " world"]
    assert comparable(final) == comparable(expected_final)
    assert final.output_text == "hello world"
    assert requests(server) == [CREATE, resume(6)]


# --- every fault, at every point ---------------------------------------------------------

# k events, then the fault: 1 to 5 fall before the first output (the first delta is
# event 5), while the response is held; 6 and later after it. Taken: the hold's start
# and end, right after the first output, and later on.
POINTS = [pytest.param(1, marks=pytest.mark.once), 4, 6, pytest.param(9, marks=pytest.mark.once)]


@pytest.mark.parametrize("k", POINTS)
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_faulted_background_stream_resumes_after_the_last_whole_event(
    server: FaultServer, sdk: Any, fault: str, k: int
) -> None:
    """A stall, keepalives only, a truncated body or a reset mid-event after k events is resumed after event k-1: every event arrives once, in order."""
    server.scenario = Scenario.stall_first(1, stall=FAULTS[fault](k), then=Scenario())
    got = created(sdk(ANYWHERE))
    assert numbered(got) == HEALTHY
    assert deltas(got) == ["hello", " world"]
    assert requests(server) == [CREATE, resume(k - 1)]


@pytest.mark.parametrize("fault", ["silent", "keepalives"])
def test_a_stall_before_the_response_is_named_is_re_sent(
    server: FaultServer, sdk: Any, fault: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A background stream that stalls before response.created (its id unknown) is re-sent, as before, not resumed: two creations, no GET, one WARNING for the stall."""
    server.scenario = Scenario.stall_first(1, stall=FAULTS[fault](0), then=Scenario())
    got = created(sdk(StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST, retries=1)))
    assert numbered(got) == HEALTHY
    assert requests(server) == [CREATE, CREATE]
    stalls = [r for r in caplog.records if "stream stalled" in r.getMessage()]
    assert len(stalls) == 1, [r.getMessage() for r in stalls]  # as for a stream not resumable


@pytest.mark.parametrize("fault", ["truncated", "reset"])
def test_a_body_that_dies_before_the_response_is_named_fails_as_before(
    server: FaultServer, sdk: Any, sdk_flavor: Flavor, fault: str
) -> None:
    """A background stream whose body dies before response.created fails as a plain stream does: the SDK's connection error, nothing resumed or re-sent."""
    server.scenario = Scenario.stall_first(1, stall=FAULTS[fault](0), then=Scenario())
    errors = (openai.APIConnectionError, sdk_flavor.http.TransportError)
    with pytest.raises(errors) as info:
        created(sdk(StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST, retries=1)))
    assert not isinstance(info.value, StreamStalled)
    assert requests(server) == [CREATE]


@pytest.mark.anyio
@pytest.mark.parametrize("k", [3, 7])
@pytest.mark.parametrize("fault", sorted(FAULTS))
# Each loop once, each flavor the SDK takes at least once: the matrix is the faults and
# points; the other pairings run the same resume again.
@pytest.mark.parametrize(
    ("anyio_backend", "sdk_flavor"),
    [("asyncio", SDK_FLAVORS[0]), ("trio", SDK_FLAVORS[-1])],
    indirect=["sdk_flavor"],
    ids=str,
)
async def test_async_a_faulted_background_stream_resumes_after_the_last_whole_event(
    server: FaultServer,
    sdk_flavor: Flavor,
    fault: str,
    k: int,
    sdk_abandons_async_generators: None,
) -> None:
    """On an event loop too, each fault after k events, before or after the first output, is resumed after event k-1 into one unbroken stream."""
    server.scenario = Scenario.stall_first(1, stall=FAULTS[fault](k), then=Scenario())
    async with async_sdk(server, sdk_flavor, ANYWHERE) as client:
        stream = await client.responses.create(stream=True, background=True, **RESPONSE)
        async with stream:
            got = [event async for event in stream]
    assert numbered(got) == HEALTHY
    assert requests(server) == [CREATE, resume(k - 1)]


# --- the resume budget -------------------------------------------------------------------


def stalling(times: int) -> Scenario:
    """The creation silent after event 6, then its first ``times - 1`` resumes silent after
    one more event each (a resume after 6 sends 7, after 7 sends 8), later ones healthy."""
    first = Scenario.stall_first(1, stall=Scenario.silent_after(7), then=Scenario.silent_after(1))
    return Scenario.stall_first(times, stall=first, then=Scenario())


@pytest.mark.parametrize("times", [1, 2])
def test_a_resumed_stream_that_stalls_again_is_resumed_again(
    server: FaultServer, sdk: Any, times: int
) -> None:
    """With StreamPolicy(resumes=2), a stream that stalls once or twice, resume included, is resumed each time from the last event it got."""
    server.scenario = stalling(times)
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=10.0, retries=0, resumes=2)
    assert numbered(created(sdk(policy))) == HEALTHY
    assert requests(server) == [CREATE, *(resume(6 + n) for n in range(times))]


def test_once_the_resumes_are_spent_the_stall_is_raised(
    server: FaultServer, sdk: Any, sdk_flavor: Flavor
) -> None:
    """A third stall with StreamPolicy(resumes=2) raises StreamStalled saying no resume is left, after exactly two resumes, each from the right event."""
    server.scenario = stalling(3)
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=10.0, retries=0, resumes=2)
    got: list[Any] = []
    with pytest.raises(STALLS) as info:
        created(sdk(policy), got)
    stall = stall_in(info.value, sdk_flavor)
    assert stall.stage == "mid_stream"
    assert "resumed 2 time(s), no resume left" in str(stall)
    assert numbered(got) == HEALTHY[:9]
    assert requests(server) == [CREATE, resume(6), resume(7)]


@pytest.mark.anyio
async def test_async_once_the_resumes_are_spent_the_stall_is_raised(
    server: FaultServer, sdk_flavor: Flavor, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, resumes share the call's budget: two resumes, then StreamStalled saying no resume is left."""
    server.scenario = stalling(3)
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=10.0, retries=0, resumes=2)
    got: list[Any] = []
    async with async_sdk(server, sdk_flavor, policy) as client:
        stream = await client.responses.create(stream=True, background=True, **RESPONSE)
        with pytest.raises(STALLS) as info:
            async with stream:
                got.extend([event async for event in stream])
    assert "resumed 2 time(s), no resume left" in str(stall_in(info.value, sdk_flavor))
    assert requests(server) == [CREATE, resume(6), resume(7)]


def test_resumes_before_the_first_output_draw_on_the_same_budget(
    server: FaultServer, sdk: Any, sdk_flavor: Flavor
) -> None:
    """Every attempt silent after two events: resumed after events 1 and 3, then, the budget spent, StreamStalled saying no resume is left."""
    server.scenario = Scenario.silent_after(2)
    got: list[Any] = []
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST, retries=0, resumes=2)
    with pytest.raises(STALLS) as info:
        created(sdk(policy), got)
    assert "resumed 2 time(s), no resume left" in str(stall_in(info.value, sdk_flavor))
    assert numbered(got) == HEALTHY[:6]
    assert requests(server) == [CREATE, resume(1), resume(3)]


def test_a_compressed_background_stream_is_not_resumed_and_its_stall_says_why(
    server: FaultServer, sdk: Any, sdk_flavor: Flavor
) -> None:
    """A gzip background stream that stalls after its first output fails as before (two compressed bodies cannot be spliced), and its StreamStalled says so."""
    server.scenario = Scenario.silent_after(7, gzip=True)
    with pytest.raises(STALLS) as info:
        created(sdk(AFTER_OUTPUT))
    stall = stall_in(info.value, sdk_flavor)
    assert "not resumed: a compressed stream cannot be spliced" in str(stall)
    assert requests(server) == [CREATE]


@pytest.mark.parametrize("resumes", [0, 1])
def test_the_resume_budget_is_read_from_the_environment(
    server: FaultServer,
    sdk: Any,
    sdk_flavor: Flavor,
    monkeypatch: pytest.MonkeyPatch,
    resumes: int,
) -> None:
    """A client built without a policy reads HERMES_STREAM_RESUMES: it resumes that many times, then raises StreamStalled."""
    env = {"STALE_TIMEOUT": STALE, "FIRST_EVENT_TIMEOUT": 10, "RETRIES": 0, "RESUMES": resumes}
    for name, value in env.items():
        monkeypatch.setenv(f"HERMES_STREAM_{name}", str(value))
    server.scenario = stalling(resumes + 1)
    with pytest.raises(STALLS) as info:
        created(sdk(None))
    said = str(stall_in(info.value, sdk_flavor))
    assert ("resumed 1 time(s), no resume left" in said) if resumes else ("resum" not in said)
    assert requests(server) == [CREATE, resume(6)][: resumes + 1]
