#!/usr/bin/env python3
"""Install and run the whole test suite once per supported openai major, then the frameworks'.

Each major gets its own virtual environment under ``.venvs/`` (created on first
use, refreshed on every run) with this project (editable, with its ``httpx2``
extra) and ``requirements-test.txt`` installed, plus the newest release of that
openai major. The frameworks of the README's "Works with" recipes get
environments of their own (``FRAMEWORK_ENVIRONMENTS``): they do not install
beside one another (LlamaIndex requires openai<3, pydantic-ai openai>=3.31), and
none of them reaches the project's own runs. Packages are installed with uv
(pinned in ``INSTALLER``, itself installed by pip into ``.venvs/tools``), which
builds an environment in seconds where pip takes a minute; where uv cannot be
installed, pip does it.

First, once, the check gate (``tools/check.py``) runs in the newest major's
environment: ``ruff check``, ``ruff format --check`` and ``mypy --strict`` on
the package, the tests (the type test of the public API included) and the
tools. Then, for each major, pytest runs in its environment (all but
``tests/frameworks/``), and after it the SDK transparency check
(``tools/sdk_transparency.py``): the installed openai and anthropic SDKs' own
client and streaming tests (and, with the newest major, google-genai's network-free
client tests), plainly and with every client on the watchdog, must give the same
results. Tests marked ``once`` (they do not depend on the openai
major) run only with the newest major tested. Last, ``tests/frameworks/`` runs
in each frameworks environment whose openai major is tested, each of its
frameworks required (``HERMES_TEST_FRAMEWORKS``): a recipe test never passes by
skipping. The gate counts as one test in the summary, and the transparency
check as one per major. The script exits non-zero if the gate, any run or any
check fails, and ends with one summary line.

    python3 tools/run_tests.py                      # every major, then the frameworks
    python3 tools/run_tests.py --major 2            # just one (the gate still runs, on the newest)
    python3 tools/run_tests.py --no-check           # without the check gate
    python3 tools/run_tests.py --no-transparency    # without the SDK transparency check
    python3 tools/run_tests.py --no-frameworks      # without the frameworks' recipe tests
    python3 tools/run_tests.py -- -k stall          # extra pytest arguments after --
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import venv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAJORS = ("1", "2", "3")
# The test runner, what the tests use and the check gate's tools: no extra of the package.
REQUIREMENTS = "requirements-test.txt"
#: The documentation site's tools, for the check gate's environment only.
DOCS_REQUIREMENTS = "requirements-docs.txt"
#: The benchmark plots' matplotlib, for the environment that runs the tests marked `once`
#: (the plots' test is one): the newest major tested, whose environment the check gate
#: prepares when that major is the newest of all.
BENCH_REQUIREMENTS = "requirements-bench.txt"
# The installer, pinned as the gate's tools are: the environments are the commit's.
INSTALLER = "uv==0.13.9"
FRAMEWORK_TESTS = "tests/frameworks"


@dataclass(frozen=True)
class Frameworks:
    """One frameworks environment: its openai major, requirement file and required modules."""

    major: str
    requirements: str
    modules: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"frameworks-openai{self.major}"


FRAMEWORK_ENVIRONMENTS = (
    Frameworks(
        "3",
        "requirements-frameworks.txt",
        (
            "agents",
            "google.genai",
            "langchain_anthropic",
            "langchain_google_genai",
            "langchain_openai",
            "litellm",
            "pydantic_ai",
        ),
    ),
    Frameworks(
        "2", "requirements-frameworks-openai2.txt", ("instructor", "llama_index.llms.openai")
    ),
)
SUMMARY = re.compile(r"(\d+) (passed|failed|error|errors|skipped|xfailed|xpassed)")


def _python(env_dir: Path) -> Path:
    return env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"


def _run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, text=True, check=False)


@cache
def _installer() -> list[str]:
    """The install command's head: uv's (``.venvs/tools``), or pip's where uv will not install."""
    tools = ROOT / ".venvs" / "tools"
    uv = (
        tools / ("Scripts" if os.name == "nt" else "bin") / ("uv.exe" if os.name == "nt" else "uv")
    )
    if not _python(tools).exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(tools)
    pip = [str(_python(tools)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    if _run([*pip, INSTALLER]).returncode != 0 or not uv.exists():
        print(f"(could not install {INSTALLER}: installing with pip instead)", flush=True)
        return []
    # Compiled at install, as pip does: else every test process compiles what it imports.
    return [str(uv), "pip", "install", "--quiet", "--compile-bytecode"]


def _prepare(name: str, major: str, requirement_files: tuple[str, ...] = ()) -> Path:
    """``.venvs/<name>``, made if missing and brought up to date: its interpreter."""
    env_dir = ROOT / ".venvs" / name
    if not _python(env_dir).exists():
        venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = str(_python(env_dir))
    head = _installer()
    if head:
        install = [*head, "--python", python]
    else:
        install = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    openai = f"openai>={major},<{int(major) + 1}"
    extra = [arg for file in requirement_files for arg in ("-r", file)]
    result = _run([*install, "--upgrade", "-e", ".[httpx2]", "-r", REQUIREMENTS, *extra, openai])
    if result.returncode != 0:
        raise SystemExit(f"installing the test environment .venvs/{name} failed")
    return _python(env_dir)


def _pytest(
    python: Path, pytest_args: list[str], env: dict[str, str] | None = None
) -> tuple[int, int, int]:
    """Run pytest there, echoing it live: (passed, failed or errors, exit status).

    Exit status 5 (no test selected, e.g. no timing test matched a -k) is a pass.
    """
    cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider", *pytest_args]
    print("+", " ".join(cmd), flush=True)
    last = ""
    with subprocess.Popen(
        cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
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
    # The anthropic and google-genai SDKs' suites do not depend on the openai major: once,
    # with the newest.
    others = ["--suite", "anthropic", "--suite", "genai"]
    suites = ["--suite", "openai"] + (others if major == MAJORS[-1] else [])
    # Its SDK environments are built with the installer chosen here (sdk_transparency.py's
    # INSTALLER_VARIABLE).
    env = {**os.environ, "HERMES_TEST_INSTALLER": json.dumps(_installer())}
    check = _run([sys.executable, "tools/sdk_transparency.py", "--major", major, *suites], env)
    took = time.monotonic() - started
    print(
        f"=== openai {version}: SDK transparency: exit {check.returncode} in {took:.0f} s ===",
        flush=True,
    )
    return check.returncode == 0


def _passes(
    python: Path,
    marks: str,
    pytest_args: list[str],
    env: dict[str, str] | None = None,
    workers: int = 4,
    *,
    timing: bool = True,
) -> tuple[int, int, int]:
    """The parallel pass, then (``timing``) the timing pass: (passed, failed, the first
    non-zero exit)."""
    # Four workers on any machine: the tests mostly wait on budgets and timers
    # (a serial run uses about a third of one core), so four fit two cores.
    # Tests bound by wall-clock time (marked `timing`) run after that pass, on
    # their own with one worker per core, so a busy machine does not make them late.
    totals = [0, 0, 0]
    parallel = ["-n", str(workers), "-m", f"not timing{marks}"]
    timed = ["-n", "2", "-m", f"timing{marks}"]
    for passes in (parallel, timed) if timing else (parallel,):
        passed, broken, code = _pytest(python, [*passes, *pytest_args], env)
        totals[0] += passed
        totals[1] += broken
        totals[2] = totals[2] or code
    return totals[0], totals[1], totals[2]


def _openai_version(python: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import openai; print(openai.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--major", choices=MAJORS, action="append", help="openai major(s) to test")
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="skip the check gate (tools/check.py: ruff, mypy and the documentation site)",
    )
    parser.add_argument(
        "--no-transparency",
        action="store_true",
        help="skip the SDK transparency check (tools/sdk_transparency.py)",
    )
    parser.add_argument(
        "--no-frameworks",
        action="store_true",
        help="skip the frameworks' recipe tests (tests/frameworks/, in their own environments)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="the contributors' fast lane: the check gate, then the newest major's parallel"
        " pass only (no timing pass, no SDK transparency, no frameworks)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    if args.quick:
        args.major = args.major or [MAJORS[-1]]
        args.no_transparency = args.no_frameworks = True
    majors = args.major or list(MAJORS)
    totals = {"passed": 0, "failed": 0}
    failed: list[str] = []
    pythons: dict[str, Path] = {}
    gate_failed = False
    if not args.no_check:
        # Once, before the suites, with the tools of the newest major's environment:
        # the same verdict whichever majors are tested.
        gate = (DOCS_REQUIREMENTS, BENCH_REQUIREMENTS)
        pythons[MAJORS[-1]] = _prepare(f"openai{MAJORS[-1]}", MAJORS[-1], gate)
        gate_failed = not _check(pythons[MAJORS[-1]])
        totals["failed" if gate_failed else "passed"] += 1
    for major in majors:
        started = time.monotonic()
        once_files = (BENCH_REQUIREMENTS,) if major == max(majors) else ()
        python = pythons.get(major) or _prepare(f"openai{major}", major, once_files)
        version = _openai_version(python)
        print(f"\n=== openai {version} ===", flush=True)
        # Tests marked `once` do not depend on the openai major: only the newest
        # major tested runs them. The frameworks' tests run in their own environments.
        once = "" if major == max(majors) else " and not once"
        passed, broken, code = _passes(
            python, once, ["--ignore", FRAMEWORK_TESTS, *args.pytest_args], timing=not args.quick
        )
        totals["passed"] += passed
        totals["failed"] += broken
        if code != 0:
            failed.append(f"openai {version}")
        took = time.monotonic() - started
        print(f"=== openai {version}: exit {code} in {took:.0f} s ===", flush=True)
        if not args.no_transparency:
            if _transparency(major, version):
                totals["passed"] += 1
            else:
                totals["failed"] += 1
                failed.append(f"openai {version} (SDK transparency)")
    for frameworks in FRAMEWORK_ENVIRONMENTS if not args.no_frameworks else ():
        if frameworks.major not in majors:
            continue
        started = time.monotonic()
        python = _prepare(frameworks.name, frameworks.major, (frameworks.requirements,))
        print(f"\n=== {frameworks.name} (openai {_openai_version(python)}) ===", flush=True)
        env = {**os.environ, "HERMES_TEST_FRAMEWORKS": ",".join(frameworks.modules)}
        # Two workers: each imports every framework of the environment (litellm alone
        # takes seconds of CPU), which costs more than two more workers gain.
        passed, broken, code = _passes(
            python, "", [FRAMEWORK_TESTS, *args.pytest_args], env, workers=2
        )
        totals["passed"] += passed
        totals["failed"] += broken
        if code != 0:
            failed.append(frameworks.name)
        took = time.monotonic() - started
        print(f"=== {frameworks.name}: exit {code} in {took:.0f} s ===", flush=True)
    if gate_failed:
        print("\nFAILED: the check gate (tools/check.py; its last lines say which check)")
    if failed:
        print(f"\nFAILED: {', '.join(failed)}")
    print(f"\n{totals['passed']} passed, {totals['failed']} failed")
    return 1 if gate_failed or failed else 0


if __name__ == "__main__":
    sys.exit(main())
