"""One response body's watch: the per-stream state and the per-chunk step.

``BodyWatch`` is what the sync and async watched streams build on: holding the bytes
before the first event, the stale deadline after it, the drain after ``[DONE]``, the
error a killed body raises, and how the stream ended for its statistics (``_report``,
into the exchange's ``StreamRecord``); ``resuming`` adds what a resumable stream
decides, ``mcp_watch`` what an MCP request's does. The hot path is ``_saw``: one
attribute read and one scan per chunk, and on progress a clock read, one attribute
write and the gap's summary. No I/O here: the streams in ``_transports`` read and send.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from .attempt import Arm, Attempt, ErrorResend, GuardFired, mapped_error
from .clock import monotonic
from .errors import StreamInterrupted, StreamStalled
from .guard import Guard
from .mcp_resume import AnyResumable
from .progress import ProgressMeter
from .resume import WholeEvents
from .stats import Outcome, ending_of

if TYPE_CHECKING:
    from .exchange import Exchange

__all__ = [
    "AFTER_DONE_SECONDS",
    "DRAIN_BYTES",
    "DRAIN_SECONDS",
    "HOLD_LIMIT",
    "BodyWatch",
    "rebuilt",
]

logger = logging.getLogger("hermes_transport")

#: Bytes of a streaming response held back while waiting for its first event.
#: Past this the response is handed up as if the first event had arrived.
HOLD_LIMIT = 1024 * 1024

#: A stream closed after ``data: [DONE]`` but before its end (the openai SDK
#: does that) is read on to its end, so that its connection goes back to the
#: pool, if the rest comes within these bounds; otherwise it is closed.
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 0.05
#: A caller that reads on after ``data: [DONE]`` (openai 1.x does) waits at
#: most this long for the body's end; then the body ends there, cleanly, and
#: its connection is closed: the answer was complete at ``[DONE]``.
AFTER_DONE_SECONDS = 0.5


class BodyWatch:
    """The watched state of one response body; the sync and async streams build on it.

    Owner-thread state except ``guard``, which the watchdog and interrupt
    tokens read under its lock.
    """

    def __init__(
        self,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        arm: Arm,
        exchange: Exchange,
    ) -> None:
        self._guard = guard
        self._exchange = exchange
        self._attempt = attempt
        self._meter = meter
        # The hot path's two reads of the meter, without its properties' calls.
        self._feed = meter.feed_chunk if meter is not None else None
        self._scanner = meter.scanner if meter is not None else None
        self._stale = stale
        self._arm = arm
        self._armed = False  # the stale deadline is in the watchdog's heap
        self._held: list[bytes] = []
        self._held_size = 0
        self._complete = False  # the inner body was read to its end
        self._drained_size = 0  # read after [DONE] when the caller closed early
        self._broken: Exception | None = None  # see _broke_early
        # Tracked: it can be resumed (only whole events are then passed up) and cancelled.
        self._resumable: AnyResumable | None = (
            exchange.resumable if meter is not None and meter.tracks else None
        )
        # A compressed body cannot be spliced (a resumed one is compressed afresh).
        spliceable = meter is not None and meter.identity and exchange.policy.resumes > 0
        self._whole: WholeEvents | None = (
            WholeEvents() if self._resumable is not None and spliceable else None
        )
        if self._resumable is not None and self._whole is None and exchange.policy.resumes:
            attempt.hint = "; not resumed: a compressed stream cannot be spliced"
        self._note = ""  # why the stream was not resumed, for its error
        self._gaps = exchange.record.gaps  # summed up on the hot path; the rest at the end
        self._handed = False  # the caller has the response: the body reports its end
        self._extensions: dict[str, Any] | None = None
        self._ending: BaseException | None = None  # what the caller is about to get
        self._cancelled = False  # a cancel was sent (or given up)
        self._refusals = 0  # resumes the server refused
        self._refused_status: int | None = None  # the status of a refusal given up on
        self._forgotten = False  # see _forget
        guard.stage = "first_event" if meter is not None else "body"
        if meter is None:  # not an event stream: not watched for progress, interruptible
            guard.deadline = None
        self._guard_released = False  # see _release_guard

    def _release_guard(self) -> None:
        """Close the guard, once: at close, before a resume replaces it, or when a response
        dropped unclosed is collected (which also runs any close deferred on the guard)."""
        if not self._guard_released:
            self._guard_released = True
            self._guard.close()

    def __del__(self) -> None:
        # Not a weakref.finalize: four more objects a stream for the collector to walk.
        if not getattr(self, "_guard_released", True):  # False once __init__ got there
            self._release_guard()

    def _hold(self, chunk: bytes) -> bool:
        """Hold a chunk read before the first event; whether holding is over.

        An error event before any output ends the hold too: a transient one
        with a re-send left ends the attempt (``ErrorResend``: nothing held
        reaches the caller); any other is handed up with what came before it.
        """
        if self._guard.fired is not None:
            raise GuardFired
        if self._whole is not None:
            chunk = self._whole.take(chunk)
            if not chunk:
                return False
        self._held.append(chunk)
        self._held_size += len(chunk)
        meter = self._meter
        assert meter is not None
        progressed = meter.feed(chunk)
        record = self._exchange.record
        if record.first_event is None and meter.seen_event:
            record.saw_event()
        if progressed or self._held_size >= HOLD_LIMIT:
            self._progressed()
            return True
        error = meter.error
        if error is None:
            return False
        if error.transient and self._exchange.resend_error(error, self._attempt):
            raise ErrorResend(error)
        self._progressed()
        return True

    def _broke_early(self, exc: Exception) -> bool:
        """Whether to keep ``exc``, raised by the body before its first event, for later.

        A stall or interrupt (the guard fired) is raised from the request,
        where a stall can be re-sent, and so is an ``ErrorResend``. Any other
        failure came from a server that answered: plain httpx would raise it
        from the caller's first read, and the SDK would not send the request
        again; so it is raised there, after the bytes held so far.
        """
        if self._guard.fired is not None or isinstance(exc, ErrorResend):
            return False
        self._broken = exc
        self._guard.deadline = None  # nothing more to wait for
        return True

    def _take_held(self) -> list[bytes]:
        held, self._held = self._held, []
        return held

    def _raise_if_broken(self) -> None:
        """After the held bytes: the failure ``_broke_early`` kept, if any."""
        broken, self._broken = self._broken, None
        if broken is not None:
            raise broken

    def _ended(self) -> None:
        """The inner body ended."""
        self._complete = True
        if self._guard.fired is not None:
            raise GuardFired  # a close-delimited body "ends" when its socket is shut down

    def _start_drain(self) -> bool:
        """At close: whether to read the rest of the body so its connection can be pooled.

        Only after an end event (``[DONE]``) or an error event before any
        output (re-sent, or handed up), and only for ``DRAIN_SECONDS``: the guard's
        deadline bounds it (a kill shuts the socket down, and the connection
        is then closed rather than pooled).
        """
        meter, guard = self._meter, self._guard
        if self._complete or meter is None or guard.fired is not None:
            return False
        if not meter.done and meter.error is None:  # an error event ends its stream too
            return False
        guard.stage = "draining"
        guard.deadline = monotonic() + DRAIN_SECONDS
        self._arm(guard)
        return True

    def _drained(self, chunk: bytes) -> bool:
        """Count a drained chunk; whether the drain may go on."""
        self._drained_size += len(chunk)
        return self._drained_size <= DRAIN_BYTES and self._guard.fired is None

    def _progressed(self) -> None:
        guard, meter = self._guard, self._meter
        now = monotonic()
        if meter is not None and meter.events:
            self._exchange.record.saw_output(now)
            self._gaps.add(now)
        if meter is not None and meter.done:
            # Complete at [DONE]: only the end of the body is left, and a caller
            # that reads on (openai 1.x) waits for it at most AFTER_DONE_SECONDS.
            guard.stage = "after_done"
            guard.deadline = None if self._complete else now + AFTER_DONE_SECONDS
            self._arm(guard)  # earlier than the stale deadline: pushed, not moved
            return
        guard.stage = "mid_stream"
        if self._stale is None:
            guard.deadline = None
            return
        guard.deadline = now + self._stale
        if not self._armed:
            # Once per attempt: the stale deadline may be earlier than the
            # first-event one the heap holds, so it must be pushed, not lazily moved.
            self._armed = True
            self._arm(guard)

    def _saw(self, chunk: bytes) -> None:
        """The per-chunk step: one scan, and on progress a clock read, an attribute write
        and the gap's summary."""
        if self._guard.fired is not None:
            raise GuardFired
        feed = self._feed
        if feed is not None and feed(chunk):
            if self._armed and not self._scanner.done:  # type: ignore[union-attr]
                now = monotonic()
                self._guard.deadline = now + self._stale  # type: ignore[operator]
                self._gaps.add(now)
            else:
                self._progressed()

    def hand_over(self, extensions: dict[str, Any]) -> None:
        """The caller gets the response: its end is reported, in ``extensions`` too."""
        self._handed = True
        self._extensions = extensions

    def _report(self) -> None:
        """At close: copy the counts into the statistics, and end them if the caller had
        the response (else the exchange does, with the error it raises)."""
        meter, exchange = self._meter, self._exchange
        record = exchange.record
        if record.finished:
            return
        if meter is not None:
            exact = meter.counted
            counts = (meter.events, meter.heartbeats, meter.comment_bytes)
            record.counts = counts if exact else (None, None, None)
            record.bytes = meter.bytes
        if not self._handed:
            return
        outcome, stage, error = self._how_ended()
        stats = exchange.finish(outcome, stage, error)
        if stats is not None and self._extensions is not None:
            self._extensions["stream_stats"] = stats

    def _forget(self) -> None:
        """Once the body is closed, its end reported and its error built: let go of all
        that reaches beyond this stream (exchange, call, record, meter, a kept error).

        httpx keeps the caller's response and its stream in a reference cycle that only
        the cyclic collector frees, and would free this too, later, making each of its
        passes longer. Kept: what a late close or a read of the closed body touches."""
        if not self._forgotten:
            self._forgotten = True
            self._drop()

    def _drop(self) -> None:
        """``_forget``'s work, once; the streams add their own."""
        del self._exchange, self._gaps, self._arm
        self._meter = self._resumable = self._whole = self._feed = self._scanner = None
        self._ending = self._broken = None
        self._extensions = None
        self._held = []

    def _how_ended(self) -> tuple[Outcome, str | None, str | None]:
        """The outcome, stage and error of the stream at its close."""
        guard, exc, meter = self._guard, self._ending, self._meter
        if self._cut_after_done():
            return "completed", None, None
        if isinstance(exc, (StreamStalled, StreamInterrupted)):
            return ending_of(exc, guard.fired_stage)
        if guard.fired == "stalled":
            return "stalled", guard.fired_stage, None
        if guard.fired == "interrupted":
            return "interrupted", guard.fired_stage, guard.reason
        if exc is not None:
            return ending_of(exc, None)
        if guard.fired == "closed":
            return "closed", None, None
        status = self._exchange.record.status
        if meter is None and status is not None and status >= 400:
            return "error", None, f"HTTP {status}"
        if self._complete or (meter is not None and meter.done):
            return "completed", None, None
        return "closed", None, None

    def _cut_after_done(self) -> bool:
        """Whether the body was cut only because its end did not follow ``[DONE]`` in time
        (read on, or drained at close): it ends there, cleanly (its connection closed)."""
        guard = self._guard
        return guard.fired == "stalled" and guard.fired_stage in ("after_done", "draining")

    def _failure(self, exc: BaseException, *, log: bool = True) -> Exception | None:
        """The error to raise instead of ``exc`` (the body is already closed), if any; a
        stall is logged (``log``) as it is raised."""
        error = mapped_error(
            self._guard,
            self._attempt,
            self._stale,
            self._meter,
            exc,
            in_body=True,
            note=self._note,
        )
        if log and isinstance(error, StreamStalled):
            attempt = self._attempt
            logger.warning("%s %s: %s", attempt.request.method, attempt.url, error)
        return error


_Response = TypeVar("_Response", bound=httpx.Response)


def rebuilt(response: _Response, stream: BodyWatch) -> _Response:
    """``response`` itself, with its body stream replaced by the watched one, which from
    now on reports its end (in the response's ``extensions`` too).

    Nothing else changes: the caller gets the inner transport's own object,
    with its class, ``request``, ``extensions`` and any state it already had.
    """
    stream.hand_over(response.extensions)
    response.stream = stream  # type: ignore[assignment]
    return response
