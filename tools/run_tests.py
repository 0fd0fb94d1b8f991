#!/usr/bin/env python3
"""Install and run the whole test suite once per supported openai major.

Each major gets its own virtual environment under ``.venvs/`` (created on first
use, refreshed on every run) with this project (editable, with its ``httpx2``
extra) and ``requirements-test.txt`` installed, plus the newest release of that
openai major and that major's own requirement files, if it has any
(``MAJOR_REQUIREMENTS``): what only that major's tests use, such as the OpenAI
Agents SDK (``requirements-agents.txt``), which requires openai 3.x and is
installed for major 3 only; its tests skip where it is not installed.

First, once, the check gate (``tools/check.py``) runs in the newest major's
environment: ``ruff check``, ``ruff format --check`` and ``mypy --strict`` on
the package, the tests (the type test of the public API included) and the
tools. Then, for each major, pytest runs in its environment, and after it the
SDK transparency check (``tools/sdk_transparency.py``): the installed openai
and anthropic SDKs' own client and streaming tests, plainly and with every
client on the watchdog, must give the same results. Tests marked ``once`` (they
do not depend on the openai major) run only with the newest major tested. The gate counts as one
test in the summary, and the transparency check as one per major. The script
exits non-zero if the gate, any run or any check fails, and ends with one
summary line.

    python3 tools/run_tests.py                      # every major
    python3 tools/run_tests.py --major 2            # just one (the gate still runs, on the newest)
    python3 tools/run_tests.py --no-check           # without the check gate
    python3 tools/run_tests.py --no-transparency    # without the SDK transparency check
    python3 tools/run_tests.py -- -k stall          # extra pytest arguments after --
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
# The test runner, what the tests use and the check gate's tools: no extra of the package.
REQUIREMENTS = "requirements-test.txt"
# What one major's environment installs besides: packages that require that major.
MAJOR_REQUIREMENTS: dict[str, tuple[str, ...]] = {
    "3": ("requirements-agents.txt",),  # the OpenAI Agents SDK: openai>=3,<4 and httpx2
}
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
    openai = f"openai>={major},<{int(major) + 1}"
    extra = [arg for name in MAJOR_REQUIREMENTS.get(major, ()) for arg in ("-r", name)]
    result = _run([*install, "--upgrade", "-e", ".[httpx2]", "-r", REQUIREMENTS, *extra, openai])
    if result.returncode != 0:
        raise SystemExit(f"installing the test environment for openai {major}.x failed")
    return _python(env_dir)


def _pytest(python: Path, pytest_args: list[str]) -> tuple[int, int, int]:
    """Run pytest there, echoing it live: (passed, failed or errors, exit status).

    Exit status 5 (no test selected, e.g. no timing test matched a -k) is a pass.
    """
    cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
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
    if proc.returncode == 5:
        return 0, 0, 0
    counts = {kind: int(n) for n, kind in SUMMARY.findall(last)}
    broken = counts.get("failed", 0) + counts.get("errors", 0) + counts.get("error", 0)
    if proc.returncode != 0:
        broken = max(broken, 1)
    return counts.get("passed", 0), broken, proc.returncode


def _check(python: Path) -> bool:
    """The check gate, in this environment; whether it passed."""
    started = time.monotonic()
    print("\n=== check gate ===", flush=True)
    check = _run([str(python), "tools/check.py"])
    took = time.monotonic() - started
    print(f"=== check gate: exit {check.returncode} in {took:.0f} s ===", flush=True)
    return check.returncode == 0


def _transparency(major: str, version: str) -> bool:
    """The SDK transparency check of this major; whether it passed."""
    started = time.monotonic()
    print(f"\n=== openai {version}: SDK transparency ===", flush=True)
    # The anthropic SDK's suite does not depend on the openai major: once, with the newest.
    suites = ["--suite", "openai"] + (["--suite", "anthropic"] if major == MAJORS[-1] else [])
    check = _run([sys.executable, "tools/sdk_transparency.py", "--major", major, *suites])
    took = time.monotonic() - started
    print(
        f"=== openai {version}: SDK transparency: exit {check.returncode} in {took:.0f} s ===",
        flush=True,
    )
    return check.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--major", choices=MAJORS, action="append", help="openai major(s) to test")
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="skip the check gate (tools/check.py: ruff and mypy)",
    )
    parser.add_argument(
        "--no-transparency",
        action="store_true",
        help="skip the SDK transparency check (tools/sdk_transparency.py)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    totals = {"passed": 0, "failed": 0}
    failed_majors = []
    pythons: dict[str, Path] = {}
    gate_failed = False
    if not args.no_check:
        # Once, before the suites, with the tools of the newest major's environment:
        # the same verdict whichever majors are tested.
        pythons[MAJORS[-1]] = _prepare(MAJORS[-1])
        gate_failed = not _check(pythons[MAJORS[-1]])
        totals["failed" if gate_failed else "passed"] += 1
    for major in args.major or MAJORS:
        started = time.monotonic()
        python = pythons.get(major) or _prepare(major)
        version = subprocess.run(
            [str(python), "-c", "import openai; print(openai.__version__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        print(f"\n=== openai {version} ===", flush=True)
        # Four workers on any machine: the tests mostly wait on budgets and timers
        # (a serial run uses about a third of one core), so four fit two cores.
        # Tests bound by wall-clock time (marked `timing`) run after that pass, on
        # their own with one worker per core, so a busy machine does not make them late.
        # Tests marked `once` do not depend on the openai major: only the newest
        # major tested runs them.
        once = "" if major == max(args.major or MAJORS) else " and not once"
        returncode = 0
        for passes in (
            ["-n", "4", "-m", f"not timing{once}"],
            ["-n", "2", "-m", f"timing{once}"],
        ):
            passed, broken, code = _pytest(python, [*passes, *args.pytest_args])
            totals["passed"] += passed
            totals["failed"] += broken
            returncode = returncode or code
        if returncode != 0:
            failed_majors.append(version)
        took = time.monotonic() - started
        print(f"=== openai {version}: exit {returncode} in {took:.0f} s ===", flush=True)
        if not args.no_transparency:
            if _transparency(major, version):
                totals["passed"] += 1
            else:
                totals["failed"] += 1
                failed_majors.append(f"{version} (SDK transparency)")
    if gate_failed:
        print("\nFAILED: the check gate (tools/check.py; its last lines say which check)")
    if failed_majors:
        print(f"\nFAILED on openai {', '.join(failed_majors)}")
    print(f"\n{totals['passed']} passed, {totals['failed']} failed")
    return 1 if gate_failed or failed_majors else 0


if __name__ == "__main__":
    sys.exit(main())
