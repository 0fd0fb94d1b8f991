"""The benchmark as pictures: SVG plots of one or more results files of ``run.py``.

    python3 benchmarks/run.py --plots DIR                        # measure, then plot
    python3 benchmarks/run.py --plots DIR --from results/httpx.json --from results/httpx2.json

Each results file is one run (``--json``), typically one per flavor; every plot shows
them side by side, labelled by flavor. Written into DIR, each where the runs have its
figures (a plot with none of them is left out):

- ``interrupt.svg``: figures 2a-2c, the interrupt latency of every trial, watchdog against
  the seed design's model, one panel per stage;
- ``stall.svg``: figures 3a-3b, stall-detection lateness of every trial, each client;
- ``ratios.svg``: wall and CPU time, watchdog / plain, of every figure that has a ratio
  (1a-1c, 6a-6d, 7a-7c, 7g, 8, 9a-9b), by flavor;
- ``cost_per_stream.svg``: CPU and memory a stream against concurrent streams (6a-6d).

The output depends on the results files only (and matplotlib's version): the SVG ids come
from a fixed salt and no date is written, so plotting the same files again gives the same
bytes. Each plot's caption names the runs (date, commit) and the machine. Matplotlib is a
benchmark-only dependency (``requirements-bench.txt``), imported only to draw.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .plot_results import RC, ResultsError, Run, caption, load_runs

if TYPE_CHECKING:
    from matplotlib.figure import Figure, SubFigure

__all__ = ["PLOTS", "ResultsError", "write_plots"]

#: The plots, by file name (without ``.svg``), in the order they are written.
PLOTS = ("interrupt", "stall", "ratios", "cost_per_stream")
#: Inches, before a plot sizes itself to its rows.
_SIZES = {
    "interrupt": (9.6, 5.6),
    "stall": (9.6, 5.6),
    "ratios": (9.6, 8.0),
    "cost_per_stream": (9.6, 7.0),
}


def _drawers() -> dict[str, Callable[[SubFigure, Sequence[Run]], bool]]:
    from . import plot_cost, plot_latency

    return {
        "interrupt": plot_latency.interrupt,
        "stall": plot_latency.stall,
        "ratios": plot_cost.ratios,
        "cost_per_stream": plot_cost.cost_per_stream,
    }


def _draw(name: str, runs: Sequence[Run]) -> Figure | None:
    """The plot ``name`` of ``runs`` (None: they have none of its figures), its caption in a
    strip of its own below it (a legend outside the plot stays clear of it)."""
    from matplotlib.figure import Figure
    from matplotlib.layout_engine import ConstrainedLayoutEngine

    figure = Figure(figsize=_SIZES[name], layout=ConstrainedLayoutEngine(wspace=0.06))
    grid = figure.add_gridspec(2, 1, hspace=0.0)
    plot, foot = figure.add_subfigure(grid[0]), figure.add_subfigure(grid[1])
    if not _drawers()[name](plot, runs):
        return None
    width, height = figure.get_size_inches()  # as the plot sized it
    text = textwrap.fill(
        "Measured by benchmarks/run.py. " + caption(runs),
        int(width * 15),
        break_on_hyphens=False,
    )
    strip = 0.15 * (text.count("\n") + 1) + 0.1
    foot.text(0.005, 0.5, text, fontsize=8, color="#555555", va="center")
    grid.set_height_ratios([height - strip, strip])
    return figure


def write_plots(results: Sequence[Path], directory: Path) -> list[Path]:
    """Plot the results files into ``directory`` (created if needed): the SVG files
    written. Raises ``ResultsError`` (naming the file) for a file that cannot be plotted,
    or when none of the plots has its figures in the files."""
    runs = load_runs(results)
    import matplotlib

    written: list[Path] = []
    with matplotlib.rc_context(RC):
        figures = {name: _draw(name, runs) for name in PLOTS}
        if not any(figures.values()):
            files = ", ".join(str(run.path) for run in runs)
            raise ResultsError(
                f"{files}: nothing to plot: none of figures 2a-2c, 3a-3b, 6a-6d or a ratio"
            )
        directory.mkdir(parents=True, exist_ok=True)
        for name, figure in figures.items():
            if figure is None:
                continue
            path = directory / f"{name}.svg"
            figure.savefig(path, format="svg", metadata={"Date": None})
            written.append(path)
    return written
