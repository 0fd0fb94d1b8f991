"""One attempt of a request, and the error a killed attempt raises.

``Attempt`` is what one attempt needs to say what happened to it;
``mapped_error`` is the one place where a killed connection's error becomes
ours. The exceptions here (``GuardFired``, ``ErrorResend``, ``ResumeFailed``)
are never shown: they end an attempt and are taken by ``Exchange.failed``.
Pure: no I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx

from .clock import monotonic
from .errors import StreamInterrupted, StreamStalled, interrupted_before_response
from .flavor import Flavor
from .guard import Guard
from .progress import ProgressMeter
from .stages import words_for
from .wires import ErrorEvent

__all__ = [
    "NOT_RESUMABLE",
    "Arm",
    "Attempt",
    "ErrorResend",
    "GuardFired",
    "ResumeFailed",
    "mapped_error",
    "shown_cause",
    "url_without_query",
]

logger = logging.getLogger("hermes_transport")

#: How a shell hands a guard to its watchdog (thread or loop) to be watched.
Arm = Callable[[Guard], None]


class GuardFired(Exception):
    """The guard fired while no I/O error said so (no socket to shut down).

    Never shown: the error raised for it has no cause, and is raised outside
    the handler that caught it, so that it is not its context either.
    """


class ErrorResend(Exception):
    """The attempt's stream opened with a transient error event and will be sent again.

    Never shown: raised from the first-event wait to end the attempt, and
    taken by ``Exchange.failed``.
    """

    def __init__(self, event: ErrorEvent) -> None:
        super().__init__(str(event))
        self.event = event


class ResumeFailed(Exception):
    """A stream that stalled before its first output could not be resumed.

    Never shown: raised from the first-event wait with the stall ``error``
    (which says why), and taken by ``Exchange.failed``, which re-sends as for
    any stall before the first output, or raises ``error``.
    """

    def __init__(self, error: StreamStalled) -> None:
        super().__init__(str(error))
        self.error = error


#: Added to a stall's message on a Responses stream that could not be resumed
#: because it was not created in background mode.
NOT_RESUMABLE = (
    "; not resumed: only a Responses stream created with background=True can be resumed"
)


def url_without_query(url: httpx.URL) -> str:
    """``url`` as logs, statistics and the probe show it: no user info and no query
    string, since either may carry a credential (some providers put API keys there)."""
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"


def shown_cause(exc: BaseException) -> BaseException | None:
    """The cause to chain the error mapped from ``exc`` to: ``exc``, unless it is a
    ``GuardFired``, which says nothing a caller could use (then ``None``), or a
    ``ResumeFailed``, whose own cause is the one (the refused resume's, if any)."""
    if isinstance(exc, ResumeFailed):
        return exc.__cause__
    return None if isinstance(exc, GuardFired) else exc


#: What a dead connection raises, by flavor: the flavor's transport errors, a socket's,
#: and ours when a guard fired with no socket to shut down. One tuple a flavor, shared by
#: its attempts (thousands may be open at once).
_DEAD: dict[Flavor, tuple[type[Exception], ...]] = {}


class Attempt:
    """What one attempt needs to say what happened to it."""

    __slots__ = (
        "budget",
        "dead",
        "flavor",
        "hint",
        "number",
        "origin",
        "request",
        "started",
    )

    def __init__(
        self,
        request: httpx.Request,
        flavor: Flavor,
        number: int,
        budget: float | None,
        hint: str = "",
        origin: str = "",
    ) -> None:
        self.request = request
        self.hint = hint  # added to a mid-stream stall's message
        self.origin = f"; budget: {origin}" if origin else ""  # what set it, if a rule did
        self.flavor = flavor
        dead = _DEAD.get(flavor)
        if dead is None:
            dead = _DEAD[flavor] = (flavor.http.TransportError, OSError, GuardFired)
        self.dead = dead
        self.number = number  # of the logical call, SDK retries and runner re-sends included
        self.budget = budget
        self.started = monotonic()

    @property
    def url(self) -> str:
        """The request's URL as logs show it (``url_without_query``): made when a message
        needs it, not for every attempt."""
        return url_without_query(self.request.url)


def mapped_error(
    guard: Guard,
    attempt: Attempt,
    stale: float | None,
    meter: ProgressMeter | None,
    exc: BaseException,
    *,
    in_body: bool,
    note: str = "",
) -> Exception | None:
    """The error to raise for ``exc`` if the guard killed the attempt, else ``None``.

    The one place where a killed connection's httpx error becomes ours.
    ``in_body``: raised while the caller reads the body, not in ``handle_request``.
    ``meter`` is the attempt's (``None``: no event stream yet): a stall's message
    says what is known of the events it read. ``note`` ends a stall's message
    (what was done about it), else ``attempt.hint`` ends a mid-stream one.
    """
    if guard.fired is None or not isinstance(exc, attempt.dead):
        return None
    elapsed = monotonic() - attempt.started
    stage = guard.fired_stage or guard.stage
    if guard.fired == "closed":
        # What httpx raises when a closed response is read: the truth, here too.
        closed: Exception = attempt.flavor.http.StreamClosed()
        return closed
    if guard.fired == "interrupted":
        reason = guard.reason or "interrupted"
        logger.info(
            "%s %s interrupted while %s, %.3f s into the attempt: %s",
            attempt.request.method,
            attempt.url,
            words_for(stage),
            elapsed,
            reason,
        )
        if in_body:
            return StreamInterrupted(reason, stage=stage)
        return interrupted_before_response(reason, stage=stage)
    if stage == "mid_stream":
        assert stale is not None
        return attempt.flavor.stalled(
            f"stream stalled: no progress event for {stale:g} s after"
            f" {meter.progress if meter is not None else '0 event(s)'},"
            f" {elapsed:.2f} s into attempt {attempt.number}{attempt.origin}"
            f"{note or attempt.hint}",
            request=attempt.request,
            stage="mid_stream",
            budget=stale,
            elapsed=elapsed,
            attempts=attempt.number,
        )
    assert attempt.budget is not None
    return attempt.flavor.stalled(
        f"stream stalled: no first event within {attempt.budget:g} s"
        f" ({words_for(stage)}{meter.before_output if meter is not None else ''})"
        f" on attempt {attempt.number}{attempt.origin}{note}",
        request=attempt.request,
        stage="first_event",
        budget=attempt.budget,
        elapsed=elapsed,
        attempts=attempt.number,
    )
