"""Command line: ``python -m hermes_transport demo``."""

from __future__ import annotations

import argparse
import sys

from ._demo import run_demo


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
    args = parser.parse_args(argv)
    if args.command == "demo":
        return run_demo(sys.stdout)
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse refuses first
    return 2  # pragma: no cover


if __name__ == "__main__":
    sys.exit(main())
