"""Draw one timeline picture per wire, for the Concepts page: ``docs/images/timelines/``.

    python tools/timelines.py                    # every wire, into docs/images/timelines/
    python tools/timelines.py --wire gemini --out /some/folder

Each picture is made of real runs, not drawn by hand: for each wire, plain httpx on a
``WatchdogTransport`` (1 s budgets, one re-send) streams the wire's request from the
embedded ``FaultServer`` under the same few scenarios (healthy; thinking with
keepalives; keepalives only after two outputs; silent from the start once; on
Responses a background stream, on MCP a stream with event ids, stalled after their
first output, then resumed). The server's record of what it sent times each attempt
(``spans_from_sent``: each write judged by the transport's own progress meter for that
wire), and the SVG writer of ``probe --svg`` and ``demo --svg`` draws them. MCP is
driven as its SDK speaks it (``initialize``, then a streamed ``tools/call``) in plain
JSON-RPC; the WebSocket turn through the openai SDK's ``client.responses.connect()``
under ``watch_connection`` (the ``websocket`` extra). Times vary by a few milliseconds
from run to run; the pictures' shape does not.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from hermes_transport import StreamPolicy, http_client_for, stream_error
from hermes_transport.cli.figure import Ending, Figure, Lane, Row, Tone
from hermes_transport.cli.sent import spans_from_sent
from hermes_transport.cli.svg import save_svg
from hermes_transport.testing import FaultServer, Scenario

BUDGET = 1.0  # seconds: the watchdog's first-event and stale budgets
HOLD = BUDGET + 1.0  # seconds: how long the server keeps a stall up
POLICY = StreamPolicy(stale_timeout=BUDGET, first_event_timeout=BUDGET, retries=1)
PIECES = ("Streams", " that", " never", " hang", " and", " never", " lie.")
OUT = Path(__file__).resolve().parent.parent / "docs" / "images" / "timelines"
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})

HEALTHY = Scenario(content=PIECES, event_interval=0.06)

Call = Callable[[FaultServer], None]


def _post(server: FaultServer, url: str, body: dict[str, Any], **headers: str) -> None:
    """Send one streaming request on a watched client and read its body to the end."""
    with (
        http_client_for(None, policy=POLICY, trust_env=False) as client,
        client.stream("POST", url, json=body, headers=headers) as response,
    ):
        response.raise_for_status()
        for _ in response.iter_raw():
            pass


def _chat(server: FaultServer) -> None:
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": "gpt-4o-mini", "messages": messages, "stream": True}
    _post(server, f"{server.base_url}/chat/completions", body)


def _responses(background: bool) -> Call:
    def call(server: FaultServer) -> None:
        body = {"model": "gpt-4o-mini", "input": "hi", "stream": True, "background": background}
        _post(server, f"{server.base_url}/responses", body)

    return call


def _messages(server: FaultServer) -> None:
    messages = [{"role": "user", "content": "hi"}]
    body = {"model": "claude-sonnet-4-5", "max_tokens": 256, "messages": messages, "stream": True}
    _post(server, f"{server.base_url}/messages", body)


def _gemini(server: FaultServer) -> None:
    root = server.base_url.removesuffix("/v1")
    url = f"{root}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
    _post(server, url, {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})


def _mcp(server: FaultServer) -> None:
    """A tool call as the mcp SDK makes one: the handshake, then ``tools/call``, streamed."""
    url = server.base_url.removesuffix("/v1") + "/mcp"
    accept = {"Accept": "application/json, text/event-stream"}
    client_info = {"name": "timelines", "version": "1"}
    params: dict[str, Any] = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": client_info,
    }
    hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    with httpx.Client(trust_env=False) as client:  # the handshake: not a stream
        answer = client.post(url, json=hello, headers=accept)
        answer.raise_for_status()
        session = answer.headers["mcp-session-id"]
        done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        client.post(url, json=done, headers={**accept, "Mcp-Session-Id": session})
    params = {"name": "work", "arguments": {}, "_meta": {"progressToken": 1}}
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
    _post(server, url, call, **accept, **{"Mcp-Session-Id": session})


def _websocket(server: FaultServer) -> None:
    """One turn of ``client.responses.connect()`` under ``watch_connection``."""
    import openai

    from hermes_transport import watch_connection

    client = openai.OpenAI(
        base_url=server.base_url,
        websocket_base_url=server.websocket_base_url,
        api_key="timelines",
        max_retries=0,
    )
    options: Any = {"proxy": None}  # websockets reads the *_proxy variables: not for loopback
    connect = client.responses.connect(websocket_connection_options=options)
    with watch_connection(connect, policy=POLICY) as conn:
        conn.response.create(model="gpt-4o-mini", input="hi")
        for event in conn:
            if event.type in TERMINAL:
                break


# Each wire: its title, its call, how many events come before its first output (so that
# "after 2 outputs" means outputs), and its own case, if any.
WIRES: dict[str, tuple[str, Call, int]] = {
    "chat": ("Chat Completions (POST /v1/chat/completions)", _chat, 0),
    "responses": ("Responses (POST /v1/responses)", _responses(False), 4),
    "messages": ("Anthropic Messages (POST /v1/messages)", _messages, 3),
    "gemini": ("Gemini (POST …/models/{model}:streamGenerateContent)", _gemini, 0),
    "mcp": ("MCP tool call (POST …/mcp, tools/call)", _mcp, 0),
    "websocket": ("Responses over a WebSocket (watch_connection)", _websocket, 4),
}


def _cases(wire: str) -> list[tuple[str, Scenario, Call]]:
    """The rows of a wire's picture: (label, scenario, call) each."""
    _, call, preamble = WIRES[wire]
    thinking = replace(HEALTHY, think=0.5, keepalive_interval=0.15)
    quiet = replace(HEALTHY, stall_after_events=preamble + 2, comment_interval=0.15)
    cases = [
        ("healthy", HEALTHY, call),
        ("thinking 0.5 s, keepalives meanwhile", thinking, call),
        ("keepalives only after 2 outputs", quiet, call),
        ("silent from the start, once", Scenario.stall_first(1, then=HEALTHY), call),
    ]
    if wire == "responses":  # cut after its first output, then resumed by its number
        stall = replace(HEALTHY, stall_after_events=preamble + 2)  # + response.queued
        resumed = Scenario.stall_first(1, stall=stall, then=HEALTHY)
        cases.append(("background, stalled after 1 output", resumed, _responses(True)))
    if wire == "mcp":  # events with ids: cut after its first output, then resumed
        stall = replace(HEALTHY, stall_after_events=1, mcp_event_ids=True)
        resumed = Scenario.stall_first(1, stall=stall, then=replace(HEALTHY, mcp_event_ids=True))
        cases.append(("event ids, stalled after 1 output", resumed, call))
    return cases


def _run(call: Call, scenario: Scenario) -> Lane:
    """One call on a fresh server, watched; its lane, timed by what the server sent, from
    the first request's arrival (the client's own start-up is not the stream's)."""
    with FaultServer(replace(scenario, hold=HOLD)) as server:
        started = time.monotonic()
        ending: Ending = "done"
        outcome = "ok"
        try:
            call(server)
        except Exception as exc:  # what the caller got, named
            found = stream_error(exc)
            if found is not None:
                ending, outcome = "cut", f"{type(found).__name__} ({found.stage})"
            else:
                ending, outcome = "error", type(exc).__name__
        ended = time.monotonic()
    sent = server.sent
    origin = min([s.request.time for s in sent if s.request.attempt >= 0], default=started)
    spans = spans_from_sent(sent, origin, ended - origin, ending, (BUDGET, BUDGET))
    if ending == "done" and len(spans) > 1:
        outcome = f"ok after a {spans[-1].via}"
    tone: Tone = "ok" if ending == "done" else "bad"
    return Lane(spans, f"{outcome}, {ended - origin:.2f} s", tone)


def figure_for(wire: str) -> Figure:
    """The picture of one wire: a row per case."""
    rows = tuple(Row(label, (_run(call, scenario),)) for label, scenario, call in _cases(wire))
    watch = "watch_connection" if wire == "websocket" else "WatchdogTransport"
    return Figure(
        f"{WIRES[wire][0]}: what the watchdog counts",
        rows,
        f"{watch}, {BUDGET:g} s budgets and 1 re-send, on the fault server;"
        " times from the first request's arrival.",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--wire", choices=list(WIRES), action="append", help="default: all")
    parser.add_argument("--out", type=Path, default=OUT, help="default: docs/images/timelines")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for wire in args.wire or list(WIRES):
        _run(WIRES[wire][1], HEALTHY)  # warm up: comparable timings
        path = args.out / f"{wire}.svg"
        if not save_svg(path, figure_for(wire), sys.stderr):
            return 1
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
