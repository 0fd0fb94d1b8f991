"""The ``mcp`` SDK's client on ``mcp_http_client_for``'s client, against the SDK's own server
(``MCPServer`` over streamable HTTP, see ``_mcp_real_server``)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
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
from hermes_transport._core.mcp import IN_BAND_CODE

from _mcp_real_server import MemoryEventStore, RealServer, serve_mcp
from _support import run_bounded

# The mcp SDK on httpx2, no openai SDK: the same under every openai major. The server's
# ctx.info (count) warns that logging is deprecated from 2026-07-28; the handshake's
# protocol versions still send it.
pytestmark = [
    pytest.mark.once,
    pytest.mark.filterwarnings("ignore:The logging capability is deprecated"),
]


@pytest.fixture
def real() -> Iterator[RealServer]:
    """The real MCP server, its streams without event ids."""
    with serve_mcp() as running:
        yield running
    assert not [t for t in threading.enumerate() if t.name == "mcp-real-server"]


@pytest.fixture
def real_with_ids() -> Iterator[RealServer]:
    """The real MCP server with an in-memory event store: its streams carry event ids."""
    with serve_mcp(event_store=MemoryEventStore()) as running:
        yield running
    assert not [t for t in threading.enumerate() if t.name == "mcp-real-server"]


@contextlib.asynccontextmanager
async def session(
    http: httpx2.AsyncClient, url: str, **callbacks: Any
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session on ``url`` over ``http``, with ``callbacks``, closed with it."""
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, **callbacks) as client,
    ):
        await client.initialize()
        yield client


def texts(result: types.CallToolResult) -> list[str]:
    """The text contents of a tool's result."""
    return [c.text for c in result.content if isinstance(c, types.TextContent)]


def echo_through(real: RealServer, reported: list[StreamStats]) -> types.CallToolResult:
    """An ``echo`` call on the factory's client, its streams reported to ``reported``."""

    async def main() -> types.CallToolResult:
        http = mcp_http_client_for("cli", on_stats=reported.append)
        async with session(http, real.url) as client:
            return await client.call_tool("echo", {"text": "hello"})

    return run_bounded(main)


def test_a_healthy_tool_call_returns_its_text_and_reports_its_streams(real: RealServer) -> None:
    """An echo through the SDK on the factory's client returns the text, and on_stats gets its streams on the mcp wire."""
    reported: list[StreamStats] = []
    result = echo_through(real, reported)
    assert texts(result) == ["hello"]
    assert not result.is_error
    assert [s for s in reported if s.wire == "mcp" and s.outcome == "completed"], reported
    assert "tools/call" in real.recorder.methods


def test_every_progress_notification_and_the_log_arrive_with_the_result(real: RealServer) -> None:
    """A tool that reports progress more often than the stale budget gets each notification, its log message and its result."""
    notified: list[tuple[float, float | None, str | None]] = []
    logged: list[Any] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notified.append((progress, total, message))

    async def on_log(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    async def main() -> types.CallToolResult:
        http = mcp_http_client_for(None, policy=StreamPolicy(stale_timeout=2.0))
        async with session(http, real.url, logging_callback=on_log) as client:
            return await client.call_tool(
                "count", {"n": 5, "delay": 0.2}, progress_callback=on_progress
            )

    result = run_bounded(main)
    assert texts(result) == ["done 5"]
    assert notified == [(float(i), 5.0, f"step {i}") for i in range(1, 6)]
    assert logged == ["counting to 5"]


def test_a_tool_call_waiting_on_an_elicitation_longer_than_its_budgets_completes(
    real: RealServer,
) -> None:
    """While the server waits for the client's answer to its elicitation, the tool call's stream budgets are suspended: an answer slower than both budgets still gets the result."""
    asked: list[str] = []

    async def on_elicit(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params.message)
        await anyio.sleep(1.5)  # the user thinks: longer than either budget
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def main() -> types.CallToolResult:
        policy = StreamPolicy(first_event_timeout=0.5, stale_timeout=0.5)
        http = mcp_http_client_for(None, policy=policy)
        async with session(http, real.url, elicitation_callback=on_elicit) as client:
            return await client.call_tool("ask", {"question": "Which colour?"})

    result = run_bounded(main)
    assert asked == ["Which colour?"]
    assert texts(result) == ["blue"]


def test_a_healthy_tool_call_with_event_ids_returns_its_text(real_with_ids: RealServer) -> None:
    """With the server's event store on, its streams carry event ids and an echo through the factory's client still returns the text."""
    reported: list[StreamStats] = []
    result = echo_through(real_with_ids, reported)
    assert texts(result) == ["hello"]
    assert [s for s in reported if s.wire == "mcp" and s.outcome == "completed"], reported
    store = real_with_ids.event_store
    assert store is not None
    # The tool call's stream: its priming event, then its answer, each with an id.
    assert any(message is None for _, _, message in store.events)
    assert any(isinstance(m, types.JSONRPCResponse) for _, _, m in store.events)


def test_a_call_the_caller_abandons_is_cancelled_on_the_server(real: RealServer) -> None:
    """A tool call the caller gives up on sends notifications/cancelled, the server cancels the tool, and the session goes on."""

    async def main() -> types.CallToolResult:
        started = anyio.Event()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            started.set()

        http = mcp_http_client_for(None)
        async with session(http, real.url) as client:
            async with anyio.create_task_group() as tasks:

                async def nap() -> None:
                    await client.call_tool("nap", {"seconds": 30}, progress_callback=on_progress)

                tasks.start_soon(nap)
                await started.wait()
                tasks.cancel_scope.cancel()
            await anyio.to_thread.run_sync(real.recorder.nap_cancelled.wait, 5.0)
            return await client.call_tool("echo", {"text": "still here"})

    result = run_bounded(main)
    assert real.recorder.nap_cancelled.is_set()
    assert real.recorder.cancelled == ["nap"]
    assert "notifications/cancelled" in real.recorder.methods
    assert len(real.recorder.cancel_notices) == 1
    assert texts(result) == ["still here"]


def test_a_get_with_last_event_id_replays_the_stream_after_it(real_with_ids: RealServer) -> None:
    """The event store the tests use replays a tool call's stream: a GET with Last-Event-ID gets the events after that id, then a fresh priming event."""
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    hello = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"},
    }
    call = {"name": "count", "arguments": {"n": 3, "delay": 0.0}, "_meta": {"progressToken": "p"}}

    def rpc(ident: int | None, method: str, params: dict[str, Any] | None = None) -> str:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if ident is not None:
            message["id"] = ident
        if params is not None:
            message["params"] = params
        return json.dumps(message)

    def events(text: str) -> list[dict[str, str]]:
        blocks = [b for b in text.replace("\r\n", "\n").split("\n\n") if b.strip()]
        return [dict(line.split(": ", 1) for line in b.splitlines()) for b in blocks]

    with httpx2.Client(timeout=5.0) as http:
        opened = http.post(real_with_ids.url, headers=headers, content=rpc(1, "initialize", hello))
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        headers["mcp-protocol-version"] = "2025-11-25"
        http.post(
            real_with_ids.url, headers=headers, content=rpc(None, "notifications/initialized")
        )
        sent = events(
            http.post(real_with_ids.url, headers=headers, content=rpc(2, "tools/call", call)).text
        )
        # A priming event (an id, empty data), the log message, 3 progress notifications, the answer.
        assert [e.get("data", "")[:1] for e in sent] == ["", "{", "{", "{", "{", "{"]
        after = sent[2]["id"]
        replayed = ""
        with http.stream(
            "GET", real_with_ids.url, headers={**headers, "last-event-id": after}
        ) as again:
            assert again.status_code == 200
            for chunk in again.iter_text():
                replayed += chunk
                if len(events(replayed)) >= 4:
                    break  # the stream stays open after the replay: a live tail
    assert events(replayed)[:3] == sent[3:]
    assert events(replayed)[3]["data"] == ""
    assert real_with_ids.recorder.http[-1] == ("GET", after)


def nap_through(
    real: RealServer,
    policy: StreamPolicy,
    seconds: float,
    reported: list[StreamStats],
    *,
    stop: Interrupt | None = None,
) -> types.CallToolResult | MCPError:
    """A ``nap`` call through the factory's client (``stop`` fired at its first progress),
    its result or the SDK's error; then an echo on the same session, which must work."""

    async def main() -> types.CallToolResult | MCPError:
        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if stop is not None:
                stop.interrupt("user pressed stop")

        http = mcp_http_client_for(None, policy=policy, interrupt=stop, on_stats=reported.append)
        async with session(http, real.url) as client:
            outcome: types.CallToolResult | MCPError
            try:
                arguments = {"seconds": seconds}
                outcome = await client.call_tool("nap", arguments, progress_callback=on_progress)
            except MCPError as exc:
                outcome = exc
            if stop is not None:
                stop.reset()
            assert texts(await client.call_tool("echo", {"text": "after"})) == ["after"]
            # The SDK closes the nap's stream on a task of its own, maybe later still: its
            # statistics come then (bounded, on a busy machine).
            deadline = time.monotonic() + 5.0
            while not _nap_reported(reported) and time.monotonic() < deadline:
                await anyio.sleep(0.01)
            return outcome

    return run_bounded(main)


def _nap_reported(reported: list[StreamStats]) -> bool:
    return any(s.mcp is not None and s.mcp.tool == "nap" for s in reported)


def tool_call_stats(reported: list[StreamStats]) -> StreamStats:
    """The statistics of the one ``tools/call`` of ``nap``."""
    (stats,) = [s for s in reported if s.wire == "mcp" and s.method == "POST" and s.resumes]
    return stats


def test_a_tool_call_silent_past_its_budget_is_resumed_by_event_id_and_completes(
    real_with_ids: RealServer,
) -> None:
    """A tool call whose stream goes silent past its stale budget is resumed with a GET carrying the last event id, as often as it takes, and returns the tool's result."""
    reported: list[StreamStats] = []
    policy = StreamPolicy(stale_timeout=0.5, resumes=20)
    result = nap_through(real_with_ids, policy, 1.5, reported)
    assert isinstance(result, types.CallToolResult), result
    assert texts(result) == ["rested"]
    resumes = [last for method, last in real_with_ids.recorder.http if method == "GET" and last]
    assert resumes, real_with_ids.recorder.http
    assert tool_call_stats(reported).resumes == len(resumes)
    assert tool_call_stats(reported).outcome == "completed"
    assert not real_with_ids.recorder.cancel_notices  # a resumed call is no given-up one


def test_without_event_ids_a_silent_tool_call_fails_alone_and_is_cancelled_on_the_server(
    real: RealServer,
) -> None:
    """Without event ids a tool call silent past its stale budget fails alone, with our stall findable, and the server gets its notifications/cancelled and stops the tool."""
    reported: list[StreamStats] = []
    result = nap_through(real, StreamPolicy(stale_timeout=0.5), 30.0, reported)
    assert isinstance(result, MCPError)
    assert result.error.code == IN_BAND_CODE
    assert isinstance(stream_error(result), StreamStalled)
    assert real.recorder.nap_cancelled.wait(5.0)
    assert len(real.recorder.cancel_notices) == 1


def test_an_interrupted_tool_call_fails_at_once_and_is_cancelled_on_the_server(
    real: RealServer,
) -> None:
    """An interrupt fired while a tool works ends its call at once with our interrupt findable, then notifications/cancelled reaches the server, once, and the tool stops."""
    reported: list[StreamStats] = []
    started = time.monotonic()
    result = nap_through(real, StreamPolicy(), 30.0, reported, stop=Interrupt())
    assert time.monotonic() - started < 10.0  # the nap is 30 s
    assert isinstance(result, MCPError)
    error = stream_error(result)
    assert isinstance(error, StreamInterrupted)
    assert "user pressed stop" in str(error)
    assert real.recorder.nap_cancelled.wait(5.0)
    assert len(real.recorder.cancel_notices) == 1
    assert "notifications/cancelled" in real.recorder.methods
