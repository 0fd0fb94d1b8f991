#!/usr/bin/env python3
"""Run the hermes-transport benchmarks and print their table.

    python3 benchmarks/run.py                   # every figure, a few minutes
    python3 benchmarks/run.py --quick           # smaller sizes: checks the harness quickly
    python3 benchmarks/run.py --only interrupt --only stall
    python3 benchmarks/run.py --flavor httpx2   # every client on httpx2 instead of httpx

The first run creates a virtual environment, .venvs/bench, with this project (editable,
with httpx2) and the newest openai; later runs reuse it, and reinstall only when
setup.cfg, pyproject.toml or what it installs changed (or with --reinstall). The figures
are measured in that environment, printed as a Markdown table, and written with every
sample as JSON (benchmarks/results/latest.json unless --json says otherwise).
"""

from __future__ import annotations

import argparse
import hashlib
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
#: What the environment installs; part of its fingerprint, so that a change reinstalls.
INSTALL = ("-e", ".[httpx2,gemini,mcp,websocket]", "openai")


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"


def _fingerprint() -> str:
    digest = hashlib.sha256()
    for name in ("setup.cfg", "pyproject.toml"):
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
        default=ROOT / "benchmarks" / "results" / "latest.json",
        help="where to write the results (default: benchmarks/results/latest.json)",
    )
    parser.add_argument(
        "--flavor",
        choices=FLAVORS,
        default="httpx",
        help="the HTTP library of every client, the plain baseline's included (default: httpx)",
    )
    parser.add_argument("--reinstall", action="store_true", help="reinstall the environment")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = _arguments(argv)
    if not _in_bench_venv():
        python = _prepare(args.reinstall)
        return subprocess.run(
            [str(python), str(Path(__file__).resolve()), *argv], check=False
        ).returncode
    sys.path.insert(0, str(ROOT))  # `benchmarks` as a package, in this process and its children
    # Before anything of the package is imported: benchmarks.flavor reads it once, and the
    # processes that the figures spawn inherit it.
    os.environ[FLAVOR_VARIABLE] = args.flavor
    from benchmarks.suite import run_suite

    names = [name for name in NAMES if args.only is None or name in args.only]
    return run_suite(names, args.quick, args.json.resolve())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
