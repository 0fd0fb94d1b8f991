"""What a timeline picture shows: ``Span``, ``Lane``, ``Row`` and ``Figure``, values only.

Owns the shape of a picture and nothing of how it is measured or drawn: a ``Span`` is
one attempt of a call (sent, headers, its data events, its events that are not
progress, its keepalives, the wait whose budget ran out, how it ended), a ``Lane`` one
call's spans, a ``Row`` one labelled case of one or more lanes (a watched call and a
plain one, say), a ``Figure`` the rows under a title. Times are seconds from the start
of the call. The probe (``probe_svg``), the demo (``demo_svg``) and the fault server's
records (``sent``) build them; ``svg`` draws them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Ending", "Figure", "Lane", "Row", "Span", "Tone"]

#: How a span ended: its body's end (``done``), cut by the watchdog (``cut``), or an
#: error the caller got (a broken body, a read timeout, a hang-up: ``error``).
Ending = Literal["done", "cut", "error"]
#: The colour of a lane's outcome: as hoped (``ok``), a stall or an error (``bad``), or
#: a client without the watchdog, shown for comparison (``plain``).
Tone = Literal["ok", "bad", "plain"]


@dataclass(frozen=True)
class Span:
    """One attempt of a call, in seconds from the call's start.

    ``headers``: when its response headers came (``None``: never). ``events``: its
    progress events; ``others``: its events that are not progress (a wire's
    preamble); ``keepalives``: its comments and heartbeat events. ``budget``: the wait
    that ran out, from its start to its deadline (a cut span's). ``gaps``: waits
    between events worth pointing out, each from and to. ``via``: how it was sent when
    it is not the first (``re-send``, ``resume``).
    """

    start: float
    end: float
    ending: Ending = "done"
    headers: float | None = None
    events: tuple[float, ...] = ()
    others: tuple[float, ...] = ()
    keepalives: tuple[float, ...] = ()
    budget: tuple[float, float] | None = None
    gaps: tuple[tuple[float, float], ...] = ()
    via: str = ""


@dataclass(frozen=True)
class Lane:
    """One call: its spans in order, its outcome in a few words, and marks to label."""

    spans: tuple[Span, ...]
    outcome: str
    tone: Tone = "ok"
    notes: tuple[tuple[float, str], ...] = ()


@dataclass(frozen=True)
class Row:
    """One case: a label and its lanes."""

    label: str
    lanes: tuple[Lane, ...]


@dataclass(frozen=True)
class Figure:
    """One picture: a title, a line under it, and the rows on one time axis."""

    title: str
    rows: tuple[Row, ...]
    subtitle: str = ""
