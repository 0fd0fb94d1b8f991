#!/usr/bin/env python3
"""The check gate: lint, format and type checks of the whole tree, before any test runs.

    .venvs/openai3/bin/python tools/check.py     # with the test environment's tools

Each check runs to its end whatever the others gave, from the project root, with
the interpreter that runs this script (its ruff and mypy: those pinned in
``requirements-test.txt``, as ``tools/run_tests.py`` installs them):

- ``ruff check .`` and ``ruff format --check .``: the settings in ``ruff.toml``;
- ``mypy``: strict, on the package, the tests and ``tools/`` (setup.cfg's ``[mypy]``),
  the tests including ``tests/typing/``, the type test of the public API, where each
  ``# type: ignore[code]`` marks a misuse that must stay an error;
- ``mkdocs build --strict``: the documentation site (``mkdocs.yml``, ``docs/``, the API
  reference from the docstrings), with the tools pinned in ``requirements-docs.txt``.

It ends with one line per check and exits 1 if any failed. ``tools/run_tests.py``
runs it once, in the newest openai major's environment, before the test suites.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = str(Path(tempfile.gettempdir()) / "hermes-transport-site")

# (name, module run with ``python -m``, its arguments)
CHECKS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("ruff check", "ruff", ("check", ".")),
    ("ruff format --check", "ruff", ("format", "--check", ".")),
    ("mypy --strict", "mypy", ()),
    # The documentation site (mkdocs.yml): a broken link, a page missing from the nav or
    # a reference the API pages cannot resolve fails it. Built away from the tree.
    ("mkdocs build --strict", "mkdocs", ("build", "--strict", "--quiet", "--site-dir", SITE)),
)


def main() -> int:
    missing = sorted({module for _, module, _ in CHECKS if not importlib.util.find_spec(module)})
    if missing:
        print(
            f"check: {', '.join(missing)} not installed for {sys.executable}; run this with the"
            " test environment's python (made by tools/run_tests.py), e.g."
            " .venvs/openai3/bin/python tools/check.py",
            flush=True,
        )
        return 2
    results: list[tuple[str, int, float]] = []
    for name, module, args in CHECKS:
        cmd = [sys.executable, "-m", module, *args]
        print(f"\n=== check: {name} ===\n+ {' '.join(cmd)}", flush=True)
        started = time.monotonic()
        # mkdocs-material's notice about its successor is no finding of ours.
        env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
        code = subprocess.run(cmd, cwd=ROOT, check=False, env=env).returncode
        results.append((name, code, time.monotonic() - started))
    print(flush=True)
    for name, code, took in results:
        verdict = "ok" if code == 0 else f"FAILED (exit {code})"
        print(f"check: {name}: {verdict} in {took:.1f} s", flush=True)
    failed = [name for name, code, _ in results if code != 0]
    if failed:
        print(f"check: FAILED: {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
