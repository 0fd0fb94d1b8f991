"""``python -m hermes_transport probe``: stream one chat completion and show its timeline.

For "my stream hangs". The probe sends one streaming chat completion through a
``WatchdogTransport`` with plain httpx (no SDK, so it sees every line) and
reports when the connection, the headers and the first data event came, each
gap between data events longer than ``--gap``, the SSE comments (keepalives),
the largest gap, the total, and a verdict: healthy, stalled (stage and
budget), interrupted (Ctrl+C) or failed (and what failed). Without
``--base-url`` it probes the embedded ``FaultServer``.

Limits: one request, never re-sent (``retries=0``), so the first stall shows
instead of being retried away. Connect and TLS times come from httpcore's
trace hook: DNS resolution is inside "connected", and through a proxy they
are the proxy's. Lines are timed when read, so the lines of one read share a
time. The API key is sent only as a Bearer token, and everything the probe
writes goes through one ``Redactor``, which masks the key and every run of 8 or
more of its characters (a key a server echoes whole, truncated or split), and
masks a text before it is ever cut. A key a server echoes re-encoded (base64,
percent-encoded, in another case) cannot be recognised.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Any, TextIO

import httpx

from .._core.errors import StreamInterrupted, StreamStalled
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stages import words_for
from .._flavors.httpx import http_client_for
from .._transports.builder import BUDGET_MARGIN
from ..testing import FaultServer, Scenario

__all__ = ["SCENARIOS", "ProbeOptions", "add_arguments", "options_from", "probe", "run"]

EXIT_HEALTHY, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

# The embedded server's stalls are scripted, so short budgets show them quickly;
# against a real server the library's defaults (or HERMES_STREAM_*) apply.
EMBEDDED_BUDGET = 4.0
EMBEDDED_MODEL = "probe"
DEFAULT_GAP = 2.0
DEFAULT_PROMPT = "Count from 1 to 20, one number per line."
LIVE_TICK = 0.1  # seconds between redraws of the live line on a terminal
PLAIN_TICK = 10.0  # seconds between "still waiting" lines when not on a terminal
ERROR_BODY_LIMIT = 2000  # bytes of an error response read for its message
ERROR_TEXT_LIMIT = 200  # characters shown of an error body that has no JSON message
COMMENT_SAMPLE = 60  # characters shown of the first comment of a run
MASK = "[api key]"
FRAGMENT = 8  # this many characters of the key in a row are masked wherever they appear

_PIECES = ("one", " two", " three", " four", " five")
SCENARIOS: dict[str, Scenario] = {
    "healthy": replace(Scenario.healthy(content=_PIECES), event_interval=0.2),
    # Gaps above the default --gap, below the embedded budget: healthy but listed.
    "slow": replace(Scenario.healthy(content=("slow",)), event_interval=2.5),
    "keepalive": Scenario.comments_after(2, interval=0.25),
    "silent": Scenario.silent_after(2),
    "no-headers": Scenario.silent_before_headers(),
}


# --- arguments ---------------------------------------------------------------------------


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


# --- observation -------------------------------------------------------------------------


@dataclass(frozen=True)
class Mark:
    """One line of the timeline: ``at`` seconds after the request started."""

    at: float
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 4), "kind": self.kind, "text": self.text, **self.data}


class Timeline:
    """What the probe saw, in seconds since the request started, with SSE line parsing.

    Written by the probing thread only; the live line reads a few fields
    without a lock (single attribute reads, so at worst one tick stale).
    Events follow the SSE rules the transport applies: an event ends at a
    blank line and is a data event if it had a ``data`` field.
    """

    def __init__(self, gap: float, console: Console) -> None:
        self.started = time.monotonic()
        self._gap = gap
        self._console = console
        self.redact = console.redact
        self.marks: list[Mark] = []
        self.events = 0
        self.comments = 0
        self.done = False
        self.status: int | None = None
        self.connected = False
        self.headers_at: float | None = None
        self.first_event_at: float | None = None
        self.last_event_at: float | None = None
        self.comments_since_event = 0
        self.largest_gap: dict[str, Any] | None = None
        # The SSE event being read, and the run of comments since the last event.
        self._has_data = False
        self._is_done = False
        self._first_line = True
        self._run: list[Any] | None = None  # [first at, last at, count, first text]

    def now(self) -> float:
        return time.monotonic() - self.started

    def mark(self, kind: str, text: str, at: float | None = None, **data: Any) -> None:
        """Record and show one timeline line (at ``now()`` unless ``at`` is given), masked."""
        redact = self.redact
        data = {name: redact(v) if isinstance(v, str) else v for name, v in data.items()}
        mark = Mark(self.now() if at is None else at, kind, redact(text), data)
        self.marks.append(mark)
        self._console.line(f"{mark.at:9.3f} s  {mark.text}")

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: connection and header times, on the probing thread."""
        if name.endswith("connect_tcp.complete"):
            self.connected = True
            self.mark("connected", "connected (TCP)")
        elif name.endswith("start_tls.complete"):
            self.mark("tls", "TLS handshake done")
        elif name.endswith("send_request_body.complete"):
            self.mark("sent", "request sent")
        elif name.endswith("receive_response_headers.complete"):
            status = info["return_value"][1]
            self.headers(int(status), _content_type(info["return_value"][3]))

    def headers(self, status: int, content_type: str) -> None:
        self.status = status
        self.headers_at = self.now()
        self.mark(
            "headers",
            f"headers: HTTP {status}, {content_type or 'no content-type'}",
            status=status,
            content_type=content_type,
        )

    def line(self, line: str) -> None:
        """One SSE line (without its line ending)."""
        if self._first_line:
            self._first_line = False
            line = line.removeprefix("\ufeff")
        if not line:
            if self._has_data:
                self._event(self._is_done)
            self._has_data = self._is_done = False
        elif line.startswith(":"):
            self._comment(line)
        elif line == "data" or line.startswith("data:"):
            if not self._has_data:
                value = line[5:].removeprefix(" ")
                self._is_done = value.startswith("[DONE]")
            self._has_data = True

    def _comment(self, line: str) -> None:
        at = self.now()
        self.comments += 1
        self.comments_since_event += 1
        if self._run is None:
            self._run = [at, at, 0, self.redact.clip(line, COMMENT_SAMPLE)]
        self._run[1] = at
        self._run[2] += 1

    def close_run(self) -> None:
        """Report a run of comments as one line: a keepalive every second is one fact."""
        run, self._run = self._run, None
        if run is None:
            return
        first, last, count, text = run
        span = f"at {first:.3f} s" if count == 1 else f"from {first:.3f} s to {last:.3f} s"
        self.mark(
            "comments",
            f"{count} comment(s) ({text!r}) {span}",
            at=first,
            count=count,
            until=round(last, 4),
            sample=text,
        )

    def _event(self, done: bool) -> None:
        at = self.now()
        self.close_run()
        self.events += 1
        self.comments_since_event = 0
        if self.first_event_at is None:
            self.first_event_at = at
            self.mark("first_event", "first event", at=at)
        else:
            assert self.last_event_at is not None
            gap = at - self.last_event_at
            self._measure_gap(gap, self.events - 1, at)
            if gap > self._gap:
                self.mark(
                    "gap",
                    f"gap of {gap:.3f} s before event {self.events}",
                    at=at,
                    seconds=round(gap, 4),
                    before_event=self.events,
                )
        if done:
            self.done = True
            self.mark("done", "[DONE]", at=at)
        self.last_event_at = at

    def _measure_gap(self, gap: float, after_event: int, until: float) -> None:
        if self.largest_gap is None or gap > self.largest_gap["seconds"]:
            self.largest_gap = {
                "seconds": round(gap, 4),
                "after_event": after_event,
                "until": round(until, 4),
            }

    def ended(self, kind: str, text: str, **data: Any) -> float:
        """Mark how the stream ended, after any comments still being collected; the time."""
        self.close_run()
        at = self.now()
        self.mark(kind, text, at=at, **data)
        return at

    def finish(self) -> float:
        """Close the open comment run and the silence after the last event; the total."""
        self.close_run()
        total = self.now()
        if self.last_event_at is not None and not self.done:
            # A stall is the largest gap of all: it must count, open as it is.
            self._measure_gap(total - self.last_event_at, self.events, total)
        return total

    def waiting(self, policy: StreamPolicy) -> str:
        """The live line: how long this wait has lasted, against its budget."""
        now = self.now()
        if self.last_event_at is None:
            what, since, budget = "first event", 0.0, policy.first_event_budget
        else:
            what, since = f"event {self.events + 1}", self.last_event_at
            budget = policy.stale_budget
        return (
            f"waiting {now - since:.1f} s for {what} / budget {_budget(budget)}"
            f" ({self.events} events, {self.comments} comments)"
        )


def _content_type(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.decode("latin-1")
    return ""


def _budget(seconds: float | None) -> str:
    return "off" if seconds is None else f"{seconds:g} s"


# --- output ------------------------------------------------------------------------------

# Marks that may stand for the key, in order of preference; the first the key
# cannot run into is used (see Redactor). None needs escaping in JSON.
_MARKS = (
    MASK,
    *(f"{a}api key{b}" for a, b in ("<>", "{}", "()")),
    *(c * 3 for c in "#*~^|%!?@$&=+;/"),
)
# One unit of the inside of a JSON string as json.dumps writes it: an escape or a character.
_JSON_UNIT = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|.", re.DOTALL)


class Redactor:
    """Masks the API key in a text: the key, and every run of ``FRAGMENT`` of its characters.

    Every text the probe writes goes through it, and a text that is cut is
    masked before the cut (``clip``): a cut key is no longer the key, and a
    server may truncate or split the key itself. Each position of the text
    inside a run of ``FRAGMENT`` characters of the key (the whole key, if it is
    shorter) is masked, and each stretch of masked positions becomes one
    ``mark``. The mark is chosen so that nothing can run into it to spell part
    of the key (its first and last characters are not in the key), so the
    result holds no such run, whatever the input. ``json`` applies the same
    rule to a JSON document as written, escapes included.
    """

    def __init__(self, secret: str | None) -> None:
        self._secret = secret or ""
        self._size = min(FRAGMENT, len(self._secret))
        ends = range(self._size, len(self._secret) + 1) if self._secret else range(0)
        self._runs = frozenset(self._secret[end - self._size : end] for end in ends)
        # The last resort is for a key holding all of their characters; a key is ASCII.
        self.mark = next((m for m in _MARKS if self._sound(m)), "\ufffd")
        self.margin = len(self._secret)  # characters past a cut that can hold a key across it

    def __call__(self, text: str) -> str:
        """``text`` with the key and every run of ``FRAGMENT`` of its characters masked."""
        spans = self._spans(text)
        if not spans:
            return text
        pieces: list[str] = []
        end = 0
        for start, stop in spans:
            pieces += (text[end:start], self.mark)
            end = stop
        pieces.append(text[end:])
        return "".join(pieces)

    def clip(self, text: str, limit: int) -> str:
        """At most ``limit`` characters of ``text``, masked before the cut; never half a mark."""
        # Only the start can show: a key's length past the limit is enough to see a key
        # across the cut whole (and spares masking a megabyte line to show 60 characters).
        limit = max(limit, 0)
        masked = self(text[: limit + self.margin])
        if len(masked) <= limit:
            return masked
        size = len(self.mark)
        start = masked.find(self.mark, max(0, limit - size + 1), limit + size - 1)
        return masked[: start if start >= 0 else limit]

    def json(self, value: Any) -> str:
        """``value`` as ``json.dumps`` writes it, each string and number masked as written.

        As written means escapes included: ``\\u0073k-`` must not spell ``sk-``.
        A run of the key can then only span the JSON syntax between values,
        which takes a key holding quotes, colons, commas, brackets or spaces;
        ``Console.write`` masks the whole text as well, for that case.
        """
        if isinstance(value, dict):
            items = (f"{self.json(str(k))}: {self.json(v)}" for k, v in value.items())
            return "{" + ", ".join(items) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self.json(item) for item in value) + "]"
        literal = json.dumps(value)
        if isinstance(value, str):
            return self._json_string(literal)
        # A number that spells part of the key (a user's budget, say) becomes a string.
        return f'"{self.mark}"' if self._spans(literal) else literal

    def _json_string(self, literal: str) -> str:
        spans = self._spans(literal)
        if not spans:
            return literal
        # Whole escapes are masked, so what is left is still a valid JSON string.
        pieces, hidden, k = ['"'], False, 0
        for unit in _JSON_UNIT.finditer(literal, 1, len(literal) - 1):
            start, end = unit.span()
            while k < len(spans) and spans[k][1] <= start:
                k += 1
            if k < len(spans) and spans[k][0] < end:
                if not hidden:
                    pieces.append(self.mark)
                hidden = True
            else:
                pieces.append(unit.group())
                hidden = False
        pieces.append('"')
        return "".join(pieces)

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """The stretches of ``text`` inside runs of the key, merged where they touch."""
        size, runs = self._size, self._runs
        spans: list[tuple[int, int]] = []
        if not runs:
            return spans
        for i in range(len(text) - size + 1):
            if text[i : i + size] in runs:
                if spans and i <= spans[-1][1]:
                    spans[-1] = (spans[-1][0], i + size)
                else:
                    spans.append((i, i + size))
        return spans

    def _sound(self, mark: str) -> bool:
        # A run through the mark would hold its first or last character, or lie inside it.
        return not ({mark[0], mark[-1]} & set(self._secret) or self._spans(mark))


class Console:
    """Where the probe writes: timeline lines to ``out``, the live line to ``err``.

    On a terminal (``err.isatty()``) the live line is rewritten in place with
    ``\\r``; otherwise no ``\\r`` is ever written. With ``--json`` the timeline
    lines are kept for the final object instead. One lock keeps a timeline line
    from landing in the middle of the live line. Every text is masked by
    ``redact`` as it is written, whole, after any masking at its source.
    """

    def __init__(self, out: TextIO, err: TextIO, *, lines: bool, secret: str | None) -> None:
        self._out, self._err = out, err
        self._lines = lines
        self.redact = Redactor(secret)
        self._lock = threading.Lock()
        self._drawn = False
        self.tty = _isatty(err)

    def line(self, text: str) -> None:
        if self._lines:
            self.write(text)

    def write(self, text: str) -> None:
        """A whole line on ``out``, whatever the mode (the summary, the JSON)."""
        with self._lock:
            self._erase()
            self._out.write(self.redact(text) + "\n")
            self._out.flush()

    def live(self, text: str) -> None:
        """Draw the live line in place (terminals only)."""
        # Cut to the terminal's width: a wrapped line cannot be rewritten in place.
        width = shutil.get_terminal_size().columns - 1
        with self._lock:
            self._err.write("\r" + self.redact.clip(text, width) + "\x1b[K")
            self._err.flush()
            self._drawn = True

    def clear(self) -> None:
        with self._lock:
            self._erase()

    def _erase(self) -> None:
        if self._drawn:
            self._err.write("\r\x1b[K")
            self._err.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class Ticker:
    """A daemon thread showing the live line until the probe ends; joined on exit.

    On a terminal it redraws every ``LIVE_TICK`` s; otherwise it prints a
    plain "still waiting" line every ``PLAIN_TICK`` s (none with ``--json``).
    """

    def __init__(self, console: Console, timeline: Timeline, policy: StreamPolicy) -> None:
        self._console, self._timeline, self._policy = console, timeline, policy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hermes-probe-live", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._console.clear()

    def _run(self) -> None:
        console, timeline = self._console, self._timeline
        period = LIVE_TICK if console.tty else PLAIN_TICK
        while not self._stop.wait(period):
            text = timeline.waiting(self._policy)
            if console.tty:
                console.live(text)
            else:
                console.line(f"{timeline.now():9.3f} s  still {text}")


class CtrlC:
    """While entered, Ctrl+C interrupts the probe's request through ``token``.

    The handler only sets an event and a helper thread calls
    ``token.interrupt``: a handler runs between two bytecodes of the main
    thread, maybe while it holds a lock ``interrupt()`` takes (the token's, a
    guard's). A second Ctrl+C raises ``KeyboardInterrupt``, for the stages an
    interrupt cannot reach (DNS). Installed only on the main thread (the only
    one Python signals) and where SIGINT is not ignored (a background job
    ignores it on purpose); the previous handler is restored on exit.
    """

    def __init__(self, token: Interrupt) -> None:
        self._token = token
        self._pressed = threading.Event()
        self._closing = False
        self._previous: Any = None
        self._installed = False
        self._thread = threading.Thread(target=self._run, name="hermes-probe-ctrl-c", daemon=True)

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not signal.SIG_IGN:
                self._previous = signal.signal(signal.SIGINT, self._handler)
                self._installed = True
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
        self._closing = True
        self._pressed.set()
        self._thread.join()

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._pressed.is_set():
            raise KeyboardInterrupt
        self._pressed.set()

    def _run(self) -> None:
        self._pressed.wait()
        if not self._closing:
            self._token.interrupt("Ctrl+C")


# --- the probe ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """How the probe ended: ``kind`` is healthy, stalled, interrupted or failed."""

    kind: str
    detail: str
    exit_code: int
    stall: dict[str, Any] | None = None


def run(
    args: argparse.Namespace, parser: argparse.ArgumentParser, out: TextIO, err: TextIO
) -> int:
    """The ``probe`` command: validate, probe, report; the exit code."""
    options = options_from(args, parser)
    try:
        return probe(options, out, err)
    except KeyboardInterrupt:  # a second Ctrl+C while starting or shutting down
        redact = Redactor(options.api_key)
        detail = "interrupted outside the stream (Ctrl+C)"
        if options.as_json:
            detail = redact.json({"verdict": "interrupted", "detail": detail, "exit_code": 130})
        out.write(redact(f"{detail}\n" if options.as_json else f"verdict: {detail}\n"))
        return EXIT_INTERRUPTED


def probe(options: ProbeOptions, out: TextIO, err: TextIO) -> int:
    """Stream one chat completion, print its timeline and verdict; the exit code.

    Returns only once everything it started (the embedded server, the live
    line, the Ctrl+C helper) has stopped.
    """
    token = Interrupt()
    console = Console(out, err, lines=not options.as_json, secret=options.api_key)
    with contextlib.ExitStack() as stack:
        stack.enter_context(CtrlC(token))
        base_url = options.base_url
        if base_url is None:
            base_url = stack.enter_context(_embedded(options)).base_url
        client = stack.enter_context(
            http_client_for(
                None,
                policy=options.policy,
                interrupt=token,
                # A proxy from the environment has no business with a loopback server.
                trust_env=options.base_url is not None,
            )
        )
        request = _request(client, base_url, options)
        console.line(_heading(request, options))
        timeline = Timeline(options.gap, console)
        request.extensions["trace"] = timeline.trace
        with Ticker(console, timeline, options.policy):
            verdict = _stream(client, request, timeline, token)
        total = timeline.finish()
    _report(console, options, request, timeline, verdict, total)
    return verdict.exit_code


def _embedded(options: ProbeOptions) -> FaultServer:
    assert options.scenario is not None
    budgets = [b for b in (options.policy.first_event_budget, options.policy.stale_budget) if b]
    # The server holds a stall past every budget, so the watchdog is what ends it.
    hold = max(budgets, default=0.0) + BUDGET_MARGIN
    return FaultServer(replace(SCENARIOS[options.scenario], hold=hold))


def _request(client: httpx.Client, base_url: str, options: ProbeOptions) -> httpx.Request:
    base = httpx.URL(base_url)
    url = base.copy_with(path=base.path.rstrip("/") + "/chat/completions")  # query kept
    headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
    body = {
        "model": options.model,
        "messages": [{"role": "user", "content": options.prompt}],
        "stream": True,
    }
    return client.build_request("POST", url, json=body, headers=headers)


def _shown_url(url: httpx.URL) -> str:
    # No user info and no query string: either may carry a credential.
    return f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"


def _heading(request: httpx.Request, options: ProbeOptions) -> str:
    policy = options.policy
    server = (
        "" if options.base_url is not None else f" | embedded fault server, {options.scenario}"
    )
    key = f"key from ${options.api_key_env}" if options.api_key_env else "no API key"
    return (
        f"probe: POST {_shown_url(request.url)} | model {options.model} | {key}{server}\n"
        f"budgets: first event {_budget(policy.first_event_budget)},"
        f" stale {_budget(policy.stale_budget)} | gaps over {options.gap:g} s listed"
    )


def _stream(
    client: httpx.Client, request: httpx.Request, timeline: Timeline, token: Interrupt
) -> Verdict:
    """Send the request and read the stream, turning how it ended into a verdict."""
    try:
        response = client.send(request, stream=True)
        try:
            return _read(response, timeline)
        finally:
            response.close()
    except StreamStalled as exc:
        return _stalled(exc, timeline)
    except (StreamInterrupted, KeyboardInterrupt) as exc:
        return _interrupted(exc, timeline)
    except (httpx.HTTPError, OSError) as exc:
        if token.interrupted:  # an interrupt that surfaced as another error
            return _interrupted(exc, timeline)
        return _failed(timeline, f"{type(exc).__name__}: {exc}", error=type(exc).__name__)


def _read(response: httpx.Response, timeline: Timeline) -> Verdict:
    if timeline.headers_at is None:  # no trace events (a custom transport, say)
        timeline.headers(response.status_code, response.headers.get("content-type", ""))
    if not response.is_success:
        message = _error_message(response, timeline.redact)
        return _failed(timeline, f"HTTP {response.status_code}: {message}")
    content_type = response.headers.get("content-type", "")
    if content_type.split(";")[0].strip().lower() != "text/event-stream":
        # The header is the server's, so it may hold the key: masked before it is cut.
        media = timeline.redact(content_type).split(";")[0].strip()
        return _failed(timeline, f"answered {media or 'no content-type'}, not an event stream")
    for line in response.iter_lines():
        timeline.line(line)
    if timeline.events == 0:
        return _failed(timeline, "the stream ended without a data event")
    timeline.ended("end", f"stream ended after {timeline.events} event(s)")
    detail = f"healthy: {timeline.events} event(s), the first at {timeline.first_event_at:.3f} s"
    if not timeline.done:
        detail += ", but no [DONE] before the end"
    return Verdict("healthy", detail, EXIT_HEALTHY)


def _failed(timeline: Timeline, what: str, **data: Any) -> Verdict:
    what = timeline.redact(what)  # an error message may quote the server
    at = timeline.ended("error", f"failed: {what}", **data)
    return Verdict("failed", f"failed at {at:.3f} s: {what}", EXIT_FAILED)


def _error_message(response: httpx.Response, redact: Redactor) -> str:
    """The message of an error response, masked: the OpenAI-style ``error.message``, else its text.

    Every step that could cut or rebuild the key masks first: the body is read
    a key's length past the limit, so a key across the limit is read whole.
    """
    limit = ERROR_BODY_LIMIT + redact.margin
    body = b""
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) >= limit:
            break
    raw = body[:limit].decode("utf-8", "replace")
    with contextlib.suppress(ValueError, LookupError, TypeError, RecursionError):
        message = json.loads(raw)["error"]["message"]
        if isinstance(message, str):
            return redact(message)  # decoded: a key its escapes hid is whole again here
    # Masked before the whitespace is squeezed (a key with spaces) and before the cut.
    text = " ".join(redact(raw).split())
    return redact.clip(text, ERROR_TEXT_LIMIT) or redact(response.reason_phrase)


def _stalled(exc: StreamStalled, timeline: Timeline) -> Verdict:
    if exc.stage == "mid_stream":
        waiting_for = f"event {timeline.events + 1}"
        what = f"no data event for {exc.budget:g} s after event {timeline.events}"
        if timeline.comments_since_event:
            what += (
                f"; {timeline.comments_since_event} comment(s) came meanwhile,"
                " and comments (keepalives) are not progress"
            )
    else:
        if timeline.headers_at is not None:
            waiting_for = "the first event"
        else:
            waiting_for = "headers" if timeline.connected else "the connection"
        what = f"no first event within {exc.budget:g} s (waiting for {waiting_for})"
    at = timeline.ended("stalled", f"stalled: {what}", stage=exc.stage, budget=exc.budget)
    stall = {
        "stage": exc.stage,
        "waiting_for": waiting_for,
        "budget": exc.budget,
        "at": round(at, 4),
    }
    stage = "mid-stream" if exc.stage == "mid_stream" else "before the first event"
    return Verdict("stalled", f"stalled at {at:.3f} s, {stage}: {what}", EXIT_FAILED, stall)


def _interrupted(exc: BaseException, timeline: Timeline) -> Verdict:
    # A StreamInterrupted came through the token and knows the stage; a bare
    # KeyboardInterrupt (a second Ctrl+C, or one outside the handler) does not.
    if isinstance(exc, StreamInterrupted):
        reason, stage = exc.reason, exc.stage
    else:
        reason, stage = type(exc).__name__, None
    if stage == "before_sending":
        where = " before sending"
    else:
        where = f" while {words_for(stage)}" if stage else ""
    at = timeline.ended("interrupted", f"interrupted{where}: {reason}", reason=reason, stage=stage)
    return Verdict(
        "interrupted",
        f"interrupted at {at:.3f} s{where} ({reason}) after {timeline.events} event(s)",
        EXIT_INTERRUPTED,
    )


def _report(
    console: Console,
    options: ProbeOptions,
    request: httpx.Request,
    timeline: Timeline,
    verdict: Verdict,
    total: float,
) -> None:
    largest = timeline.largest_gap
    if not options.as_json:
        gap = (
            "none"
            if largest is None
            else f"{largest['seconds']:.3f} s after event {largest['after_event']}"
        )
        console.write(f"verdict: {verdict.detail}")
        first = timeline.first_event_at
        console.write(
            f"summary: first event {'none' if first is None else f'at {first:.3f} s'},"
            f" {timeline.events} event(s), {timeline.comments} comment(s),"
            f" largest gap {gap}, total {total:.3f} s"
        )
        return
    policy = options.policy
    report = {
        "verdict": verdict.kind,
        "detail": verdict.detail,
        "exit_code": verdict.exit_code,
        "url": _shown_url(request.url),
        "model": options.model,
        "embedded": options.base_url is None,
        "scenario": options.scenario,
        "api_key_env": options.api_key_env,
        "budgets": {
            "first_event": policy.first_event_budget,
            "stale": policy.stale_budget,
            "gap": options.gap,
        },
        "status": timeline.status,
        "events": timeline.events,
        "comments": timeline.comments,
        "done": timeline.done,
        "first_event_at": _rounded(timeline.first_event_at),
        "largest_gap": largest,
        "total": round(total, 4),
        "stall": verdict.stall,
        "timeline": [mark.as_json() for mark in sorted(timeline.marks, key=lambda m: m.at)],
    }
    console.write(console.redact.json(report))


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
