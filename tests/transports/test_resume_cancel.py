"""An interrupt of a background Responses stream cancels its response on the server, once.

Each test reads ``client.responses.create(stream=True, background=True)``
through the real openai SDK (sync, and async on asyncio and trio) over a
watchdog client bound to an ``Interrupt`` on loopback. An interrupt once the
response id is known sends one ``POST /v1/responses/{id}/cancel`` with the
request's own credentials (sync: as the stream is closed, which the SDK does
as the error passes; async: on a task, by the time the client is closed);
without an id, with ``cancel_on_interrupt=False``, on a stream that is not
background, or on a stall after the first output, nothing is cancelled. A
cancel that never answers is given up after ``CANCEL_TIMEOUT`` seconds, and
the caller still gets ``StreamInterrupted``. (When the cancel goes out, and
on which thread: ``test_resume_cancel_order``.)
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._core.resume import CANCEL_TIMEOUT
from hermes_transport.testing import RESPONSES_PATH, FaultServer, RecordedRequest, Scenario

from _support import (
    OPENAI_MAJOR,
    SDK_FLAVORS,
    Flavor,
    assert_prompt,
    interrupt_when,
    read_responses,
)

API_KEY = "sk-resume-cancel"
REQUEST: dict[str, Any] = {"model": "m", "input": "hi"}
#: sync: openai.OpenAI; asyncio and trio: openai.AsyncOpenAI on that event loop.
# trio adds nothing an openai major changes: run with the newest major only.
MODES = ["sync", "asyncio", pytest.param("trio", marks=pytest.mark.once)]
#: Events of a background stream up to and with its first output (the " hello" delta, 5).
TO_FIRST_OUTPUT = 6
#: Budgets no test waits for: only an interrupt (or the stall tested) ends a stream.
PATIENT = StreamPolicy(stale_timeout=30.0, first_event_timeout=30.0, retries=2)
#: Far below PATIENT's budgets, far above an interrupt's milliseconds on a busy machine.
GENEROUS = 10.0
#: How long a call waits before it is interrupted, for the events before it to arrive
#: (on loopback, milliseconds: generous on a busy machine).
SETTLE = 0.4
#: Silent for longer than any test, keeping alive meanwhile: before the first output.
HOLDING = replace(Scenario.thinking(20.0, keepalive_interval=0.05), hold=30.0)


def _run(
    mode: str,
    base_url: str,
    flavor: Flavor,
    token: Interrupt,
    *,
    policy: StreamPolicy = PATIENT,
    background: bool = True,
    bound: bool = False,
    seen: list[Any] | None = None,
) -> BaseException | None:
    """Read one Responses stream to its end in ``mode`` (see ``read_responses``)."""
    body = {**REQUEST, "background": True} if background else REQUEST
    return read_responses(
        mode, base_url, flavor, body, API_KEY, policy, token, bound=bound, seen=seen
    )


def _interrupt(error: BaseException | None) -> StreamInterrupted:
    """The interrupt the caller got; openai 1.x wraps one raised before the response."""
    if isinstance(error, StreamInterrupted):
        return error
    assert OPENAI_MAJOR == 1, repr(error)
    assert isinstance(error, openai.APIConnectionError), repr(error)
    assert isinstance(error.__cause__, StreamInterrupted), repr(error)
    return error.__cause__


def _stall(error: BaseException | None) -> StreamStalled:
    """The stall the caller got; openai 3.x wraps one raised while iterating in its timeout."""
    if isinstance(error, openai.APITimeoutError):
        error = error.__cause__
    assert isinstance(error, StreamStalled), repr(error)
    return error


def _cancels(requests: list[RecordedRequest]) -> list[RecordedRequest]:
    return [r for r in requests if r.method == "POST" and r.path.endswith("/cancel")]


def _without_body(headers: dict[str, str]) -> dict[str, str]:
    """Request headers without those that describe a body (a cancel has none)."""
    return {k: v for k, v in headers.items() if k not in ("content-length", "content-type")}


def _has_output(seen: list[Any]) -> Callable[[], bool]:
    return lambda: len(seen) >= TO_FIRST_OUTPUT


def _resume_refusal(server: FaultServer, response_id: str) -> tuple[int, str]:
    """What a plain resume of ``response_id`` gets now: its status and text."""
    url = f"{server.base_url}/responses/{response_id}?stream=true&starting_after=5"
    answer = httpx.get(url, headers={"authorization": f"Bearer {API_KEY}"}, timeout=10.0)
    return answer.status_code, answer.text


# --- an interrupt once the id is known: one cancel --------------------------------------------


@pytest.mark.parametrize("variant", ["client-token", "bound-token", "gzip"])
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_after_the_first_output_cancels_the_response_once(
    server: FaultServer, sdk_flavor: Flavor, mode: str, variant: str
) -> None:
    """Interrupted while reading after its first output (token on the client or bound to the call; body plain or gzip), a background stream raises StreamInterrupted, and the server got one cancel with the caller's credentials: its response can no longer be resumed."""
    server.scenario = Scenario.silent_after(TO_FIRST_OUTPUT, gzip=variant == "gzip")
    token = Interrupt()
    seen: list[Any] = []
    when = interrupt_when(token, _has_output(seen))
    bound = variant == "bound-token"
    error = _run(mode, server.base_url, sdk_flavor, token, bound=bound, seen=seen)
    assert isinstance(error, StreamInterrupted), repr(error)
    assert time.monotonic() - when[0] < GENEROUS
    assert (error.reason, error.stage) == ("user pressed stop", "mid_stream")
    assert [event.sequence_number for event in seen] == list(range(TO_FIRST_OUTPUT))
    response_id = seen[0].response.id
    cancels = _cancels(server.requests)  # sent by the time the client was closed
    assert [r.path for r in cancels] == [f"{RESPONSES_PATH}/{response_id}/cancel"]
    assert cancels[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert _without_body(cancels[0].headers) == _without_body(server.requests[0].headers)
    assert cancels[0].body == b""
    assert len(server.requests) == 2, "something was resumed or re-sent"
    status, text = _resume_refusal(server, response_id)
    assert status == 400
    assert f"Response '{response_id}' was cancelled." in text


@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_while_the_model_thinks_cancels_the_response_once(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Interrupted after response.created but before any output (create() still holding the response), the call raises StreamInterrupted and one cancel is sent."""
    server.scenario = HOLDING
    token = Interrupt()
    when = interrupt_when(token, lambda: len(server.requests) == 1, delay=SETTLE)
    error = _interrupt(_run(mode, server.base_url, sdk_flavor, token))
    assert time.monotonic() - when[0] < GENEROUS
    assert (error.reason, error.stage) == ("user pressed stop", "first_event")
    cancels = _cancels(server.requests)
    assert [r.path for r in cancels] == [f"{RESPONSES_PATH}/resp_hermes0/cancel"]
    assert cancels[0].headers["authorization"] == f"Bearer {API_KEY}"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.parametrize("phase", ["mid_stream", "first_event"])
@pytest.mark.parametrize("mode", MODES)
def test_the_cancel_keeps_the_interrupted_caller_waiting_only_milliseconds(
    server: FaultServer, sdk_flavor: Flavor, mode: str, phase: str
) -> None:
    """With the cancel's round trip included, StreamInterrupted reaches the caller within a second of the interrupt."""
    seen: list[Any] = []
    if phase == "mid_stream":
        server.scenario, ready = Scenario.silent_after(TO_FIRST_OUTPUT), _has_output(seen)
    else:
        server.scenario, ready = HOLDING, lambda: len(server.requests) == 2
    scenario, server.scenario = server.scenario, Scenario()
    _run(mode, server.base_url, sdk_flavor, Interrupt())  # the SDK's first call is slow: untimed
    server.scenario = scenario
    token = Interrupt()
    when = interrupt_when(token, ready, delay=SETTLE)
    error = _interrupt(_run(mode, server.base_url, sdk_flavor, token, seen=seen))
    assert_prompt(when, error, phase)
    assert len(_cancels(server.requests)) == 1


# --- no cancel ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "stage"),
    [(Scenario.silent_before_headers(), "headers"), (Scenario.silent_after(0), "first_event")],
    ids=["before-headers", "before-any-event"],
)
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_before_the_response_is_named_cancels_nothing(
    server: FaultServer, sdk_flavor: Flavor, mode: str, scenario: Scenario, stage: str
) -> None:
    """Interrupted before response.created arrived, the call raises StreamInterrupted and sends nothing more: there is no id to cancel."""
    server.scenario = scenario
    token = Interrupt()
    when = interrupt_when(token, lambda: len(server.requests) == 1, delay=SETTLE)
    error = _interrupt(_run(mode, server.base_url, sdk_flavor, token))
    assert time.monotonic() - when[0] < GENEROUS
    assert error.stage == stage
    assert [(r.method, r.path) for r in server.requests] == [("POST", RESPONSES_PATH)]


@pytest.mark.parametrize("case", ["cancel_on_interrupt=False", "not-background"])
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_cancels_nothing_when_told_not_to_or_not_in_background(
    server: FaultServer, sdk_flavor: Flavor, mode: str, case: str
) -> None:
    """With StreamPolicy(cancel_on_interrupt=False), or on a stream created without background=True, an interrupt after the first output sends no cancel."""
    server.scenario = Scenario.silent_after(TO_FIRST_OUTPUT - (case == "not-background"))
    policy = replace(PATIENT, cancel_on_interrupt=case != "cancel_on_interrupt=False")
    token = Interrupt()
    seen: list[Any] = []
    ready = lambda: any(e.type == "response.output_text.delta" for e in seen)  # noqa: E731
    interrupt_when(token, ready)
    background = case != "not-background"
    error = _run(
        mode, server.base_url, sdk_flavor, token, policy=policy, background=background, seen=seen
    )
    assert isinstance(error, StreamInterrupted), repr(error)
    assert [(r.method, r.path) for r in server.requests] == [("POST", RESPONSES_PATH)]


@pytest.mark.parametrize("resumes", [0, 1])
@pytest.mark.parametrize("mode", MODES)
def test_a_stall_cancels_nothing(
    server: FaultServer, sdk_flavor: Flavor, mode: str, resumes: int
) -> None:
    """A background stream that stalls after its first output (a token bound, never fired) is resumed or fails with StreamStalled: it is never cancelled."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.silent_after(TO_FIRST_OUTPUT))
    policy = StreamPolicy(stale_timeout=0.5, first_event_timeout=10.0, resumes=resumes)
    token = Interrupt()
    seen: list[Any] = []
    error = _run(mode, server.base_url, sdk_flavor, token, policy=policy, seen=seen)
    if resumes:
        assert error is None
        assert seen[-1].type == "response.completed"
    else:
        assert _stall(error).stage == "mid_stream"
    assert not token.interrupted
    assert _cancels(server.requests) == []
    assert [r.method for r in server.requests] == ["POST", "GET"][: 1 + resumes]


# --- a cancel that never answers ---------------------------------------------------------------


@contextlib.contextmanager
def _cancel_never_answers(events: bytes) -> Iterator[tuple[str, list[str]]]:
    """A loopback Responses server: ``POST /v1/responses`` streams ``events``, then stalls;
    a cancel is read and never answered. Yields its base URL and the paths it was sent."""
    paths: list[str] = []
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            paths.append(self.path)
            self.close_connection = True
            if not self.path.endswith("/cancel"):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(events), events))
                self.wfile.flush()
            stop.wait(30.0)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", paths
    finally:
        stop.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _first_events(server: FaultServer, count: int) -> bytes:
    """The first ``count`` events of a healthy background stream of the fault server."""
    body = {**REQUEST, "stream": True, "background": True}
    with httpx.Client(timeout=10.0) as client:
        text = client.post(server.base_url + "/responses", json=body).content
    return b"".join(block + b"\n\n" for block in text.split(b"\n\n")[:count])


@pytest.mark.timing
@pytest.mark.once  # waits CANCEL_TIMEOUT: once is enough
# Each mode once and each flavor the SDK takes at least once: the other pairings would wait
# CANCEL_TIMEOUT again on the same code.
@pytest.mark.parametrize(
    ("mode", "sdk_flavor"),
    [("sync", SDK_FLAVORS[0]), ("asyncio", SDK_FLAVORS[-1]), ("trio", SDK_FLAVORS[0])],
    indirect=["sdk_flavor"],
    ids=str,
)
def test_a_cancel_that_never_answers_is_given_up_and_the_interrupt_still_raised(
    server: FaultServer, sdk_flavor: Flavor, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A server that never answers the cancel keeps the interrupted caller at most CANCEL_TIMEOUT seconds (and a little), and the caller gets StreamInterrupted, with the failure logged."""
    caplog.set_level(logging.WARNING, logger="hermes_transport")
    events = _first_events(server, TO_FIRST_OUTPUT)
    with _cancel_never_answers(events) as (base_url, paths):
        token = Interrupt()
        seen: list[Any] = []
        when = interrupt_when(token, _has_output(seen))
        error = _run(mode, base_url, sdk_flavor, token, seen=seen)
        waited = time.monotonic() - when[0]
    assert isinstance(error, StreamInterrupted), repr(error)
    assert paths == [RESPONSES_PATH, f"{RESPONSES_PATH}/resp_hermes0/cancel"]
    assert waited < CANCEL_TIMEOUT + 3.0, f"the caller waited {waited:.2f} s"
    logged = [r.getMessage() for r in caplog.records if r.name == "hermes_transport"]
    assert any(m.startswith("cancelling /v1/responses/resp_hermes0/cancel failed") for m in logged)
