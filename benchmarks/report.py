"""The results table: one row per figure, rendered as Markdown and kept as JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["COLUMNS", "Row", "Verdict", "render"]

Verdict = Literal["PASS", "MISS", "info", "ERROR"]

#: Column titles, in order, for the cells of a row.
COLUMNS = ("watchdog", "plain", "seed")
_TITLES = {"watchdog": "WatchdogTransport", "plain": "plain {library}", "seed": "seed model"}


@dataclass
class Row:
    """One figure: what it measures, one cell per client, its target and verdict.

    ``data`` keeps the numbers behind the cells (samples included) for the JSON file.
    """

    key: str
    figure: str
    cells: Mapping[str, str]
    target: str
    verdict: Verdict
    data: Mapping[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def render(rows: list[Row], library: str) -> str:
    """A Markdown table of ``rows``, then their notes; ``library`` is the run's HTTP library
    (the plain client's)."""
    titles = [_TITLES[c].format(library=library) for c in COLUMNS]
    head = ["#", "figure", *titles, "target", "result"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.key, row.figure, *(row.cells.get(c, "") for c in COLUMNS)]
        cells += [row.target, f"**{row.verdict}**" if row.verdict == "MISS" else row.verdict]
        lines.append("| " + " | ".join(_escape(cell) for cell in cells) + " |")
    notes = [f"- {row.key}: {note}" for row in rows for note in row.notes]
    if notes:
        lines += ["", *notes]
    return "\n".join(lines)
