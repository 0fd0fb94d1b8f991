"""``mcp_http_client_for``: an httpx2 client for the ``mcp`` SDK's streamable HTTP client, on the watchdog."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx2
import pytest
from mcp import ClientSession, MCPError, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from hermes_transport import (
    BudgetRules,
    DefaultSeconds,
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    ToolBudget,
    mcp_http_client_for,
    stream_error,
)
from hermes_transport._transports.builder import profile_of
from hermes_transport.httpx2 import AsyncWatchdogTransport
from hermes_transport.testing import MCP_TOOL_NAME, FaultServer, Scenario

from _support import run_bounded

# The mcp SDK on httpx2, no openai SDK: the same under every openai major.
pytestmark = pytest.mark.once


def test_the_client_is_set_up_as_the_sdk_sets_its_own_on_the_watchdog() -> None:
    """The client has the SDK's own timeouts and redirect setting, over httpx2's watchdog transport with the given policy and interrupt."""
    policy, token = StreamPolicy(retries=1), Interrupt()
    client = mcp_http_client_for("cron", policy=policy, interrupt=token)
    own = create_mcp_http_client()
    transport = client._transport
    assert isinstance(transport, AsyncWatchdogTransport)
    assert transport.policy is policy
    assert own.timeout == httpx2.Timeout(30.0, read=300.0)
    # MCP's first-event budget is 300 s: the read timeout is kept above it.
    assert client.timeout == httpx2.Timeout(30.0, read=305.0)
    assert client.follow_redirects is own.follow_redirects is False
    profile = profile_of(client)
    assert profile is not None
    assert (profile.policy, profile.interrupt) == (policy, token)


@pytest.mark.parametrize(
    ("policy", "read"),
    [
        (StreamPolicy(), 305.0),  # above MCP's 300 s first-event budget
        (StreamPolicy(stale_timeout=1000.0), 1005.0),
        (StreamPolicy(first_event_timeout=20.0, stale_timeout=30.0), 300.0),
        (StreamPolicy(stale_timeout=None), 300.0),
        (StreamPolicy(budget_rules=BudgetRules(tools=(ToolBudget("deep*", 900.0),))), 905.0),
        (
            StreamPolicy(
                stale_timeout=60.0,
                budget_rules=BudgetRules(tools=(ToolBudget("*", 900.0, 900.0),)),
            ),
            300.0,  # what the user set wins over the rule: no budget is longer than 60 s
        ),
        # A default of one's own is no setting: MCP's defaults replace it, as rules would.
        (StreamPolicy(stale_timeout=DefaultSeconds(800.0)), 305.0),
    ],
    ids=["defaults", "long-stale", "short", "off", "tool-rule", "user-wins", "own-default"],
)
def test_the_read_timeout_stays_above_every_budget_an_mcp_request_can_get(
    policy: StreamPolicy, read: float
) -> None:
    """The read timeout is the SDK's 300 s, or the longest budget an MCP request can get plus a 5 s margin when that is longer, so the watch decides a stall."""
    client = mcp_http_client_for(None, policy=policy)
    assert client.timeout == httpx2.Timeout(30.0, read=read)


def test_given_client_settings_are_kept_and_connection_settings_go_to_the_transport() -> None:
    """A timeout, headers and redirect setting given are the client's; connection settings reach the transport."""
    timeout = httpx2.Timeout(5.0)
    client = mcp_http_client_for(
        None, timeout=timeout, headers={"x-key": "k"}, follow_redirects=True, verify=False
    )
    assert client.timeout == timeout
    assert client.headers["x-key"] == "k"
    assert client.follow_redirects is True
    assert isinstance(client._transport, AsyncWatchdogTransport)


@pytest.mark.parametrize("bypass", ["transport", "mounts", "app"])
def test_a_transport_of_ones_own_is_refused_naming_it(bypass: str) -> None:
    """A transport, mounts or app would bypass the watch: the factory raises a TypeError naming it."""
    settings: dict[str, Any] = {bypass: object()}
    with pytest.raises(TypeError, match=f"{bypass}= would bypass it"):
        mcp_http_client_for(None, **settings)


@contextlib.asynccontextmanager
async def session(http: httpx2.AsyncClient, url: str) -> AsyncIterator[ClientSession]:
    """An initialized SDK session on ``url`` over ``http``, closed with it."""
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as client,
    ):
        await client.initialize()
        yield client


def test_a_tool_call_through_the_sdk_on_the_factorys_client(server: FaultServer) -> None:
    """The SDK's tool call runs on the factory's client, each of its streams reported to on_stats on the mcp wire."""
    server.scenario = Scenario(content=("a", "b"))
    reported: list[StreamStats] = []
    url = server.base_url.removesuffix("/v1") + "/mcp"

    async def main() -> types.CallToolResult:
        http = mcp_http_client_for("cli", on_stats=reported.append)
        async with session(http, url) as client:
            await client.list_tools()
            return await client.call_tool(MCP_TOOL_NAME, {})

    result = run_bounded(main)
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == ["ab"]
    calls: list[Any] = [s for s in reported if s.wire == "mcp" and s.outcome == "completed"]
    assert calls, reported


FAST = StreamPolicy(first_event_timeout=0.5, stale_timeout=0.5)


async def fails(
    http: httpx2.AsyncClient, url: str, messages: list[str]
) -> tuple[MCPError, list[types.Tool]]:
    """A tool call that must fail through the SDK: its error, and the tools the same
    session lists after it (it goes on)."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")

    async with session(http, url) as client:
        await client.list_tools()
        with pytest.raises(MCPError) as failed:
            await client.call_tool(MCP_TOOL_NAME, {}, progress_callback=on_progress)
        tools = (await client.list_tools()).tools
    return failed.value, tools


@pytest.mark.parametrize(
    ("scenario", "stage", "progress"),
    [
        (Scenario(think=10.0, content=("a",)), "first_event", []),
        (Scenario(content=("a", "b"), stall_after_events=1, hold=15.0), "mid_stream", ["a"]),
        (
            Scenario(content=("a", "b"), stall_after_events=1, hold=15.0, comment_interval=0.05),
            "mid_stream",
            ["a"],
        ),
    ],
    ids=["before-the-first-event", "after-progress", "keepalives-only"],
)
def test_a_stalled_tool_call_fails_alone_and_says_so(
    server: FaultServer, scenario: Scenario, stage: str, progress: list[str]
) -> None:
    """Through the SDK on the factory's client, a stalled tool call fails by itself with an MCPError that says it stalled, where stream_error finds our StreamStalled, and the session goes on; it is sent once."""
    server.scenario = scenario
    url = server.base_url.removesuffix("/v1") + "/mcp"
    seen: list[str] = []
    error, tools = run_bounded(lambda: fails(mcp_http_client_for(None, policy=FAST), url, seen))
    assert error.code == -32001
    assert error.message.startswith("stream stalled")
    ours = stream_error(error)
    assert isinstance(ours, StreamStalled)
    assert ours.stage == stage
    assert str(ours) == error.message
    assert seen == progress
    assert [tool.name for tool in tools] == [MCP_TOOL_NAME]
    assert len([r for r in server.requests if r.attempt >= 0]) == 1


def test_an_interrupted_tool_call_fails_alone_at_once(server: FaultServer) -> None:
    """An interrupt of the factory's client ends its waiting tool call at once with an MCPError, where stream_error finds our StreamInterrupted with the reason; the session goes on."""
    server.scenario = Scenario(think=10.0, content=("a",))
    url = server.base_url.removesuffix("/v1") + "/mcp"
    token = Interrupt()

    async def main() -> tuple[MCPError, list[types.Tool], float]:
        http = mcp_http_client_for(None, interrupt=token)
        async with session(http, url) as client:
            await client.list_tools()
            timer = threading.Timer(0.5, token.interrupt, args=("user pressed stop",))
            timer.start()
            started = time.monotonic()
            with pytest.raises(MCPError) as failed:
                await client.call_tool(MCP_TOOL_NAME, {})
            took = time.monotonic() - started
            token.reset()
            tools = (await client.list_tools()).tools
        return failed.value, tools, took

    error, tools, took = run_bounded(main)
    ours = stream_error(error)
    assert isinstance(ours, StreamInterrupted)
    assert ours.reason == "user pressed stop"
    assert took < 5.0
    assert [tool.name for tool in tools] == [MCP_TOOL_NAME]
