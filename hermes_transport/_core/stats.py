"""What happened on the wire: one stream's statistics, and the record that builds them.

``StreamStats`` is the value every watched stream ends with; ``StreamRecord``
is its mutable draft, owned by the request's ``Exchange`` (one per
``handle_request``) and written only by the thread or task that runs that
request and reads its body; ``GapSummary`` is the fixed-size summary of the
gaps between progress. Times are ``clock.monotonic`` seconds from the start
of the request. The callback is called here, once, on the thread or task
that ended the stream; nothing here does I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import httpx

from .attempt import url_without_query
from .call_budgets import CallBudgets
from .clock import monotonic
from .errors import Handoff, StreamInterrupted, StreamStalled
from .gaps import GAP_RESOLUTION, GapSummary
from .mcp import McpStats

__all__ = [
    "GAP_RESOLUTION",
    "GapSummary",
    "Outcome",
    "StatsCallback",
    "StreamRecord",
    "StreamStats",
    "ending_of",
]

logger = logging.getLogger("hermes_transport")

#: How a stream ended: read to its end (``completed``), cut for want of
#: progress (``stalled``), stopped by an ``Interrupt`` (``interrupted``),
#: failed with an error (``error``: a dead connection, an HTTP error status),
#: or closed by its reader before its end (``closed``).
Outcome = Literal["completed", "stalled", "interrupted", "error", "closed"]
#: A count of events or bytes of a kind; ``None`` where it is not known exactly.
Count = int | None


@dataclass(frozen=True)
class StreamStats:
    """What happened to one watched stream, from its request to its end.

    Times are seconds from the start of the request (its first attempt): to the
    response ``headers``, the ``first_event`` (any SSE event with data,
    keepalives included; ``None`` when the first event was not waited for: no
    first-event budget) and the ``first_output`` (the first progress event),
    all of the attempt the caller got; ``duration`` to the end. ``connect`` and
    ``tls`` are how long that attempt's new connection took to open and to
    shake hands (``None``: a pooled connection, plain HTTP, or a transport
    whose sockets the watchdog cannot see). ``events`` counts progress events,
    ``heartbeats`` keepalive events, ``comment_bytes`` the bytes of comment
    lines and ``bytes`` the body's bytes as they came (still compressed, if
    they were); all four are 0 for a body that is not an event stream (an error
    status's JSON, say), which is not read for progress. The first three are
    ``None`` when not known exactly: a long run of events in one read (a fast
    server's burst) is not read event by event where nothing depends on it
    (counting would cost a pass over every byte); nor is an undecodable body. Gaps are between
    chunks that carried progress, as read: ``gap_count``, ``largest_gap``
    (exact) and the 50th, 90th and 99th percentiles (within
    ``GAP_RESOLUTION``). ``attempts`` counts the sends of this request, resumes
    included; ``resends`` and ``resumes`` those among them. ``budgets`` are the
    budgets the call got; ``mcp``, an MCP request's method, tool and message counts
    (``McpStats``; ``None`` on every other wire). ``transport`` is what carried it:
    ``"http"``, or ``"websocket"`` for one turn of a watched Responses WebSocket
    (``watch_connection``: then ``method`` is ``"WEBSOCKET"``, ``status`` and ``headers``
    are ``None``, and a turn's ``attempts`` count its re-sends and its resumes over
    HTTP). ``outcome`` says how it ended; ``stage`` where it
    stalled or was interrupted, as finely as the watchdog saw it
    (``connecting``, ``headers``, ``first_event``, ``mid_stream``, ...: a
    ``StreamStalled`` says only ``first_event`` or ``mid_stream``); ``error``
    what was raised for an ``error`` outcome (its class and message, or ``HTTP
    <status>``) and the reason of an interrupt.
    """

    wire: str
    model: str | None
    method: str
    url: str
    server_address: str
    status: int | None
    outcome: Outcome
    stage: str | None
    error: str | None
    attempts: int
    resends: int
    resumes: int
    connect: float | None
    tls: float | None
    headers: float | None
    first_event: float | None
    first_output: float | None
    duration: float
    events: Count
    heartbeats: Count
    comment_bytes: Count
    bytes: int
    gap_count: int
    largest_gap: float | None
    gap_p50: float | None
    gap_p90: float | None
    gap_p99: float | None
    budgets: CallBudgets
    mcp: McpStats | None = None
    transport: str = "http"


def ending_of(
    error: BaseException, fired_stage: str | None
) -> tuple[Outcome, str | None, str | None]:
    """How a stream that ends with ``error`` ended: its outcome, stage and error text
    (``fired_stage``: where its guard fired, if it did, the finer stage)."""
    if isinstance(error, Handoff):
        error = error.error
    if isinstance(error, StreamStalled):
        return "stalled", fired_stage or error.stage, None
    if isinstance(error, StreamInterrupted):
        return "interrupted", error.stage or fired_stage, error.reason
    return "error", None, f"{type(error).__name__}: {error}"


#: What a transport calls with each stream's statistics.
StatsCallback = Callable[[StreamStats], object]


class StreamRecord:
    """The draft of one request's ``StreamStats``; see the module docstring for its owner.

    The body copies its meter's counts in (``counts``, ``bytes``) as it ends; whoever
    ends the stream last (the body, or the exchange when no body reached the
    caller) calls ``finish`` once.
    """

    __slots__ = (
        "_callback",
        "_method",
        "_url",
        "attempts",
        "budgets",
        "bytes",
        "connect",
        "counts",
        "finished",
        "first_event",
        "first_output",
        "gaps",
        "headers",
        "mcp",
        "resends",
        "resumes",
        "server_address",
        "started",
        "status",
        "tls",
        "transport",
        "wire",
    )

    def __init__(
        self,
        request: httpx.Request,
        wire: str,
        budgets: CallBudgets,
        callback: StatsCallback | None,
        mcp: McpStats | None = None,
    ) -> None:
        self.started = monotonic()
        self.mcp = mcp  # an MCP request's (its stream's counts are added as it ends)
        self._method = request.method
        self._url = url_without_query(request.url)
        self.server_address = request.url.host
        self.attempts = 0  # sent, resumes included
        self.wire = wire
        self.transport = "http"  # what carried it (see StreamStats.transport)
        self.budgets = budgets
        self._callback = callback
        self.finished = False  # ``finish`` has run
        self.gaps = GapSummary()
        self.resends = 0
        self.resumes = 0
        self.status: int | None = None
        self.connect: float | None = None
        self.tls: float | None = None
        self.headers: float | None = None
        self.first_event: float | None = None
        self.first_output: float | None = None
        self.counts: tuple[Count, Count, Count] = (0, 0, 0)  # events, heartbeats, comment bytes
        self.bytes = 0

    def new_attempt(self) -> None:
        """An attempt is sent; after the first, a re-send: what is timed is the attempt the
        caller gets."""
        self.attempts += 1
        if self.attempts == 1:
            return
        self.resends += 1
        self.status = self.connect = self.tls = None
        self.headers = self.first_event = self.first_output = None
        self.gaps.restart()

    def resumed(self) -> None:
        """A resume is sent: it continues the same stream."""
        self.attempts += 1
        self.resumes += 1

    def answered(self, status: int, connect: float | None, tls: float | None) -> None:
        """The attempt's response headers came, on a connection that took that long."""
        self.headers = monotonic() - self.started
        self.status, self.connect, self.tls = status, connect, tls

    def saw_event(self) -> None:
        if self.first_event is None:
            self.first_event = monotonic() - self.started

    def saw_output(self, now: float) -> None:
        if self.first_output is None:
            self.first_output = now - self.started

    def gave_up(self, error: BaseException, fired_stage: str | None) -> None:
        """The request raises ``error`` with no response for the caller (the guard of its
        last attempt fired at ``fired_stage``, if it did): the end of the stream."""
        self.finish(*ending_of(error, fired_stage))

    def finish(
        self, outcome: Outcome, stage: str | None = None, error: str | None = None
    ) -> StreamStats | None:
        """The stream's statistics, given to the callback (once; ``None`` after that).

        A callback that raises is logged, never raised: the stream's own
        outcome is what the caller gets.
        """
        if self.finished:
            return None
        self.finished = True
        gaps = self.gaps
        gap_count = gaps.count
        events, heartbeats, comment_bytes = self.counts
        stats = StreamStats(
            wire=self.wire,
            model=self.budgets.model,
            method=self._method,
            url=self._url,
            server_address=self.server_address,
            status=self.status,
            outcome=outcome,
            stage=stage,
            error=error,
            attempts=self.attempts,
            resends=self.resends,
            resumes=self.resumes,
            connect=self.connect,
            tls=self.tls,
            headers=self.headers,
            first_event=self.first_event,
            first_output=self.first_output,
            duration=monotonic() - self.started,
            events=events,
            heartbeats=heartbeats,
            comment_bytes=comment_bytes,
            bytes=self.bytes,
            gap_count=gap_count,
            largest_gap=gaps.largest if gap_count else None,
            gap_p50=gaps.percentile(0.5),
            gap_p90=gaps.percentile(0.9),
            gap_p99=gaps.percentile(0.99),
            budgets=self.budgets,
            mcp=self.mcp,
            transport=self.transport,
        )
        callback = self._callback
        if callback is not None:
            try:
                callback(stats)
            except Exception:
                logger.exception("the stream statistics callback %r raised", callback)
        return stats
