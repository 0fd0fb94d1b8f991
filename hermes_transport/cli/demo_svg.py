"""The demo's picture (``demo --svg FILE``): ``Seen`` (one call) and ``demo_figure``.

A row per case of the demo's table and one for its resumable stream, as the demo's
lines are: the watched call's lane (the ``WatchdogTransport``'s), then the plain
client's, each timed by the fault server's record of what it sent (``sent``), so the
picture needs no hook in either client. The Gemini, MCP and crash parts, which have
clients of their own, are not drawn. The demo's text is the same with or without the
picture.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..testing import SentResponse
from .figure import Ending, Figure, Lane, Row
from .sent import spans_from_sent

__all__ = ["Seen", "demo_figure"]

_EARLY = 0.05  # seconds: a plain call that ended this close to the hold waited for it


@dataclass(frozen=True)
class Seen:
    """One call of the demo: when it began (``time.monotonic()``), how long it took, its
    outcome as the demo names it (``ok``, ``StreamStalled ...``, an error's class) and
    what the fault server sent for it."""

    started: float
    took: float
    outcome: str
    sent: tuple[SentResponse, ...]


def _ending(outcome: str) -> Ending:
    if outcome == "ok":
        return "done"
    return "cut" if outcome.startswith("StreamStalled") else "error"


def _watched(seen: Seen, budget: float) -> Lane:
    spans = spans_from_sent(
        seen.sent, seen.started, seen.took, _ending(seen.outcome), (budget,) * 2
    )
    took = f"{seen.took:.2f} s"
    if seen.outcome == "ok":
        via = spans[-1].via if spans else ""
        return Lane(
            spans, f"watchdog: ok after a {via}, {took}" if via else f"watchdog: ok, {took}"
        )
    if seen.outcome.startswith("StreamStalled"):
        stage = "cut mid-stream" if "mid-stream" in seen.outcome else "cut, no first event"
        return Lane(spans, f"watchdog: {stage}, {took}", "bad")
    return Lane(spans, f"watchdog: {seen.outcome}, {took}", "bad")


def _plain(seen: Seen, hold: float) -> Lane:
    spans = spans_from_sent(seen.sent, seen.started, seen.took, _ending(seen.outcome))
    if seen.outcome == "ok":
        words = "ok"
    elif seen.took >= hold - _EARLY:
        words = "hung until the hang-up"
    else:
        words = seen.outcome
    return Lane(spans, f"plain: {words}, {seen.took:.2f} s", "plain")


def demo_figure(
    cases: Sequence[tuple[str, Seen, Seen]],
    *,
    budget: float,
    plain_timeout: float,
    hold: float,
    http_name: str,
) -> Figure:
    """The picture of the demo's cases: (title, the watched call, the plain one) each."""
    rows = tuple(
        Row(title, (_watched(watched, budget), _plain(plain, hold)))
        for title, watched, plain in cases
    )
    return Figure(
        "demo: the openai SDK on the fault server, with and without the watchdog",
        rows,
        f"Watchdog: {budget:g} s budgets, 1 re-send before the first event; plain {http_name}:"
        f" a {plain_timeout:g} s read timeout; a stall is hung up after {hold:g} s.",
    )
