"""A resumable stream's decisions: what to pass up, when to resume, what to cancel.

``ResumingWatch`` is the ``BodyWatch`` the sync and async streams are: on a
resumable stream (``BodyWatch._resumable``; see ``resume``) it passes up
whole events only (``_pass``), decides after a stall, a dead connection or an
early end whether to resume and with which request (``_resume_request``),
takes a resume attempt over (``_adopt``), says what the caller gets when the
stream could not be resumed (``_unresumed``), how long to wait before
resuming again after a refusal that may pass (``_retry_wait``) and which
cancel goes out at close (``_cancel_request``). On any other stream none of
this runs. No I/O: the streams in ``_transports`` send.
"""

from __future__ import annotations

import contextlib
import logging
from typing import TYPE_CHECKING, Any

import httpx

from .attempt import Arm, Attempt, GuardFired, ResumeFailed
from .body import BodyWatch
from .calls import backoff_before
from .checkpoints import Checkpoints
from .clock import monotonic
from .errors import StreamStalled
from .guard import Guard
from .mcp_resume import AnyResumable
from .progress import ProgressMeter, is_event_stream
from .resume import (
    RETRY_AFTER_LIMIT,
    TAIL_LIMIT,
    Resumable,
    ResumeRefused,
    refusal,
    retry_after,
    spliceable,
)

if TYPE_CHECKING:
    from .exchange import Exchange

__all__ = ["ResumingWatch"]

#: What a broken body means for the caller: ``(error, cause)``, or ``None`` to end cleanly.
Consequence = tuple[BaseException, BaseException | None] | None

logger = logging.getLogger("hermes_transport")


class ResumingWatch(BodyWatch):
    """A body watch that can also resume its stream (when it is resumable), and give its
    checkpoints (a background Responses stream's, to an ``on_checkpoint``)."""

    def __init__(
        self,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        arm: Arm,
        exchange: Exchange,
    ) -> None:
        super().__init__(guard, attempt, meter, stale, arm, exchange)
        call, resumable = exchange.call, self._resumable
        callback = call.on_checkpoint if call is not None else None
        self._checkpoints: Checkpoints | None = None
        if callback is not None and isinstance(resumable, Resumable):
            interval, model = exchange.policy.checkpoint_interval, exchange.budgets.model
            known, after = resumable.response_id, resumable.after
            self._checkpoints = Checkpoints(callback, interval, model, known, after)
        self._had = -1  # the last event the caller had finished with (see ``_asking``)
        self._begin(meter)

    def _begin(self, meter: ProgressMeter | None) -> None:
        """What a subclass watches more, set up last (``McpWatch``: its asks)."""

    def _checkpoint(self, *, stopped: bool) -> None:
        """Give a checkpoint, if one is due, naming the last event the caller had finished
        with when it last asked for more (none while they are held: -1); ``stopped``: a
        stall, interrupt or close, which gives one whatever the interval; never once the
        response is over."""
        meter, checkpoints = self._meter, self._checkpoints
        if checkpoints is None or meter is None or meter.finished:
            return
        give = checkpoints.stopped if stopped else checkpoints.reading
        give(meter.response_id, self._had, meter.scanner.created_at, monotonic())

    def _asking(self) -> None:
        """The caller asks for more (a read begins, after what was passed up): it is done
        with every event passed up so far; the held ones too, once handed over."""
        meter = self._meter
        if meter is not None and self._handed:
            self._had = meter.sequence

    def _hold(self, chunk: bytes) -> bool:
        """As ``BodyWatch._hold``; and once the response is named, its first checkpoint."""
        held = super()._hold(chunk)
        if self._checkpoints is not None:
            self._checkpoint(stopped=False)
        return held

    def _pass(self, chunk: bytes) -> bytes:
        """The per-chunk step of a resumable stream: what of ``chunk`` to pass up (whole
        events), watched as ``_saw`` watches; a checkpoint first, if one is due (the caller
        is done with what it had: it asked for more)."""
        if self._checkpoints is not None:
            self._asking()
            self._checkpoint(stopped=False)
        whole = self._whole.take(chunk)  # type: ignore[union-attr]
        if whole:
            self._saw(whole)
        elif self._guard.fired is not None:
            raise GuardFired
        return whole

    def _rest(self) -> bytes:
        """At the body's end: the tail of an unfinished event still held, if any."""
        return self._whole.rest() if self._whole is not None else b""

    def _may_resume(self) -> bool:
        """At a clean end of the inner body: whether it ended before the response did
        (its end event) and can be resumed (then it is, as for a dead connection)."""
        meter = self._meter
        return self._whole is not None and meter is not None and not meter.finished

    def _resume_request(self) -> httpx.Request | None:
        """After the body died (or ended early): the request that resumes it, a resume
        drawn from the call's budget; ``None`` (``_note`` says why) to fail as without."""
        resumable, whole, meter, guard = self._resumable, self._whole, self._meter, self._guard
        if resumable is None or whole is None or meter is None or meter.finished:
            return None
        if guard.fired not in (None, "stalled") or self._cut_after_done():
            return None  # interrupted, or closed by the caller: not a failure of the server
        found = resumable.resume_from(meter)
        if isinstance(found, str):
            self._note = found
            return None
        if whole.mid_event:
            self._note = f"; not resumed: an event longer than {TAIL_LIMIT} bytes was cut"
            return None
        call = self._exchange.call
        if call is None or not call.take_resume():
            resumed = call.resumed if call is not None else 0
            self._note = f"; resumed {resumed} time(s), no resume left"
            return None
        whole.drop()
        self._checkpoint(stopped=True)
        attempt = self._attempt
        logger.warning(
            "%s %s: the stream %s; resuming %s (%d resume(s) left)",
            attempt.request.method,
            attempt.url,
            "stalled" if guard.fired == "stalled" else "broke off",
            found[1],
            call.resumes_left,
        )
        self._note = ""
        return found[0]

    def _report(self) -> None:
        """As ``BodyWatch._report``; and a closed stream's last checkpoint, if unfinished."""
        self._checkpoint(stopped=True)
        super()._report()

    def _resume_budget(self) -> float | None:
        """The budget a resumed stream gets: the first event's until the first output, then
        the stale one (what the stream would have had had it not been cut)."""
        meter = self._meter
        if meter is not None and meter.events:
            return self._stale
        return self._exchange.budgets.first_event

    def _adopt(self, guard: Guard, attempt: Attempt) -> None:
        """Watch a resume attempt from now on: its guard replaces the cut stream's, which
        the caller has released (before closing the cut connection)."""
        self._guard, self._attempt = guard, attempt
        self._armed = False
        self._complete = False
        self._guard_released = False

    def _resumed(self) -> None:
        """The resume answered with its stream: read on from it."""
        guard, meter = self._guard, self._meter
        assert meter is not None
        guard.stage = "mid_stream" if meter.events else "first_event"
        if guard.fired is not None:
            raise GuardFired

    def _outcome(self, failure: BaseException | None) -> Consequence:
        """What ``failure`` (``None``: the body ended early) means for the caller, judged now,
        by the guard of the attempt it killed: ``(error, cause)``, or ``None`` to end the
        body where it is, cleanly (it ended early, or was cut after its end event)."""
        if failure is None or self._cut_after_done():
            return None
        mapped = self._failure(failure, log=False)  # logged when raised, or as resumed
        if mapped is None:
            return failure, failure.__cause__
        return mapped, None if isinstance(failure, GuardFired) else failure

    def _retry_wait(self, refused: ResumeRefused) -> float | None:
        """After ``refused``: the seconds to wait before resuming again, if the refusal
        may pass (a 429, a 5xx) and a resume is left; ``None`` to give up on resuming."""
        self._refusals += 1
        call = self._exchange.call
        if not refused.transient or call is None or call.resumes_left <= 0:
            self._refused_status = refused.status
            return None
        if refused.retry_after is not None:
            wait = min(refused.retry_after, RETRY_AFTER_LIMIT)
        else:
            wait = backoff_before(self._refusals)
        logger.warning(
            "%s %s: the resume was refused (%s); resuming again in %.2f s",
            self._attempt.request.method,
            self._attempt.url,
            refused.said,
            wait,
        )
        return wait

    def _unresumed(self, outcome: Consequence, refused: ResumeRefused | None) -> Any:
        """After the stream could not be resumed: ``outcome`` (of the latest attempt's
        failure) with the reason in its message, and a refused resume's ``HTTPStatusError``
        as its cause; ``False`` for ``None``, to end cleanly."""
        tried = f" {self._refusals} times" if self._refusals > 1 else ""
        note = f"; resume was tried{tried} and refused: {refused.said}" if refused else self._note
        if outcome is None:
            if refused is not None:
                logger.warning("the stream ended before its end event%s", note)
            return False
        error, cause = outcome
        return _noted(error, note, self._attempt.flavor.http.RequestError), (
            refused.error if refused is not None else cause
        )

    def _in_band(self, error: BaseException, cause: BaseException | None) -> bytes | None:
        """What to pass up in the server's place when ``error`` ends the request, if it is
        answered in band (``McpWatch``); ``None``: raise ``error``."""
        return None

    def _answer_for(self, outcome: tuple[BaseException, BaseException | None]) -> bytes | None:
        """What to pass up in place of raising ``outcome`` (an error and its cause) at the
        end of a resumable stream: the answer in band (``_in_band``), if the request is
        answered so; else ``None``, and a stall about to reach the caller is logged (the
        exchange logs one it takes)."""
        answer = self._in_band(*outcome)
        error = outcome[0]
        if answer is None and isinstance(error, StreamStalled):
            attempt = self._attempt
            logger.warning("%s %s: %s", attempt.request.method, attempt.url, error)
        return answer

    def _held_failed(self, failure: BaseException | None, outcome: Consequence) -> None:
        """Before the first output, the stream could not be resumed: raise what the
        exchange takes (a stall is then re-sent as any stall before the first output; an
        interrupt is said as one), or keep a dead connection's error for the caller's first
        read, after what is held (as ``_broke_early`` does)."""
        assert outcome is not None
        error, cause = outcome
        if isinstance(error, StreamStalled):
            raise ResumeFailed(error) from cause
        if self._guard.fired is not None and failure is not None:
            raise failure
        error.__cause__ = cause
        if not isinstance(error, Exception) or not self._broke_early(error):
            raise error

    def _hold_ended(self) -> None:
        """The hold is over at the body's end: hand up an unfinished event's tail too."""
        rest = self._rest()
        if rest:
            self._held.append(rest)
        self._progressed()

    def _cancel_request(self) -> httpx.Request | None:
        """At close: the cancel to send (once), if any. For an interrupted resumable
        stream (unless ``cancel_on_interrupt=False``), and for one given up after a stall
        or a refused resume that would run on unread (``_abandoned``)."""
        resumable, meter, guard = self._resumable, self._meter, self._guard
        if self._cancelled or resumable is None or meter is None or meter.finished:
            return None
        if guard.fired == "interrupted":
            wanted = self._exchange.policy.cancel_on_interrupt
        else:
            wanted = self._abandoned(resumable, meter)
        if not wanted:
            return None
        request = resumable.cancel_from(meter, guard.reason or f"the stream {guard.fired}")
        self._cancelled = request is not None
        return request

    def _abandoned(self, resumable: AnyResumable, meter: ProgressMeter) -> bool:
        """Whether this stream was given up with its work still running: it stalled, or a
        resume of it was refused (not for want of such a stream, a 404), and the resumable
        says a stall given up cancels it (``cancels_given_up``); never once an error event
        came (the server ended it)."""
        refused = self._refused_status
        if meter.error is not None or not resumable.cancels_given_up(self._handed):
            return False
        return refused != 404 and (self._guard.fired == "stalled" or refused is not None)

    def _is_rest(self, response: Any) -> bool:
        """Whether a resume's ``response`` is the rest of the stream: an event stream, in
        an encoding that can be spliced."""
        headers = response.headers
        return is_event_stream(response.status_code, headers.get("content-type", "")) and (
            spliceable(headers.get("content-encoding", ""))
        )

    def _refused(self, request: Any, response: Any, body: bytes) -> ResumeRefused:
        http = self._attempt.flavor.http
        shown = http.Response(
            response.status_code, headers=response.headers, content=body, request=request
        )
        with contextlib.suppress(http.DecodingError):
            body = shown.read()
        said = refusal(response.status_code, body)
        if 200 <= response.status_code < 300:
            kind = response.headers.get("content-type", "no content type")
            said = f"{said} with {kind} ({response.headers.get('content-encoding', 'identity')})"
        error = http.HTTPStatusError(f"resume refused: {said}", request=request, response=shown)
        wait = retry_after(response.headers.get("retry-after"))
        return ResumeRefused(said, error, response.status_code, wait)


def _noted(error: BaseException, note: str, request_error: type[Exception]) -> BaseException:
    """``error`` with ``note`` added to its message, as a new error of its class (a
    ``StreamStalled`` or an HTTP library's ``request_error``); ``error`` itself when there
    is no note or it cannot be rebuilt."""
    if not note:
        return error
    try:
        if isinstance(error, StreamStalled):
            return type(error)(
                f"{error}{note}",
                request=error.request,
                stage=error.stage,
                budget=error.budget,
                elapsed=error.elapsed,
                attempts=error.attempts,
            )
        if isinstance(error, request_error):
            return type(error)(f"{error}{note}", request=error.request)  # type: ignore[call-arg, attr-defined]
    except (TypeError, RuntimeError):  # another signature; or no request
        pass
    return error
