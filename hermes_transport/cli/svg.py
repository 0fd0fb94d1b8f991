"""A ``Figure`` as an SVG file: ``render_svg``, ``save_svg`` and ``--svg``'s type, ``svg_path``.

Owns the layout: the title and the line under it, a row per case (its label and each
lane's outcome on the left, in the lane's colour; the lanes on the right, each with
its notes above it on as few levels as keep them apart), grid lines and a time axis
in seconds at round steps, and the legend of the marks used (``svg_marks`` draws
them). The picture is 800 px wide, on white, in the light theme's colours and a
sans-serif font; deterministic (the same figure gives the same bytes: no clock, no
random id) and self-contained (no font, script or link). ``save_svg`` writes it whole
or not at all. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import math
import os
from pathlib import Path
from typing import TextIO
from xml.sax.saxutils import escape, quoteattr

from .figure import Figure, Lane, Row
from .svg_marks import (
    GRID,
    MUTED,
    PLOT_LEFT,
    PLOT_RIGHT,
    coordinate,
    legend,
    span_marks,
    svg_text,
    text_width,
)

__all__ = ["MAX_NOTES", "SVG_WIDTH", "render_svg", "save_svg", "svg_path"]

SVG_WIDTH = 800
MAX_NOTES = 10  # labelled marks above one lane, at most
_LEVELS = 3  # lines of notes above a lane, at most
_STEP = 12.0  # px between two lines of notes
_MARKS = 24.0  # px the marks need above a lane's line
_ASIDE_TRIES = 100
_LABELS = PLOT_LEFT - 24  # px for a row's words
_TONES = {"ok": "#2e7d32", "bad": "#c62828", "plain": MUTED}
_FONT = "Roboto, 'Helvetica Neue', Arial, sans-serif"


def _axis(figure: Figure) -> tuple[float, float]:
    """The time axis' end and step: a round number of seconds past every span and deadline."""
    latest = 0.05
    for row in figure.rows:
        for lane in row.lanes:
            for span in lane.spans:
                latest = max(latest, span.end, span.budget[1] if span.budget else 0.0)
    raw = latest / 8
    magnitude = 10.0 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    return step * math.ceil(latest / step - 1e-9), step


def render_svg(figure: Figure) -> str:
    """The figure as an SVG document (a ``str`` ending in a newline)."""
    c = coordinate
    end, step = _axis(figure)
    scale = (PLOT_RIGHT - PLOT_LEFT) / end
    body = [svg_text(12, 24, figure.title, size=15, weight=600, clip=SVG_WIDTH - 24)]
    y = 24.0
    if figure.subtitle:
        y += 18
        body.append(svg_text(12, y, figure.subtitle, size=11, fill=MUTED, clip=SVG_WIDTH - 24))
    top = y = y + 10
    used: set[str] = set()
    shades: list[str] = []  # every other row's background, under the grid
    for index, row in enumerate(figure.rows):
        drawn, bottom = _row(row, y, scale, used)
        if index % 2:
            shades.append(f'<rect y="{c(y)}" width="{SVG_WIDTH}" height="{c(bottom - y)}"/>')
        body.extend(drawn)
        y = bottom
    ticks = [i * step for i in range(round(end / step) + 1)]
    lines = "".join(f"M{c(PLOT_LEFT + t * scale)} {c(top)}V{c(y)}" for t in ticks)
    grid = f'<path d="{lines}" stroke="{GRID}"/>'
    marks = "".join(f"M{c(PLOT_LEFT + t * scale)} {c(y)}v4" for t in ticks)
    line = f"M{c(PLOT_LEFT)} {c(y)}H{c(PLOT_RIGHT)}{marks}"
    scale_parts = [f'<g class="axis"><path d="{line}" stroke="{MUTED}"/>']
    for t in ticks:
        label = f"{round(t, 6):g}"
        x = PLOT_LEFT + t * scale
        scale_parts.append(svg_text(x, y + 15, label, size=10, fill=MUTED, anchor="middle"))
    words = "seconds"
    scale_parts.append(svg_text(PLOT_RIGHT, y + 29, words, size=10, fill=MUTED, anchor="end"))
    scale_parts.append("</g>")
    keys, height = legend(used, y + 48)
    height += 8
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{SVG_WIDTH}" height="{c(height)}"'
        f' viewBox="0 0 {SVG_WIDTH} {c(height)}" role="img"'
        f' aria-label={quoteattr(figure.title)} font-family="{_FONT}">\n'
        f"<title>{escape(figure.title)}</title>\n"
        f'<rect width="{SVG_WIDTH}" height="{c(height)}" fill="#ffffff"/>\n'
        + "\n".join([f'<g fill="#fafafa">{"".join(shades)}</g>', grid, *body, *scale_parts, *keys])
        + "\n</svg>\n"
    )


def _row(row: Row, y: float, scale: float, used: set[str]) -> tuple[list[str], float]:
    """One row's elements from ``y`` down, and the ``y`` below it."""
    c = coordinate
    parts = [svg_text(12, y + 16, row.label, size=12.5, weight=600, clip=_LABELS)]
    cursor = y + 4
    for number, lane in enumerate(row.lanes):
        notes, levels = _notes(lane, scale)
        line = cursor + _MARKS + levels * _STEP
        if number == 0:
            line = max(line, y + 34)  # the outcome's words go below the row's label
        parts.append(
            f'<g class="lane" data-tone="{lane.tone}" data-outcome={quoteattr(lane.outcome)}>'
        )
        tone = _TONES[lane.tone]
        parts.append(svg_text(12, line + 4, lane.outcome, size=10.5, fill=tone, clip=_LABELS))
        for level, x, words in notes:
            base = line - _MARKS - 2 - level * _STEP
            fits = x + 3 + text_width(words, 10) <= PLOT_RIGHT
            parts.append(
                f'<g class="note"><path d="M{c(x)} {c(base + 2)}V{c(line - 10)}"'
                ' stroke="#bdbdbd"/>'
                + svg_text(
                    x + 3 if fits else x - 3,
                    base,
                    words,
                    size=10,
                    anchor="start" if fits else "end",
                )
                + "</g>"
            )
        for span in lane.spans:
            parts.extend(span_marks(span, line, scale, used, tone))
        parts.append("</g>")
        cursor = line + 12
    bottom = cursor + 4
    head = f'<g class="row" data-label={quoteattr(row.label)}>'
    return [head, *parts, f'<path d="M0 {c(bottom)}H{SVG_WIDTH}" stroke="{GRID}"/></g>'], bottom


def _notes(lane: Lane, scale: float) -> tuple[list[tuple[int, float, str]], int]:
    """Where a lane's notes go, (level, x, words) each, on the fewest levels that keep
    their words apart: the first ``MAX_NOTES`` in time, those with no room left out;
    and how many levels that took."""
    placed: list[tuple[int, float, str]] = []
    ends = [-math.inf] * _LEVELS  # where the words last placed on each level end
    for at, words in sorted(lane.notes)[:MAX_NOTES]:
        x = PLOT_LEFT + max(at, 0.0) * scale
        width = text_width(words, 10) + 6
        left = x if x + width <= PLOT_RIGHT else x - width
        for level in range(_LEVELS):
            if left >= ends[level] + 4:
                ends[level] = left + width
                placed.append((level, x, words))
                break
    return placed, 1 + max((level for level, _, _ in placed), default=-1)


def save_svg(path: Path, figure: Figure, err: TextIO) -> bool:
    """Write ``figure`` to ``path`` whole: to a new file beside it (made as ``open`` makes
    one, under the umask), then renamed over it. On a failure say why on ``err``, naming
    ``--svg``, leave nothing behind, and return False."""
    data = render_svg(figure).encode("utf-8")
    aside: Path | None = None
    try:
        for number in range(_ASIDE_TRIES):
            aside = path.with_name(f".{path.name}.{os.getpid()}.{number}.tmp")
            try:
                fd = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                break
            except FileExistsError:  # left by a run that died: not ours to remove
                aside = None
        else:
            raise FileExistsError(errno.EEXIST, "no free name for a file beside it")
        with os.fdopen(fd, "wb") as file:
            file.write(data)
        os.replace(aside, path)
    except OSError as exc:
        if aside is not None:
            with contextlib.suppress(OSError):
                os.unlink(aside)
        err.write(f"--svg: cannot write {str(path)!r}: {exc.strerror or exc}\n")
        return False
    return True


def svg_path(text: str) -> Path:
    """argparse type of ``--svg``: a file (not a directory) in a directory that exists
    and can be written; argparse names the option in the error."""
    if not text:
        raise argparse.ArgumentTypeError("needs a file name")
    path = Path(text)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: no directory {str(folder)!r}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise argparse.ArgumentTypeError(f"cannot write {text!r}: cannot write in {str(folder)!r}")
    return path
