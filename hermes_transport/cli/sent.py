"""Spans from what the fault server sent: ``spans_from_sent``.

The demo's picture and the documentation's (``tools/timelines.py``) time a call by the
fault server's own record of it (``FaultServer.sent``: each response's headers and
body writes, at ``time.monotonic()``), which needs no hook in the client under test,
watched or plain: on loopback a write reaches the client within a millisecond, so the
server's times are the client's. Each answered attempt (a request the scenario
answers: a creation, a re-send, a resume) is a ``Span``; its writes are judged by the
transport's own ``ProgressMeter`` for the request's wire (decoding gzip as the
transport does), so a tick is an event the watchdog counts as progress, a lighter
tick an event it does not (a preamble), a diamond a comment or heartbeat event. A
WebSocket turn's frames are judged as the Responses events they carry.

An attempt followed by another was cut by the watchdog (sent again or resumed), unless
the server had ended it first (a dropped connection: an error); the last ends as the
caller says (``last``). A cut span's budget band is the wait that ran out: from its
last progress event (the stale budget), or the first-event budget up to the cut (the
watchdog times it from the connection, a moment before the server reads the request).
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from .._core.policy import StreamPolicy
from .._core.progress import ProgressMeter
from .._core.wire_paths import Wire, wire_of
from ..testing import SentResponse
from .figure import Ending, Span

__all__ = ["spans_from_sent"]

_GZIP = b"\x1f\x8b"
_SLACK = 0.005  # seconds: a server that ended this much before the next attempt ended first


def _wire(sent: SentResponse) -> Wire:
    request = sent.request
    if request.method == "WEBSOCKET":
        return "responses"
    path = urlsplit(request.path).path.rstrip("/")
    return "mcp" if path.endswith("/mcp") else wire_of(path)


def _marks(
    sent: SentResponse, started: float, until: float
) -> tuple[list[float], list[float], list[float]]:
    """The times of ``sent``'s progress events, other events and keepalives, up to ``until``."""
    wire = _wire(sent)
    gzip = bool(sent.writes) and sent.writes[0][1].startswith(_GZIP)
    meter = ProgressMeter("gzip" if gzip else "", StreamPolicy().heartbeats_for(wire), wire)
    scanner = meter.scanner
    events: list[float] = []
    others: list[float] = []
    keepalives: list[float] = []
    for at, data in sent.writes:
        if at - started > until:
            break
        if sent.request.method == "WEBSOCKET":
            data = b"data: " + data + b"\n\n"  # one frame, one event
        before = (scanner.others, meter.heartbeats, meter.comment_bytes)
        progress = meter.feed(data)
        seconds = at - started
        events.extend([seconds] * progress)
        others.extend([seconds] * (scanner.others - before[0]))
        keepalives.extend([seconds] * (meter.heartbeats - before[1]))
        if meter.comment_bytes > before[2]:
            keepalives.append(seconds)
    return events, others, keepalives


def spans_from_sent(
    sent: Sequence[SentResponse],
    started: float,
    ended: float,
    last: Ending,
    budgets: tuple[float | None, float | None] = (None, None),
) -> tuple[Span, ...]:
    """One ``Span`` per attempt in ``sent`` (the server's record of one call), in seconds
    from ``started`` (``time.monotonic()`` when the call began) to ``ended`` (seconds,
    when the caller had its answer or its error); ``last``: how the last one ended;
    ``budgets``: the call's first-event and stale budgets (``None``: no band)."""
    answered = sorted((s for s in sent if s.request.attempt >= 0), key=lambda s: s.request.time)
    spans: list[Span] = []
    for index, one in enumerate(answered):
        ending: Ending = last
        stop = started + ended
        if index + 1 < len(answered):
            stop = answered[index + 1].request.time
            server_ended = one.ended_at is not None and one.ended_at < stop - _SLACK
            ending = "error" if server_ended else "cut"
        if one.ended_at is not None and ending != "cut":
            stop = min(stop, one.ended_at)
        end = max(stop - started, 0.0)
        events, others, keepalives = _marks(one, started, end)
        start = max(one.request.time - started, 0.0)
        budget = None
        if ending == "cut" and events and budgets[1] is not None:
            budget = (events[-1], events[-1] + budgets[1])
        elif ending == "cut" and not events and budgets[0] is not None:
            # Timed from the connection, a moment before the server read the request.
            budget = (end - budgets[0], end)  # drawn from 0 at the earliest
        headers = None if one.headers_at is None else max(one.headers_at - started, start)
        via = "" if not index else "resume" if one.request.method == "GET" else "re-send"
        spans.append(
            Span(
                start,
                max(end, start),
                ending,
                headers if headers is None or headers <= end else None,
                tuple(events),
                tuple(others),
                tuple(keepalives),
                budget,
                via=via,
            )
        )
    return tuple(spans)
