"""Resuming a background Responses stream, through the real openai SDK: refusals, limits, requests, logs.

Each test runs openai.OpenAI or openai.AsyncOpenAI over a watchdog transport on
loopback against the fault server. A resume the server refuses, a stream that
was not created with ``background=True`` and ``resumes=0`` fail with
``StreamStalled`` as before, saying why; the resume request carries the
original request's headers and query and no body headers; the caller's own
resume is resumed too; and each resume is logged without secrets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import openai
import pytest

from hermes_transport import StreamPolicy, StreamStalled
from hermes_transport.testing import RESPONSES_PATH, FaultServer, RecordedRequest, Scenario

from _support import Flavor, build_responses_models

RESPONSE: dict[str, Any] = {"model": "gpt-test", "input": "hi"}
API_KEY = "sk-test-key-not-to-be-logged"
ID = "resp_hermes0"  # the fault server's first response
STALE = 0.5
# A stall after the first output is cut by the stale budget alone.
POLICY = StreamPolicy(stale_timeout=STALE, first_event_timeout=10.0, retries=0)
# Silent after event 6 (the second delta) on the creation only.
STALL_AFTER_OUTPUT = Scenario.stall_first(1, stall=Scenario.silent_after(7))
EVERY_NUMBER = list(range(11))
STALLS = (StreamStalled, openai.APITimeoutError)  # openai 3.x wraps a stall mid-body


@pytest.fixture(scope="module", autouse=True)
def _models_built() -> None:
    """The SDK builds its event models once, slowly (longer than STALE): not in a test."""
    build_responses_models()


@pytest.fixture
def sdk(server: FaultServer, sdk_flavor: Flavor) -> Iterator[Any]:
    """Builds sync openai clients of the SDK's flavor on the fault server; closes them."""
    clients: list[openai.OpenAI] = []

    def build(
        policy: StreamPolicy | None = POLICY, *, on: FaultServer = server, **kwargs: Any
    ) -> openai.OpenAI:
        http_client = sdk_flavor.http_client_for("cron", policy=policy)
        client = openai.OpenAI(
            base_url=on.base_url, api_key=API_KEY, max_retries=0, http_client=http_client, **kwargs
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def async_sdk(
    server: FaultServer, flavor: Flavor, policy: StreamPolicy = POLICY, **kwargs: Any
) -> openai.AsyncOpenAI:
    http_client = flavor.async_http_client_for("cron", policy=policy)
    return openai.AsyncOpenAI(
        base_url=server.base_url, api_key=API_KEY, http_client=http_client, max_retries=0, **kwargs
    )


def numbers(client: openai.OpenAI, seen: list[int] | None = None, **extra: Any) -> list[int]:
    """The sequence numbers of a background stream's events, read to the end into ``seen``."""
    seen = [] if seen is None else seen
    options = {"background": True, **RESPONSE, **extra}
    with client.responses.create(stream=True, **options) as stream:
        seen.extend(e.sequence_number for e in stream if e.type != "keepalive")
    return seen


async def async_numbers(client: openai.AsyncOpenAI, seen: list[int], **extra: Any) -> list[int]:
    options = {"background": True, **RESPONSE, **extra}
    stream = await client.responses.create(stream=True, **options)
    async with stream:
        seen.extend([e.sequence_number async for e in stream if e.type != "keepalive"])
    return seen


def stall_in(error: BaseException, flavor: Flavor) -> StreamStalled:
    """The stall itself: raised bare, or as the cause of openai's timeout error."""
    stall = error if isinstance(error, StreamStalled) else error.__cause__
    assert isinstance(stall, flavor.StreamStalled), repr(error)
    return stall


def query(request: RecordedRequest) -> dict[str, list[str]]:
    return parse_qs(urlsplit(request.path).query)


def resumed_after(server: FaultServer) -> list[int]:
    """The starting_after of each resume request the server saw, in order."""
    return [
        int(query(r).get("starting_after", ["-1"])[0])
        for r in server.requests
        if r.method == "GET"
    ]


# --- the server refuses the resume -------------------------------------------------------

GONE = "Response with id 'resp_hermes0' not found."
EXPIRED = "can no longer be streamed because it is more than 0.05 seconds old."
# The resume comes a stale budget after the creation: past a 0.05 s window.
REFUSALS = {
    "expired": (0.05, STALL_AFTER_OUTPUT, 400, EXPIRED),
    "unknown": (300.0, replace(STALL_AFTER_OUTPUT, status=404, message=GONE), 404, GONE),
}


def assert_refused(error: BaseException, flavor: Flavor, status: int, said: str) -> None:
    stall = stall_in(error, flavor)
    assert stall.stage == "mid_stream"
    assert f"resume was tried and refused: {status} " in str(stall)
    assert said in str(stall)
    cause = stall.__cause__
    assert isinstance(cause, flavor.http.HTTPStatusError), repr(cause)
    assert cause.response.status_code == status


@pytest.mark.parametrize("refusal", sorted(REFUSALS))
def test_a_refused_resume_raises_the_stall_saying_what_the_server_said(
    sdk: Any, sdk_flavor: Flavor, refusal: str
) -> None:
    """A resume answered 400 (the window expired) or 404 raises StreamStalled with the status and the server's message, caused by the flavor's HTTPStatusError."""
    window, scenario, status, said = REFUSALS[refusal]
    seen: list[int] = []
    with FaultServer(resume_window=window) as own:
        own.scenario = scenario
        with pytest.raises(STALLS) as info:
            numbers(sdk(on=own), seen)
    assert_refused(info.value, sdk_flavor, status, said)
    assert seen == EVERY_NUMBER[:7]
    assert [r.method for r in own.requests] == ["POST", "GET"]


def test_a_refusal_after_a_resume_that_stalled_reports_the_callers_own_stall(
    sdk: Any, sdk_flavor: Flavor
) -> None:
    """A first resume that gets no headers, then a second one refused: the caller gets the stall it had (mid-stream), saying the resume was refused, not the resume's own stall."""
    # Attempt 0 (the creation) silent after event 6, attempt 1 (a resume) silent before
    # its headers, later ones answered: refused, the window being long past.
    first_two = Scenario.stall_first(
        1, stall=Scenario.silent_after(7), then=Scenario.silent_before_headers()
    )
    with FaultServer(resume_window=0.05) as own:
        own.scenario = Scenario.stall_first(2, stall=first_two, then=Scenario())
        with pytest.raises(STALLS) as info:
            numbers(sdk(on=own))
        assert resumed_after(own) == [6, 6]
    assert_refused(info.value, sdk_flavor, 400, EXPIRED)
    assert "no progress event" in str(stall_in(info.value, sdk_flavor))


@pytest.mark.anyio
@pytest.mark.parametrize("refusal", sorted(REFUSALS))
async def test_async_a_refused_resume_raises_the_stall_saying_what_the_server_said(
    sdk_flavor: Flavor, refusal: str, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, a refused resume raises StreamStalled with the server's answer, caused by the flavor's HTTPStatusError."""
    window, scenario, status, said = REFUSALS[refusal]
    with FaultServer(resume_window=window) as own:
        own.scenario = scenario
        async with async_sdk(own, sdk_flavor) as client:
            with pytest.raises(STALLS) as info:
                await async_numbers(client, [])
        assert resumed_after(own) == [6]
    assert_refused(info.value, sdk_flavor, status, said)


@pytest.mark.parametrize("retries", [1, 0])
def test_a_stall_before_the_output_whose_resume_is_refused_is_re_sent_if_it_may(
    server: FaultServer, sdk: Any, sdk_flavor: Flavor, retries: int
) -> None:
    """A stall before the first output whose resume is refused (404) is re-sent while re-sends are left, else raises a first_event StreamStalled saying so, caused by the 404."""
    refused = Scenario.stall_first(1, stall=Scenario.silent_after(3), then=Scenario.error(404))
    server.scenario = Scenario.stall_first(2, stall=refused)
    client = sdk(StreamPolicy(stale_timeout=STALE, first_event_timeout=0.6, retries=retries))
    if retries:
        assert numbers(client) == EVERY_NUMBER
    else:
        with pytest.raises(STALLS) as info:
            numbers(client)
        stall = stall_in(info.value, sdk_flavor)
        assert stall.stage == "first_event"
        assert "resume was tried and refused: 404" in str(stall)
        assert isinstance(stall.__cause__, sdk_flavor.http.HTTPStatusError)
    assert [r.method for r in server.requests] == ["POST", "GET", "POST"][: 2 + retries]
    assert resumed_after(server) == [2]


# --- streams that are not resumed --------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "extra", "hint"),
    [
        (POLICY, {"background": False}, "only a Responses stream created with background=True"),
        (replace(POLICY, resumes=0), {}, ""),
    ],
    ids=["not-background", "resumes-off"],
)
def test_a_stream_that_cannot_be_resumed_stalls_as_before(
    server: FaultServer,
    sdk: Any,
    sdk_flavor: Flavor,
    policy: StreamPolicy,
    extra: dict[str, Any],
    hint: str,
) -> None:
    """A mid-stream stall of a stream created without background=True (its message says so), or with resumes=0, raises StreamStalled; nothing is resumed."""
    server.scenario = STALL_AFTER_OUTPUT
    seen: list[int] = []
    with pytest.raises(STALLS) as info:
        numbers(sdk(policy), seen, **extra)
    stall = stall_in(info.value, sdk_flavor)
    assert stall.stage == "mid_stream"
    if hint:
        assert hint in str(stall)
    else:
        assert "resum" not in str(stall)
    assert seen == EVERY_NUMBER[:7]
    assert resumed_after(server) == []


@pytest.mark.anyio
async def test_async_a_stream_created_without_background_stalls_as_before(
    server: FaultServer, sdk_flavor: Flavor, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, a stall after output of a non-background stream raises StreamStalled with the background=True hint, and no GET is sent."""
    server.scenario = STALL_AFTER_OUTPUT
    async with async_sdk(server, sdk_flavor) as client:
        with pytest.raises(STALLS) as info:
            await async_numbers(client, [], background=False)
    assert "only a Responses stream created with background=True" in str(
        stall_in(info.value, sdk_flavor)
    )
    assert resumed_after(server) == []


# --- the resume request ------------------------------------------------------------------

IDENTITY: dict[str, Any] = {
    "organization": "org-resume",
    "project": "proj-resume",
    "default_headers": {"OpenAI-Beta": "responses=v1"},
    "default_query": {"api-version": "2025-01-01"},
}
IDENTITY_HEADERS = ["org-resume", "proj-resume", "responses=v1"]
BODY_HEADERS = {"content-length", "content-type", "transfer-encoding"}


def assert_resumed_as_sent(server: FaultServer) -> None:
    create, resume = server.requests
    assert (create.method, resume.method) == ("POST", "GET")
    assert urlsplit(resume.path).path == f"{RESPONSES_PATH}/{ID}"
    assert query(create) == {"api-version": ["2025-01-01"]}
    assert query(resume) == {**query(create), "stream": ["true"], "starting_after": ["6"]}
    named = ["authorization", "openai-organization", "openai-project", "openai-beta"]
    assert [resume.headers[name] for name in named] == [f"Bearer {API_KEY}", *IDENTITY_HEADERS]
    assert not BODY_HEADERS & set(resume.headers)
    assert resume.body == b""
    sent = {k: v for k, v in create.headers.items() if k not in BODY_HEADERS}
    assert resume.headers == sent


def test_the_resume_carries_the_original_headers_and_query(server: FaultServer, sdk: Any) -> None:
    """The resume GET has the creation's auth, organization, project, extra headers and query, and no body headers."""
    server.scenario = STALL_AFTER_OUTPUT
    assert numbers(sdk(**IDENTITY)) == EVERY_NUMBER
    assert_resumed_as_sent(server)


@pytest.mark.anyio
async def test_async_the_resume_carries_the_original_headers_and_query(
    server: FaultServer, sdk_flavor: Flavor, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, the resume GET is the creation's headers and query, minus its body headers."""
    server.scenario = STALL_AFTER_OUTPUT
    async with async_sdk(server, sdk_flavor, **IDENTITY) as client:
        assert await async_numbers(client, []) == EVERY_NUMBER
    assert_resumed_as_sent(server)


# --- the caller's own resume -------------------------------------------------------------

OWN_RESUMES = [(3, 2, 5), (3, 0, 3), (6, 1, 7), (None, 3, 2)]


def _own_resume_stalls(events: int) -> Scenario:
    """The creation healthy, the caller's resume silent after ``events`` events, then healthy."""
    caller = Scenario.stall_first(1, stall=Scenario(), then=Scenario.silent_after(events))
    return Scenario.stall_first(2, stall=caller)


@pytest.mark.parametrize(("after", "events", "ours"), OWN_RESUMES)
def test_the_callers_own_resume_is_resumed_from_the_right_event(
    server: FaultServer, sdk: Any, after: int | None, events: int, ours: int
) -> None:
    """responses.retrieve(id, stream=True, starting_after=N) whose stream stalls is resumed after the last event it got (N if none): the caller gets every event above N once."""
    server.scenario = _own_resume_stalls(events)
    client = sdk(StreamPolicy(stale_timeout=STALE, first_event_timeout=0.6, retries=0))
    assert numbers(client) == EVERY_NUMBER
    options = {} if after is None else {"starting_after": after}
    with client.responses.retrieve(ID, stream=True, **options) as stream:
        got = [e.sequence_number for e in stream]
    mine = -1 if after is None else after
    assert got == EVERY_NUMBER[mine + 1 :]
    assert resumed_after(server) == [mine, ours]


@pytest.mark.anyio
async def test_async_the_callers_own_resume_is_resumed_from_the_right_event(
    server: FaultServer, sdk_flavor: Flavor, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, the caller's own resume after event 3, silent after two more, is resumed after event 5."""
    server.scenario = _own_resume_stalls(2)
    async with async_sdk(server, sdk_flavor) as client:
        await async_numbers(client, [])
        stream = await client.responses.retrieve(ID, stream=True, starting_after=3)
        async with stream:
            got = [e.sequence_number async for e in stream]
    assert got == EVERY_NUMBER[4:]
    assert resumed_after(server) == [3, 5]


# --- the log -----------------------------------------------------------------------------


def test_each_resume_is_logged_with_the_response_and_event_and_no_secret(
    server: FaultServer, sdk: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Each resume logs one WARNING naming the response id, the event it resumes after and the resumes left, and no log line holds the api key or a query."""
    caplog.set_level(logging.INFO, logger="hermes_transport")
    again = Scenario.stall_first(1, stall=Scenario.silent_after(7), then=Scenario.silent_after(1))
    server.scenario = Scenario.stall_first(2, stall=again)  # resumed after 6, then after 7
    assert numbers(sdk(**IDENTITY)) == EVERY_NUMBER
    records = [r for r in caplog.records if r.name == "hermes_transport"]
    resumes = [r for r in records if "resuming" in r.getMessage()]
    assert [r.levelno for r in resumes] == [logging.WARNING] * 2
    assert [r.getMessage().split(": ", 1)[1] for r in resumes] == [
        f"the stream stalled; resuming response {ID} after event 6 (2 resume(s) left)",
        f"the stream stalled; resuming response {ID} after event 7 (1 resume(s) left)",
    ]
    for record in records:
        message = record.getMessage()
        assert API_KEY not in message
        assert "2025-01-01" not in message
        assert "starting_after" not in message
