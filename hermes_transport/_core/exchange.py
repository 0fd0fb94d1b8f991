"""One request's attempts: budgets, re-sends, resumes, and which error the caller sees.

``Exchange`` is what the sync and async shells share for one
``handle_request``: from what the request asks (``asked``) it decides the call's
budgets (``budgets``: the policy's, fitted to the request by its rules), whether
a stalled attempt is sent again, whether its stream can be resumed
(``resumable``) and which error the caller sees, and holds the draft of the
stream's statistics (``record``); one attempt's own state and error mapping are
in ``attempt``. Nothing here does I/O, sleeps or awaits: the shells in
``_transports`` do, and the guard's kill switches in ``_io`` reach the sockets.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import httpx

from .asked import asked, resumable_of
from .attempt import (
    NOT_RESUMABLE,
    Arm,
    Attempt,
    ErrorResend,
    GuardFired,
    ResumeFailed,
    mapped_error,
    shown_cause,
)
from .call_budgets import CallBudgets
from .calls import Call, backoff_before, call_for_request, under_runner
from .checkpoints import CheckpointCallback
from .errors import StreamInterrupted, StreamStalled, for_caller, interrupted_before_response
from .flavor import Flavor
from .guard import Guard
from .interrupt import Interrupt
from .mcp import answer_id, mcp_stats
from .mcp_asks import WaitingAsks
from .mcp_resume import AnyResumable
from .policy import StreamPolicy
from .progress import ProgressMeter, is_event_stream
from .stats import Outcome, StatsCallback, StreamRecord, StreamStats
from .wires import ErrorEvent

__all__ = ["Exchange"]

logger = logging.getLogger("hermes_transport")


class Exchange:
    """The attempts of one ``handle_request``: budgets, re-sends, and their errors.

    The shell loops: ``begin()`` an attempt, send it, and on an exception ask
    ``failed()`` whether to send again (``None``) or what to raise.
    """

    __slots__ = (
        "_budget",
        "_call",
        "_error_resends",
        "_event_stream",
        "_flavor",
        "_handoff",
        "_hint",
        "_meter",
        "_policy",
        "_replayable",
        "_request",
        "_tokens",
        "_wire",
        "answers",
        "asks",
        "attempt",
        "backoff",
        "budgets",
        "guard",
        "in_band",
        "record",
        "resumable",
        "session",
        "streaming",
    )

    def __init__(
        self,
        request: httpx.Request,
        flavor: Flavor,
        policy: StreamPolicy,
        own_interrupt: Interrupt | None,
        bound: Sequence[Interrupt],
        on_stats: StatsCallback | None = None,
        *,
        in_band: bool = False,
        asks: WaitingAsks | None = None,
        on_checkpoint: CheckpointCallback | None = None,
    ) -> None:
        self._request = request
        self._flavor = flavor
        self._policy = policy
        # A ByteStream is bytes in memory: replayable, and readable without
        # consuming anything. (A request httpx rebuilt for a 307/308 redirect
        # carries the original ByteStream but has no `content` of its own.)
        stream = request.stream
        self._replayable = isinstance(stream, flavor.http.ByteStream)
        body: bytes | None = b"".join(stream) if self._replayable else None  # type: ignore[arg-type]
        self._wire, streaming, payload, budgets, mcp = asked(request, body, policy)
        #: The MCP request whose stall or interrupt is answered in band (``in_band``: as a
        #: JSON-RPC error in the server's place), if it is one; else such errors are raised.
        self.in_band = mcp if in_band and mcp is not None and not mcp.channel else None
        #: MCP: the asks this transport's streams wait on; the id of the server's request
        #: this POST answers (the shell says when it is sent), and the session it is on.
        self.asks = asks
        self.answers = answer_id(request.method, payload) if mcp is None else None
        related = mcp is not None or self.answers is not None
        self.session = request.headers.get("mcp-session-id", "") if related else ""
        #: The budgets this call got (the policy's, fitted to the request by its rules).
        self.budgets: CallBudgets = budgets
        self._budget = self.budgets.first_event if streaming else None
        if streaming and self.budgets.source:
            logger.debug("%s %s: budgets %s", request.method, request.url.path, self.budgets)
        #: Whether the request asks for a stream (its statistics are then reported).
        self.streaming = streaming
        #: The draft of the stream's statistics, for the body to add to and end.
        mcp_drafted = mcp_stats(mcp, self.session)
        self.record = StreamRecord(request, self._wire, self.budgets, on_stats, mcp_drafted)
        self._event_stream = False  # a response was an event stream (reported as a stream)
        self._meter: ProgressMeter | None = None  # the latest attempt's, once it is answered
        #: How to resume the stream, if it can be (a background Responses one).
        self.resumable: AnyResumable | None = (
            resumable_of(request, self._wire, payload, mcp, flavor.http) if streaming else None
        )
        self._hint = (
            NOT_RESUMABLE if streaming and self._wire == "responses" and not self.resumable else ""
        )
        # A request with effects (an MCP tools/call) is never sent twice.
        resends = policy.retries if mcp is None or mcp.resendable else 0
        # A resumable stream draws on its call's resumes even with no first-event budget.
        self._call: Call | None = (
            call_for_request(request.headers, resends, policy.resumes, on_checkpoint)
            if self._budget is not None or self.resumable is not None
            else None
        )
        self._handoff = under_runner()
        self._tokens = (*bound, own_interrupt) if own_interrupt is not None else tuple(bound)
        if self._call is not None and self._call.exhausted_by_stalls():
            # An SDK retry of a stream whose re-sends are spent: fail at once, offline,
            # with the interrupt if one fired during the SDK's back-off.
            fired = next((token.reason for token in self._tokens if token.interrupted), None)
            assert self._call.last_stall is not None
            stall = self._call.last_stall
            error = (
                stall
                if fired is None
                else interrupted_before_response(fired, stage="before_sending")
            )
            raise for_caller(error, handoff=self._handoff, request=request)
        self._error_resends = 0
        #: Seconds the shell waits before the next attempt (after a transient
        #: error event; a stall is re-sent at once).
        self.backoff = 0.0
        #: The latest attempt's guard and attempt (a resume replaces them).
        self.guard: Guard | None = None
        self.attempt: Attempt | None = None

    @property
    def tokens(self) -> tuple[Interrupt, ...]:
        """The interrupt tokens every attempt is bound to (a back-off ends when one fires)."""
        return self._tokens

    @property
    def gated(self) -> bool:
        """Whether the response is held back until its first progress event."""
        return self._budget is not None

    def begin(self, arm: Arm, sockets_reachable: bool) -> tuple[Guard, Attempt]:
        """A new attempt with its guard bound to the interrupt tokens; raises if one fired.

        The first-event budget runs from when the attempt gets its connection
        where the guard can see that (``sockets_reachable``: the shell tracks
        its inner transport's connections), else from now. The guard's deadline
        is set or put off; the shell arms it with ``arm`` either way.
        """
        call, request = self._call, self._request
        number = call.start_attempt() if call is not None else 1
        attempt = Attempt(
            request, self._flavor, number, self._budget, self._hint, self.budgets.source
        )
        self.record.new_attempt()
        guard = Guard()
        self.guard, self.attempt, self._meter = guard, attempt, None
        if not guard.bind(self._tokens):
            reason = guard.reason or "interrupted"
            logger.info(
                "%s %s not sent: already interrupted: %s", request.method, attempt.url, reason
            )
            raise for_caller(
                interrupted_before_response(reason, stage="before_sending"),
                handoff=self._handoff,
            )
        guard.budget_for_attempt(self._budget, attempt.started, arm, sockets_reachable)
        return guard, attempt

    @property
    def call(self) -> Call | None:
        """The logical call this request belongs to (``None``: not a watched stream)."""
        return self._call

    policy = property(lambda self: self._policy, doc="The policy of this transport.")

    def begin_resume(
        self, request: httpx.Request, budget: float | None, arm: Arm, sockets_reachable: bool
    ) -> tuple[Guard, Attempt]:
        """The guard and attempt of a resume ``request``, watched by ``budget`` from its
        connection on (``None``: no bound). If a token has fired, the guard has too: the
        shell then sends nothing, and the body raises the interrupt."""
        call = self._call
        number = call.start_attempt() if call is not None else 1
        attempt = Attempt(request, self._flavor, number, budget, origin=self.budgets.source)
        self.record.resumed()
        guard = Guard("before_sending")
        self.guard, self.attempt, self._meter = guard, attempt, None
        if guard.bind(self._tokens):
            guard.budget_for_attempt(budget, attempt.started, arm, sockets_reachable)
        return guard, attempt

    def answered(self, response: httpx.Response, guard: Guard) -> None:
        """An attempt's response headers came (a re-send's replace an earlier one's)."""
        # A budget put off until the connection (``budget_from_connection``) starts now
        # if no connection was seen: a mock patched in under the pool (respx,
        # pytest-httpx2) answers without one. A no-op once it has started.
        guard.start_budget()
        self.record.answered(response.status_code, guard.connect_seconds, guard.tls_seconds)

    def finish(
        self, outcome: Outcome, stage: str | None = None, error: str | None = None
    ) -> StreamStats | None:
        """End the stream's statistics (once; ``None`` if neither the request nor a response
        was a stream, or already ended)."""
        if not (self.streaming or self._event_stream):
            return None
        return self.record.finish(outcome, stage, error)

    def gave_up(self, error: BaseException) -> None:
        """The request raises ``error`` with no body for the caller: end its statistics."""
        if self.streaming or self._event_stream:
            self.record.gave_up(error, self.guard.fired_stage if self.guard else None)

    def succeeded(self) -> None:
        if self._call is not None:
            self._call.last_stall = None

    def resend_error(self, event: ErrorEvent, attempt: Attempt) -> bool:
        """Whether to send the request again for a transient error event before any output.

        Draws on the call's re-send budget, as a stall before the first event
        does; when it is spent the event passes through to the caller as it
        came, and the SDK raises what it raises for it.
        """
        call, request = self._call, self._request
        if call is None or not self._replayable or not call.take_resend():
            logger.warning(
                "%s %s: the stream opened with %s; no re-send left, passed through",
                request.method,
                attempt.url,
                event,
            )
            return False
        self._error_resends += 1
        self.backoff = backoff_before(self._error_resends)
        logger.warning(
            "%s %s: the stream opened with %s; re-sending in %.2f s (%d re-send(s) left)",
            request.method,
            attempt.url,
            event,
            self.backoff,
            call.resends_left,
        )
        return True

    def failed(self, exc: BaseException) -> BaseException | None:
        """After the latest attempt raised ``exc`` (its guard closed): ``None`` to send the
        request again, else the exception to raise (``exc`` itself when the guard did not
        kill it), from ``shown_cause(exc)``."""
        guard, attempt = self.guard, self.attempt
        assert guard is not None
        assert attempt is not None
        if isinstance(exc, ErrorResend) and guard.fired is None:
            return None  # resend_error() drew the re-send and set the back-off
        self.backoff = 0.0
        error: Exception | None
        if isinstance(exc, ResumeFailed):
            error = exc.error
        else:
            stale, meter = self.budgets.stale, self._meter
            error = mapped_error(guard, attempt, stale, meter, exc, in_body=False)
        if error is None:
            return exc
        if isinstance(error, StreamInterrupted):
            if self._handoff:
                error.__cause__ = shown_cause(exc)  # kept when the runner unwraps the handoff
            return for_caller(error, handoff=self._handoff)
        if not isinstance(error, StreamStalled):
            return error
        call = self._call
        assert call is not None
        call.last_stall = error
        if self._replayable and call.take_resend():
            logger.warning(
                "%s %s: %s; re-sending; that connection is closed (%d re-send(s) left)",
                attempt.request.method,  # the attempt that stalled: a resume, may be
                attempt.url,
                error,
                call.resends_left,
            )
            return None
        logger.warning("%s %s: %s; no re-send left", attempt.request.method, attempt.url, error)
        error.__cause__ = shown_cause(exc)  # kept when the runner unwraps a handoff
        return for_caller(error, handoff=self._handoff, request=self._request)

    def meter_for(self, response: httpx.Response, guard: Guard) -> ProgressMeter | None:
        """The progress meter of a response just received (``None``: not an event stream).

        Raises ``GuardFired`` if the guard fired meanwhile.
        """
        if guard.fired is not None:
            raise GuardFired
        if is_event_stream(response.status_code, response.headers.get("content-type", "")):
            self._event_stream = True
            encoding = response.headers.get("content-encoding", "")
            self._meter = ProgressMeter(
                encoding,
                self._policy.heartbeats_for(self._wire),
                self._wire,
                track=self.resumable is not None,
            )
            return self._meter
        # Not watched for progress, but interruptible, and the guard keeps the
        # socket from being closed under the body by another thread.
        return None
