"""The probe's command line: ``ProbeOptions``, ``add_arguments`` and ``options_from``.

Owns what can be asked of the probe and how it is checked: the options of the
``probe`` subcommand, the embedded server's ``SCENARIOS`` and defaults, and the
validation that turns parsed arguments into ``ProbeOptions`` (a usage error,
exit 2, names what is wrong, never the key or the URL). The budgets come from
the options, then the environment (``HERMES_STREAM_*``) against a real server.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import httpx

from .._core.policy import StreamPolicy
from ..testing import Scenario
from .svg import svg_path

__all__ = [
    "DEFAULT_GAP",
    "EMBEDDED_BUDGET",
    "SCENARIOS",
    "ProbeOptions",
    "add_arguments",
    "options_from",
]

# The embedded server's stalls are scripted, so short budgets show them quickly;
# against a real server the library's defaults (or HERMES_STREAM_*) apply.
EMBEDDED_BUDGET = 4.0
EMBEDDED_MODEL = "probe"
DEFAULT_GAP = 2.0
DEFAULT_PROMPT = "Count from 1 to 20, one number per line."

_PIECES = ("one", " two", " three", " four", " five")
SCENARIOS: dict[str, Scenario] = {
    "healthy": replace(Scenario.healthy(content=_PIECES), event_interval=0.2),
    # Gaps above the default --gap, below the embedded budget: healthy but listed.
    "slow": replace(Scenario.healthy(content=("slow",)), event_interval=2.5),
    "keepalive": Scenario.comments_after(2, interval=0.25),
    "silent": Scenario.silent_after(2),
    "no-headers": Scenario.silent_before_headers(),
}


@dataclass(frozen=True)
class ProbeOptions:
    """What to probe and how; built from the command line by ``options_from``."""

    base_url: str | None  # None: the embedded fault server
    model: str
    prompt: str
    policy: StreamPolicy
    gap: float
    scenario: str | None
    as_json: bool
    api_key_env: str | None = None
    api_key: str | None = field(default=None, repr=False)  # never shown, even in a repr
    svg: Path | None = None  # where to write the timeline's picture


def _seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0 (argparse names the option)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The probe's options, on its subcommand parser."""
    parser.add_argument(
        "--base-url",
        metavar="URL",
        help="OpenAI-compatible API base, e.g. https://api.openai.com/v1"
        " (default: the embedded fault server)",
    )
    parser.add_argument(
        "--model", help=f"model to ask (required with --base-url; default {EMBEDDED_MODEL!r})"
    )
    parser.add_argument(
        "--api-key-env",
        metavar="VAR",
        help="environment variable holding the API key, sent as a Bearer token;"
        " the key itself is never printed",
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the user message to send")
    parser.add_argument(
        "--stale",
        type=_seconds,
        metavar="SECONDS",
        help="seconds allowed between data events (default: HERMES_STREAM_STALE_TIMEOUT"
        f" or 180; {EMBEDDED_BUDGET:g} on the embedded server)",
    )
    parser.add_argument(
        "--first-event",
        type=_seconds,
        metavar="SECONDS",
        help="seconds allowed until the first data event, connecting included"
        " (default: HERMES_STREAM_FIRST_EVENT_TIMEOUT, or the same as --stale)",
    )
    parser.add_argument(
        "--gap",
        type=_seconds,
        default=DEFAULT_GAP,
        metavar="SECONDS",
        help=f"list gaps between data events longer than this (default {DEFAULT_GAP:g})",
    )
    parser.add_argument(
        "--scenario",
        choices=list(SCENARIOS),
        help="embedded server only: how it answers (default healthy)",
    )
    parser.add_argument(
        "--json", action="store_true", dest="as_json", help="print one JSON object on stdout"
    )
    parser.add_argument(
        "--svg",
        type=svg_path,
        metavar="FILE",
        help="also write the timeline as an SVG picture (events, keepalives, gaps, the budget"
        " and the verdict); with --json too",
    )


def options_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> ProbeOptions:
    """Validate parsed arguments; ``parser.error`` (exit 2) names what is wrong."""
    if args.base_url is not None:
        if args.scenario is not None:
            parser.error("--scenario applies to the embedded server only, not with --base-url")
        if not args.model:
            parser.error("--model is required with --base-url")
        _check_url(args.base_url, parser)
    api_key = None
    if args.api_key_env is not None:
        # Only the variable's name is ever echoed, never its value.
        api_key = os.environ.get(args.api_key_env, "").strip()
        if not api_key:
            parser.error(
                f"--api-key-env: environment variable {args.api_key_env!r} is not set or empty"
            )
        if not (api_key.isascii() and api_key.isprintable()):
            # A header cannot carry it, and the encoding error would quote part of it.
            parser.error(
                f"--api-key-env: the value of {args.api_key_env!r} is not printable ASCII"
            )
    try:
        policy = _policy(args)
    except ValueError as exc:  # a malformed HERMES_STREAM_* variable, named in the message
        parser.error(str(exc))
    return ProbeOptions(
        base_url=args.base_url,
        model=args.model or EMBEDDED_MODEL,
        prompt=args.prompt,
        policy=policy,
        gap=args.gap,
        scenario=None if args.base_url is not None else (args.scenario or "healthy"),
        as_json=args.as_json,
        api_key_env=args.api_key_env,
        api_key=api_key,
        svg=args.svg,
    )


def _check_url(text: str, parser: argparse.ArgumentParser) -> None:
    # The URL is not echoed: its query string may hold a key.
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, TypeError):
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        parser.error("--base-url must be an http:// or https:// URL with a host")


def _policy(args: argparse.Namespace) -> StreamPolicy:
    """The budgets: the options win; then the environment (real servers) or short defaults."""
    overrides: dict[str, Any] = {"retries": 0}
    if args.stale is not None:
        overrides["stale_timeout"] = args.stale
    if args.first_event is not None:
        overrides["first_event_timeout"] = args.first_event
    if args.base_url is None:
        overrides.setdefault("stale_timeout", EMBEDDED_BUDGET)
        return StreamPolicy(**overrides)
    # What the user's application would use, since it reads the same variables.
    return StreamPolicy.from_env(**overrides)
