"""The OpenAI Agents SDK's MCP client on the watchdog: ``MCPServerStreamableHttp`` over ``mcp_http_client_for``.

The recipe gives ``MCPServerStreamableHttp`` an ``httpx_client_factory`` (its params'
key: called as ``factory(headers=..., timeout=..., auth=...)`` for every connection,
required to return an ``httpx2.AsyncClient`` on mcp 2.x) that returns
``mcp_http_client_for``'s client, passing the SDK's headers and auth on and keeping its
own timeout, and sets ``client_session_timeout_seconds=None``. Against the fault
server's MCP wire, with no model: the server object's ``call_tool`` runs on the factory's
client; a stalled tool call (before its first event or after progress) fails alone with
the mcp SDK's ``MCPError``, where ``stream_error`` finds our ``StreamStalled``, is sent
once, and the next call on the same server object succeeds; an ``Interrupt`` given to
the factory's client, or bound around the ``call_tool`` call (mcp 2.x carries the
caller's context to the request), ends a waiting call at once. Pinned traps: the SDK's
own 5 s ``client_session_timeout_seconds`` ends a long tool call first with an
``MCPError`` of the same code (-32001, MCP's request timeout) and nothing of ours; and
``max_retry_attempts`` takes our in-band error for that timeout and sends the stalled
``tools/call`` again in a new session, which the transport itself never does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

import httpx2
import pytest
from mcp import MCPError

from _frameworks_support import framework

framework("agents")

from agents import set_tracing_disabled
from agents.mcp import MCPServerStreamableHttp

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    mcp_http_client_for,
    stream_error,
)
from hermes_transport.testing import MCP_TOOL_NAME, FaultServer, RecordedRequest, Scenario

from _support import interrupt_when

pytestmark = pytest.mark.anyio

# Budgets far above a loopback event gap, far below the server's holds.
AGENTS_MCP_POLICY = StreamPolicy(first_event_timeout=0.5, stale_timeout=0.5)
# For interrupts and the session timer: no budget of ours can end the call first.
AGENTS_MCP_LONG_POLICY = StreamPolicy(first_event_timeout=5.0, stale_timeout=5.0)
AGENTS_MCP_REASON = "user pressed stop"
# An interrupt is "prompt" within this, on two busy cores.
AGENTS_MCP_PROMPT = 1.0
# The JSON-RPC code of our in-band error, and of the mcp SDK's own request timeout.
AGENTS_MCP_CODE = -32001


@pytest.fixture
def anyio_backend() -> str:
    """The Agents SDK runs on asyncio only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _ag_mcp_no_tracing() -> None:
    """The Agents SDK's tracing stays off (it would export to the network)."""
    set_tracing_disabled(True)


def _mcp_url(server: FaultServer) -> str:
    """The fault server's MCP endpoint."""
    return server.base_url.removesuffix("/v1") + "/mcp"


def _tool_calls(server: FaultServer) -> list[RecordedRequest]:
    """The ``tools/call`` requests the server answered with its scenario."""
    return [request for request in server.requests if request.attempt >= 0]


def _watched_factory(
    made: list[httpx2.AsyncClient], **settings: Any
) -> Callable[..., httpx2.AsyncClient]:
    """The recipe's ``httpx_client_factory``: ``mcp_http_client_for``'s client with the SDK's headers and auth, its own timeout kept; each client made is kept in ``made``."""

    def factory(
        headers: dict[str, str] | None = None, timeout: Any = None, auth: Any = None
    ) -> httpx2.AsyncClient:
        client = mcp_http_client_for(None, headers=headers, auth=auth, **settings)
        made.append(client)
        return client

    return factory


def _mcp_server(
    server: FaultServer,
    made: list[httpx2.AsyncClient],
    session_timeout: float | None = None,
    max_retry_attempts: int = 0,
    **settings: Any,
) -> Any:
    """An Agents SDK ``MCPServerStreamableHttp`` on the fault server over the recipe's factory."""
    params: dict[str, Any] = {
        "url": _mcp_url(server),
        "headers": {"x-app": "demo"},
        "httpx_client_factory": _watched_factory(made, **settings),
    }
    return MCPServerStreamableHttp(
        params,
        client_session_timeout_seconds=session_timeout,
        max_retry_attempts=max_retry_attempts,
        retry_backoff_seconds_base=0.0,
    )


def _texts(result: Any) -> list[str]:
    """The text parts of a tool call's result."""
    return [part.text for part in result.content if part.type == "text"]


async def test_a_tool_call_through_the_agents_mcp_server_runs_on_the_factorys_client(
    server: FaultServer,
) -> None:
    """list_tools and call_tool of MCPServerStreamableHttp run on mcp_http_client_for's client (the SDK's headers sent, the factory's timeout kept), its streams reported to on_stats on the mcp wire."""
    server.scenario = Scenario(content=("a", "b"))
    made: list[httpx2.AsyncClient] = []
    reported: list[StreamStats] = []
    async with _mcp_server(server, made, on_stats=reported.append) as mcp:
        tools = await mcp.list_tools()
        result = await mcp.call_tool(MCP_TOOL_NAME, {})
    assert [tool.name for tool in tools] == [MCP_TOOL_NAME]
    assert (_texts(result), result.is_error) == (["ab"], False)
    assert len(made) == 1
    assert made[0].is_closed
    # Not the SDK's Timeout(5, read=300): mcp_http_client_for's, above MCP's 300 s budget.
    assert made[0].timeout == httpx2.Timeout(30.0, read=305.0)
    assert all(request.headers.get("x-app") == "demo" for request in server.requests)
    completed = [s for s in reported if s.wire == "mcp" and s.outcome == "completed"]
    assert completed, reported
    assert len(_tool_calls(server)) == 1


@pytest.mark.parametrize(
    ("scenario", "stage"),
    [
        (Scenario(think=10.0, content=("a",)), "first_event"),
        (Scenario(content=("a", "b"), stall_after_events=1, hold=15.0), "mid_stream"),
    ],
    ids=["before-the-first-event", "after-progress"],
)
async def test_a_stalled_agents_mcp_tool_call_fails_alone_with_stream_stalled_inside(
    server: FaultServer, scenario: Scenario, stage: str
) -> None:
    """A stalled tool call through MCPServerStreamableHttp fails with the mcp SDK's MCPError (code -32001, our message), where stream_error finds our StreamStalled; it is sent once, and the next call on the same server object succeeds."""
    server.scenario = scenario
    made: list[httpx2.AsyncClient] = []
    async with _mcp_server(server, made, policy=AGENTS_MCP_POLICY) as mcp:
        await mcp.list_tools()
        with pytest.raises(MCPError) as failed:
            await mcp.call_tool(MCP_TOOL_NAME, {})
        stalled_calls = len(_tool_calls(server))
        server.scenario = Scenario(content=("c",))
        after = await mcp.call_tool(MCP_TOOL_NAME, {})
    error = failed.value
    ours = stream_error(error)
    assert isinstance(ours, StreamStalled)
    assert (error.code, error.message) == (AGENTS_MCP_CODE, str(ours))
    assert (ours.stage, ours.budget) == (stage, 0.5)
    assert stalled_calls == 1
    assert _texts(after) == ["c"]
    assert len(made) == 1  # the same session and client went on


@pytest.mark.timing
@pytest.mark.parametrize("how", ["on-the-client", "bound-around-call-tool"])
async def test_an_interrupt_from_another_thread_ends_an_agents_mcp_tool_call_at_once(
    server: FaultServer, how: str
) -> None:
    """An Interrupt given to the factory's client, or bound around call_tool, fired from another thread while the tool works ends the call promptly with an MCPError where stream_error finds our StreamInterrupted and its reason; after reset() the next call succeeds."""
    server.scenario = Scenario(think=10.0, content=("a",))
    stop = Interrupt()
    on_client = how == "on-the-client"
    made: list[httpx2.AsyncClient] = []
    settings: dict[str, Any] = {"policy": AGENTS_MCP_LONG_POLICY}
    if on_client:
        settings["interrupt"] = stop
    async with _mcp_server(server, made, **settings) as mcp:
        await mcp.list_tools()
        when = interrupt_when(stop, lambda: bool(_tool_calls(server)))
        bound: contextlib.AbstractContextManager[Any] = (
            contextlib.nullcontext() if on_client else stop.bind()
        )
        with bound, pytest.raises(MCPError) as failed:
            await mcp.call_tool(MCP_TOOL_NAME, {})
        ended = time.monotonic()
        stop.reset()
        server.scenario = Scenario(content=("c",))
        after = await mcp.call_tool(MCP_TOOL_NAME, {})
    ours = stream_error(failed.value)
    assert isinstance(ours, StreamInterrupted)
    assert ours.reason == AGENTS_MCP_REASON
    assert failed.value.code == AGENTS_MCP_CODE
    assert ended - when[0] < AGENTS_MCP_PROMPT
    assert len(_tool_calls(server)) == 2
    assert _texts(after) == ["c"]


@pytest.mark.timing
async def test_the_agents_mcp_session_timeout_ends_a_long_tool_call_first_with_nothing_of_ours(
    server: FaultServer,
) -> None:
    """The trap: client_session_timeout_seconds (default 5 s) below the watch's budgets ends a working tool call first, with an MCPError of the same code -32001 (MCP's request timeout) where stream_error finds nothing."""
    server.scenario = Scenario(think=10.0, content=("a",))
    made: list[httpx2.AsyncClient] = []
    async with _mcp_server(server, made, 0.5, policy=AGENTS_MCP_LONG_POLICY) as mcp:
        await mcp.list_tools()
        started = time.monotonic()
        with pytest.raises(MCPError) as failed:
            await mcp.call_tool(MCP_TOOL_NAME, {})
        took = time.monotonic() - started
    assert failed.value.code == AGENTS_MCP_CODE
    assert stream_error(failed.value) is None
    assert took < 5.0  # the session's 0.5 s, not the watch's 5 s


async def test_agents_mcp_retries_send_a_stalled_tool_call_again_in_a_new_session(
    server: FaultServer,
) -> None:
    """The trap: with max_retry_attempts=1 the SDK takes our in-band -32001 for MCP's request timeout and sends the stalled tools/call again, in a new session on a new factory client: the tool runs twice."""
    server.scenario = Scenario(content=("a", "b"), stall_after_events=1, hold=15.0)
    made: list[httpx2.AsyncClient] = []
    async with _mcp_server(server, made, policy=AGENTS_MCP_POLICY, max_retry_attempts=1) as mcp:
        await mcp.list_tools()
        with pytest.raises(MCPError) as failed:
            await mcp.call_tool(MCP_TOOL_NAME, {})
    assert isinstance(stream_error(failed.value), StreamStalled)
    assert [request.attempt for request in _tool_calls(server)] == [0, 1]
    assert len(made) == 2
