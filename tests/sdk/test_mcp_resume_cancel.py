"""MCP through the watchdog, against the fault server, through the real ``mcp`` client: a
stream resumed by its event ids, a budget suspended while an elicitation waits, and the
``notifications/cancelled`` sent for a call given up."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, MCPError, types
from mcp.client.session import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    mcp_http_client_for,
    stream_error,
)
from hermes_transport.httpx2 import WatchdogTransport
from hermes_transport.testing import MCP_TOOL_NAME, FaultServer, Scenario

from _support import run_bounded

# The mcp SDK on httpx2, no openai SDK: the same under every openai major.
pytestmark = pytest.mark.once

FAST = StreamPolicy(first_event_timeout=0.5, stale_timeout=0.5)
# Generous: what a cancel sent on a task of its own may take to arrive on a busy machine.
ARRIVAL = 5.0


def url_of(server: FaultServer) -> str:
    return server.base_url.removesuffix("/v1") + "/mcp"


class Call:
    """One tool call through the SDK on the factory's client: its progress messages, its
    outcome (a result or the SDK's error) and how long it took."""

    def __init__(self) -> None:
        self.progress: list[str] = []
        self.outcome: types.CallToolResult | MCPError | None = None
        self.took = 0.0

    async def run(
        self,
        http: httpx2.AsyncClient,
        url: str,
        *,
        elicit: Any = None,
        during: Any = None,
        token: Interrupt | None = None,
        bound: bool = False,
    ) -> None:
        """Call the tool on a new session (``elicit``: its elicitation callback; ``during``:
        called with no argument before the call is sent; ``token``: reset after it, and bound
        around it with ``bound``), then
        list the tools on the same session, which must still work."""

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            self.progress.append(message or "")

        async with (
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write, elicitation_callback=elicit) as client,
        ):
            await client.initialize()
            await client.list_tools()
            if during is not None:
                during()
            started = time.monotonic()
            binding = token.bind() if bound and token is not None else contextlib.nullcontext()
            try:
                with binding:
                    self.outcome = await client.call_tool(
                        MCP_TOOL_NAME, {}, progress_callback=on_progress
                    )
            except MCPError as exc:
                self.outcome = exc
            self.took = time.monotonic() - started
            if token is not None:
                token.reset()
            assert [t.name for t in (await client.list_tools()).tools] == [MCP_TOOL_NAME]

    @property
    def text(self) -> str:
        assert isinstance(self.outcome, types.CallToolResult), self.outcome
        return "".join(c.text for c in self.outcome.content if isinstance(c, types.TextContent))


def call(http: httpx2.AsyncClient, url: str, **options: Any) -> Call:
    made = Call()
    run_bounded(lambda: made.run(http, url, **options), bound=30.0)
    return made


def attempts(server: FaultServer) -> list[tuple[str, str | None]]:
    """The tool call's attempts the server saw: each one's method and ``Last-Event-ID``."""
    return [(r.method, r.headers.get("last-event-id")) for r in server.requests if r.attempt >= 0]


def tool_call_id(server: FaultServer) -> object:
    (first,) = [r for r in server.requests if r.attempt == 0]
    assert isinstance(first.json, dict)
    return first.json["id"]


def cancels_heard(server: FaultServer, n: int = 1) -> list[object]:
    """The cancels the server heard, once ``n`` came (or ``ARRIVAL`` passed), and a little
    more: a second one would have come by then."""
    deadline = time.monotonic() + ARRIVAL
    while len(server.mcp_cancelled) < n and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    return server.mcp_cancelled


CONTENT = ("a", "b", "c", "d")


@pytest.mark.parametrize(
    "cut",
    [
        Scenario(content=CONTENT, stall_after_events=2, mcp_event_ids=True, hold=15.0),
        Scenario(
            content=CONTENT,
            stall_after_events=2,
            comment_interval=0.05,
            mcp_event_ids=True,
            hold=15.0,
        ),
        Scenario(content=CONTENT, drop_after_events=2, drop_mid_event=True, mcp_event_ids=True),
        Scenario(content=CONTENT, end_after_events=2, mcp_event_ids=True, crlf=True),
    ],
    ids=["stalled", "keepalives-only", "dropped-mid-event", "ended-early-crlf"],
)
def test_a_stream_with_event_ids_is_resumed_after_its_last_whole_event(
    server: FaultServer, cut: Scenario
) -> None:
    """A tool call's stream cut after two events (stalled, kept alive by comments only, dropped mid-event or ended early) is resumed by a GET with the last whole event's id, and the SDK sees every message once and the result."""
    server.scenario = Scenario.stall_first(
        1, stall=cut, then=Scenario(content=CONTENT, mcp_event_ids=True)
    )
    reported: list[StreamStats] = []
    made = call(mcp_http_client_for(None, policy=FAST, on_stats=reported.append), url_of(server))
    assert made.text == "abcd"
    assert made.progress == ["a", "b", "c", "d"]  # each once, none lost
    (original, resume) = attempts(server)
    assert original == ("POST", None)
    assert resume[0] == "GET"
    assert resume[1] is not None
    assert resume[1].endswith("-1")  # the second event's id
    stats = [s for s in reported if s.wire == "mcp" and s.method == "POST" and s.resumes]
    assert [(s.resumes, s.outcome) for s in stats] == [(1, "completed")]
    mcp = stats[0].mcp
    assert mcp is not None
    assert (mcp.method, mcp.tool, mcp.progress, mcp.logs, mcp.asks) == (
        "tools/call",
        MCP_TOOL_NAME,
        4,  # each once: the resumed stream's are only those after the cut
        0,
        0,
    )
    assert mcp.session is not None
    assert len(mcp.session) == 9  # 8 characters and an ellipsis, never the whole id
    assert mcp.session.endswith("…")
    assert not cancels_heard(server, 0)


def test_a_stream_without_event_ids_is_not_resumed_and_fails_alone(server: FaultServer) -> None:
    """A tool call's stream without event ids that stalls is not resumed: the call fails alone with our stall, which says why it was not resumed."""
    server.scenario = Scenario(content=CONTENT, stall_after_events=2, hold=15.0)
    made = call(mcp_http_client_for(None, policy=FAST), url_of(server))
    assert isinstance(made.outcome, MCPError)
    ours = stream_error(made.outcome)
    assert isinstance(ours, StreamStalled)
    assert "not resumed: the server gave its events no ids" in str(ours)
    assert [method for method, _ in attempts(server)] == ["POST"]


@pytest.mark.parametrize(
    ("refusal", "cancelled"), [(404, False), (405, True)], ids=["unknown-stream", "not-allowed"]
)
def test_a_refused_resume_fails_the_call_with_the_refusal_as_the_stalls_cause(
    server: FaultServer, refusal: int, cancelled: bool
) -> None:
    """A resume the server refuses fails the call alone with our stall, which names the refusal and has the refused answer as its cause; the call is then cancelled on the server, unless the refusal said it knows no such stream (404)."""
    server.scenario = Scenario.stall_first(
        1,
        stall=Scenario(content=CONTENT, stall_after_events=2, mcp_event_ids=True, hold=15.0),
        then=Scenario.error(refusal),
    )
    made = call(mcp_http_client_for(None, policy=FAST), url_of(server))
    assert isinstance(made.outcome, MCPError)
    ours = stream_error(made.outcome)
    assert isinstance(ours, StreamStalled)
    assert f"refused: {refusal}" in str(ours)
    assert isinstance(ours.__cause__, httpx2.HTTPStatusError)
    assert ours.__cause__.response.status_code == refusal
    assert made.progress == ["a", "b"]
    heard = cancels_heard(server, int(cancelled))
    assert heard == ([tool_call_id(server)] if cancelled else [])


def test_an_elicitation_longer_than_every_budget_suspends_them_until_it_is_answered(
    server: FaultServer,
) -> None:
    """A tool call whose server asks for an elicitation waits, its budgets suspended, for as long as the client takes to answer (longer than either budget), then completes."""
    server.scenario = Scenario(content=("a", "b"), mcp_elicit=True)
    asked: list[str] = []

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        await anyio.sleep(1.5)  # three budgets' worth of silence
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    reported: list[StreamStats] = []
    http = mcp_http_client_for(None, policy=FAST, on_stats=reported.append)
    made = call(http, url_of(server), elicit=on_elicit)
    assert asked == ["Which one?"]
    assert made.text == "ab"
    assert made.progress == ["a", "b"]
    (stats,) = [s for s in reported if s.mcp is not None and s.mcp.method == "tools/call"]
    assert stats.mcp is not None
    assert (stats.mcp.asks, stats.mcp.progress, stats.outcome) == (1, 2, "completed")


def test_after_the_answer_the_budget_runs_again(server: FaultServer) -> None:
    """Once the client's answer to an elicitation is sent, the stream's budget runs again: a server silent after it is cut as a stall."""
    server.scenario = Scenario(
        content=("a", "b"), mcp_elicit=True, stall_after_events=1, hold=15.0
    )

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    made = call(mcp_http_client_for(None, policy=FAST), url_of(server), elicit=on_elicit)
    assert isinstance(made.outcome, MCPError)
    ours = stream_error(made.outcome)
    assert isinstance(ours, StreamStalled)
    assert ours.stage == "first_event"
    assert made.took < 10.0


@pytest.mark.parametrize(
    ("scenario", "stage"),
    [
        (Scenario.silent_before_headers(), "headers"),
        (Scenario(think=30.0, content=("a",)), "first_event"),
        (Scenario(content=("a", "b"), stall_after_events=1, hold=30.0), "mid_stream"),
    ],
    ids=["waiting-for-headers", "before-the-first-event", "mid-stream"],
)
@pytest.mark.parametrize(
    ("cancel_on_interrupt", "bound"),
    [(True, False), (False, False), (True, True)],
    ids=["cancel", "no-cancel", "bound-cancel"],
)
def test_an_interrupted_tool_call_is_cancelled_on_the_server_once_after_the_caller_has_its_error(
    server: FaultServer, scenario: Scenario, stage: str, cancel_on_interrupt: bool, bound: bool
) -> None:
    """An interrupt (given to the client, or bound around the call) at any stage of a tool call ends it at once with our interrupt, and then notifications/cancelled for its id reaches the server once, on the same session (none with cancel_on_interrupt=False)."""
    server.scenario = scenario
    token = Interrupt()
    policy = StreamPolicy(cancel_on_interrupt=cancel_on_interrupt)

    def fire_when_sent() -> None:
        def fire() -> None:
            n = len(server.requests)
            server.wait_for_requests(n + 1, timeout=10.0)  # the tool call arrived
            time.sleep(0.3 if stage == "mid_stream" else 0.1)
            token.interrupt("user pressed stop")

        threading.Thread(target=fire, daemon=True).start()

    made = call(
        mcp_http_client_for(None, policy=policy, interrupt=None if bound else token),
        url_of(server),
        during=fire_when_sent,
        token=token,
        bound=bound,
    )
    assert isinstance(made.outcome, MCPError)
    ours = stream_error(made.outcome)
    assert isinstance(ours, StreamInterrupted)
    assert ours.stage == stage
    assert made.took < 5.0
    heard = cancels_heard(server, 1 if cancel_on_interrupt else 0)
    assert heard == ([tool_call_id(server)] if cancel_on_interrupt else [])
    if cancel_on_interrupt:
        (cancel,) = [
            r
            for r in server.requests
            if isinstance(r.json, dict) and r.json.get("method") == "notifications/cancelled"
        ]
        (tool_call,) = [r for r in server.requests if r.attempt == 0]
        for header in ("mcp-session-id", "mcp-protocol-version"):
            assert cancel.headers[header] == tool_call.headers[header]


@pytest.mark.parametrize(
    "scenario",
    [
        Scenario(think=30.0, content=("a",)),
        Scenario(content=("a", "b"), stall_after_events=1, hold=30.0),
    ],
    ids=["before-the-first-event", "mid-stream"],
)
def test_a_stalled_tool_call_is_cancelled_on_the_server(
    server: FaultServer, scenario: Scenario
) -> None:
    """A tool call given up for a stall is cancelled on the server, once: the client has an error for it and would never cancel it."""
    server.scenario = scenario
    made = call(mcp_http_client_for(None, policy=FAST), url_of(server))
    assert isinstance(made.outcome, MCPError)
    assert isinstance(stream_error(made.outcome), StreamStalled)
    assert cancels_heard(server) == [tool_call_id(server)]


@pytest.mark.parametrize(
    ("scenario", "stage"),
    [
        (Scenario.silent_before_headers(), "headers"),
        (Scenario(content=("a", "b"), stall_after_events=1, hold=30.0), "mid_stream"),
    ],
    ids=["waiting-for-headers", "mid-stream"],
)
def test_a_sync_client_sends_the_cancel_on_its_own_thread_before_raising(
    server: FaultServer, scenario: Scenario, stage: str
) -> None:
    """On a bare sync transport (any MCP client on httpx2) an interrupted tool call raises our interrupt, and its notifications/cancelled has reached the server by then."""
    url = url_of(server)
    token = Interrupt()
    headers = {"accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}}
    with httpx2.Client(transport=WatchdogTransport(interrupt=token), timeout=30.0) as http:
        opened = http.post(
            url,
            headers=headers,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello},
        )
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        server.scenario = scenario
        threading.Timer(0.3, token.interrupt, args=("user pressed stop",)).start()
        call_body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}}

        def read_all() -> None:
            with http.stream("POST", url, headers=headers, json=call_body) as response:
                for _ in response.iter_bytes():
                    pass

        with pytest.raises(StreamInterrupted) as raised:
            read_all()
        assert server.mcp_cancelled == [7]  # sent before the error was raised
    assert raised.value.stage == stage


@pytest.mark.parametrize("silent_after", [False, True], ids=["answered", "silent-after-it"])
def test_on_a_sync_client_an_answer_sent_from_another_thread_restarts_the_budget(
    server: FaultServer, silent_after: bool
) -> None:
    """On a bare sync transport, a tool call's stream waits out an elicitation longer than its budgets while another thread answers it on the same client; then its budget runs again: it reads on to its response, or stalls if the server goes silent."""
    url = url_of(server)
    headers = {"accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "x"}}
    initialize = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello}
    call_body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "x"}}
    answered: list[float] = []
    read = b""
    with httpx2.Client(transport=WatchdogTransport(policy=FAST), timeout=30.0) as http:
        opened = http.post(url, headers=headers, json=initialize)
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        server.scenario = Scenario(
            content=("a", "b"),
            mcp_elicit=True,
            stall_after_events=1 if silent_after else None,
            hold=15.0,
        )

        def answer(ask: object) -> None:
            time.sleep(1.5)  # three budgets' worth
            body = {"jsonrpc": "2.0", "id": ask, "result": {"action": "accept"}}
            assert http.post(url, headers=headers, json=body).status_code == 202
            answered.append(time.monotonic())

        def read_all() -> None:
            nonlocal read
            with http.stream("POST", url, headers=headers, json=call_body) as response:
                for chunk in response.iter_bytes():
                    read += chunk
                    if b"elicitation/create" in chunk:
                        line = chunk.split(b"data: ", 1)[1].split(b"\n", 1)[0]
                        ask = json.loads(line)["id"]
                        answering.append(threading.Thread(target=answer, args=(ask,)))
                        answering[-1].start()

        answering: list[threading.Thread] = []
        if not silent_after:
            read_all()
            answering[0].join(10.0)  # its 202 may come after the rest of the stream
            assert b'"result"' in read
            assert len(answered) == 1
            return
        with pytest.raises(StreamStalled) as stalled:
            read_all()
        answering[0].join(10.0)
    assert len(answered) == 1
    assert stalled.value.stage == "first_event"
    assert time.monotonic() - answered[0] < 5.0
