"""``python -m hermes_transport probe``: stream one chat completion and show its timeline.

For "my stream hangs". The probe sends one streaming chat completion through a
``WatchdogTransport`` with plain httpx (no SDK, so it sees every line) and
reports when the connection, the headers and the first progress event came,
each gap between progress events longer than ``--gap``, the keepalives (SSE
comments, and events of a ``heartbeat_events`` type such as ``event: ping``),
the largest gap, the total, and a verdict: healthy, stalled (stage and
budget), interrupted (Ctrl+C) or failed (and what failed). Events are counted
by the transport's own progress meter (see ``timeline``), so the probe's count
is the watchdog's. After the timeline come the transport's own ``StreamStats``
(its ``on_stats``), the numbers an application gets from the same callback, and
``--json`` carries them as ``"stats"``; ``--svg`` draws the timeline (``probe_svg``).
The budgets shown are the ones the call got (``StreamPolicy.budgets_for`` the model
and body sent, as the transport fits them). Without ``--base-url`` it probes the
embedded ``FaultServer``.

This module owns the run itself: the request, reading the stream, the verdict
and the report; ``options`` parses the command line, ``timeline`` observes,
``console`` writes, ``redact`` masks.

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
from dataclasses import dataclass, replace
from typing import Any, TextIO

import httpx

from .._core.attempt import url_without_query
from .._core.call_budgets import CallBudgets
from .._core.errors import StreamInterrupted, StreamStalled
from .._core.interrupt import Interrupt
from .._core.stages import words_for
from .._core.stats import StreamStats
from .._flavors.httpx import http_client_for
from .._transports.builder import BUDGET_MARGIN
from ..testing import FaultServer
from .console import Console, CtrlC, Ticker
from .options import SCENARIOS, ProbeOptions, options_from
from .probe_svg import probe_figure
from .redact import Redactor
from .statistics import statistics_lines, stats_json
from .svg import save_svg
from .timeline import Timeline

__all__ = ["EXIT_FAILED", "EXIT_HEALTHY", "EXIT_INTERRUPTED", "Verdict", "probe", "run"]

EXIT_HEALTHY, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ERROR_BODY_LIMIT = 2000  # bytes of an error response read for its message
ERROR_TEXT_LIMIT = 200  # characters shown of an error body that has no JSON message
STATS_ERROR_LIMIT = 200  # characters shown of the statistics' error


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
    body = _body(options)
    # What the transport gives this call: the policy fitted to the model and body sent.
    budgets = options.policy.budgets_for(options.model, len(body))
    reported: list[StreamStats] = []
    with contextlib.ExitStack() as stack:
        stack.enter_context(CtrlC(token))
        base_url = options.base_url
        if base_url is None:
            base_url = stack.enter_context(_embedded(options, budgets)).base_url
        client = stack.enter_context(
            http_client_for(
                None,
                policy=options.policy,
                interrupt=token,
                on_stats=reported.append,
                # A proxy from the environment has no business with a loopback server.
                trust_env=options.base_url is not None,
            )
        )
        request = _request(client, base_url, options, body)
        console.line(_heading(request, options, budgets))
        timeline = Timeline(
            options.gap, console, options.policy.heartbeats_for("chat_completions"), budgets
        )
        request.extensions["trace"] = timeline.trace
        with Ticker(console, timeline, options.policy):
            verdict = _stream(client, request, timeline, token)
        total = timeline.finish()
    # Called once, by the time the response is closed (on this thread).
    stats = reported[-1] if reported else None
    _report(console, options, request, timeline, verdict, total, budgets, stats)
    if options.svg is not None:
        kind, stall = verdict.kind, verdict.stall
        figure = probe_figure(options, request.url, budgets, timeline, kind, stall, total)
        if not save_svg(options.svg, figure, err):
            return verdict.exit_code or EXIT_FAILED
    return verdict.exit_code


def _embedded(options: ProbeOptions, budgets: CallBudgets) -> FaultServer:
    assert options.scenario is not None
    seconds = [b for b in (budgets.first_event, budgets.stale) if b]
    # The server holds a stall past every budget, so the watchdog is what ends it.
    hold = max(seconds, default=0.0) + BUDGET_MARGIN
    return FaultServer(replace(SCENARIOS[options.scenario], hold=hold))


def _body(options: ProbeOptions) -> bytes:
    """The request body, encoded here so that its size (for the budgets) is the one sent."""
    body = {
        "model": options.model,
        "messages": [{"role": "user", "content": options.prompt}],
        "stream": True,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _request(
    client: httpx.Client, base_url: str, options: ProbeOptions, body: bytes
) -> httpx.Request:
    base = httpx.URL(base_url)
    url = base.copy_with(path=base.path.rstrip("/") + "/chat/completions")  # query kept
    headers = {"Content-Type": "application/json"}
    if options.api_key:
        headers["Authorization"] = f"Bearer {options.api_key}"
    return client.build_request("POST", url, content=body, headers=headers)


def _heading(request: httpx.Request, options: ProbeOptions, budgets: CallBudgets) -> str:
    server = (
        "" if options.base_url is not None else f" | embedded fault server, {options.scenario}"
    )
    key = f"key from ${options.api_key_env}" if options.api_key_env else "no API key"
    return (
        f"probe: POST {url_without_query(request.url)} | model {options.model} | {key}{server}\n"
        f"budgets: {budgets} | gaps over {options.gap:g} s listed"
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
    timeline.body(response.headers.get("content-encoding", ""))
    # The bytes as the transport's meter reads them: decoded, unless it cannot decode them.
    for chunk in response.iter_raw() if timeline.blind else response.iter_bytes():
        timeline.feed(chunk)
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
        what += timeline.keepalives_note()
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
    budgets: CallBudgets,
    stats: StreamStats | None,
) -> None:
    largest = timeline.largest_gap
    if not options.as_json:
        for line in statistics_lines(stats, console.redact, STATS_ERROR_LIMIT):
            console.write(line)
        gap = (
            "none"
            if largest is None
            else f"{largest['seconds']:.3f} s after event {largest['after_event']}"
        )
        console.write(f"verdict: {verdict.detail}")
        heartbeats = f" {timeline.heartbeats} heartbeat event(s)," if timeline.heartbeats else ""
        first = timeline.first_event_at
        console.write(
            f"summary: first event {'none' if first is None else f'at {first:.3f} s'},"
            f" {timeline.events} event(s), {timeline.comments} comment(s),{heartbeats}"
            f" largest gap {gap}, total {total:.3f} s"
        )
        return
    first = timeline.first_event_at
    report = {
        "verdict": verdict.kind,
        "detail": verdict.detail,
        "exit_code": verdict.exit_code,
        "url": url_without_query(request.url),
        "model": options.model,
        "embedded": options.base_url is None,
        "scenario": options.scenario,
        "api_key_env": options.api_key_env,
        "budgets": {
            "first_event": budgets.first_event,
            "stale": budgets.stale,
            "gap": options.gap,
        },
        "status": timeline.status,
        "events": timeline.events,
        "comments": timeline.comments,
        "heartbeats": timeline.heartbeats,
        "done": timeline.done,
        "first_event_at": None if first is None else round(first, 4),
        "largest_gap": largest,
        "total": round(total, 4),
        "stall": verdict.stall,
        "timeline": [mark.as_json() for mark in sorted(timeline.marks, key=lambda m: m.at)],
        "stats": stats_json(stats),
    }
    console.write(console.redact.json(report))
