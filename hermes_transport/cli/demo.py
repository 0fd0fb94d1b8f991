"""``python -m hermes_transport demo``: every fault scenario, with and without the watchdog.

Then one resumable stream: a Responses stream created with ``background=True`` whose
connection stalls after its first output, "hello". The plain client times out with half
the text; the watchdog resumes the response (``GET /v1/responses/{id}?stream=true&
starting_after=N``, printed as the server saw it) and the caller reads the whole text.
Last, where google-genai is installed (the ``gemini`` extra), a Gemini thinking stream
that stays silent on its first attempt: the watchdog re-sends it after its budget, the
plain client waits for its read timeout. And, where the mcp SDK is installed (the ``mcp``
extra), a hung tool call cut and a stalled one resumed by its event ids (``demo_mcp``). Last,
a process killed mid-answer and the next one finishing it from its checkpoint
(``demo_crash``).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

import openai

from .._core.errors import StreamInterrupted, StreamStalled
from .._core.policy import StreamPolicy
from .._sdk.clients import clients_for
from ..testing import RESPONSES_PATH, FaultServer, Scenario
from .demo_crash import crash_part
from .demo_mcp import mcp_part
from .demo_svg import Seen, demo_figure
from .svg import save_svg

__all__ = ["run_demo"]

BUDGET = 0.8  # seconds: the watchdog's stale and first-event budgets
PLAIN_TIMEOUT = 2.0  # seconds: the plain client's read timeout
HOLD = PLAIN_TIMEOUT + 1.0  # seconds: how long the server keeps any stall up before hanging up

MID_STREAM = "StreamStalled mid-stream"
FIRST_EVENT = "StreamStalled, no first event"


@dataclass(frozen=True)
class Case:
    title: str
    scenario: Scenario
    expected: str  # the watchdog's outcome, as `_outcome` names it


CASES = (
    Case("healthy stream", Scenario.healthy(), "ok"),
    Case("silent before headers", Scenario.silent_before_headers(), FIRST_EVENT),
    Case("silent after 1 event", Scenario.silent_after(1), MID_STREAM),
    Case("keepalives only after 1 event", Scenario.comments_after(1), MID_STREAM),
    Case("stalls once, then healthy", Scenario.stall_first(1), "ok"),
    Case("truncated body", Scenario.truncated(1), "RemoteProtocolError"),
    Case("one byte at a time", Scenario.trickle(), "ok"),
    Case("gzip, keepalives after 1 event", Scenario.comments_after(1, gzip=True), MID_STREAM),
)

RESUME_TITLE = "background, stalls after hello"
# The first attempt stalls after event 5 ("hello"; 0-4 are the preamble), the resume is healthy.
RESUMABLE = Scenario.stall_first(
    1, stall=replace(Scenario.silent_after(6), hold=HOLD), then=Scenario.healthy()
)
RESUMED_AFTER = 5  # the sequence number of "hello": the resume's starting_after


def _outcome(exc: BaseException, http: Any) -> str:
    """Name what the caller got, looking through the SDK's wrappers to the first cause."""
    cause: BaseException | None = exc
    name = type(exc).__name__
    while cause is not None:
        if isinstance(cause, StreamStalled):
            return FIRST_EVENT if cause.stage == "first_event" else MID_STREAM
        if isinstance(cause, StreamInterrupted):
            return "StreamInterrupted"
        if isinstance(cause, http.TransportError):
            name = type(cause).__name__
        cause = cause.__cause__
    return name


def _failure(exc: Exception, http: Any) -> tuple[str, str]:
    """(outcome, what to print) of a call that raised ``exc``."""
    outcome = _outcome(exc, http)
    told = outcome
    if isinstance(exc.__cause__, StreamStalled) and exc.__cause__.attempts > 1:
        told += f", {exc.__cause__.attempts} attempts"
    if outcome != type(exc).__name__ and not isinstance(exc, StreamStalled):
        told += f" (SDK: {type(exc).__name__})"
    return outcome, told


def _run(client: openai.OpenAI, http: Any) -> tuple[str, str]:
    """Stream one completion; return (outcome, what to print)."""
    text = []
    try:
        stream = client.chat.completions.create(
            model="demo", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                text.append(chunk.choices[0].delta.content)
    except Exception as exc:  # the demo reports whatever the caller would get
        return _failure(exc, http)
    return "ok", f"ok {''.join(text)!r}"


def _run_response(client: openai.OpenAI, http: Any) -> str:
    """Stream one background response; return what to print."""
    text = []
    try:
        stream = client.responses.create(model="demo", input="hi", stream=True, background=True)
        for event in stream:
            if event.type == "response.output_text.delta":
                text.append(event.delta)
    except Exception as exc:  # the demo reports whatever the caller would get
        return f"{_failure(exc, http)[1]} after {''.join(text)!r}"
    return f"ok {''.join(text)!r}"


def _resume_once(
    http_client: Any, http: Any, scenario: Scenario | None = None, seen: list[Seen] | None = None
) -> tuple[str, float, list[str]]:
    """Stream a background response on a fresh server (``RESUMABLE`` by default): (what to
    print, seconds, the GETs the server saw); the call joins ``seen`` if given."""
    with FaultServer(RESUMABLE if scenario is None else scenario) as server:
        client = openai.OpenAI(
            base_url=server.base_url, api_key="demo", http_client=http_client, max_retries=0
        )
        started = time.monotonic()
        told = _run_response(client, http)
        took = time.monotonic() - started
        gets = [f"GET {r.path}" for r in server.requests if r.method == "GET"]
    if seen is not None:  # its outcome is the first word of what it printed
        seen.append(Seen(started, took, told.split(" ", 1)[0], tuple(server.sent)))
    return told, took, gets


def _resume_part(
    out: TextIO, watched: Any, plain: Any, http: Any, seen: list[Seen] | None = None
) -> bool:
    """Print the resumable stream's line and the watchdog's resume; whether it resumed."""
    told, took, gets = _resume_once(watched, http, seen=seen)
    plain_told, plain_took, _ = _resume_once(plain, http, seen=seen)
    resume = rf"GET {RESPONSES_PATH}/[^/?]+\?stream=true&starting_after={RESUMED_AFTER}"
    ok = (
        told == "ok 'hello world'" and len(gets) == 1 and re.fullmatch(resume, gets[0]) is not None
    )
    out.write(
        f"\nResumable: a Responses stream created with background=True, stalled after its"
        f" first output; the watchdog resumes it.\n"
        f"{RESUME_TITLE:<31} {f'{told} in {took:.2f} s':<58} {plain_told} in {plain_took:.2f} s"
        + ("" if ok else f"   <-- expected ok 'hello world', resumed after event {RESUMED_AFTER}")
        + "\n"
    )
    for get in gets:
        out.write(f"{'':<31} resumed: {get}\n")
    return ok


def _stream_once(
    http_client: Any, http: Any, scenario: Scenario, seen: list[Seen] | None = None
) -> tuple[str, str, float]:
    # A fresh server per run, so "stalls once" stalls each client's first request.
    with FaultServer(replace(scenario, hold=HOLD)) as server:
        client = openai.OpenAI(
            base_url=server.base_url, api_key="demo", http_client=http_client, max_retries=0
        )
        started = time.monotonic()
        outcome, told = _run(client, http)
        took = time.monotonic() - started
    if seen is not None:  # what the server sent, kept for the picture
        seen.append(Seen(started, took, outcome, tuple(server.sent)))
    return outcome, told, took


GEMINI_TITLE = "Gemini, silent thinking once"
# The first attempt thinks in silence past every budget; the second answers at once.
GEMINI = Scenario.stall_first(1, stall=Scenario(think=HOLD, hold=HOLD), then=Scenario.healthy())


def _gemini_once(watched: bool, policy: StreamPolicy) -> tuple[str, float]:
    """Stream one Gemini answer on a fresh server: (what to print, seconds)."""
    from google import genai
    from google.genai import types

    from .._sdk.gemini import genai_client_for

    with FaultServer(GEMINI) as server:
        options = types.HttpOptions(base_url=server.base_url.removesuffix("/v1"))
        if watched:
            client = genai_client_for(None, api_key="demo", policy=policy, http_options=options)
        else:
            options.timeout = int(PLAIN_TIMEOUT * 1000)
            client = genai.Client(api_key="demo", http_options=options)
        started = time.monotonic()
        try:
            chunks = client.models.generate_content_stream(model="gemini-2.5-pro", contents="hi")
            told = f"ok {''.join(chunk.text or '' for chunk in chunks)!r}"
            told += f", {len(server.requests)} attempts"
        except Exception as exc:  # the demo reports whatever the caller would get
            told = f"{type(exc).__name__} (no answer)"
        finally:
            client.close()
        return told, time.monotonic() - started


def _gemini_part(out: TextIO, policy: StreamPolicy) -> bool:
    """Print the Gemini line (or why there is none); whether the watchdog's answer came."""
    try:
        import google.genai  # noqa: F401
    except ImportError:
        out.write(
            "\nGemini: google-genai is not installed (pip install 'hermes-transport[gemini]').\n"
        )
        return True
    _gemini_once(True, policy)  # warm the SDK up so timings are comparable
    told, took = _gemini_once(True, policy)
    plain_told, plain_took = _gemini_once(False, policy)
    ok = told == "ok 'hello world', 2 attempts"
    out.write(
        "\nGemini (google-genai): a thinking model silent on its first attempt; the watchdog"
        " re-sends it.\n"
        f"{GEMINI_TITLE:<31} {f'{told} in {took:.2f} s':<58} {plain_told} in {plain_took:.2f} s"
        + ("" if ok else "   <-- expected ok 'hello world', 2 attempts")
        + "\n"
    )
    return ok


def run_demo(out: TextIO, svg: Path | None = None, err: TextIO | None = None) -> int:
    """Run every case, print one line each; 0 if every watchdog outcome is the expected one.

    Both clients are of the HTTP library the installed openai uses natively. With
    ``svg``, the cases' timelines are written there too (``demo_svg``); a file that
    cannot be written is said on ``err`` (stderr) and fails the demo.
    """
    clients = clients_for(None)
    http = clients.flavor.http
    policy = StreamPolicy(stale_timeout=BUDGET, first_event_timeout=BUDGET, retries=1)
    demo_started = time.monotonic()
    failures = 0
    out.write(
        f"hermes-transport demo: the openai SDK (max_retries=0) on an embedded fault server.\n"
        f"WatchdogTransport: {BUDGET:g} s budgets, 1 re-send before the first event."
        f" Plain {http.__name__}: a {PLAIN_TIMEOUT:g} s read timeout. The server hangs up a stall"
        f" after {HOLD:g} s.\n\n"
    )
    out.write(f"{'scenario':<31} {'WatchdogTransport':<58} plain {http.__name__}.Client\n")
    watched = http.Client(transport=clients.sync_transport(policy=policy))
    plain = http.Client(timeout=PLAIN_TIMEOUT)
    resumed = False
    seen: list[Seen] | None = None if svg is None else []
    try:
        for http_client in (watched, plain):  # warm the SDK up so timings are comparable
            _stream_once(http_client, http, Scenario.healthy())
            _resume_once(http_client, http, Scenario.healthy())
        for case in CASES:
            outcome, told, took = _stream_once(watched, http, case.scenario, seen)
            _, plain_told, plain_took = _stream_once(plain, http, case.scenario, seen)
            if plain_took >= HOLD - 0.05:
                plain_told = f"hung until the server hung up: {plain_told}"
            ok = outcome == case.expected
            failures += not ok
            out.write(
                f"{case.title:<31} {f'{told} in {took:.2f} s':<58}"
                f" {plain_told} in {plain_took:.2f} s"
                + ("" if ok else f"   <-- expected {case.expected}")
                + "\n"
            )
        resumed = _resume_part(out, watched, plain, http, seen)
    finally:
        watched.close()
        plain.close()
    gemini = _gemini_part(out, policy)
    mcp = mcp_part(out, BUDGET, HOLD)
    crash = crash_part(out)
    out.write(
        f"\n{len(CASES) - failures} of {len(CASES)} watchdog outcomes as expected,"
        f" the background stream {'resumed' if resumed else 'NOT resumed'}"
        + ("" if gemini else ", the Gemini stream NOT re-sent")
        + ("" if mcp else ", the MCP tool calls NOT as expected")
        + ("" if crash else ", the crashed answer NOT finished whole")
        + f"; {time.monotonic() - demo_started:.1f} s in all.\n"
    )
    if seen is not None and svg is not None:
        titles = [case.title for case in CASES] + [RESUME_TITLE]
        pairs = [(title, seen[2 * i], seen[2 * i + 1]) for i, title in enumerate(titles)]
        figure = demo_figure(
            pairs, budget=BUDGET, plain_timeout=PLAIN_TIMEOUT, hold=HOLD, http_name=http.__name__
        )
        failures += not save_svg(svg, figure, sys.stderr if err is None else err)
    return 1 if failures or not resumed or not gemini or not mcp or not crash else 0
