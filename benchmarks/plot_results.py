"""The results files that the plots read, and what every plot shares: checks, style, caption.

A results file is what ``run.py`` writes with ``--json`` (``suite.run_suite``): the run's
date, flavor, machine and one entry per table row, each with its key (``2a``, ``6c/250``)
and ``data``, the numbers behind its cells. Nothing here measures or imports the package;
a file that is not such a document, or a row whose numbers are not where its figure puts
them, raises ``ResultsError`` naming the file (and the row).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

__all__ = [
    "CLIENT_COLORS",
    "FLAVOR_STYLES",
    "RC",
    "ResultsError",
    "Run",
    "caption",
    "load_runs",
    "target_value",
]

#: Matplotlib settings of every plot: deterministic SVG (a fixed hash salt for its ids; the
#: date left out when saved), text kept as text (searchable, and smaller), a light theme.
#: The plots are about 9.6 inches wide, so that shown in the site's content column (about
#: 700 pixels) their text is about as large as it is set in points.
RC: dict[RcKeyType, Any] = {
    "svg.hashsalt": "hermes-transport-benchmarks",
    "svg.fonttype": "none",
    "font.family": "sans-serif",
    "font.sans-serif": ["DejaVu Sans", "Helvetica", "Arial", "Liberation Sans"],
    "font.size": 10.0,
    "axes.titlesize": 10.5,
    "axes.labelsize": 10.0,
    "legend.fontsize": 9.0,
    "legend.title_fontsize": 9.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "figure.titlesize": 12.0,
    "axes.grid": True,
    "grid.color": "#dddddd",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.edgecolor": "#555555",
    "text.color": "#222222",
    "axes.labelcolor": "#222222",
    "xtick.color": "#444444",
    "ytick.color": "#444444",
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "legend.frameon": False,
}
#: One color per client (Okabe-Ito, for color-blind readers), one line style per run.
CLIENT_COLORS = {"watchdog": "#0072B2", "seed": "#D55E00", "plain": "#7A7A7A"}
FLAVOR_STYLES = ("-", "--", ":", "-.")


class ResultsError(Exception):
    """A results file that cannot be plotted; the message names the file."""


@dataclass
class Run:
    """One results file: its document, and its label in the plots (the run's flavor)."""

    path: Path
    document: dict[str, Any]
    label: str = ""
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def error(self, what: str, key: str | None = None) -> ResultsError:
        where = f"{self.path}: row {key}" if key is not None else str(self.path)
        return ResultsError(f"{where}: {what}")

    def row(self, key: str) -> dict[str, Any] | None:
        return self.rows.get(key)

    def data(self, key: str, *path: str, optional: bool = False) -> Any:
        """``rows[key]["data"][path...]``; a missing step raises (or gives None if
        ``optional``)."""
        value: Any = self.rows[key]["data"]
        for step in path:
            if not isinstance(value, Mapping) or value.get(step) is None:
                if optional:
                    return None
                raise self.error(f"no data.{'.'.join(path)}", key)
            value = value[step]
        return value

    def number(self, key: str, *path: str) -> float:
        value = self.data(key, *path)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"data.{'.'.join(path)} is not a number: {value!r:.60}", key)
        return float(value)

    def numbers(self, key: str, *path: str) -> list[float]:
        values = self.data(key, *path)
        if not isinstance(values, list) or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in values
        ):
            raise self.error(f"data.{'.'.join(path)} is not a list of numbers", key)
        return [float(v) for v in values]

    @property
    def machine(self) -> Mapping[str, Any]:
        machine = self.document.get("machine")
        return machine if isinstance(machine, Mapping) else {}


def _read(path: Path) -> Run:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultsError(f"{path}: no such results file") from None
    except OSError as exc:
        raise ResultsError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultsError(f"{path}: not JSON ({exc}): not a results file of run.py") from None
    run = Run(path, document if isinstance(document, dict) else {})
    rows = run.document.get("rows")
    if not isinstance(document, dict) or not isinstance(rows, list):
        raise run.error("not a results file of run.py (--json): no list of rows")
    if not isinstance(run.document.get("flavor"), str):
        raise run.error("not a results file of run.py (--json): no flavor")
    for number, row in enumerate(rows):
        if not (
            isinstance(row, dict) and isinstance(row.get("key"), str) and "data" in row
        ) or not isinstance(row["data"], dict):
            raise run.error(f"row {number + 1} has no key or no data")
        run.rows[row["key"]] = row
    return run


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """Read each results file, in order; label each by its flavor (and its file name when
    two share a flavor)."""
    if not paths:
        raise ResultsError("no results file to plot")
    runs = [_read(Path(path)) for path in paths]
    flavors = [str(run.document["flavor"]) for run in runs]
    for run, flavor in zip(runs, flavors, strict=True):
        run.label = flavor if flavors.count(flavor) == 1 else f"{flavor} ({run.path.stem})"
    return runs


_TARGET = re.compile(r"(?:<=|<)\s*([0-9.]+)\s*(x|ms)")


def target_value(run: Run, key: str, unit: str) -> float | None:
    """The row's first target bound in ``unit`` (``x`` or ``ms``), if its target states one."""
    row = run.row(key)
    target = row.get("target") if row else None
    for value, found in _TARGET.findall(target if isinstance(target, str) else ""):
        if found == unit:
            return float(value)
    return None


def _when(run: Run) -> str:
    date = str(run.document.get("date", "?"))
    shown = date[:16].replace("T", " ") + " UTC" if len(date) >= 16 else date
    kind = "quick run (--quick: not the figures)" if run.document.get("quick") else "full run"
    return f"{run.label}: {kind} of {shown} at {run.machine.get('commit', '?')}"


def caption(runs: Sequence[Run]) -> str:
    """Where the numbers come from: each run's date and commit, and the machine(s)."""
    machines = []
    for run in runs:
        m = run.machine
        text = f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('python', '?')}"
        if text not in machines:
            machines.append(text)
    return "; ".join(_when(run) for run in runs) + ". Machine: " + "; ".join(machines) + "."
