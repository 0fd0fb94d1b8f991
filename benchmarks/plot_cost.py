"""Plots of what the watchdog costs: the ratios of every figure that has one, and the cost a
stream against the number of concurrent streams (figures 6a-6d)."""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from matplotlib.axes import Axes
from matplotlib.figure import SubFigure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from .plot_results import CLIENT_COLORS, Run, target_value

if TYPE_CHECKING:
    from matplotlib.typing import LineStyleType

__all__ = ["cost_per_stream", "ratios"]

#: Short names of the figures with a watchdog / plain ratio (the table has the long ones).
SHORT = {
    "1a": "raw SSE, 64 KiB reads",
    "1b": "openai SDK chunks",
    "1c": "raw SSE, one event a chunk",
    "6a": "async, {n:,} on one client",
    "6b": "async, {n:,} on clients of 100",
    "6c": "async, a client a stream",
    "6d": "sync, {n:,} threads, one client",
    "7a": "Chat Completions, raw",
    "7b": "Responses, raw",
    "7c": "Messages, raw",
    "7g": "Gemini, raw",
    "8": "Gemini, google-genai SDK",
    "9a": "WebSocket, sync SDK",
    "9b": "WebSocket, async SDK",
}
RUN_COLORS = ("#0072B2", "#56B4E9", "#009E73", "#CC79A7")
_STREAMS = re.compile(r"([0-9][0-9,]*) concurrent")


def _value(run: Run, key: str, name: str) -> float | None:
    """A ratio of the row: a number, or the watchdog's entry of a per-client mapping."""
    value = run.data(key, name, optional=True)
    if value is None:
        return None
    return run.number(key, name, "watchdog") if isinstance(value, dict) else run.number(key, name)


def _ratios(run: Run, key: str) -> tuple[float | None, float | None]:
    """(wall, CPU) ratio, watchdog / plain. Figures 1, 7 and 8 keep the wall ratio as
    ``ratio`` beside ``cpu_ratio``; figure 9 as ``wall_ratio``; figure 6 keeps only the CPU
    ratio, as ``ratio``."""
    cpu = _value(run, key, "cpu_ratio")
    if cpu is not None:
        wall = _value(run, key, "wall_ratio")
        return (wall if wall is not None else _value(run, key, "ratio")), cpu
    return None, _value(run, key, "ratio")


def _streams(run: Run, key: str) -> int | None:
    if run.data(key, "streams", optional=True) is not None:
        return int(run.number(key, "streams"))
    row = run.row(key) or {}
    found = _STREAMS.search(str(row.get("figure", "")))
    return int(found.group(1).replace(",", "")) if found else None


def _label(run: Run, key: str) -> str:
    name = SHORT.get(key.split("/")[0], str((run.row(key) or {}).get("figure", ""))[:28])
    return f"{key}  {name.format(n=_streams(run, key) or 0)}"


Found = dict[tuple[str, int], tuple[float | None, float | None]]


def _bars(ax: Axes, side: int, keys: list[str], found: Found, runs: Sequence[Run]) -> None:
    """One panel: a bar from 1.0 per figure and run, its value at its end; the targets."""
    height = 0.8 / len(runs)
    for row, key in enumerate(keys):
        pairs = [found.get((key, index)) for index in range(len(runs))]
        if all(pair is None or pair[side] is None for pair in pairs):
            ax.annotate(  # figures 6: CPU time only
                "CPU time only",
                (1.0, row),
                xytext=(4, 0),
                textcoords="offset points",
                va="center",
                fontsize=8,
                color="#777777",
            )
        for index, pair in enumerate(pairs):
            value = None if pair is None else pair[side]
            if value is None:
                continue
            y = row - 0.4 + height * (index + 0.5)
            color = RUN_COLORS[index % len(RUN_COLORS)]
            ax.barh(y, value - 1.0, height * 0.9, left=1.0, color=color)
            ax.annotate(
                f"{value:.2f}x",
                (value, y),
                xytext=(3 if value >= 1.0 else -3, 0),
                textcoords="offset points",
                ha="left" if value >= 1.0 else "right",
                va="center",
                fontsize=7.5,
            )
        # Figures 6 and 9 set their target on CPU time only.
        target = target_value(runs[0], key, "x") if side == 1 or key[0] not in "69" else None
        if target is not None:
            ax.vlines(target, row - 0.45, row + 0.45, colors="#222222", linestyles=":")
    ax.axvline(1.0, color="#222222", linewidth=1.0)
    ax.set_ylim(len(keys) - 0.5, -0.5)
    ax.grid(axis="y", visible=False)
    ax.margins(x=0.12)
    ax.set_xlabel("ratio (x plain)")


def ratios(figure: SubFigure, runs: Sequence[Run]) -> bool:
    """Wall and CPU time, watchdog / plain, by figure and run: bars from 1.0 (no cost)."""
    keys: list[str] = []
    labels: dict[str, str] = {}
    found: Found = {}
    for index, run in enumerate(runs):
        for key in run.rows:
            wall, cpu = _ratios(run, key)
            if wall is None and cpu is None:
                continue
            found[key, index] = wall, cpu
            if key not in keys:
                keys.append(key)
                labels[key] = _label(run, key)
    if not keys:
        return False
    figure.figure.set_size_inches(9.6, 2.0 + 0.4 * len(keys) * max(1, len(runs)) ** 0.5)
    axes = figure.subplots(1, 2, sharey=True)
    for side, ax in enumerate(axes):
        _bars(ax, side, keys, found, runs)
    axes[0].set_yticks(range(len(keys)), [labels[k] for k in keys])
    axes[0].set_title("wall time, watchdog / plain", loc="left")
    axes[1].set_title("CPU time, watchdog / plain", loc="left")
    handles: list[Patch | Line2D] = [
        Patch(color=RUN_COLORS[i % len(RUN_COLORS)], label=f"flavor {run.label}")
        for i, run in enumerate(runs)
    ]
    handles.append(Line2D([], [], color="#222222", linestyle=":", label="the figure's target"))
    figure.legend(handles=handles, loc="outside lower center", ncols=len(handles))
    figure.suptitle(
        "What the watchdog costs: WatchdogTransport's time over the plain\nclient's, by"
        " figure and flavor (1.0: no cost)",
        fontweight="bold",
    )
    return True


@dataclass(frozen=True)
class _Point:
    streams: int
    cpu: dict[str, float]  # seconds a stream, by client
    memory: dict[str, float]  # KiB a stream, by client (absent: not measured)


def _point(run: Run, key: str) -> _Point | None:
    streams = _streams(run, key)
    if not streams:
        return None
    cpu, memory = {}, {}
    for client in ("plain", "watchdog"):
        samples = run.data(key, "samples", client)
        found = [s.get("cpu") for s in samples if isinstance(s, dict)] if samples else []
        seconds = [float(s) for s in found if isinstance(s, (int, float))]
        if not seconds or len(seconds) != len(samples):
            raise run.error(f"data.samples.{client}: not a list of samples with their cpu", key)
        cpu[client] = statistics.median(seconds) / streams
        grown = run.data(key, "memory_per_stream_bytes", client, optional=True)
        if grown is not None:
            memory[client] = run.number(key, "memory_per_stream_bytes", client) / 1024
    return _Point(streams, cpu, memory)


#: The series of figure 6: (title, marker, line style, which rows).
SERIES: tuple[tuple[str, str, LineStyleType, Callable[[str], bool]], ...] = (
    ("async, a client per stream (6c)", "o", "-", lambda key: key.startswith("6c/")),
    ("async, shared clients (6a, 6b)", "s", "--", lambda key: key in ("6a", "6b")),
    ("sync, threads sharing a client (6d)", "^", ":", lambda key: key == "6d"),
)


def _draw(ax: Axes, points: list[_Point], what: str, marker: str, style: LineStyleType) -> None:
    for client in ("plain", "watchdog"):
        shown = [p for p in points if client in getattr(p, what)]
        xs = [p.streams for p in shown]
        ys = [getattr(p, what)[client] * (1e3 if what == "cpu" else 1.0) for p in shown]
        ax.plot(xs, ys, marker=marker, linestyle=style, color=CLIENT_COLORS[client])
    if style != "-":
        return
    for p in points:  # what the watchdog adds a stream, on the main series
        values = getattr(p, what)
        if "plain" in values and "watchdog" in values:
            extra = values["watchdog"] - values["plain"]
            text = f"{extra * 1e6:+,.0f} µs" if what == "cpu" else f"{extra:+.1f} KiB"
            y = values["watchdog"] * (1e3 if what == "cpu" else 1.0)
            ax.annotate(
                text,
                (p.streams, y),
                xytext=(0, 6),
                textcoords="offset points",
                ha="center",
                fontsize=8,
                color=CLIENT_COLORS["watchdog"],
            )


def cost_per_stream(figure: SubFigure, runs: Sequence[Run]) -> bool:
    """CPU and memory a stream against concurrent streams, a column per run."""
    series = [
        [[p for k in run.rows if pick(k) and (p := _point(run, k))] for _, _, _, pick in SERIES]
        for run in runs
    ]
    if not any(points for run_series in series for points in run_series):
        return False
    figure.figure.set_size_inches(max(9.6, 4.4 * len(runs) + 0.8), 7.4)
    axes = figure.subplots(2, len(runs), sharey="row", squeeze=False)
    for column, (run, run_series) in enumerate(zip(runs, series, strict=True)):
        for row, what in enumerate(("cpu", "memory")):
            ax = axes[row][column]
            for (_, marker, style, _), points in zip(SERIES, run_series, strict=True):
                _draw(ax, sorted(points, key=lambda p: p.streams), what, marker, style)
            ax.set_xscale("log")
            ax.set_xlim(100, 20_000)
            ax.set_xticks([250, 1_000, 10_000], ["250", "1,000", "10,000"])
            ax.set_xlabel("concurrent streams (log scale)")
        axes[0][column].set_title(f"flavor {run.label}: CPU time a stream", loc="left")
        axes[1][column].set_title(f"flavor {run.label}: memory a stream", loc="left")
    for row_axes in axes:  # shared within a row: room for the labels above the points
        row_axes[0].set_ylim(0.0, row_axes[0].get_ylim()[1] * 1.15)
    axes[0][0].set_ylabel("client CPU a stream (ms)")
    axes[1][0].set_ylabel("peak resident set a stream (KiB)")
    handles = [
        Line2D([], [], color=CLIENT_COLORS["watchdog"], linewidth=6, label="WatchdogTransport"),
        Line2D([], [], color=CLIENT_COLORS["plain"], linewidth=6, label="plain client"),
        Line2D([], [], linestyle="", label="labels: the watchdog's extra"),
    ]
    handles += [
        Line2D([], [], color="#444444", marker=marker, linestyle=style, label=title)
        for title, marker, style, _ in SERIES
    ]
    figure.legend(handles=handles, loc="outside lower center", ncols=3)
    figure.suptitle(
        "Cost a stream against concurrent streams (raw SSE): WatchdogTransport\nagainst"
        " the plain client",
        fontweight="bold",
    )
    return True
