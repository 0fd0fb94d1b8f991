"""What the figures were measured on: CPU, cores, Python and the versions that matter."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path

__all__ = ["describe", "summary"]

# httpx2 and httpcore2 too, whatever the run's flavor: openai 3.x builds on them.
_PACKAGES = (
    "httpx",
    "httpcore",
    "httpx2",
    "httpcore2",
    "h11",
    "anyio",
    "openai",
    "hermes-transport",
)
_ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _commit() -> str:
    """The library's commit, and whether its sources differ from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "hermes_transport")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit} + uncommitted changes" if dirty else commit


def describe() -> dict[str, str]:
    """The machine and software versions, for the JSON file and the table's header."""
    info = {
        "cpu": _cpu_model(),
        "cores": str(os.cpu_count()),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "commit": _commit(),
    }
    info.update({package: _version(package) for package in _PACKAGES})
    return info


def summary(info: dict[str, str]) -> str:
    """``describe()`` as one line."""
    packages = ", ".join(f"{p} {info[p]}" for p in _PACKAGES if p != "hermes-transport")
    return (
        f"{info['cpu']}, {info['cores']} cores, {info['os']}, {info['python']}; {packages};"
        f" hermes-transport {info['hermes-transport']} at {info['commit']}"
    )
