"""Checkpoints of a background Responses stream, and going on from one in another call.

``ResumeCheckpoint`` as a value (JSON, pickle, its checks); the moments a stream gives
one, to a runner's ``on_checkpoint`` (``stream_response``, ``astream_response``) or to a
transport's with the raw SDK (``client.responses.create(background=True, stream=True)``
iterated): the first while the stream is held before its first output, then at most one
an interval as events pass, one at a resumed stall, at an interrupt and at a close by the
caller, none once the response is over, and never one naming an event the caller was not
done with; and ``resume_response`` / ``aresume_response`` from a checkpoint: the events
after it, the whole response, a finished one at once, a gone one, an interrupt, misuse.

The paced scenario sends its 15 events 50 ms apart: 0-4 the preamble (created, queued,
in progress, item and part added), 5-10 the text deltas, 11-13 the closing events and
14 ``response.completed``; with a 0.15 s interval, several intervals pass.
"""

from __future__ import annotations

import json
import logging
import math
import pickle
import pickletools
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent

from hermes_transport import (
    Interrupt,
    ResponseGone,
    ResumeCheckpoint,
    StreamInterrupted,
    StreamPolicy,
    aresume_response,
    astream_response,
    async_openai_client_for,
    openai_client_for,
    resume_response,
    stream_response,
)
from hermes_transport.testing import RESPONSES_PATH, FaultServer, Scenario

from _support import Flavor, interrupt_when, load_flavor, run_bounded

REQUEST: dict[str, Any] = {"model": "m", "input": "hi", "background": True}
#: The text of the paced stream: one delta event each, numbered 5 to 10.
CONTENT = ("a", "b", "c", "d", "e", "f")
#: The number of the paced stream's ``response.completed`` event, its last.
COMPLETED = 5 + len(CONTENT) + 3
#: A background stream whose events come 50 ms apart: over 0.7 s in all.
PACED = Scenario(content=CONTENT, event_interval=0.05)
#: The checkpoint interval of the paced runs: several pass while they stream.
INTERVAL = 0.15
#: How much earlier than its interval a checkpoint may seem to come, as timed here.
SLACK = 0.01
#: The id of the first response a fresh fault server creates.
RESPONSE_ID = "resp_hermes0"
#: sync: the sync runner, client or resume; async: the async ones, on asyncio.
MODES = ["sync", "async"]


def _policy(interval: float | None = INTERVAL, **more: Any) -> StreamPolicy:
    """A policy giving checkpoints every ``interval`` seconds, with budgets no loaded
    machine reaches unless ``more`` says otherwise."""
    budgets: dict[str, Any] = {"stale_timeout": 10.0, "first_event_timeout": 10.0}
    return StreamPolicy(checkpoint_interval=interval, **(budgets | more))


class Log:
    """What one call's callbacks saw: the number of each event once its ``on_event``
    returned, and each checkpoint with when it came and the number of the last event
    whose ``on_event`` had returned by then (``done``: -1 before any)."""

    def __init__(self, done: int = -1) -> None:
        self.done = done
        self.events: list[int] = []
        self.checkpoints: list[ResumeCheckpoint] = []
        self.times: list[float] = []
        self.done_at: list[int] = []

    def on_event(self, event: ResponseStreamEvent) -> None:
        self.events.append(event.sequence_number)
        self.done = event.sequence_number

    def on_checkpoint(self, checkpoint: ResumeCheckpoint) -> None:
        self.checkpoints.append(checkpoint)
        self.times.append(time.monotonic())
        self.done_at.append(self.done)

    @property
    def numbers(self) -> list[int]:
        return [checkpoint.sequence_number for checkpoint in self.checkpoints]

    def never_ahead(self) -> None:
        """No checkpoint named an event the caller was not done with when it came."""
        for checkpoint, done in zip(self.checkpoints, self.done_at, strict=True):
            assert checkpoint.sequence_number <= done, (checkpoint, done)


def _respond(
    mode: str,
    server: FaultServer,
    flavor: Flavor,
    log: Log,
    *,
    policy: StreamPolicy,
    on_checkpoint: Callable[[ResumeCheckpoint], object] | None = None,
    transport_checkpoint: Callable[[ResumeCheckpoint], object] | None = None,
    interrupt: Interrupt | None = None,
    **request: Any,
) -> Response:
    """One ``stream_response`` (sync) or ``astream_response`` (async) call of ``REQUEST``
    (updated by ``request``) with ``log``'s ``on_event``, on a factory client of ``flavor``
    whose transport has ``transport_checkpoint``, closed after it."""
    factory: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "x",
        "flavor": flavor.name,
        "policy": policy,
        "on_checkpoint": transport_checkpoint,
    }
    run: dict[str, Any] = {
        "on_event": log.on_event,
        "on_checkpoint": on_checkpoint,
        "interrupt": interrupt,
        **(REQUEST | request),
    }
    if mode == "sync":
        with openai_client_for("cron", **factory) as client:
            return stream_response(client, **run)

    async def main() -> Response:
        async with async_openai_client_for("cron", **factory) as client:
            return await astream_response(client, **run)

    return run_bounded(main)


def _raw(
    mode: str,
    server: FaultServer,
    flavor: Flavor,
    log: Log,
    *,
    policy: StreamPolicy,
    stop_after: int | None = None,
) -> None:
    """The raw SDK's ``client.responses.create(background=True, stream=True)`` iterated,
    each event given to ``log.on_event``, on an SDK client over the flavor's transport
    whose ``on_checkpoint`` is ``log``'s; closed by the caller right after the event
    numbered ``stop_after``, if any."""
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": "x", "max_retries": 0}
    if mode == "sync":
        transport = flavor.WatchdogTransport(policy=policy, on_checkpoint=log.on_checkpoint)
        with (
            openai.OpenAI(**options, http_client=flavor.http.Client(transport=transport)) as sdk,
            sdk.responses.create(stream=True, **REQUEST) as stream,
        ):
            for event in stream:
                log.on_event(event)
                if event.sequence_number == stop_after:
                    break
        return

    async def main() -> None:
        transport = flavor.AsyncWatchdogTransport(policy=policy, on_checkpoint=log.on_checkpoint)
        http_client = flavor.http.AsyncClient(transport=transport)
        async with (
            openai.AsyncOpenAI(**options, http_client=http_client) as sdk,
            await sdk.responses.create(stream=True, **REQUEST) as stream,
        ):
            async for event in stream:
                log.on_event(event)
                if event.sequence_number == stop_after:
                    break

    run_bounded(main)


def _resume(
    mode: str,
    server: FaultServer,
    flavor: Flavor,
    checkpoint: ResumeCheckpoint,
    *,
    on_event: Callable[[ResponseStreamEvent], None] | None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    transport_checkpoint: Callable[[ResumeCheckpoint], object] | None = None,
) -> Response:
    """``resume_response`` (sync) or ``aresume_response`` (async) of ``checkpoint`` on a
    fresh factory client of ``flavor``, closed after it."""
    factory: dict[str, Any] = {
        "base_url": server.base_url,
        "api_key": "x",
        "flavor": flavor.name,
        "policy": policy or _policy(),
        "on_checkpoint": transport_checkpoint,
    }
    if mode == "sync":
        with openai_client_for("cron", **factory) as client:
            return resume_response(client, checkpoint, on_event=on_event, interrupt=interrupt)

    async def main() -> Response:
        async with async_openai_client_for("cron", **factory) as client:
            return await aresume_response(
                client, checkpoint, on_event=on_event, interrupt=interrupt
            )

    return run_bounded(main)


def _requests(server: FaultServer, since: int = 0) -> list[tuple[str, str]]:
    """The method and path (with query) of each request the server got, from ``since``."""
    return [(request.method, request.path) for request in server.requests[since:]]


def _resume_of(path: str, response_id: str, after: int) -> None:
    """``path`` streams ``response_id`` again, after event ``after`` (all: -1)."""
    parts = urlsplit(path)
    assert parts.path == f"{RESPONSES_PATH}/{response_id}"
    expected = {"stream": ["true"]} | ({"starting_after": [str(after)]} if after >= 0 else {})
    assert parse_qs(parts.query) == expected


def _paced_intervals(log: Log) -> None:
    """The checkpoints of a whole paced stream: the first while it was held (-1, the caller
    had nothing yet), then at least two more, each an interval or more after the one
    before, naming ever later events, the last before ``response.completed``."""
    assert log.numbers[0] == -1
    assert log.done_at[0] == -1
    assert len(log.checkpoints) >= 3, log.numbers
    assert log.numbers == sorted(set(log.numbers)), log.numbers
    gaps = [later - earlier for earlier, later in zip(log.times, log.times[1:], strict=False)]
    assert min(gaps) >= INTERVAL - SLACK, gaps
    assert log.numbers[-1] < COMPLETED
    log.never_ahead()


# --- the value ---------------------------------------------------------------------------------

CHECKPOINT = ResumeCheckpoint("resp_abc", 7, "gpt-5", 1_700_000_000.0)


@pytest.mark.once
@pytest.mark.parametrize(
    "checkpoint", [CHECKPOINT, ResumeCheckpoint("resp_abc", -1)], ids=["full", "bare"]
)
def test_a_checkpoint_round_trips_through_json(checkpoint: ResumeCheckpoint) -> None:
    """to_json writes a JSON object of the four fields, which from_json (given str or bytes) reads back as an equal checkpoint."""
    text = checkpoint.to_json()
    assert json.loads(text) == {
        "response_id": checkpoint.response_id,
        "sequence_number": checkpoint.sequence_number,
        "model": checkpoint.model,
        "created_at": checkpoint.created_at,
    }
    assert ResumeCheckpoint.from_json(text) == checkpoint
    assert ResumeCheckpoint.from_json(text.encode()) == checkpoint
    assert ResumeCheckpoint.from_json('{"response_id": "r", "sequence_number": 0}') == (
        ResumeCheckpoint("r", 0, None, None)
    )


def _pickled_classes(data: bytes) -> list[str]:
    """The module and name of each class or function a pickle imports."""
    found: list[str] = []
    strings: list[str] = []
    for opcode, argument, _ in pickletools.genops(data):
        if opcode.name == "GLOBAL":
            found.append(str(argument).replace(" ", "."))
        elif opcode.name == "STACK_GLOBAL":
            found.append(".".join(strings[-2:]))
        if isinstance(argument, str):
            strings.append(argument)
    return found


@pytest.mark.once
@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_checkpoint_pickles_under_its_public_name(protocol: int) -> None:
    """A checkpoint pickles as hermes_transport.ResumeCheckpoint, not a private module's class, and unpickles equal."""
    data = pickle.dumps(CHECKPOINT, protocol=protocol)
    imported = _pickled_classes(data)
    assert "hermes_transport.ResumeCheckpoint" in imported
    assert not [name for name in imported if name.startswith("hermes_transport._")]
    assert pickle.loads(data) == CHECKPOINT


MALFORMED: list[tuple[dict[str, Any], str]] = [
    ({"response_id": "", "sequence_number": 0}, "response_id"),
    ({"response_id": None, "sequence_number": 0}, "response_id"),
    ({"response_id": "r", "sequence_number": -2}, "sequence_number"),
    ({"response_id": "r", "sequence_number": True}, "sequence_number"),
    ({"response_id": "r", "sequence_number": 1.0}, "sequence_number"),
    ({"response_id": "r", "sequence_number": 1, "model": 3}, "model"),
    ({"response_id": "r", "sequence_number": 1, "created_at": math.nan}, "created_at"),
    ({"response_id": "r", "sequence_number": 1, "created_at": math.inf}, "created_at"),
    ({"response_id": "r", "sequence_number": 1, "created_at": "1700000000"}, "created_at"),
]


@pytest.mark.once
@pytest.mark.parametrize(("fields", "name"), MALFORMED, ids=[repr(f) for f, _ in MALFORMED])
def test_a_malformed_checkpoint_is_refused_naming_the_field(
    fields: dict[str, Any], name: str
) -> None:
    """A checkpoint with an empty id, a number below -1 or not an int (a bool), a model not a str or a non-finite created_at is a ValueError naming the field."""
    with pytest.raises(ValueError, match=rf"ResumeCheckpoint\.{name} must be"):
        ResumeCheckpoint(**fields)
    with pytest.raises(ValueError, match=rf"ResumeCheckpoint\.{name} must be"):
        ResumeCheckpoint.from_json(json.dumps(fields))


NOT_CHECKPOINTS: list[tuple[str | bytes, str]] = [
    ("not json", "not JSON"),
    (b"\xff\xfe{", "not JSON"),
    ("", "not JSON"),
    ("[1, 2]", "expected a JSON object, got list"),
    ('"resp_abc"', "expected a JSON object, got str"),
    ('{"response_id": "r", "sequence_number": 1, "step": 2}', r"unknown field\(s\) step"),
    ('{"response_id": "r"}', r"missing field\(s\) sequence_number"),
    ('{"sequence_number": 1}', r"missing field\(s\) response_id"),
]


@pytest.mark.once
@pytest.mark.parametrize(("text", "said"), NOT_CHECKPOINTS)
def test_from_json_refuses_what_to_json_did_not_write(text: str | bytes, said: str) -> None:
    """from_json says what is wrong with text that is not JSON, not an object, or has a field unknown or missing, as a ValueError."""
    with pytest.raises(ValueError, match=rf"^ResumeCheckpoint\.from_json: .*{said}"):
        ResumeCheckpoint.from_json(text)


# --- when checkpoints come ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_runner_gets_a_first_checkpoint_while_held_then_one_an_interval(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """The runner's on_checkpoint gets the first checkpoint (-1) before any event reached on_event, then at most one an interval, naming only events on_event was done with, none after response.completed."""
    server.scenario = PACED
    log = Log()
    response = _respond(
        mode, server, sdk_flavor, log, policy=_policy(), on_checkpoint=log.on_checkpoint
    )
    assert response.status == "completed"
    assert log.events == list(range(COMPLETED + 1))
    assert log.checkpoints[0] == ResumeCheckpoint(response.id, -1, "m", response.created_at)
    assert {(c.response_id, c.model, c.created_at) for c in log.checkpoints} == {
        (response.id, "m", response.created_at)
    }
    _paced_intervals(log)


@pytest.mark.parametrize("mode", MODES)
def test_the_raw_sdk_gets_the_same_checkpoints_from_the_transports_on_checkpoint(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Iterating client.responses.create(background=True, stream=True) over a WatchdogTransport with on_checkpoint gives the first checkpoint while held, then at most one an interval, none after the end."""
    server.scenario = PACED
    log = Log()
    _raw(mode, server, sdk_flavor, log, policy=_policy())
    assert log.events == list(range(COMPLETED + 1))
    assert {c.response_id for c in log.checkpoints} == {RESPONSE_ID}
    _paced_intervals(log)


@pytest.mark.timing  # events 50 ms apart come one a read only when the reader keeps up
@pytest.mark.parametrize("mode", MODES)
def test_no_checkpoint_names_the_completed_event_even_at_every_read(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """With an interval shorter than the events' pace a checkpoint comes at each read, and still none names response.completed, nor comes at the close of the completed stream."""
    server.scenario = PACED
    log = Log()
    _respond(mode, server, sdk_flavor, log, policy=_policy(0.001), on_checkpoint=log.on_checkpoint)
    assert log.events == list(range(COMPLETED + 1))
    assert log.numbers[0] == -1
    assert log.numbers[-1] == COMPLETED - 1  # at the read that brought the last event
    assert len(log.checkpoints) >= COMPLETED // 2  # after the hold: about one a read
    log.never_ahead()


@pytest.mark.parametrize("interval", [INTERVAL, None], ids=["interval", "no-interval"])
@pytest.mark.parametrize("mode", MODES)
def test_a_close_by_the_caller_mid_stream_gives_a_last_checkpoint(
    server: FaultServer, sdk_flavor: Flavor, mode: str, interval: float | None
) -> None:
    """Closed by the caller after event 7 (read alone), the raw SDK's stream gives a last checkpoint at 6, the last event the caller had finished with when it asked for more (the transport cannot know it finished 7); with no interval only the first one (-1) came before it."""
    server.scenario = PACED
    log = Log()
    _raw(mode, server, sdk_flavor, log, policy=_policy(interval), stop_after=7)
    assert log.events == list(range(8))
    created_at = log.checkpoints[0].created_at
    assert isinstance(created_at, float)
    assert log.checkpoints[-1] == ResumeCheckpoint(RESPONSE_ID, 6, "m", created_at)
    if interval is None:
        assert log.numbers == [-1, 6]
    else:
        assert log.numbers[0] == -1
        assert log.numbers == sorted(log.numbers)
    log.never_ahead()


@pytest.mark.parametrize("mode", MODES)
def test_a_close_by_the_caller_mid_chunk_names_only_the_events_it_had(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Closed by the caller after event 6 while the events after it were already read in the same chunk, the stream's last checkpoint names no event after 6: none the caller never got."""
    server.scenario = Scenario(content=CONTENT, write_size=1200)  # a few events a write
    log = Log()
    _raw(mode, server, sdk_flavor, log, policy=_policy(None), stop_after=6)
    assert log.events == list(range(7))
    assert -1 <= log.numbers[-1] <= 6
    log.never_ahead()


@pytest.mark.parametrize("mode", MODES)
def test_a_resumed_stall_gives_a_checkpoint(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A stream that stalls after event 7 and is resumed gives a checkpoint at 7 as the resume is decided, and with no interval no other after the first."""
    stall = Scenario(content=CONTENT, stall_after_events=8)
    server.scenario = Scenario.stall_first(1, stall=stall, then=Scenario(content=CONTENT))
    log = Log()
    policy = _policy(None, stale_timeout=1.0)
    response = _respond(
        mode, server, sdk_flavor, log, policy=policy, on_checkpoint=log.on_checkpoint
    )
    assert response.status == "completed"
    assert log.events == list(range(COMPLETED + 1))
    assert log.numbers == [-1, 7]
    assert log.done_at == [-1, 7]
    assert log.checkpoints[1] == ResumeCheckpoint(response.id, 7, "m", response.created_at)
    requests = _requests(server)
    assert [method for method, _ in requests] == ["POST", "GET"]
    _resume_of(requests[1][1], response.id, 7)


@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_gives_a_checkpoint(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Interrupted while it waits after event 7, a stream gives a checkpoint at 7, and with no interval no other after the first."""
    server.scenario = Scenario(content=CONTENT, stall_after_events=8)
    log = Log()
    token = Interrupt()
    interrupt_when(token, lambda: len(log.events) == 8)
    with pytest.raises(StreamInterrupted):
        _respond(
            mode,
            server,
            sdk_flavor,
            log,
            policy=_policy(None),
            on_checkpoint=log.on_checkpoint,
            interrupt=token,
        )
    assert log.events == list(range(8))
    assert log.numbers == [-1, 7]
    assert log.done_at == [-1, 7]
    assert log.checkpoints[1].response_id == RESPONSE_ID


@pytest.mark.parametrize("mode", MODES)
def test_a_raising_on_checkpoint_is_logged_and_the_stream_completes(
    server: FaultServer, sdk_flavor: Flavor, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An on_checkpoint that raises is logged with its error, each time, and the stream goes on to its whole response."""
    server.scenario = PACED
    calls: list[ResumeCheckpoint] = []

    def broken(checkpoint: ResumeCheckpoint) -> None:
        calls.append(checkpoint)
        raise RuntimeError("the disk is full")

    log = Log()
    with caplog.at_level(logging.ERROR, logger="hermes_transport"):
        response = _respond(mode, server, sdk_flavor, log, policy=_policy(), on_checkpoint=broken)
    assert response.status == "completed"
    assert response.output_text == "".join(CONTENT)
    assert log.events == list(range(COMPLETED + 1))
    logged = [r for r in caplog.records if "checkpoint callback" in r.getMessage()]
    assert len(calls) >= 2
    assert len(logged) == len(calls)
    for record in logged:
        assert record.name == "hermes_transport"
        assert record.levelno == logging.ERROR
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], RuntimeError)


@pytest.mark.parametrize("mode", MODES)
def test_a_stream_not_in_background_gives_no_checkpoints(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A Responses stream created without background=True gives no checkpoint, to the runner's on_checkpoint nor the transport's."""
    server.scenario = PACED
    log, transport = Log(), Log()
    response = _respond(
        mode,
        server,
        sdk_flavor,
        log,
        policy=_policy(0.001),
        on_checkpoint=log.on_checkpoint,
        transport_checkpoint=transport.on_checkpoint,
        background=False,
    )
    assert response.status == "completed"
    assert len(log.events) == COMPLETED  # no response.queued
    assert log.checkpoints == []
    assert transport.checkpoints == []


@pytest.mark.parametrize("mode", MODES)
def test_the_runners_on_checkpoint_wins_over_the_transports(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """Given to the runner, on_checkpoint gets the call's checkpoints and the transport's own is not called; without it, the transport's gets them."""
    server.scenario = PACED
    runner, transport = Log(), Log()
    _respond(
        mode,
        server,
        sdk_flavor,
        runner,
        policy=_policy(),
        on_checkpoint=runner.on_checkpoint,
        transport_checkpoint=transport.on_checkpoint,
    )
    assert runner.numbers[0] == -1
    assert transport.checkpoints == []
    alone = Log()  # the transport's on_checkpoint, and nothing given to the runner
    _respond(
        mode, server, sdk_flavor, alone, policy=_policy(), transport_checkpoint=alone.on_checkpoint
    )
    assert {c.response_id for c in alone.checkpoints} == {"resp_hermes1"}
    _paced_intervals(alone)


# --- resume_response ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["first", "last"])
@pytest.mark.parametrize("mode", MODES)
def test_resume_response_from_a_checkpoint_gives_the_events_after_it_and_the_whole_response(
    server: FaultServer, sdk_flavor: Flavor, mode: str, which: str
) -> None:
    """From a stream's first (-1) or last checkpoint, read back from JSON, resume_response gives on_event exactly the events after it and returns the response the uninterrupted stream did."""
    server.scenario = PACED
    log = Log()
    whole = _respond(
        mode, server, sdk_flavor, log, policy=_policy(), on_checkpoint=log.on_checkpoint
    )
    checkpoint = log.checkpoints[0 if which == "first" else -1]
    after = checkpoint.sequence_number
    assert (after == -1) if which == "first" else (4 < after < COMPLETED)
    stored = ResumeCheckpoint.from_json(checkpoint.to_json())
    sent = len(server.requests)
    resumed_log = Log(done=after)
    resumed = _resume(
        mode,
        server,
        sdk_flavor,
        stored,
        on_event=resumed_log.on_event,
        transport_checkpoint=resumed_log.on_checkpoint,
    )
    assert type(resumed) is Response
    assert resumed_log.events == list(range(after + 1, COMPLETED + 1))
    assert resumed.to_dict() == whole.to_dict()
    requests = _requests(server, sent)
    assert requests[0] == ("GET", f"{RESPONSES_PATH}/{whole.id}")
    assert len(requests) == 2
    _resume_of(requests[1][1], whole.id, after)
    # The transport's checkpoints of the resumed stream: never behind the one resumed from.
    assert all(after <= number < COMPLETED for number in resumed_log.numbers)
    resumed_log.never_ahead()


@pytest.mark.parametrize("mode", MODES)
def test_resume_response_of_a_finished_response_without_on_event_returns_it_at_once(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """A checkpoint of a response that is over, resumed with no on_event, returns the response as the server keeps it, after one request: the retrieve."""
    whole = _respond(mode, server, sdk_flavor, Log(), policy=_policy())
    sent = len(server.requests)
    checkpoint = ResumeCheckpoint(whole.id, 5, "m", whole.created_at)
    resumed = _resume(mode, server, sdk_flavor, checkpoint, on_event=None)
    assert type(resumed) is Response
    assert resumed.to_dict() == whole.to_dict()
    assert _requests(server, sent) == [("GET", f"{RESPONSES_PATH}/{whole.id}")]


@pytest.mark.parametrize("with_events", [False, True], ids=["no-on_event", "on_event"])
@pytest.mark.parametrize("mode", MODES)
def test_resume_response_of_a_gone_response_raises_response_gone(
    server: FaultServer, sdk_flavor: Flavor, mode: str, with_events: bool
) -> None:
    """A checkpoint of a response the server does not have raises ResponseGone naming its id, the SDK's NotFoundError as its cause."""
    log = Log()
    with pytest.raises(ResponseGone) as info:
        _resume(
            mode,
            server,
            sdk_flavor,
            ResumeCheckpoint("resp_gone", 3, "m"),
            on_event=log.on_event if with_events else None,
        )
    assert info.value.response_id == "resp_gone"
    assert "'resp_gone'" in str(info.value)
    assert isinstance(info.value, LookupError)
    assert isinstance(info.value.__cause__, openai.NotFoundError)
    assert log.events == []
    assert _requests(server) == [("GET", f"{RESPONSES_PATH}/resp_gone")]


@pytest.mark.parametrize("cancel", [True, False], ids=["cancel", "no-cancel"])
@pytest.mark.parametrize("mode", MODES)
def test_an_interrupt_during_resume_response_raises_and_cancels_the_response(
    server: FaultServer, sdk_flavor: Flavor, mode: str, cancel: bool
) -> None:
    """Interrupted while the resumed stream waits after two events, resume_response raises StreamInterrupted and cancels the response on the server, unless cancel_on_interrupt=False."""
    whole = _respond(mode, server, sdk_flavor, Log(), policy=_policy())
    server.scenario = Scenario.silent_after(2)  # the resume: events 6 and 7, then nothing
    sent = len(server.requests)
    log = Log()
    token = Interrupt()
    interrupt_when(token, lambda: len(log.events) == 2)
    policy = _policy(stale_timeout=30.0, cancel_on_interrupt=cancel)
    with pytest.raises(StreamInterrupted) as info:
        _resume(
            mode,
            server,
            sdk_flavor,
            ResumeCheckpoint(whole.id, 5, "m"),
            on_event=log.on_event,
            policy=policy,
            interrupt=token,
        )
    assert info.value.reason == "user pressed stop"
    assert log.events == [6, 7]
    deadline = time.monotonic() + 2.0  # async sends the cancel after raising
    while cancel and len(server.requests) < sent + 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.1)  # and nothing comes after it
    requests = _requests(server, sent)
    assert requests[0] == ("GET", f"{RESPONSES_PATH}/{whole.id}")
    _resume_of(requests[1][1], whole.id, 5)
    cancels = [("POST", f"{RESPONSES_PATH}/{whole.id}/cancel")] if cancel else []
    assert requests[2:] == cancels


@pytest.mark.once
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "given", [CHECKPOINT.to_json(), {"response_id": "resp_abc", "sequence_number": 7}, None]
)
def test_resume_response_refuses_what_is_not_a_checkpoint(
    server: FaultServer, mode: str, given: object
) -> None:
    """resume_response and aresume_response given anything but a ResumeCheckpoint (its JSON, a dict) raise TypeError, sending nothing."""
    checkpoint: Any = given
    with pytest.raises(TypeError, match="checkpoint must be a ResumeCheckpoint"):
        _resume(mode, server, load_flavor("httpx"), checkpoint, on_event=None)
    assert server.requests == []


@pytest.mark.once
def test_resume_response_refuses_an_async_client_naming_aresume_response(
    server: FaultServer,
) -> None:
    """resume_response given an openai.AsyncOpenAI raises TypeError pointing to aresume_response, sending nothing."""

    async def main() -> None:
        async with async_openai_client_for(
            "cron", base_url=server.base_url, api_key="x"
        ) as client:
            wrong: Any = client
            with pytest.raises(TypeError, match=r"aresume_response\(\)"):
                resume_response(wrong, CHECKPOINT)

    run_bounded(main)
    assert server.requests == []


@pytest.mark.once
def test_aresume_response_refuses_a_sync_client_naming_resume_response(
    server: FaultServer,
) -> None:
    """aresume_response given an openai.OpenAI raises TypeError pointing to resume_response, sending nothing."""
    with openai_client_for("cron", base_url=server.base_url, api_key="x") as client:
        wrong: Any = client
        with pytest.raises(TypeError, match=r"use resume_response\(\)"):
            run_bounded(lambda: aresume_response(wrong, CHECKPOINT))
    assert server.requests == []
