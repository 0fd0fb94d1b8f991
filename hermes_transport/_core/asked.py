"""What a request asks: its wire, whether it streams, its budgets, and its MCP call.

``asked`` reads it once per ``handle_request``, for the exchange: the wire from the
path (or, for MCP, from the body and headers), whether a stream is asked for, the
body's JSON parsed once and only if the request may stream, and the budgets the
policy gives such a call; and ``resumable_of``, how its stream can be resumed. Pure: the
request's body is bytes in memory (or unread).
"""

from __future__ import annotations

from typing import Any

import httpx

from .budgets import model_of
from .call_budgets import CallBudgets
from .mcp import McpCall, mcp_call
from .mcp_resume import McpResumable
from .policy import StreamPolicy
from .progress import stream_asked
from .resume import Resumable, resumable_for
from .wire_paths import Wire, gemini_call, wire_of

__all__ = ["CHANNEL_BUDGETS", "asked", "resumable_of"]

#: The budgets of MCP's GET channel, on which a server speaks only when it has something
#: to say: never cut for silence (interrupts and closes still reach it).
CHANNEL_BUDGETS = CallBudgets(None, None, source="MCP server channel: never cut for silence")


def asked(
    request: httpx.Request, body: bytes | None, policy: StreamPolicy
) -> tuple[Wire, bool, dict[str, Any] | None, CallBudgets, McpCall | None]:
    """``request``'s wire, whether it asks for a stream, its body's JSON object (parsed
    only if it may stream), the budgets ``policy`` gives it, and its MCP call if it is
    one. ``body``: the request's body if it is in memory (``None``: not read)."""
    wire = wire_of(request.url.path)
    streaming, payload = stream_asked(
        request.headers.get("accept", ""), request.headers.get("content-type", ""), body
    )
    # Gemini's model and its streaming are in its path alone (a body of contents).
    gemini = gemini_call(request.url.path) if wire == "gemini" else None
    mcp = mcp_call(request.method, request.headers, payload) if wire == "generic" else None
    streaming = (
        streaming
        # The Responses resume, GET /responses/{id}?stream=true, says so
        # only in its query: it has no body and no Accept header.
        or (wire == "responses" and request.url.params.get("stream") == "true")
        or (gemini is not None and gemini[1])
    )
    if mcp is not None:
        budgets = CHANNEL_BUDGETS if mcp.channel else policy.budgets_for(mcp=True, tool=mcp.tool)
        return "mcp", streaming, payload, budgets, mcp
    if not streaming:
        return wire, False, payload, policy.budgets_for(), None
    model = gemini[0] if gemini is not None else model_of(payload)
    budgets = policy.budgets_for(model, None if body is None else len(body))
    return wire, True, payload, budgets, None


def resumable_of(
    request: httpx.Request,
    wire: Wire,
    payload: dict[str, Any] | None,
    mcp: McpCall | None,
    http: Any,
) -> Resumable | McpResumable | None:
    """How the stream a request asks for can be resumed, if it can be: an MCP request's
    (not the server's channel, which the SDK reconnects itself), or a background Responses
    one (``resume.resumable_for``)."""
    if mcp is not None:
        return None if mcp.channel else McpResumable(request, mcp, http)
    return resumable_for(request, wire, payload, http)
