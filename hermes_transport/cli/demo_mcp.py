"""The demo's MCP part: tool calls through the ``mcp`` SDK, watched and plain.

Where the ``mcp`` SDK is installed (the ``mcp`` extra), two tool calls on the embedded
fault server's MCP wire, each on ``mcp_http_client_for``'s client and on the SDK's own
(``create_mcp_http_client``, whose read timeout is 300 s): a tool that stops after its
first progress notification, which the watchdog cuts (the call fails alone, and the
server hears ``notifications/cancelled``) where the SDK's own client waits until the
server hangs up; and one whose stream carries event ids and stalls once, which the
watchdog resumes with ``Last-Event-ID`` and completes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TextIO

from .._core.errors import stream_error
from .._core.policy import StreamPolicy
from ..testing import MCP_TOOL_NAME, FaultServer, Scenario

__all__ = ["HUNG_TITLE", "RESUMED_TITLE", "mcp_part"]

HUNG_TITLE = "MCP tool, silent after progress"
RESUMED_TITLE = "MCP tool, ids, stalls once"
_CONTENT = ("hello", " world")


def _hung(hold: float) -> Scenario:
    return Scenario(content=_CONTENT, stall_after_events=1, hold=hold)


def _resumable(hold: float) -> Scenario:
    cut = Scenario(content=_CONTENT, stall_after_events=1, mcp_event_ids=True, hold=hold)
    return Scenario.stall_first(1, stall=cut, then=Scenario(content=_CONTENT, mcp_event_ids=True))


def _call_once(make_client: Callable[[], Any], scenario: Scenario) -> tuple[str, float, Any]:
    """One tool call on a fresh server, through the SDK: (what to print, seconds, the
    fault server, stopped)."""
    import anyio
    from mcp import ClientSession, MCPError, types
    from mcp.client.streamable_http import streamable_http_client

    async def main(url: str) -> str:
        async with (
            make_client() as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            try:
                result = await session.call_tool(MCP_TOOL_NAME, {})
            except MCPError as exc:
                ours = stream_error(exc)
                if ours is None:
                    return f"MCPError {exc.error.code} {exc.error.message[:36]!r}"
                return f"{type(ours).__name__} (the call fails alone)"
            texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
            return f"ok {''.join(texts)!r}"

    with FaultServer(scenario) as server:
        started = time.monotonic()
        try:
            told = anyio.run(main, server.base_url.removesuffix("/v1") + "/mcp")
        except Exception as exc:  # the demo reports whatever the caller would get
            told = f"{type(exc).__name__}"
        took = time.monotonic() - started
    return told, took, server


def mcp_part(out: TextIO, budget: float, hold: float) -> bool:
    """Print the MCP lines (or why there are none); whether the watchdog's outcomes came."""
    try:
        from mcp.shared._httpx_utils import create_mcp_http_client

        from .._sdk.mcp import mcp_http_client_for
    except ImportError:
        out.write("\nMCP: the mcp SDK is not installed (pip install 'hermes-transport[mcp]').\n")
        return True
    policy = StreamPolicy(stale_timeout=budget, first_event_timeout=budget)
    out.write(
        "\nMCP (the mcp SDK's streamable HTTP client): the watchdog cuts a hung tool call"
        " and resumes one whose events carry ids.\n"
    )
    watched = lambda: mcp_http_client_for(None, policy=policy)  # noqa: E731
    _call_once(watched, Scenario(content=_CONTENT))  # warm the SDK up: comparable timings
    ok = True
    for title, scenario, expected in (
        (HUNG_TITLE, _hung(hold), "StreamStalled (the call fails alone)"),
        (RESUMED_TITLE, _resumable(hold), "ok 'hello world'"),
    ):
        told, took, server = _call_once(watched, scenario)
        plain_told, plain_took, _ = _call_once(create_mcp_http_client, scenario)
        if plain_took >= hold - 0.05:
            plain_told = f"hung until the server hung up: {plain_told}"
        resumes = [r for r in server.requests if "last-event-id" in r.headers]
        cancels = server.mcp_cancelled
        fine = told == expected and (resumes if title == RESUMED_TITLE else cancels)
        ok = ok and bool(fine)
        out.write(
            f"{title:<31} {f'{told} in {took:.2f} s':<58} {plain_told} in {plain_took:.2f} s"
            + ("" if fine else f"   <-- expected {expected}")
            + "\n"
        )
        for resume in resumes:
            out.write(
                f"{'':<31} resumed: GET with Last-Event-ID {resume.headers['last-event-id']}\n"
            )
        for cancel in cancels:
            out.write(f"{'':<31} then cancelled: notifications/cancelled for request {cancel}\n")
    return ok
