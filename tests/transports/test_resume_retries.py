"""Resuming a background Responses stream again: refusals that pass, early ends, numbered keepalives, abandoned responses.

Each test reads ``client.responses.create(stream=True, background=True)``
through the real openai SDK (sync and async) over a watchdog transport on
loopback against the fault server. A resume answered 503 or 429 is sent
again after a short back-off while resumes are left; one answered 400 or 404
is not. A body that ends cleanly before ``response.completed`` is resumed like
one that broke. A keepalive that took its own number is where the resume
starts. A response given up before the caller saw any of it (its stall
re-sent, or failed) is cancelled; one the caller saw is left to it.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._core import resuming
from hermes_transport._core.calls import BACKOFF_FIRST
from hermes_transport._core.resume import ResumeRefused, retry_after
from hermes_transport.testing import RESPONSES_PATH, FaultServer, RecordedRequest, Scenario

from _support import (
    Flavor,
    answered_in_turn,
    build_responses_models,
    interrupt_when,
    read_responses,
)

RESPONSE: dict[str, Any] = {"model": "gpt-test", "input": "hi", "background": True}
API_KEY = "sk-resume-retries"
ID = "resp_hermes0"  # the fault server's first response
#: A stall after the first output is cut by this stale budget alone.
POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=10.0, retries=0, resumes=3)
#: Silent after event 6 (the second delta).
SILENT = Scenario.silent_after(7)
#: Every number of a healthy background stream, 0 to 10.
EVERY_NUMBER = list(range(11))
MODES = ["sync", "asyncio"]
STALLS = (StreamStalled, openai.APITimeoutError)  # openai 3.x wraps a stall mid-body


@pytest.fixture(scope="module", autouse=True)
def _models_built() -> None:
    """The SDK builds its event models once, slowly (longer than a budget): not in a test."""
    build_responses_models()


def _read(
    mode: str,
    server: FaultServer,
    flavor: Flavor,
    policy: StreamPolicy = POLICY,
    *,
    token: Interrupt | None = None,
    seen: list[Any] | None = None,
) -> BaseException | None:
    """Read one background stream to its end in ``mode`` (see ``read_responses``)."""
    return read_responses(
        mode, server.base_url, flavor, RESPONSE, API_KEY, policy, token, seen=seen
    )


def _numbers(seen: list[Any]) -> list[int]:
    return [event.sequence_number for event in seen if event.type != "keepalive"]


def _stall(error: BaseException | None) -> StreamStalled:
    if isinstance(error, openai.APITimeoutError):
        error = error.__cause__
    assert isinstance(error, StreamStalled), repr(error)
    return error


def _resumes(server: FaultServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "GET"]


def _after(request: RecordedRequest) -> int:
    return int(parse_qs(urlsplit(request.path).query)["starting_after"][0])


def _cancels(server: FaultServer) -> list[str]:
    return [r.path for r in server.requests if r.path.endswith("/cancel")]


# --- a refusal that may pass: resumed again ---------------------------------------------------


@pytest.mark.parametrize("status", [503, 429])  # 500: the same rule (test_which_refusals_may_pass)
@pytest.mark.parametrize("mode", MODES)
def test_a_resume_refused_for_a_while_is_sent_again_and_the_stream_completes(
    server: FaultServer,
    sdk_flavor: Flavor,
    mode: str,
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A resume answered 503, 429 or 500 is sent again after a back-off, from the same event: the caller reads every event once, and the wait is logged."""
    caplog.set_level(logging.WARNING, logger="hermes_transport")
    server.scenario = answered_in_turn(SILENT, Scenario.error(status))
    seen: list[Any] = []
    assert _read(mode, server, sdk_flavor, seen=seen) is None
    assert _numbers(seen) == EVERY_NUMBER
    resumes = _resumes(server)
    assert [_after(r) for r in resumes] == [6, 6]
    pause = resumes[1].time - resumes[0].time
    assert pause >= BACKOFF_FIRST / 2 * 0.9, f"resumed again after {pause:.3f} s"
    logged = [r.getMessage() for r in caplog.records if r.name == "hermes_transport"]
    assert any(
        f"the resume was refused ({status}" in m and "resuming again in" in m for m in logged
    )


@pytest.mark.parametrize("mode", MODES)
def test_refusals_that_never_pass_spend_the_resumes_and_say_so(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A resume answered 503 every time is sent as often as resumes=3 allows, then the caller gets the stall, saying the resume was tried 3 times and what the server answered, the last refusal as its cause."""
    server.scenario = Scenario.stall_first(1, then=Scenario.error(503), stall=SILENT)
    error = _stall(_read(mode, server, sdk_flavor))
    assert "resume was tried 3 times and refused: 503" in str(error)
    assert "503" in str(error.__cause__)
    assert [_after(r) for r in _resumes(server)] == [6, 6, 6]


@pytest.mark.parametrize(("status", "tries"), [(400, 1), (404, 1)])
@pytest.mark.parametrize("mode", MODES)
def test_a_refusal_that_cannot_pass_is_not_sent_again(
    server: FaultServer, sdk_flavor: Flavor, mode: str, status: int, tries: int
) -> None:
    """A resume answered 400 or 404 is final: one resume, and the stall says what was answered."""
    server.scenario = Scenario.stall_first(1, then=Scenario.error(status), stall=SILENT)
    error = _stall(_read(mode, server, sdk_flavor))
    assert f"resume was tried and refused: {status}" in str(error)
    assert len(_resumes(server)) == tries


@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_during_the_back_off_ends_the_call_as_an_interrupt(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """An interrupt while the transport waits to resume again after a 503 raises StreamInterrupted (not the stall), and nothing more is sent but the cancel."""
    server.scenario = Scenario.stall_first(1, then=Scenario.error(503), stall=SILENT)
    token = Interrupt()
    interrupt_when(token, lambda: len(_resumes(server)) == 1, delay=0.02)
    slow = replace(POLICY, resumes=50)  # the back-offs alone would outlast the test
    error = _read(mode, server, sdk_flavor, slow, token=token)
    assert isinstance(error, StreamInterrupted), repr(error)
    assert len(_resumes(server)) <= 2
    assert _cancels(server) == [f"{RESPONSES_PATH}/{ID}/cancel"]


@pytest.mark.parametrize(
    ("header", "seconds"),
    [("1.5", 1.5), ("0", 0.0), ("120", 120.0), (None, None), ("soon", None), ("-3", None)],
)
def test_retry_after_reads_seconds_only(header: str | None, seconds: float | None) -> None:
    """A Retry-After of seconds is read as such; none, a date or nonsense is None (the back-off schedule applies)."""
    assert retry_after(header) == seconds


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (408, True),
        (429, True),
        (500, True),
        (503, True),
        (529, True),
        (400, False),
        (404, False),
        (200, False),
    ],
)
def test_which_refusals_may_pass(status: int, transient: bool) -> None:
    """Timeouts, rate limits and server errors may pass; anything else is final."""
    assert ResumeRefused("x", RuntimeError(), status).transient is transient


@pytest.mark.parametrize(("header", "limit", "at_least"), [(0.4, 5.0, 0.4), (120.0, 0.3, 0.3)])
@pytest.mark.parametrize("mode", MODES)
def test_a_resume_refused_with_retry_after_waits_that_long_within_its_limit(
    server: FaultServer,
    sdk_flavor: Flavor,
    mode: str,
    header: float,
    limit: float,
    at_least: float,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A 429 resume with Retry-After is sent again after that many seconds, a longer one cut to RETRY_AFTER_LIMIT (here lowered), never parking the caller for minutes."""
    monkeypatch.setattr(resuming, "RETRY_AFTER_LIMIT", limit)
    server.scenario = answered_in_turn(SILENT, replace(Scenario.error(429), retry_after=header))
    seen: list[Any] = []
    assert _read(mode, server, sdk_flavor, seen=seen) is None
    assert _numbers(seen) == EVERY_NUMBER
    first, second = _resumes(server)
    assert at_least * 0.95 <= second.time - first.time < at_least + 10.0


# --- a body that ends before its end event ------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_body_that_ends_cleanly_before_completed_is_resumed(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A body ended cleanly after its first output but before response.completed (a proxy's cut) is resumed after its last event: the caller reads every event once."""
    server.scenario = answered_in_turn(Scenario(end_after_events=7))
    seen: list[Any] = []
    assert _read(mode, server, sdk_flavor, seen=seen) is None
    assert _numbers(seen) == EVERY_NUMBER
    assert [_after(r) for r in _resumes(server)] == [6]


@pytest.mark.parametrize("mode", MODES)
def test_a_body_that_keeps_ending_early_ends_cleanly_once_resumes_are_spent(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stream whose every body ends early is resumed as often as allowed, then ends where it is, as a plain client's would, nothing raised and nothing repeated."""
    server.scenario = Scenario(end_after_events=1)  # each body: the next event only
    seen: list[Any] = []
    assert _read(mode, server, sdk_flavor, replace(POLICY, resumes=2), seen=seen) is None
    assert _numbers(seen) == [0, 1, 2]
    assert [_after(r) for r in _resumes(server)] == [0, 1]


# --- keepalives that take numbers of their own -----------------------------------------------

#: Thinks for longer than the first-event budget, keeping alive meanwhile; its keepalives
#: take numbers of their own (5, 6, ...), the kept events after them skip twenty.
NUMBERED = replace(Scenario.thinking(5.0, keepalive_interval=0.05), keepalive_numbers=20)


@pytest.mark.parametrize("mode", MODES)
def test_a_stall_after_numbered_keepalives_resumes_after_the_last_of_them(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stream that stalls before its first output while keepalives with numbers of their own arrive is resumed after the last keepalive's number: the caller sees the preamble, the keepalives and the rest, each once, in order."""
    server.scenario = answered_in_turn(NUMBERED)
    policy = replace(POLICY, first_event_timeout=0.5)
    seen: list[Any] = []
    assert _read(mode, server, sdk_flavor, policy, seen=seen) is None
    keepalives = [e.sequence_number for e in seen if e.type == "keepalive"]
    assert keepalives, "no keepalive came before the stall"
    assert keepalives == list(range(5, 5 + len(keepalives)))
    assert [_after(r) for r in _resumes(server)] == [keepalives[-1]]
    assert _numbers(seen) == [0, 1, 2, 3, 4, *range(25, 31)]
    assert seen[-1].type == "response.completed"


# --- a response nobody will read is cancelled ---------------------------------------------------


@pytest.mark.parametrize("why", ["resumes=0", "resume refused"])
@pytest.mark.parametrize("mode", MODES)
def test_a_response_given_up_before_the_caller_saw_it_is_cancelled(
    server: FaultServer, sdk_flavor: Flavor, mode: str, why: str
) -> None:
    """A background stream that stalls before its first output and is re-sent (resuming off, or its resume refused) has its first response cancelled: it would run on unread, since the caller never heard of it."""
    stall = Scenario.thinking(5.0)
    refused = why == "resume refused"
    server.scenario = (
        answered_in_turn(stall, Scenario.error(400)) if refused else answered_in_turn(stall)
    )
    policy = replace(POLICY, first_event_timeout=0.5, retries=1, resumes=int(refused))
    seen: list[Any] = []
    assert _read(mode, server, sdk_flavor, policy, seen=seen) is None
    assert seen[0].response.id != ID  # the re-sent request's response
    assert _cancels(server) == [f"{RESPONSES_PATH}/{ID}/cancel"]
    creations = [r for r in server.requests if r.path == RESPONSES_PATH]
    assert len(creations) == 2


@pytest.mark.parametrize("mode", MODES)
def test_a_response_the_server_does_not_know_is_not_cancelled(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stall before the first output whose resume was answered 404 is re-sent without a cancel: the server said it has no such response."""
    server.scenario = answered_in_turn(Scenario.thinking(5.0), Scenario.error(404))
    policy = replace(POLICY, first_event_timeout=0.5, retries=1, resumes=1)
    assert _read(mode, server, sdk_flavor, policy) is None
    assert _cancels(server) == []


@pytest.mark.parametrize("mode", MODES)
def test_a_final_stall_before_output_cancels_what_nobody_can_read(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stall before the first output with no re-send and no resume left fails with StreamStalled, and its response is cancelled."""
    server.scenario = Scenario.thinking(5.0)
    policy = replace(POLICY, first_event_timeout=0.5, retries=0, resumes=0)
    error = _read(mode, server, sdk_flavor, policy)
    cause = error.__cause__ if isinstance(error, openai.APIConnectionError) else error
    assert isinstance(cause, StreamStalled), repr(error)
    assert _cancels(server) == [f"{RESPONSES_PATH}/{ID}/cancel"]


@pytest.mark.parametrize("mode", MODES)
def test_a_stall_after_output_leaves_the_response_to_the_caller(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stall after the first output that could not be resumed is not cancelled: the caller has the response's id and may retrieve it."""
    server.scenario = SILENT
    error = _stall(_read(mode, server, sdk_flavor, replace(POLICY, resumes=0)))
    assert error.stage == "mid_stream"
    assert _cancels(server) == []
