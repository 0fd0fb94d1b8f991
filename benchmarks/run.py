#!/usr/bin/env python3
"""Run the hermes-transport benchmarks and print their table.

    python3 benchmarks/run.py                   # every figure, a few minutes
    python3 benchmarks/run.py --quick           # smaller sizes: checks the harness quickly
    python3 benchmarks/run.py --only interrupt --only stall
    python3 benchmarks/run.py --flavor httpx2   # every client on httpx2 instead of httpx
    python3 benchmarks/run.py --plots DIR       # and then the plots of this run, as SVG
    python3 benchmarks/run.py --plots DIR --from httpx.json --from httpx2.json

The first run creates a virtual environment, .venvs/bench, with this project (editable,
with httpx2), the newest openai and matplotlib (requirements-bench.txt); later runs reuse
it, and reinstall only when setup.cfg, pyproject.toml, requirements-bench.txt or what it
installs changed (or with --reinstall). The figures are measured in that environment,
printed as a Markdown table, and written with every sample as JSON
(benchmarks/results/latest.json unless --json says otherwise).

--plots DIR writes SVG plots of the results into DIR (benchmarks/plots.py says which):
after the run, of its JSON file; with --from (repeatable: one results file of an earlier
run each, e.g. one per flavor), of those files, measuring nothing (with the interpreter
that runs this script if it has matplotlib, else in .venvs/bench)."""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venvs" / "bench"
STAMP = "hermes-bench-installed"
# The keys of benchmarks.suite.FIGURES: this script runs before the environment exists,
# so it imports nothing of the package until it runs inside it.
NAMES = (
    "throughput",
    "event_chunks",
    "interrupt",
    "stall",
    "threads",
    "connections",
    "async",
    "async_scale",
    "sync_scale",
    "cycles",
    "wires",
    "gemini",
    "mcp",
    "websocket",
)
# benchmarks.flavor.FLAVORS and FLAVOR_VARIABLE, for the same reason.
FLAVORS = ("httpx", "httpx2")
FLAVOR_VARIABLE = "HERMES_BENCH_FLAVOR"
#: The plots' requirement (matplotlib, pinned): a file, so that the test environment that
#: runs the plots' test installs the same (tools/run_tests.py).
PLOT_REQUIREMENTS = "requirements-bench.txt"
#: What the environment installs; part of its fingerprint (with the files it names), so that
#: a change reinstalls.
INSTALL = ("-e", ".[httpx2,gemini,mcp,websocket]", "openai", "-r", PLOT_REQUIREMENTS)
DEFAULT_JSON = ROOT / "benchmarks" / "results" / "latest.json"


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml", PLOT_REQUIREMENTS):
        path = ROOT / name
        digest.update(path.read_bytes() if path.exists() else b"")
    digest.update(" ".join(INSTALL).encode())
    return digest.hexdigest()


def _prepare(reinstall: bool) -> Path:
    """The benchmark environment's python, created and installed if needed."""
    python = _python(VENV)
    if not python.exists():
        print(f"creating {VENV.relative_to(ROOT)}", flush=True)
        venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
    stamp = VENV / STAMP
    if reinstall or not stamp.exists() or stamp.read_text() != _fingerprint():
        command = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        command += ["--upgrade", *INSTALL]
        print("+", " ".join(command[1:]), flush=True)
        if subprocess.run(command, cwd=ROOT, check=False).returncode != 0:
            raise SystemExit("installing the benchmark environment failed")
        stamp.write_text(_fingerprint())
    return python


def _in_bench_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a quick check")
    parser.add_argument(
        "--only",
        action="append",
        choices=NAMES,
        metavar="NAME",
        help=f"run only this figure (repeatable): {', '.join(NAMES)}",
    )
    parser.add_argument(
        "--json",
        type=Path,
        help="where to write the results (default: benchmarks/results/latest.json)",
    )
    parser.add_argument(
        "--flavor",
        choices=FLAVORS,
        help="the HTTP library of every client, the plain baseline's included (default: httpx)",
    )
    parser.add_argument(
        "--plots",
        type=Path,
        metavar="DIR",
        help="write SVG plots of the results into DIR (after the run, or of --from's files)",
    )
    parser.add_argument(
        "--from",
        dest="plot_from",
        action="append",
        type=Path,
        metavar="RESULTS",
        help="with --plots: plot this results file of an earlier run (repeatable, e.g. one per"
        " flavor) instead of measuring",
    )
    parser.add_argument("--reinstall", action="store_true", help="reinstall the environment")
    args = parser.parse_args(argv)
    if args.plot_from:
        if args.plots is None:
            parser.error("--from needs --plots DIR: it names the results to plot")
        measuring = [
            option
            for option, given in (
                ("--quick", args.quick),
                ("--only", args.only),
                ("--json", args.json),
                ("--flavor", args.flavor),
            )
            if given
        ]
        if measuring:
            parser.error(f"--from plots saved results, it measures nothing: drop {measuring[0]}")
    return args


def _shown(path: Path) -> Path:
    try:
        return path.resolve().relative_to(Path.cwd())
    except ValueError:
        return path


def _plot(results: list[Path], directory: Path) -> int:
    """Write the plots of ``results`` into ``directory``; exit status 1 if they cannot be."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.plots import ResultsError, write_plots

    try:
        written = write_plots(results, directory)
    except ResultsError as exc:
        print(f"plots: {exc}", file=sys.stderr)
        return 1
    for path in written:
        print(f"plot: {_shown(path)}")
    return 0


def _can_plot_here() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    if args.plot_from and (_in_bench_venv() or _can_plot_here()):
        return _plot(args.plot_from, args.plots)
    if not _in_bench_venv():
        python = _prepare(args.reinstall)
        return subprocess.run(
            [str(python), str(Path(__file__).resolve()), *argv], check=False
        ).returncode
    sys.path.insert(0, str(ROOT))  # `benchmarks` as a package, in this process and its children
    # Before anything of the package is imported: benchmarks.flavor reads it once, and the
    # processes that the figures spawn inherit it.
    os.environ[FLAVOR_VARIABLE] = args.flavor or FLAVORS[0]
    from benchmarks.suite import run_suite

    names = [name for name in NAMES if args.only is None or name in args.only]
    json_path = (args.json or DEFAULT_JSON).resolve()
    status = run_suite(names, args.quick, json_path)
    if args.plots is not None:
        status = max(status, _plot([json_path], args.plots))
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
