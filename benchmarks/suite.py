"""Run the selected figures, print the table, write the JSON file."""

from __future__ import annotations

import importlib
import json
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import machine
from .flavor import FLAVOR
from .report import Row, render

__all__ = ["FIGURES", "run_suite"]

#: Figure name (for --only) -> module with ``run(quick: bool) -> list[Row]``.
FIGURES = {
    "throughput": "benchmarks.fig_throughput",
    "event_chunks": "benchmarks.fig_event_chunks",
    "interrupt": "benchmarks.fig_interrupt",
    "stall": "benchmarks.fig_stall",
    "threads": "benchmarks.fig_threads",
    "connections": "benchmarks.fig_connections",
    "async": "benchmarks.fig_async",
    "async_scale": "benchmarks.fig_async_scale",
    "sync_scale": "benchmarks.fig_sync_scale",
    "cycles": "benchmarks.fig_cycles",
    "wires": "benchmarks.fig_wires",
    "gemini": "benchmarks.fig_gemini",
    "mcp": "benchmarks.fig_mcp",
    "websocket": "benchmarks.fig_websocket",
}


def _run_figure(name: str, quick: bool) -> list[Row]:
    module = importlib.import_module(FIGURES[name])
    try:
        rows: list[Row] = module.run(quick)
    except Exception as exc:  # one broken figure must not hide the others
        traceback.print_exc()
        return [
            Row(
                key=name,
                figure=f"{name}: the measurement failed",
                cells={},
                target="",
                verdict="ERROR",
                notes=[f"{type(exc).__name__}: {exc}"],
            )
        ]
    return rows


def run_suite(names: list[str], quick: bool, json_path: Path) -> int:
    """Measure ``names`` in order; print and save the table. Exit status 1 on an ERROR."""
    started = time.monotonic()
    when = datetime.now(timezone.utc)
    info = machine.describe()
    rows: list[Row] = []
    for name in names:
        print(f"== {name}", file=sys.stderr, flush=True)
        figure_started = time.monotonic()
        rows += _run_figure(name, quick)
        print(f"== {name}: {time.monotonic() - figure_started:.0f} s", file=sys.stderr, flush=True)
    took = time.monotonic() - started
    kind = "quick run (--quick): smaller sizes" if quick else "full run"
    header = (
        f"hermes-transport benchmarks, {when:%Y-%m-%d %H:%M} UTC, {kind}, flavor {FLAVOR},"
        f" {took:.0f} s\nMachine: {machine.summary(info)}"
    )
    print(f"\n{header}\n\n{render(rows, FLAVOR)}")
    document: dict[str, Any] = {
        "date": when.isoformat(timespec="seconds"),
        "quick": quick,
        "flavor": FLAVOR,
        "figures": names,
        "seconds": round(took, 1),
        "machine": info,
        "rows": [row.as_json() for row in rows],
    }
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(document, indent=1, default=str) + "\n", encoding="utf-8")
    try:
        shown = json_path.relative_to(Path.cwd())
    except ValueError:
        shown = json_path
    print(f"\nJSON: {shown}")
    return 1 if any(row.verdict == "ERROR" for row in rows) else 0
