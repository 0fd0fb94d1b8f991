"""The turns of a watched Responses WebSocket, judged frame by frame without a socket."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from hermes_transport import StreamPolicy, StreamStats
from hermes_transport._core.guard import Guard
from hermes_transport._core.ws_ends import NO_RECONNECT
from hermes_transport._core.ws_turns import HOLD_LIMIT, TurnWatch, create_of

pytestmark = pytest.mark.once

POLICY = StreamPolicy(stale_timeout=1.0, first_event_timeout=2.0, retries=1, budget_rules=None)
REQUEST = httpx.Request("WEBSOCKET", "ws://127.0.0.1:1/v1/responses")


def frame(kind: str, n: int = 0, **fields: Any) -> bytes:
    return json.dumps({"type": kind, "sequence_number": n, **fields}).encode()


CREATED = frame("response.created", 0, response={"id": "resp_1", "status": "in_progress"})
DELTA = frame("response.output_text.delta", 5, delta="hi")
DONE = frame("response.completed", 9, response={"id": "resp_1"})


def watch(stats: list[StreamStats] | None = None) -> tuple[TurnWatch, Guard, list[Guard]]:
    armed: list[Guard] = []
    turns = TurnWatch(POLICY, REQUEST, None if stats is None else stats.append)
    guard = Guard("between_turns")
    return turns, guard, armed


def opened(turns: TurnWatch, guard: Guard, armed: list[Guard], **create: Any) -> None:
    turns.open({"type": "response.create", "model": "m", **create})
    turns.watch(guard, armed.append)


@pytest.mark.parametrize(
    ("event", "expected"),
    [
        ({"type": "response.create"}, True),
        ({"type": "response.steer"}, False),
        ({}, False),
        ("text", False),
    ],
)
def test_a_create_is_known_by_its_type(event: object, expected: bool) -> None:
    """Only a response.create starts a turn, as a mapping or the SDK's model."""
    assert create_of(event) is expected


def test_a_turn_gets_the_first_event_budget_then_the_stale_one() -> None:
    """From the create the guard has the first-event budget; the first output moves it to
    the stale budget (armed again, it may be earlier); the end clears it."""
    stats: list[StreamStats] = []
    turns, guard, armed = watch(stats)
    opened(turns, guard, armed)
    assert (guard.stage, len(armed)) == ("first_event", 1)
    assert guard.deadline is not None
    first = guard.deadline
    assert turns.judge(CREATED) == "hold"
    assert guard.deadline == first  # a lifecycle event is no progress
    assert turns.judge(frame("keepalive", 1)) == "hold"
    assert turns.judge(DELTA) == "release"  # what was held goes first
    assert (guard.stage, len(armed)) == ("mid_stream", 2)
    assert guard.deadline < first
    assert turns.release(DELTA) == [CREATED, frame("keepalive", 1), DELTA]
    assert turns.judge(DONE) == "end"
    assert turns.turn is None
    assert [(s.outcome, s.events, s.heartbeats) for s in stats] == [("completed", 2, 1)]
    assert stats[0].transport == "websocket"


@pytest.mark.parametrize(
    ("error", "verdict"),
    [
        pytest.param(frame("error", 1, error={"code": "server_error"}), "resend", id="transient"),
        pytest.param(frame("error", 1, error={"code": "invalid_prompt"}), "end", id="other"),
    ],
)
def test_an_error_before_output_is_re_sent_only_when_transient(error: bytes, verdict: str) -> None:
    """A transient error event before output asks for a re-send (the held frames dropped);
    any other ends the turn as an error, its frames handed up."""
    stats: list[StreamStats] = []
    turns, guard, armed = watch(stats)
    opened(turns, guard, armed)
    turns.judge(CREATED)
    assert turns.judge(error) == verdict
    if verdict == "resend":
        turns.resent()
        assert turns.held == []
        assert turns.turn is not None
        assert turns.turn.attempt == 2
    else:
        assert turns.release(error) == [CREATED, error]
        assert stats[0].outcome == "error"


def test_creates_sent_during_a_turn_wait_their_turn() -> None:
    """A second create sent while a turn is under way starts when the first ends."""
    turns, guard, armed = watch()
    opened(turns, guard, armed, input="one")
    second = turns.open({"type": "response.create", "input": "two"})
    assert turns.turn is not None
    assert turns.turn is not second
    turns.judge(DELTA)
    turns.judge(DONE)
    assert turns.turn is second


@pytest.mark.parametrize(
    ("create", "outputs", "can_reopen", "plan"),
    [
        ({}, 0, True, ("resend", "")),
        ({}, 0, False, ("raise", NO_RECONNECT)),
        ({"previous_response_id": "r", "store": False}, 0, True, ("raise", "chained")),
        ({"previous_response_id": "r"}, 0, True, ("resend", "")),
        ({}, 1, True, ("raise", "")),
        ({"background": True}, 1, True, ("resume", "")),
        ({"background": True}, 0, True, ("resume", "")),
    ],
)
def test_what_happens_to_a_turn_whose_connection_died(
    create: dict[str, Any], outputs: int, can_reopen: bool, plan: tuple[str, str]
) -> None:
    """Before output a turn is sent again if a fresh connection can carry it; after output
    only a background turn (its id known) goes on, resumed."""
    turns, guard, armed = watch()
    opened(turns, guard, armed, **create)
    turns.judge(CREATED)
    for _ in range(outputs):
        turns.judge(DELTA)
    action, note = turns.plan(can_reopen)
    assert action == plan[0]
    assert plan[1] in note


def test_a_turn_out_of_re_sends_is_raised() -> None:
    """A turn sent as many times as the policy allows is not sent again."""
    turns, guard, armed = watch()
    opened(turns, guard, armed)
    turns.resent()
    assert turns.plan(True) == ("raise", "")


def test_a_hold_past_its_limit_is_handed_up_in_order_and_never_re_sent() -> None:
    """Frames before the first output beyond the hold limit are handed up, those held
    first; the turn can then no longer be sent again."""
    turns, guard, armed = watch()
    opened(turns, guard, armed)
    first = frame("keepalive", 1, padding="x" * (HOLD_LIMIT // 2))
    second = frame("keepalive", 2, padding="y" * (HOLD_LIMIT // 2))
    assert turns.judge(first) == "hold"
    assert turns.judge(second) == "release"
    assert turns.release(second) == [first, second]
    assert turns.judge(frame("keepalive", 3)) == "pass"
    assert turns.plan(True)[0] == "raise"


def test_steering_events_are_no_output() -> None:
    """The WebSocket's steering acknowledgements are lifecycle events: held, no progress."""
    turns, guard, armed = watch()
    opened(turns, guard, armed)
    assert turns.judge(frame("response.steer.accepted", 1)) == "hold"
    assert guard.stage == "first_event"


def test_a_re_sent_turn_goes_behind_those_sent_after_it() -> None:
    """Sent again on the same connection, a turn is answered after the creates already
    sent behind it: the next of those is current, the re-sent one last."""
    turns, guard, armed = watch()
    opened(turns, guard, armed, input="one")
    second = turns.open({"type": "response.create", "input": "two"})
    first = turns.turn
    assert turns.requeue() is first
    assert turns.turn is second
    assert turns.waiting == [first]
    assert first is not None
    assert first.attempt == 2


@pytest.mark.parametrize(
    ("stage", "words"),
    [("first_event", "no output within 2 s"), ("mid_stream", "for 1 s after 1")],
)
def test_a_stall_names_its_stage_budget_and_attempt(stage: str, words: str) -> None:
    """The stall a cut turn raises says where it was, its budget and what came."""
    turns, guard, armed = watch()
    opened(turns, guard, armed)
    turns.judge(CREATED)
    if stage == "mid_stream":
        turns.judge(DELTA)
    guard.expire()
    error = turns.stalled(guard)
    assert error.stage == stage
    assert words in str(error)
    assert error.attempts == 1
    assert error.request is REQUEST
