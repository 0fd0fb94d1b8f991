"""``python -m hermes_transport docs``: the documentation site, served from a clone.

The site is built by MkDocs from the repository's ``mkdocs.yml``, ``docs/`` and the
package's docstrings, so it needs a clone (an installed wheel carries neither) and the
tools pinned in ``requirements-docs.txt``. This module only finds both and hands over to
``mkdocs serve``, which rebuilds the pages as their files change; Ctrl+C stops it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import TextIO

__all__ = ["DOCS_REQUIREMENTS", "add_docs_arguments", "serve_docs", "site_root"]

#: The file that pins the site's tools, at the repository's root.
DOCS_REQUIREMENTS = "requirements-docs.txt"


def site_root() -> Path | None:
    """The clone's root that holds ``mkdocs.yml`` beside this package, or ``None``."""
    root = Path(__file__).resolve().parent.parent.parent
    return root if (root / "mkdocs.yml").is_file() else None


def add_docs_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``docs`` command's options, on its subcommand parser."""
    parser.add_argument(
        "--port",
        type=_port,
        default=8000,
        help="the local port to serve on, on 127.0.0.1 (default 8000)",
    )


def _port(text: str) -> int:
    """argparse type: a TCP port number (argparse names the option)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"must be a port number, 1 to 65535, got {text!r}")
    return port


def serve_docs(port: int, stderr: TextIO) -> int:
    """Serve the site on ``127.0.0.1:port`` until stopped: mkdocs' exit status, or 2 with
    what is missing (a clone's ``mkdocs.yml``, or the site's tools) said on ``stderr``."""
    root = site_root()
    if root is None:
        stderr.write(
            "docs: the site is built from a clone of the repository (mkdocs.yml, docs/), which"
            " this installation is not: clone it and run this command there, with the"
            " package installed from it (pip install -e .)\n"
        )
        return 2
    if importlib.util.find_spec("mkdocs") is None:
        stderr.write(
            f"docs: the site's tools are not installed for {sys.executable}: install them with"
            f" `{sys.executable} -m pip install -r {root / DOCS_REQUIREMENTS}`\n"
        )
        return 2
    command = [sys.executable, "-m", "mkdocs", "serve", "--dev-addr", f"127.0.0.1:{port}"]
    # mkdocs-material's notice about its successor is not about this site.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    stderr.write(f"docs: serving the site on http://127.0.0.1:{port}/ (Ctrl+C stops it)\n")
    stderr.flush()
    try:
        return subprocess.run(command, cwd=root, env=env, check=False).returncode
    except KeyboardInterrupt:
        return 130
