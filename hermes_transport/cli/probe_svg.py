"""The probe's picture (``probe --svg FILE``): ``probe_figure``, which ``svg`` writes.

One row, one lane, one span: the request from its start to its verdict, the
connection's line dashed until the headers, a tick per data event as the watchdog
counts them, a diamond per keepalive (a comment or a heartbeat event), a bracket over
each gap longer than ``--gap``, and for a stall the budget's band, from the last event
(or the start) to its deadline, and a cross where the watchdog cut the stream. Notes
label the connection, TLS, the headers, the first event, ``[DONE]`` and the verdict.
Every text goes through the timeline's ``Redactor``, as the probe's lines do; the
embedded server is named by its scenario, not its port, so the same marks draw the
same picture.
"""

from __future__ import annotations

from typing import Any

import httpx

from .._core.attempt import url_without_query
from .._core.call_budgets import CallBudgets
from .figure import Ending, Figure, Lane, Row, Span, Tone
from .options import ProbeOptions
from .timeline import Timeline

__all__ = ["probe_figure"]

# The timeline's marks that are labelled on the picture, and their words.
_NOTES = {
    "connected": "connected",
    "tls": "TLS",
    "first_event": "first event",
    "done": "[DONE]",
    "end": "end",
    "stalled": "stalled",
    "error": "failed",
    "interrupted": "interrupted",
}
_ENDINGS: dict[str, tuple[Ending, Tone]] = {
    "healthy": ("done", "ok"),
    "stalled": ("cut", "bad"),
    "failed": ("error", "bad"),
    "interrupted": ("error", "plain"),
}


def probe_figure(
    options: ProbeOptions,
    url: httpx.URL,
    budgets: CallBudgets,
    timeline: Timeline,
    verdict: str,
    stall: dict[str, Any] | None,
    total: float,
) -> Figure:
    """The probe's timeline as a ``Figure``: ``verdict`` is the verdict's kind, ``stall``
    the verdict's stall (its stage, budget and time), ``total`` the seconds in all."""
    redact = timeline.redact
    notes = []
    for mark in timeline.marks:
        if mark.kind == "end" and timeline.done:
            continue  # [DONE] says it
        if mark.kind == "headers":
            notes.append((mark.at, f"headers: HTTP {mark.data.get('status')}"))
        elif mark.kind in _NOTES:
            notes.append((mark.at, _NOTES[mark.kind]))
    gaps = tuple(
        (mark.at - mark.data["seconds"], mark.at) for mark in timeline.marks if mark.kind == "gap"
    )
    budget = None
    if stall is not None:
        mid = stall["stage"] == "mid_stream" and timeline.last_event_at is not None
        start = timeline.last_event_at if mid and timeline.last_event_at is not None else 0.0
        budget = (start, start + stall["budget"])
        where = "mid-stream" if mid else "no first event"
        outcome = f"stalled at {stall['at']:.3f} s, {where}"
    elif verdict == "healthy":
        outcome = f"healthy: {timeline.events} event(s)"
    else:
        outcome = f"{verdict} at {total:.3f} s"
    ending, tone = _ENDINGS.get(verdict, ("error", "bad"))
    span = Span(
        0.0,
        total,
        ending,
        timeline.headers_at,
        tuple(timeline.event_times),
        (),
        tuple(timeline.keepalive_times),
        budget,
        gaps,
    )
    if options.base_url is None:
        title = f"probe: the embedded fault server, scenario {options.scenario}"
    else:
        title = f"probe: POST {url_without_query(url)}"
    counts = f"{timeline.events} event(s), {timeline.comments} comment(s)"
    if timeline.heartbeats:
        counts += f", {timeline.heartbeats} heartbeat event(s)"
    return Figure(
        redact(title),
        (Row(redact(f"model {options.model}"), (Lane((span,), outcome, tone, tuple(notes)),)),),
        redact(f"budgets: {budgets} | {counts} | gaps over {options.gap:g} s bracketed"),
    )
