"""How a watched WebSocket turn ends when its connection dies: sent again, resumed, raised.

``plan_for`` decides, for the turn that was under way (``ws_turns``): sent again (no output
yet, a re-send left, and a fresh connection to be had that can carry it), resumed over
HTTP (a background turn with output and a known id), or raised, with the words that say
why not; ``stall_of`` builds the ``StreamStalled`` of a turn its guard cut. Pure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import httpx

from .clock import monotonic
from .errors import StreamStalled
from .guard import Guard
from .policy import StreamPolicy

if TYPE_CHECKING:
    from .ws_turns import Turn

__all__ = ["NO_CLIENT", "NO_RECONNECT", "Plan", "plan_for", "stall_of"]

#: What to do when the connection died under a turn.
Plan = Literal["raise", "resend", "resume"]

#: End a turn's error when it was not sent again or resumed, saying why.
NO_RECONNECT = (
    "; not re-sent: the connection is dead and no way to open another was given"
    " (watch what responses.connect() returns, or give awatch_websocket its reopen)"
)
NO_CLIENT = (
    "; not resumed: no client to resume it with over HTTP (watch what responses.connect() returns)"
)
_CHAINED = "; not re-sent: it is chained (store=false) to a response only the dead connection knew"


def plan_for(turn: Turn | None, policy: StreamPolicy, can_reopen: bool) -> tuple[Plan, str]:
    """What to do with ``turn`` (``None``: none was under way) now that its connection
    died, cut by its guard or dropped; with why not, for the error."""
    if turn is None:
        return "raise", ""
    if turn.background and turn.response_id is not None and policy.resumes:
        return "resume", ""  # running on the server: a second one would be billed again
    if not (turn.outputs or turn.shown):
        if turn.attempt > policy.retries:
            return "raise", ""
        if not turn.survives_reconnect:
            return "raise", _CHAINED
        return ("resend", "") if can_reopen else ("raise", NO_RECONNECT)
    return "raise", ""


def stall_of(turn: Turn, request: httpx.Request, guard: Guard, note: str) -> StreamStalled:
    """The error of ``turn``, cut by ``guard`` for want of progress; ``note`` ends it."""
    elapsed = monotonic() - turn.started
    source = f"; budget: {turn.budgets.source}" if turn.budgets.source else ""
    if guard.fired_stage == "mid_stream":
        stale = turn.budgets.stale
        assert stale is not None
        return StreamStalled(
            f"turn stalled: no output event for {stale:g} s after {turn.outputs}"
            f" output event(s), {elapsed:.2f} s into attempt {turn.attempt}{source}{note}",
            request=request,
            stage="mid_stream",
            budget=stale,
            elapsed=elapsed,
            attempts=turn.attempt,
        )
    first = turn.budgets.first_event
    assert first is not None
    came = ""
    if turn.others or turn.heartbeats:
        came = (
            f"; {turn.others} preamble event(s) and {turn.heartbeats} heartbeat(s)"
            " arrived, none of them output"
        )
    return StreamStalled(
        f"turn stalled: no output within {first:g} s of its response.create{came},"
        f" on attempt {turn.attempt}{source}{note}",
        request=request,
        stage="first_event",
        budget=first,
        elapsed=elapsed,
        attempts=turn.attempt,
    )
