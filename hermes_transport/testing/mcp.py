"""What the fault server answers on MCP's streamable HTTP transport (Model Context Protocol).

Owns the routes, sessions and messages of that wire, as the ``mcp`` SDK's
``streamable_http_client`` speaks it (the ``initialize`` handshake, protocol versions up to
2025-11-25). The route is any path ending in ``/mcp`` (a proxy's prefix too; give the SDK
``server.base_url.removesuffix("/v1") + "/mcp"``): a ``POST`` carries one JSON-RPC 2.0
message, a ``GET`` opens the session's channel, a ``DELETE`` ends the session (200, empty
body). Request headers are not checked (the SDK sends ``Accept: application/json,
text/event-stream`` and, after the handshake, ``MCP-Protocol-Version``).

``initialize`` answers JSON with a new ``Mcp-Session-Id`` (32 hex digits) and the client's
own ``protocolVersion``; every later request must carry a known one: missing, HTTP 400,
unknown (or ended), HTTP 404, each with a JSON-RPC error (code -32600, the request's id or
null). Notifications and the client's responses: 202, empty body. ``ping`` and
``tools/list`` (one tool, :data:`MCP_TOOL_NAME`) answer JSON; any other method but
``tools/call``, JSON-RPC error -32601 with HTTP 200. A body that is no JSON object: 400.

``tools/call`` (any tool name) is this wire's attempt, the one request a
:class:`~hermes_transport.testing.Scenario` answers (its faults, ``stall_attempts``): an
SSE stream of ``event: message`` events (CRLF with ``crlf``), one per ``content`` piece,
a ``notifications/progress`` (``progress`` i + 1 of ``total`` len(content), the piece as
its ``message``) when the request has ``params._meta.progressToken``, else a
``notifications/message`` (level ``info``, the piece as its ``data``), then the response,
the joined pieces as one text content. ``think`` pauses before the first event; the
keepalive is the ``: keepalive`` comment; ``error_event`` sends a JSON-RPC error (-32603,
``message``) for the request in place of the rest; a ``status`` other than 200 answers
that JSON-RPC error as JSON with that status. With ``mcp_event_ids`` each event has an
``id: {stream}-{index}`` line (the stream's id a new 32-hex-digit one per answer); with
``mcp_json`` the answer is the response alone, as JSON (after ``json_delay``).

The ``GET`` channel sends nothing (or the ``: keepalive`` comment every ``comment_interval``
of the current scenario), then hangs up after its ``hold`` seconds, as a stall does.

Not implemented yet: resuming a stream (a ``GET`` with ``Last-Event-ID`` answers 405),
server-to-client requests (elicitation, sampling, roots), messages on the ``GET`` channel,
batches, the 2026 stateless envelope (``server/discover`` answers -32601).
"""

from __future__ import annotations

import json
import threading
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .recording import heard
from .scenarios import RecordedRequest, Scenario
from .stream import WireStream, sse_comment

if TYPE_CHECKING:
    from .handler import Handler
    from .server import FaultServer

__all__ = [
    "MCP_TOOL_NAME",
    "McpSessions",
    "mcp_answer",
    "mcp_channel",
    "mcp_error",
    "mcp_events",
    "mcp_record",
    "mcp_result",
    "mcp_route",
    "mcp_stream",
]

#: The name of the one tool ``tools/list`` lists (``tools/call`` answers any name).
MCP_TOOL_NAME = "work"
_SERVER = "hermes-fault-server"
_TOOL = {
    "name": MCP_TOOL_NAME,
    "description": "Streams the fault server's scenario content.",
    "inputSchema": {"type": "object", "properties": {}},
}
_CAPABILITIES = {"tools": {"listChanged": False}, "logging": {}}
_SESSION = "mcp-session-id"
Answer = tuple[int, object, dict[str, str]]  # status, JSON payload (None: no body), headers


class McpSessions:
    """The MCP sessions one server opened with ``initialize`` and not ended yet (the
    server holds them: ``FaultServer._mcp_sessions``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()

    def new(self) -> str:
        session = uuid.uuid4().hex
        with self._lock:
            self._ids.add(session)
        return session

    def known(self, session: str | None) -> bool:
        with self._lock:
            return session in self._ids

    def end(self, session: str) -> None:
        with self._lock:
            self._ids.discard(session)


def mcp_route(target: str) -> bool:
    """Whether a request target is the MCP endpoint: any path ending in ``/mcp``."""
    return urlsplit(target).path.endswith("/mcp")


def _message(request: RecordedRequest) -> dict[str, Any]:
    return request.json if isinstance(request.json, dict) else {}


def _is_call(request: RecordedRequest) -> bool:
    return request.method == "POST" and _message(request).get("method") == "tools/call"


def mcp_record(
    fault: FaultServer, handler: Handler, body: bytes, arrived: float
) -> RecordedRequest:
    """Record an MCP request as ``FaultServer`` records the others, but with this wire's
    attempts: a ``tools/call`` of a known session counts, ``stream`` says whether it is
    answered as a stream (None for the other requests)."""
    request = heard(handler, body, arrived)
    if not (_is_call(request) and fault._mcp_sessions.known(request.headers.get(_SESSION))):
        return fault._counted(request, False)
    scenario = fault.scenario  # before the lock, which the property takes
    return fault._counted(
        request, True, lambda attempt: not scenario.for_attempt(attempt).mcp_json
    )


def mcp_error(request: RecordedRequest | None, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error for ``request`` (id null without one)."""
    ident = _message(request).get("id") if request is not None else None
    return {"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}}


def _result(request: RecordedRequest, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": _message(request).get("id"), "result": result}


def mcp_answer(fault: FaultServer, request: RecordedRequest) -> Answer | None:
    """The answer to an MCP request that is no attempt (see the module docstring): its
    status, JSON payload (None: no body) and headers; None: open the session's channel."""
    message, sessions = _message(request), fault._mcp_sessions
    if request.method == "POST" and not isinstance(request.json, dict):
        return 400, mcp_error(None, -32700, "Parse error"), {}
    if request.method == "POST" and message.get("method") == "initialize":
        params = message.get("params")
        version = params.get("protocolVersion") if isinstance(params, dict) else None
        info = {"name": _SERVER, "version": "1"}
        result = {"protocolVersion": version, "capabilities": _CAPABILITIES, "serverInfo": info}
        return 200, _result(request, result), {"Mcp-Session-Id": sessions.new()}
    session = request.headers.get(_SESSION)
    if session is None:
        return 400, mcp_error(request, -32600, "Bad Request: Missing session ID"), {}
    if not sessions.known(session):
        return 404, mcp_error(request, -32600, "Not Found: Invalid or expired session ID"), {}
    if request.method == "DELETE":
        sessions.end(session)
        return 200, None, {}
    if request.method == "GET" and "last-event-id" not in request.headers:
        return None
    if request.method != "POST":
        return 405, mcp_error(None, -32600, f"Method Not Allowed: {request.method}"), {}
    method = message.get("method")
    if not isinstance(method, str) or "id" not in message:  # a notification or a response
        return 202, None, {}
    if method == "ping":
        return 200, _result(request, {}), {}
    if method == "tools/list":
        return 200, _result(request, {"tools": [_TOOL]}), {}
    return 200, mcp_error(request, -32601, "Method not found"), {}


def mcp_result(request: RecordedRequest, scenario: Scenario) -> dict[str, Any]:
    """The ``tools/call`` response: the joined ``content`` as one text content."""
    text = {"type": "text", "text": "".join(scenario.content)}
    return _result(request, {"content": [text], "isError": False})


def _progress_token(request: RecordedRequest) -> str | int | None:
    params = _message(request).get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


def _event(message: dict[str, Any], crlf: bool, event_id: str | None = None) -> bytes:
    newline = "\r\n" if crlf else "\n"
    lines = [] if event_id is None else [f"id: {event_id}"]
    lines += ["event: message", f"data: {json.dumps(message)}"]
    return (newline.join(lines) + newline + newline).encode()


def mcp_events(scenario: Scenario, request: RecordedRequest) -> list[bytes]:
    """The events of the complete ``tools/call`` stream, its response last."""
    token, total = _progress_token(request), len(scenario.content)
    messages: list[dict[str, Any]] = []
    for i, piece in enumerate(scenario.content):
        params: dict[str, Any]
        if token is None:
            method = "notifications/message"
            params = {"level": "info", "logger": _SERVER, "data": piece}
        else:
            method = "notifications/progress"
            params = {"progressToken": token, "progress": i + 1, "total": total, "message": piece}
        messages.append({"jsonrpc": "2.0", "method": method, "params": params})
    messages.append(mcp_result(request, scenario))
    stream = uuid.uuid4().hex if scenario.mcp_event_ids else None
    return [
        _event(message, scenario.crlf, None if stream is None else f"{stream}-{i}")
        for i, message in enumerate(messages)
    ]


def mcp_stream(scenario: Scenario, request: RecordedRequest) -> WireStream:
    """The ``tools/call`` stream, its ``: keepalive`` comment and its in-stream error (a
    JSON-RPC error for the request, with no event id). ``think`` pauses before the first
    event."""
    error = mcp_error(request, -32603, scenario.message)
    return WireStream(
        mcp_events(scenario, request),
        think_at=0,
        keepalive=sse_comment(scenario.crlf),
        error=_event(error, scenario.crlf),
    )


def mcp_channel(scenario: Scenario) -> tuple[Scenario, WireStream]:
    """The session's ``GET`` channel: a stream of no event stalled from the start, under
    ``scenario``'s ``hold``, ``comment_interval``, ``crlf`` and ``gzip``."""
    channel = Scenario(
        content=(),
        stall_after_events=0,
        comment_interval=scenario.comment_interval,
        hold=scenario.hold,
        crlf=scenario.crlf,
        gzip=scenario.gzip,
    )
    keepalive = sse_comment(scenario.crlf)
    return channel, WireStream([], think_at=0, keepalive=keepalive, error=keepalive)
