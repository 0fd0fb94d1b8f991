"""The command line: ``python -m hermes_transport demo`` and ``... probe``."""

from __future__ import annotations

import argparse
import sys

from .options import add_arguments
from .probe import run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hermes_transport",
        description="hermes-transport: a watchdog httpx transport for streaming LLM calls.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser(
        "demo",
        help="run the openai SDK through every fault scenario of the embedded server,"
        " with and without the watchdog",
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
    args = parser.parse_args(argv)
    if args.command == "demo":
        # Imported here: the demo needs the openai SDK, which the probe does not load.
        from .demo import run_demo

        return run_demo(sys.stdout)
    if args.command == "probe":
        return run(args, probe_parser, sys.stdout, sys.stderr)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first
    return 2  # pragma: no cover
