"""The command line: ``python -m hermes_transport demo``, ``... probe`` and ``... docs``."""

from __future__ import annotations

import argparse
import sys

from .docs import add_docs_arguments, serve_docs
from .options import add_arguments
from .probe import run
from .svg import svg_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_transport",
        description="hermes-transport: a watchdog httpx transport for streaming LLM calls.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo_parser = commands.add_parser(
        "demo",
        help="run the openai SDK through every fault scenario of the embedded server,"
        " with and without the watchdog",
    )
    demo_parser.add_argument(
        "--svg",
        type=svg_path,
        metavar="FILE",
        help="also write the cases' timelines (events, keepalives, stalls, re-sends) as an SVG",
    )
    probe_parser = commands.add_parser(
        "probe",
        help="stream one chat completion through the watchdog and print its timeline",
        description="Stream one chat completion through the watchdog and print its timeline:"
        " connect, headers, first event, long gaps, keepalive comments, and a verdict."
        " Exit 0 healthy, 1 stalled or failed, 2 bad arguments, 130 interrupted (Ctrl+C)."
        " Without --base-url it probes the embedded fault server.",
    )
    add_arguments(probe_parser)
    docs_parser = commands.add_parser(
        "docs",
        help="serve the documentation site locally, from a clone of the repository",
        description="Serve the documentation site (MkDocs: mkdocs.yml, docs/ and the"
        " docstrings) on 127.0.0.1, rebuilt as its files change, until Ctrl+C. Needs a clone"
        " of the repository and the tools of requirements-docs.txt.",
    )
    add_docs_arguments(docs_parser)
    args = parser.parse_args(argv)
    if args.command == "docs":
        return serve_docs(args.port, sys.stderr)
    if args.command == "demo":
        # Imported here: the demo needs the openai SDK, which the probe does not load.
        from .demo import run_demo

        return run_demo(sys.stdout, args.svg, sys.stderr)
    if args.command == "probe":
        return run(args, probe_parser, sys.stdout, sys.stderr)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first
    return 2  # pragma: no cover
