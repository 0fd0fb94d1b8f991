#!/usr/bin/env python3
"""Install and run the whole test suite once per supported openai major.

Each major gets its own virtual environment under ``.venvs/`` (created on first
use, refreshed on every run) with this project and its test extra installed,
plus the newest release of that openai major. Then pytest runs there. The
script exits non-zero if any run fails, and ends with one summary line.

    python3 tools/run_tests.py              # every major
    python3 tools/run_tests.py --major 2    # just one
    python3 tools/run_tests.py -- -k stall  # extra pytest arguments after --
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAJORS = ("1", "2", "3")
SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped|xfailed|xpassed)")


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, text=True, check=False)


def _prepare(major: str) -> Path:
    env_dir = ROOT / ".venvs" / f"openai{major}"
    if not _python(env_dir).exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = str(_python(env_dir))
    install = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    result = _run([*install, "--upgrade", "-e", ".[test]", f"openai>={major},<{int(major) + 1}"])
    if result.returncode != 0:
        raise SystemExit(f"installing the test environment for openai {major}.x failed")
    return _python(env_dir)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--major", choices=MAJORS, action="append", help="openai major(s) to test")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    totals = {"passed": 0, "failed": 0}
    failed_majors = []
    for major in args.major or MAJORS:
        started = time.monotonic()
        python = _prepare(major)
        version = subprocess.run(
            [str(python), "-c", "import openai; print(openai.__version__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(f"\n=== openai {version} ===", flush=True)
        # Four workers on any machine: the tests mostly wait on budgets and timers
        # (a serial run uses about a third of one core), so four fit two cores.
        cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-n", "4", *args.pytest_args]
        print("+", " ".join(cmd), flush=True)
        last = ""
        with subprocess.Popen(
            cmd, cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        ) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:  # echoed live, the last non-empty one kept
                sys.stdout.write(line)
                sys.stdout.flush()
                last = line.strip() or last
        counts = {kind: int(n) for n, kind in SUMMARY.findall(last)}
        broken = counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0)
        if proc.returncode != 0:
            failed_majors.append(version)
            broken = max(broken, 1)
        totals["passed"] += counts.get("passed", 0)
        totals["failed"] += broken
        took = time.monotonic() - started
        print(f"=== openai {version}: exit {proc.returncode} in {took:.0f} s ===", flush=True)
    if failed_majors:
        print(f"\nFAILED on openai {', '.join(failed_majors)}")
    print(f"\n{totals['passed']} passed, {totals['failed']} failed")
    return 1 if failed_majors else 0


if __name__ == "__main__":
    sys.exit(main())
