"""MCP tool calls through the watchdog: the real ``mcp`` client on httpx2, the fault server's mcp wire.

The SDK's own traffic (the handshake, its GET channel, its DELETE) goes through the
watchdog as well; plain httpx2 requests show what the transport itself raises.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, MCPError, types
from mcp.client.streamable_http import streamable_http_client

from hermes_transport import StreamPolicy, StreamStalled
from hermes_transport.httpx2 import AsyncWatchdogTransport, WatchdogTransport
from hermes_transport.testing import MCP_TOOL_NAME, FaultServer, RecordedRequest, Scenario

from _support import run_bounded

if sys.version_info >= (3, 11):
    from builtins import BaseExceptionGroup
else:  # anyio's dependency there
    from exceptiongroup import BaseExceptionGroup

# The mcp SDK on httpx2, no openai SDK: the same under every openai major.
pytestmark = pytest.mark.once

FAST = StreamPolicy(first_event_timeout=0.5, stale_timeout=0.5, retries=2)
ACCEPT = {"accept": "application/json, text/event-stream"}


def mcp_url(server: FaultServer) -> str:
    """The server's MCP endpoint."""
    return server.base_url.removesuffix("/v1") + "/mcp"


@contextlib.asynccontextmanager
async def session(
    server: FaultServer, policy: StreamPolicy | None
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session on the server, its client on the watchdog (``None``: plain)."""
    transport = AsyncWatchdogTransport(policy=policy) if policy is not None else None
    async with (
        httpx2.AsyncClient(transport=transport) as http,
        streamable_http_client(mcp_url(server), http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


async def call(
    server: FaultServer, policy: StreamPolicy | None, messages: list[str]
) -> types.CallToolResult | MCPError:
    """Call the tool once in a new session: its result, or the SDK's error for it."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    outcome: types.CallToolResult | MCPError
    async with session(server, policy) as client:
        await client.list_tools()  # so that call_tool sends no list of its own
        try:  # raised out of the session, it would come wrapped in an exception group
            outcome = await client.call_tool(MCP_TOOL_NAME, {}, progress_callback=on_progress)
        except MCPError as error:
            outcome = error
    return outcome


def tool_calls(server: FaultServer) -> list[RecordedRequest]:
    """The tools/call requests the server received."""
    return [
        r
        for r in server.requests
        if isinstance(r.json, dict) and r.json.get("method") == "tools/call"
    ]


@pytest.mark.parametrize("watched", [False, True], ids=["plain", "watchdog"])
def test_a_tool_call_with_progress_goes_through_the_watchdog_unchanged(
    server: FaultServer, watched: bool
) -> None:
    """A healthy tool call gets every progress notification and its result through the watchdog, as through a plain client."""
    server.scenario = Scenario(content=("one", "two", "three"), event_interval=0.05)
    progress: list[str] = []
    result = run_bounded(lambda: call(server, FAST if watched else None, progress))
    assert isinstance(result, types.CallToolResult)
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == ["onetwothree"]
    assert progress == ["one", "two", "three"]
    assert len(tool_calls(server)) == 1


def test_the_servers_silent_channel_is_never_cut(server: FaultServer) -> None:
    """The SDK's GET channel stays open through a silence many times the stale budget: it has none."""
    server.scenario = Scenario(content=("a",))

    async def main() -> list[RecordedRequest]:
        async with session(server, FAST) as client:
            await anyio.sleep(2.0)  # four stale budgets
            await client.send_ping()
        return [r for r in server.requests if r.method == "GET"]

    channels = run_bounded(main)
    assert channels, "the SDK opened no channel"
    sent = [s for s in server.sent if s.request is channels[0]]
    assert sent
    assert sent[0].status == 200
    # Open until the session ended (its DELETE), not cut at 0.5 s.
    assert sent[0].ended_at is None or sent[0].ended_at - sent[0].request.time > 1.5


def initialized(client: httpx2.Client, server: FaultServer) -> dict[str, str]:
    """The headers of an initialized session on ``server`` (its Mcp-Session-Id)."""
    response = client.post(
        mcp_url(server),
        json={
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        headers=ACCEPT,
    )
    return {**ACCEPT, "mcp-session-id": response.headers["mcp-session-id"]}


def test_a_tool_call_that_stalls_before_its_first_event_is_never_sent_again(
    server: FaultServer,
) -> None:
    """A tools/call silent past its first-event budget raises StreamStalled once, with re-sends left: it may have had effects."""
    server.scenario = Scenario(think=10.0, content=("a",))
    request = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}}
    with httpx2.Client(transport=WatchdogTransport(policy=FAST), timeout=30) as client:
        headers = initialized(client, server)
        started = time.monotonic()
        with pytest.raises(StreamStalled) as stalled:
            client.post(mcp_url(server), json=request, headers=headers)
    assert stalled.value.stage == "first_event"
    assert stalled.value.attempts == 1
    assert time.monotonic() - started < 5.0
    assert len(tool_calls(server)) == 1


def test_a_tool_call_that_stalls_after_progress_ends_instead_of_hanging(
    server: FaultServer,
) -> None:
    """A tool call whose stream goes silent after its first progress fails within the stale budget, not at the server's whim; it is not sent again."""
    server.scenario = Scenario(content=("a", "b"), stall_after_events=1, hold=15.0)
    progress: list[str] = []
    started = time.monotonic()
    outcome = run_bounded(lambda: call(server, FAST, progress))
    assert isinstance(outcome, MCPError)
    assert progress == ["a"]
    assert time.monotonic() - started < 10.0
    assert len(tool_calls(server)) == 1


def test_keepalive_comments_do_not_keep_a_stalled_tool_call_alive(server: FaultServer) -> None:
    """A stream held open by keepalive comments alone after its progress is stalled all the same."""
    server.scenario = Scenario(
        content=("a", "b"), stall_after_events=1, hold=15.0, comment_interval=0.05
    )
    request = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "x"}}
    with httpx2.Client(transport=WatchdogTransport(policy=FAST), timeout=30) as client:
        headers = initialized(client, server)
        with (
            client.stream("POST", mcp_url(server), json=request, headers=headers) as response,
            pytest.raises(StreamStalled) as stalled,
        ):
            for _ in response.iter_bytes():
                pass
    assert stalled.value.stage == "mid_stream"
    assert json.loads(tool_calls(server)[0].body)["id"] == 5


def test_tool_budgets_apply_to_the_tool_they_name(server: FaultServer) -> None:
    """A tool rule's first-event budget is the one a call of that tool gets, over MCP's default."""
    from hermes_transport import BudgetRules, ToolBudget

    policy = StreamPolicy(budget_rules=BudgetRules(tools=(ToolBudget("slow_*", first_event=0.4),)))
    server.scenario = Scenario(think=10.0, content=("a",))
    request: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 6,
        "method": "tools/call",
        "params": {"name": "slow_search"},
    }
    with httpx2.Client(transport=WatchdogTransport(policy=policy), timeout=30) as client:
        headers = initialized(client, server)
        with pytest.raises(StreamStalled) as stalled:
            client.post(mcp_url(server), json=request, headers=headers)
    assert stalled.value.budget == pytest.approx(0.4)
    assert "tool 'slow_search' matched rule 'slow_*'" in str(stalled.value)


def test_on_a_bare_transport_a_first_event_stall_through_the_sdk_ends_its_session(
    server: FaultServer,
) -> None:
    """On a bare transport (not the factory's client), a tool call stalled before its first event ends the SDK's session with an exception group holding our StreamStalled, after one attempt, as the README says."""
    server.scenario = Scenario(think=10.0, content=("a",))

    async def main() -> None:
        async with session(server, FAST) as client:
            await client.list_tools()
            await client.call_tool(MCP_TOOL_NAME, {})

    with pytest.raises(BaseExceptionGroup) as group:
        run_bounded(main)
    assert group.group_contains(StreamStalled)
    assert len(tool_calls(server)) == 1
