"""Plots of figures 2a-2c and 3a-3b: interrupt latency and stall lateness, every trial.

Each is an empirical distribution (the share of trials done by a given time), one line per
client and run, on a log time axis: the watchdog's milliseconds and the seed model's
hundreds of milliseconds (its monitor wakes every 0.3 s) fit one picture. The target is a
dotted vertical line; the legend gives each line's p99.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from matplotlib.axes import Axes
from matplotlib.figure import SubFigure
from matplotlib.ticker import FuncFormatter, NullFormatter

from .measure import fmt_ms, percentile
from .plot_results import CLIENT_COLORS, FLAVOR_STYLES, Run, target_value

__all__ = ["interrupt", "stall"]

INTERRUPT_STAGES = (
    ("2a", "before the headers,\nnew connection"),
    ("2b", "before the headers,\nreused connection"),
    ("2c", "mid-stream,\nafter the first chunk"),
)
STALL_KINDS = (
    ("3a", "silent server"),
    ("3b", "keep-alive comments only"),
)
NAMES = {
    "watchdog": "watchdog",
    "seed": "seed model",
    "plain": "plain, read timeout",
}
SEED_REUSED = (
    "seed model: n/a, no socket to shut\ndown before a reused connection's\nheaders"
    " (it waits for its read timeout)"
)
PLAIN_COMMENTS = "plain: never detected (the comments\nreset its read timeout)"
# Below this (ms), a symmetric-log axis is linear: room for early (negative) lateness.
LINEAR_BELOW_MS = 0.1


def _line(ax: Axes, samples_s: Sequence[float], client: str, run: Run, style: str) -> None:
    """One empirical distribution, in milliseconds, labelled with its p50 and p99."""
    if not samples_s:
        return
    p50, p99 = fmt_ms(percentile(samples_s, 50)), fmt_ms(percentile(samples_s, 99))
    label = f"{NAMES[client]}, {run.label}: {p50} / {p99}"
    ax.ecdf(
        [s * 1e3 for s in samples_s],
        color=CLIENT_COLORS[client],
        linestyle=style,
        linewidth=1.4,
        label=label,
    )


def _target(ax: Axes, runs: Sequence[Run], key: str, what: str) -> None:
    targets = {t for run in runs if (t := target_value(run, key, "ms")) is not None}
    for value in sorted(targets):
        ax.axvline(value, color="#222222", linestyle=":", linewidth=1.0)
        ax.annotate(
            f"target: {what} < {value:g} ms",
            (value, 0.02),
            xytext=(3, 0),
            textcoords="offset points",
            fontsize=8,
            rotation=90,
            va="bottom",
        )


def _note(ax: Axes, text: str) -> None:
    """A line of the panel's legend without a series: why a client has none here."""
    ax.plot([], [], linestyle="none", label=text)


def _tick(value: float, _position: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1 or value == 0 else f"{value:g}"


def _axes(
    axes: Sequence[Axes], keys: Sequence[tuple[str, str]], samples_ms: list[float], what: str
) -> None:
    """Titles, one shared time axis for the panels (decades, linear around 0 if a sample is
    not above it), the share of trials upwards, and each panel's legend below it."""
    positive = [v for v in samples_ms if v > 0] or [1.0]
    low = 10.0 ** math.floor(math.log10(min(positive)))
    high = 10.0 ** math.ceil(math.log10(max(positive)))
    for ax, (key, title) in zip(axes, keys, strict=True):
        ax.set_title(f"{key}: {title}", loc="left")
        if samples_ms and min(samples_ms) <= 0:
            ax.set_xscale("symlog", linthresh=LINEAR_BELOW_MS)
            ax.set_xlim(min(-LINEAR_BELOW_MS, min(samples_ms) * 1.5), high)
            ax.axvline(0.0, color="#999999", linewidth=0.8)
            ax.set_xlabel(f"{what} (ms, log; linear within ±{LINEAR_BELOW_MS:g})")
        else:
            ax.set_xscale("log")
            ax.set_xlim(low, high)
            ax.set_xlabel(f"{what} (ms, log scale)")
        ax.xaxis.set_major_formatter(FuncFormatter(_tick))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_ylim(0.0, 1.02)
        ax.set_yticks([0.0, 0.25, 0.5, 0.75, 0.99], ["0", "25 %", "50 %", "75 %", "99 %"])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(
                loc="upper center",
                bbox_to_anchor=(0.5, -0.2),
                handlelength=2.4,
                title="p50 / p99 (ms)",
            )


def _all_ms(
    runs: Sequence[Run], keys: Sequence[tuple[str, str]], clients: Sequence[str]
) -> list[float]:
    return [
        sample * 1e3
        for run in runs
        for key, _ in keys
        if run.row(key) is not None
        for client in clients
        if run.data(key, client, optional=True) is not None
        for sample in run.numbers(key, client, "samples_s")
    ]


def interrupt(figure: SubFigure, runs: Sequence[Run]) -> bool:
    """2a-2c: ``interrupt()`` to the exception, watchdog against the seed model."""
    if not any(run.row(key) for run in runs for key, _ in INTERRUPT_STAGES):
        return False
    axes = figure.subplots(1, len(INTERRUPT_STAGES), sharex=True, sharey=True)
    for ax, (key, _title) in zip(axes, INTERRUPT_STAGES, strict=True):
        seed_missing = _lines(ax, runs, key, ("watchdog", "seed"), "seed")
        _target(ax, runs, key, "p99")
        if seed_missing:
            _note(ax, SEED_REUSED)
    samples = _all_ms(runs, INTERRUPT_STAGES, ("watchdog", "seed"))
    _axes(axes, INTERRUPT_STAGES, samples, "interrupt() to exception")
    axes[0].set_ylabel("share of trials done")
    figure.suptitle(
        "Interrupt latency through the openai SDK: WatchdogTransport against the\nseed"
        " design's model (a monitor thread per call, waking every 0.3 s)",
        fontweight="bold",
    )
    return True


def _lines(ax: Axes, runs: Sequence[Run], key: str, clients: Sequence[str], absent: str) -> bool:
    """Each client's samples of row ``key``, per run; whether ``absent``'s were missing."""
    missing = False
    for client in clients:
        for run, style in zip(runs, FLAVOR_STYLES * len(runs), strict=False):
            if run.row(key) is None:
                continue
            if run.data(key, client, optional=True) is not None:
                _line(ax, run.numbers(key, client, "samples_s"), client, run, style)
            elif client == absent:
                missing = True
    return missing


def stall(figure: SubFigure, runs: Sequence[Run]) -> bool:
    """3a-3b: how long after the stale budget a stall surfaces, each client."""
    if not any(run.row(key) for run in runs for key, _ in STALL_KINDS):
        return False
    axes = figure.subplots(1, len(STALL_KINDS), sharex=True, sharey=True)
    clients = ("watchdog", "plain", "seed")
    for ax, (key, _title) in zip(axes, STALL_KINDS, strict=True):
        plain_missing = _lines(ax, runs, key, clients, "plain")
        _target(ax, runs, key, "p99")
        if plain_missing:
            _note(ax, PLAIN_COMMENTS)
    what = "error - (last event + 0.2 s budget)"
    _axes(axes, STALL_KINDS, _all_ms(runs, STALL_KINDS, clients), what)
    axes[0].set_ylabel("share of trials detected")
    figure.suptitle(
        "Stall-detection lateness through the openai SDK: how long after\nthe stale budget"
        " the caller gets the error",
        fontweight="bold",
    )
    return True
