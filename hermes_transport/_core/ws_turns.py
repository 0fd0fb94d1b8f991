"""The turns of one watched Responses WebSocket: what each frame means to the watch.

``TurnWatch`` is owned by whoever reads the connection (the watched connections in
``_sdk.websocket`` and ``_sdk.awebsocket``: one thread or task at a time). A turn opens
when a ``response.create`` is sent (``open``; one sent while a turn is under way waits
its turn, as the server answers them in order) and ends at its end or error event. Each
frame read is judged with the Responses wire's event classes (``wires``): a turn's guard
gets the first-event budget from its create to its first output and the stale budget
between outputs; keepalives and lifecycle events are not progress; between turns the
connection has no deadline at all. Each turn ends with its statistics (a
``StreamRecord`` with ``transport="websocket"``), and ``stalled`` builds the error a cut
turn raises. Pure: the connection's I/O, its guards and their watchdog are the shell's.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Literal

import httpx

from .attempt import Arm
from .body import HOLD_LIMIT
from .call_budgets import CallBudgets
from .clock import monotonic
from .errors import StreamInterrupted, StreamStalled
from .guard import Guard
from .policy import StreamPolicy
from .stats import Outcome, StatsCallback, StreamRecord, ending_of
from .wires import ErrorEvent, classify, response_id
from .ws_ends import Plan, plan_for, stall_of
from .ws_frames import (
    DELTAS,
    STEER_TYPES,
    create_of,
    field_of,
    frame_type,
    sequence_of,
    size_of,
    special_types,
)

__all__ = [
    "HOLD_LIMIT",
    "FrameVerdict",
    "Turn",
    "TurnWatch",
    "create_of",
]

#: What a frame means to its reader: hand it up (``pass``), hand it up and the turn is
#: over (``end``), keep it until the turn's first output (``hold``: what came before it
#: is handed up only if the turn is not sent again, so that the caller sees one answer),
#: hand up what was held and then it (``release``: the first output), or drop it and send
#: the turn's create again (``resend``: a transient error before any output, with a
#: re-send left). ``end`` also follows what was held, if anything was.
FrameVerdict = Literal["pass", "end", "hold", "release", "resend"]

logger = logging.getLogger("hermes_transport")


class Turn:
    """One ``response.create`` and the events that answer it."""

    __slots__ = (
        "attempt",
        "background",
        "budgets",
        "event",
        "heartbeats",
        "others",
        "outputs",
        "record",
        "response_id",
        "sequence",
        "shown",
        "started",
        "steady",
        "survives_reconnect",
    )

    def __init__(self, event: object, budgets: CallBudgets, record: StreamRecord) -> None:
        self.event = event  # as the caller gave it: sent again as it is
        self.budgets = budgets
        self.record = record
        self.background = field_of(event, "background") is True
        # A create chained to a response that only the connection kept (store=false) cannot
        # be sent on another connection: the new one does not know that response.
        chained = field_of(event, "previous_response_id") is not None
        self.survives_reconnect = not (chained and field_of(event, "store") is False)
        self.attempt = 1
        self.started = monotonic()  # of the attempt: when its create was sent
        self.outputs = self.heartbeats = self.others = 0
        self.response_id: str | None = None
        self.sequence = -1  # the last event's sequence_number (background turns only)
        # Past its first output, with the guard armed on a stale budget and nothing to
        # track: an output frame only moves the deadline (``TurnWatch.judge``'s hot path).
        self.steady = False
        # Something of it was handed up (held frames past the hold's limit): not sent again.
        self.shown = False


class TurnWatch:
    """The turn state of one watched connection; see the module docstring for its owner."""

    def __init__(
        self, policy: StreamPolicy, request: httpx.Request, on_stats: StatsCallback | None
    ) -> None:
        self.policy = policy
        self.request = request  # what errors and statistics name: the handshake's URL
        self._on_stats = on_stats
        self._heartbeats = frozenset(name.encode() for name in policy.heartbeats_for("responses"))
        # The types ``classify`` must look at; any other is output.
        self._special = special_types(self._heartbeats)
        # ``turn`` and ``_waiting`` change under ``_lock``: a sender on another thread
        # opens turns while the reader ends them.
        self._lock = threading.Lock()
        self.turn: Turn | None = None
        self._waiting: deque[Turn] = deque()  # creates sent while a turn was under way
        self.guard: Guard | None = None  # the current turn's (the shell's to replace)
        self._arm: Arm | None = None
        self.held: list[bytes] = []  # the current turn's frames before its first output
        self._held_size = 0

    def open(self, event: object) -> Turn:
        """A ``response.create`` was sent: a turn, current unless one is under way."""
        model = field_of(event, "model")
        budgets = self.policy.budgets_for(
            model if isinstance(model, str) else None, size_of(event)
        )
        record = StreamRecord(self.request, "responses", budgets, self._on_stats)
        record.transport = "websocket"
        record.new_attempt()
        turn = Turn(event, budgets, record)
        with self._lock:
            if self.turn is None:
                self.turn = turn
            else:
                self._waiting.append(turn)
        return turn

    @property
    def waiting(self) -> list[Turn]:
        """The turns sent behind the current one, in order."""
        with self._lock:
            return list(self._waiting)

    def requeue(self) -> Turn:
        """The current turn is sent again behind those already sent (the server answers
        them first); the next one, if any, is current now. Returns the re-sent turn."""
        turn = self.resent()
        with self._lock:
            if self._waiting:
                self._waiting.append(turn)
                self.turn = self._waiting.popleft()
                self.turn.started = monotonic()
        return turn

    def watch(self, guard: Guard, arm: Arm) -> None:
        """Give the current turn's budget to ``guard`` (the turn's own), armed with ``arm``."""
        turn = self.turn
        assert turn is not None
        self.guard, self._arm = guard, arm
        now = monotonic()
        if turn.outputs:
            self._mid_stream(turn, guard, now)
        else:
            guard.stage = "first_event"
            first = turn.budgets.first_event
            guard.deadline = None if first is None else turn.started + first
        if guard.deadline is not None:
            arm(guard)

    def judge(self, data: bytes) -> FrameVerdict:
        """The per-frame step: the frame's class, and the turn's deadline moved on output."""
        turn = self.turn
        if turn is None:
            return "pass"  # between turns (an answer to something else than a create)
        record = turn.record
        record.bytes += len(data)
        if data.startswith(DELTAS):  # most frames: one C call says output
            guard = self.guard
            if turn.steady and guard is not None:  # the hot path: clock, gap, deadline
                now = monotonic()
                turn.outputs += 1
                record.gaps.add(now)
                guard.deadline = now + turn.budgets.stale  # type: ignore[operator]
                return "pass"
            return self._output(turn, record, data)
        kind = frame_type(data)
        if kind not in self._special:  # output, whatever its data
            return self._output(turn, record, data)
        verdict = (
            "preamble"
            if kind in STEER_TYPES
            else classify("responses", kind, data, self._heartbeats)
        )
        if verdict == "output":
            return self._output(turn, record, data)
        turn.record.saw_event()
        if turn.background:
            turn.sequence = sequence_of(data, turn.sequence)
        if verdict == "heartbeat":
            turn.heartbeats += 1
            return self._hold(turn, data)
        if verdict == "preamble":
            turn.others += 1
            if turn.response_id is None:
                turn.response_id = response_id(data)
            return self._hold(turn, data)
        if verdict == "end":
            turn.outputs += 1
            self.end("completed", held=True)
            return "end"
        assert isinstance(verdict, ErrorEvent)
        if not turn.outputs and verdict.transient and turn.attempt <= self.policy.retries:
            return "resend"
        self.end("error", None, str(verdict), held=True)
        return "end"

    def _output(self, turn: Turn, record: StreamRecord, data: bytes) -> FrameVerdict:
        """An output frame: the gap summed up, the stale deadline moved (one clock read)."""
        now = monotonic()
        turn.outputs += 1
        record.gaps.add(now)
        if turn.background:
            turn.sequence = sequence_of(data, turn.sequence)
        guard = self.guard
        if guard is None:
            return "pass"
        if turn.outputs == 1:
            record.saw_event()
            record.saw_output(now)
            self._mid_stream(turn, guard, now)
            if guard.deadline is not None and self._arm is not None:
                self._arm(guard)  # may be earlier than the first-event deadline
            return "release" if self.held else "pass"
        stale = turn.budgets.stale
        if stale is not None:
            guard.deadline = now + stale
        return "pass"

    @staticmethod
    def _mid_stream(turn: Turn, guard: Guard, now: float) -> None:
        """The turn has output: its guard has the stale budget from ``now``."""
        stale = turn.budgets.stale
        guard.stage = "mid_stream"
        guard.deadline = None if stale is None else now + stale
        turn.steady = stale is not None and not turn.background

    def unwatch(self) -> None:
        """The current turn goes on without a guard (resumed over HTTP, watched there)."""
        self.guard = None
        if self.turn is not None:
            self.turn.steady = False

    def _hold(self, turn: Turn, data: bytes) -> FrameVerdict:
        if turn.outputs or turn.shown or turn.attempt > self.policy.retries:
            return "pass"  # nothing will be sent again: no need to hold
        if self._held_size + len(data) > HOLD_LIMIT:
            turn.shown = True  # handed up, what was held first: never sent again
            return "release"
        self.held.append(data)
        self._held_size += len(data)
        return "hold"

    def release(self, data: bytes) -> list[bytes]:
        """The frames held before ``data`` (the turn's first output, its end or its
        error), then ``data``: the caller gets them in order."""
        held, self.held, self._held_size = self.held, [], 0
        held.append(data)
        return held

    def resent(self) -> Turn:
        """The current turn's create is sent again (a new attempt of the same turn)."""
        turn = self.turn
        assert turn is not None
        turn.attempt += 1
        self.held, self._held_size = [], 0  # the attempt's answer: never handed up
        turn.record.new_attempt()
        turn.started = monotonic()
        turn.outputs = turn.heartbeats = turn.others = 0
        turn.response_id, turn.sequence, turn.steady = None, -1, False
        return turn

    def end(
        self,
        outcome: Outcome,
        stage: str | None = None,
        error: str | None = None,
        *,
        held: bool = False,
    ) -> None:
        """The current turn is over (its statistics given); the next one, if sent, starts.
        ``held``: what it held is kept for ``release`` (ended by an event), else dropped."""
        turn = self.turn
        if turn is None:
            return
        record = turn.record
        record.counts = (turn.outputs, turn.heartbeats, 0)
        record.finish(outcome, stage, error)
        self.guard = None
        if not held:
            self.held, self._held_size = [], 0
        with self._lock:
            self.turn = self._waiting.popleft() if self._waiting else None
            if self.turn is not None:  # the server answers it from now on
                self.turn.started = self.turn.record.started = monotonic()

    def end_all(self, outcome: Outcome, stage: str | None, error: str | None) -> None:
        """The connection is gone: every turn sent on it ends so."""
        while self.turn is not None:
            self.end(outcome, stage, error)

    def plan(self, can_reopen: bool) -> tuple[Plan, str]:
        """What to do with the current turn now that its connection died (``plan_for``)."""
        return plan_for(self.turn, self.policy, can_reopen)

    def interrupted(self, guard: Guard) -> StreamInterrupted:
        """The error of every turn under way, when ``guard``'s interrupt cut the connection."""
        reason = guard.reason or "interrupted"
        self.end_all("interrupted", guard.fired_stage, reason)
        return StreamInterrupted(reason, stage=guard.fired_stage)

    def given_up(self, exc: BaseException, guard: Guard, note: str) -> BaseException:
        """The error to raise for every turn under way, when the connection died under
        them (``exc``) and was neither sent again nor resumed (``note`` says why): the
        current turn's stall if ``guard`` cut it, else ``exc`` itself."""
        if guard.fired == "stalled" and self.turn is not None:
            error = self.stalled(guard, note)
            logger.warning("%s", error)
            self.end_all("stalled", guard.fired_stage, None)
            return error
        self.failed(exc)
        return exc

    def failed(self, exc: BaseException) -> None:
        """Every turn under way ends with ``exc`` (a stall or interrupt: at its stage)."""
        stage = exc.stage if isinstance(exc, (StreamStalled, StreamInterrupted)) else None
        self.end_all(*ending_of(exc, stage))

    def stalled(self, guard: Guard, note: str = "") -> StreamStalled:
        """The error of the current turn, cut by ``guard`` for want of progress."""
        assert self.turn is not None
        return stall_of(self.turn, self.request, guard, note)
