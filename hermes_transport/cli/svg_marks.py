"""The pieces of a timeline picture: text, one span's marks, the legend.

Owns how each thing looks: ``text`` (a ``<text>`` element, escaped, clipped to a
width), ``span_marks`` (one ``Span``: its connection line, dashed until the headers,
a tick per data event, a lighter one per event that is not progress, a diamond per
keepalive, the budget's band up to its deadline, brackets over long gaps, a separator
and a word where it was sent again, and how it ended: a dot, a cross where the
watchdog cut it, a bar for an error) and ``legend`` (the marks a picture used). Marks
closer than a pixel (keepalives: two) are drawn once (``merged``), so thousands of
events make a picture no bigger than a few hundred; each mark group says how many it
stands for (``data-count``). Standard library only.
"""

from __future__ import annotations

from collections.abc import Iterable
from xml.sax.saxutils import escape, quoteattr

from .figure import Span

__all__ = [
    "GRID",
    "INK",
    "MUTED",
    "PLOT_LEFT",
    "PLOT_RIGHT",
    "coordinate",
    "legend",
    "merged",
    "span_marks",
    "svg_text",
    "text_width",
]

PLOT_LEFT, PLOT_RIGHT = 262.0, 784.0  # the time axis; the labels are left of it
INK, MUTED, GRID = "#212121", "#616161", "#eeeeee"
_EVENT, _OTHER, _KEEPALIVE = "#3949ab", "#9fa8da", "#f57c00"
_LINE, _CUT, _DONE, _BUDGET = "#9e9e9e", "#d32f2f", "#43a047", "#e53935"
_NARROW, _WIDE = frozenset("ijlt.,:;'|!()[]{} I/-"), frozenset("mwMW@%")

# The legend: each mark's key and its words, in the order shown (symbols: ``_symbol``).
_KEYS = (
    ("event", "data event (progress)"),
    ("other", "event that is not progress"),
    ("keepalive", "keepalive (comment or heartbeat)"),
    ("waiting", "no headers yet"),
    ("budget", "budget, to its deadline"),
    ("gap", "long gap"),
    ("cut", "cut by the watchdog"),
    ("attempt", "sent again"),
    ("error", "error or gave up"),
    ("done", "stream ended"),
)


def coordinate(value: float) -> str:
    """A coordinate as written: one decimal at most, never ``-0``."""
    written = f"{value:.1f}".removesuffix(".0")
    return "0" if written == "-0" else written


def text_width(words: str, size: float) -> float:
    """About how wide ``words`` are in a sans-serif font of ``size`` px."""
    # Generous: a reader without the first fonts named gets a wider one (DejaVu Sans).
    ems = sum(
        0.34 if c in _NARROW else 0.92 if c in _WIDE else 0.72 if c.isupper() else 0.6
        for c in words
    )
    return ems * size


def svg_text(
    x: float,
    y: float,
    words: str,
    *,
    size: float = 11,
    fill: str = INK,
    weight: int = 400,
    anchor: str = "start",
    clip: float | None = None,
) -> str:
    """A ``<text>`` element, escaped; cut with an ellipsis to ``clip`` px if given."""
    if clip is not None and text_width(words, size) > clip:
        while words and text_width(words + "…", size) > clip:
            words = words[:-1]
        words = words.rstrip() + "…"
    bold = f' font-weight="{weight}"' if weight != 400 else ""
    middle = f' text-anchor="{anchor}"' if anchor != "start" else ""
    return (
        f'<text x="{coordinate(x)}" y="{coordinate(y)}" font-size="{size:g}" fill="{fill}"'
        f"{bold}{middle}>{escape(words)}</text>"
    )


def merged(xs: Iterable[float], apart: float = 1.0) -> list[float]:
    """``xs`` in order, without those closer than ``apart`` to the last one kept."""
    kept: list[float] = []
    for x in sorted(xs):
        if not kept or x - kept[-1] >= apart:
            kept.append(x)
    return kept


def _rhomb(x: float, y: float) -> str:
    """A keepalive's diamond, as a piece of a path."""
    return f"M{coordinate(x)} {coordinate(y - 3.5)}l3.5 3.5-3.5 3.5-3.5-3.5z"


def _diamond(x: float, y: float) -> str:
    return f'<path d="{_rhomb(x, y)}" fill="{_KEEPALIVE}"/>'


def _cross(x: float, y: float, kind: str = "") -> str:
    return (
        f'<path{kind} d="M{coordinate(x - 5)} {coordinate(y - 5)}l10 10m0-10-10 10"'
        f' stroke="{_CUT}" stroke-width="2.2"/>'
    )


def _group(kind: str, count: int, drawn: str) -> str:
    return f'<g class="{kind}" data-count="{count}">{drawn}</g>'


def span_marks(span: Span, y: float, scale: float, used: set[str], tone: str) -> list[str]:
    """The elements of one span on the lane whose line is at ``y``; the keys of the marks
    it used join ``used``; ``tone`` colours an error's bar."""

    def at(seconds: float) -> float:
        return PLOT_LEFT + max(seconds, 0.0) * scale

    c = coordinate
    start, end = at(span.start), max(at(span.end), at(span.start))
    via = f" data-via={quoteattr(span.via)}" if span.via else ""
    parts = [f'<g class="span" data-ending="{span.ending}"{via}>']
    if span.budget is not None:
        used.add("budget")
        left, right = at(span.budget[0]), at(span.budget[1])
        parts.append(
            f'<rect class="budget" x="{c(left)}" y="{c(y - 12)}" width="{c(max(right - left, 1))}"'
            f' height="24" fill="{_BUDGET}" fill-opacity="0.12"/>'
            f'<path d="M{c(right)} {c(y - 14)}v28" stroke="{_BUDGET}" stroke-dasharray="3 2"/>'
        )
        label = f"{span.budget[1] - span.budget[0]:.3g} s budget"
        if text_width(label, 9) + 8 <= right - left:
            parts.append(svg_text(left + 4, y - 5, label, size=9, fill="#c62828"))
    headers = end if span.headers is None else min(max(at(span.headers), start), end)
    if headers - start >= 3:  # a wait for the headers worth seeing
        used.add("waiting")
        parts.append(
            f'<path class="waiting" d="M{c(start)} {c(y)}H{c(headers)}" stroke="{_LINE}"'
            ' stroke-width="1.5" stroke-dasharray="3 3"/>'
        )
    else:
        headers = start
    if end > headers:
        parts.append(
            f'<path d="M{c(headers)} {c(y)}H{c(end)}" stroke="{_LINE}" stroke-width="2"/>'
        )
    for g0, g1 in span.gaps:
        left, right = at(g0), at(g1)
        if right - left >= 4:
            used.add("gap")
            parts.append(
                f'<path class="gap" d="M{c(left)} {c(y - 12)}v-4H{c(right)}v4" fill="none"'
                f' stroke="{MUTED}"/>'
            )
            label = f"{g1 - g0:.3g} s"
            if text_width(label, 9) + 4 <= right - left:
                parts.append(
                    svg_text(
                        (left + right) / 2, y - 19, label, size=9, fill=MUTED, anchor="middle"
                    )
                )
    if span.via:
        used.add("attempt")
        parts.append(
            f'<path class="attempt" d="M{c(start)} {c(y - 10)}v20" stroke="{INK}"'
            ' stroke-width="1.5"/>'
        )
        parts.append(svg_text(start + 3, y - 14, span.via, size=9.5, fill=MUTED))
    for kind, times, half, colour in (
        ("others", span.others, 5, _OTHER),
        ("events", span.events, 8, _EVENT),
    ):
        if times:
            used.add(kind.removesuffix("s"))
            d = "".join(f"M{c(x)} {c(y - half)}v{2 * half}" for x in merged(map(at, times)))
            parts.append(
                _group(kind, len(times), f'<path d="{d}" stroke="{colour}" stroke-width="1.6"/>')
            )
    if span.keepalives:
        used.add("keepalive")
        d = "".join(_rhomb(x, y) for x in merged(map(at, span.keepalives), 2.0))
        parts.append(
            _group("keepalives", len(span.keepalives), f'<path d="{d}" fill="{_KEEPALIVE}"/>')
        )
    used.add(span.ending)
    if span.ending == "cut":
        parts.append(_cross(end, y, ' class="cut"'))
    elif span.ending == "error":
        parts.append(
            f'<path class="error" d="M{c(end)} {c(y - 9)}v18" stroke="{tone}" stroke-width="3"/>'
        )
    else:
        parts.append(f'<circle class="done" cx="{c(end)}" cy="{c(y)}" r="4" fill="{_DONE}"/>')
    parts.append("</g>")
    return parts


def _symbol(key: str, x: float, y: float) -> str:
    """The legend's sample of the mark ``key``, 14 px wide, at ``x`` on the line ``y``."""
    c, mid = coordinate, coordinate(x + 6)
    if key in ("event", "other"):
        half, colour = (7, _EVENT) if key == "event" else (5, _OTHER)
        return (
            f'<path d="M{mid} {c(y - 1 - half)}v{2 * half}" stroke="{colour}" stroke-width="1.6"/>'
        )
    if key == "keepalive":
        return _diamond(x + 6, y - 1)
    if key == "waiting":
        return (
            f'<path d="M{c(x)} {c(y - 1)}h14" stroke="{_LINE}" stroke-width="1.5"'
            ' stroke-dasharray="3 3"/>'
        )
    if key == "budget":
        return (
            f'<rect x="{c(x)}" y="{c(y - 8)}" width="14" height="14" fill="{_BUDGET}"'
            f' fill-opacity="0.12"/><path d="M{c(x + 14)} {c(y - 9)}v16" stroke="{_BUDGET}"'
            ' stroke-dasharray="3 2"/>'
        )
    if key == "gap":
        return f'<path d="M{c(x)} {c(y)}v-4h14v4" fill="none" stroke="{MUTED}"/>'
    if key == "cut":
        return _cross(x + 6, y - 1)
    if key in ("attempt", "error"):
        colour, width = (INK, 1.5) if key == "attempt" else (MUTED, 3)
        return f'<path d="M{mid} {c(y - 9)}v16" stroke="{colour}" stroke-width="{width:g}"/>'
    return f'<circle cx="{mid}" cy="{c(y - 1)}" r="4" fill="{_DONE}"/>'


def legend(used: set[str], y: float) -> tuple[list[str], float]:
    """The legend of the marks in ``used``, in lines from ``y``; and the ``y`` below it."""
    parts = ['<g class="legend">']
    x = 12.0
    for key, words in _KEYS:
        if key not in used:
            continue
        width = 20 + text_width(words, 10.5)
        if x + width > PLOT_RIGHT:
            x, y = 12.0, y + 18
        parts.append(_symbol(key, x, y))
        parts.append(svg_text(x + 18, y + 3, words, size=10.5, fill=MUTED))
        x += width + 16
    parts.append("</g>")
    return parts, y + 14
