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
``id: {stream}-{index}`` line (the stream's id a new 32-hex-digit one per answer), and a
``GET`` with ``Last-Event-ID: {stream}-{index}`` resumes that stream: an attempt too (under
its own scenario's faults), the events after that one; an id of no stream the server kept
(the latest 256), HTTP 404. With ``mcp_elicit`` the stream opens with an
``elicitation/create`` request of the server's (one string field, ``answer``), then waits,
at most ``hold`` seconds, for the client's answer (its ``POST``) before the rest. With
``mcp_json`` the answer is the response alone, as JSON (after ``json_delay``).

The ``GET`` channel sends nothing (or the ``: keepalive`` comment every ``comment_interval``
of the current scenario), then hangs up after its ``hold`` seconds, as a stall does.

Every ``notifications/cancelled`` is kept, in order, whatever its session (one that
arrives after the session ended is heard too: ``FaultServer.mcp_cancelled``, the request
ids they name).

Not implemented yet: sampling and roots requests, messages on the ``GET`` channel,
batches, the 2026 stateless envelope (``server/discover`` answers -32601).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
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
    "mcp_attempt",
    "mcp_channel",
    "mcp_error",
    "mcp_events",
    "mcp_record",
    "mcp_result",
    "mcp_route",
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
_STREAMS_KEPT = 256
Answer = tuple[int, object, dict[str, str]]  # status, JSON payload (None: no body), headers


class McpSessions:
    """The MCP sessions one server opened with ``initialize`` and not ended yet, the streams
    it can resume, the asks that wait for their answer and the cancels it heard (the server
    holds them: ``FaultServer._mcp_sessions``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()
        self._streams: OrderedDict[str, tuple[list[bytes], bytes]] = OrderedDict()
        self._asks: dict[tuple[str, object], threading.Event] = {}
        self.cancelled: list[object] = []

    def keep(self, stream: str, events: list[bytes], error: bytes) -> None:
        """Keep a stream's events (and its in-stream error) for its resumes."""
        with self._lock:
            self._streams[stream] = (events, error)
            if len(self._streams) > _STREAMS_KEPT:
                self._streams.popitem(last=False)

    def stream(self, stream: str) -> tuple[list[bytes], bytes] | None:
        with self._lock:
            return self._streams.get(stream)

    def ask(self, session: str, ask: object) -> threading.Event:
        """The event set when the client answers ``ask`` on ``session``."""
        answered = threading.Event()
        with self._lock:
            self._asks[(session, ask)] = answered
        return answered

    def heard(self, session: str, message: dict[str, Any]) -> None:
        """A notification or a client's answer came: an answer ends its ask's wait; a
        cancel is kept."""
        if message.get("method") == "notifications/cancelled":
            params = message.get("params")
            with self._lock:
                self.cancelled.append(
                    params.get("requestId") if isinstance(params, dict) else None
                )
        elif "method" not in message:
            with self._lock:
                answered = self._asks.pop((session, message.get("id")), None)
            if answered is not None:
                answered.set()

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
    """Whether ``request`` is a ``tools/call``, or a resume of its stream: an attempt."""
    if request.method == "GET":
        return "last-event-id" in request.headers
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
    if message.get("method") == "notifications/cancelled":
        sessions.heard(session or "", message)  # heard, whatever the session
    if session is None:
        return 400, mcp_error(request, -32600, "Bad Request: Missing session ID"), {}
    if not sessions.known(session):
        return 404, mcp_error(request, -32600, "Not Found: Invalid or expired session ID"), {}
    if request.method == "DELETE":
        sessions.end(session)
        return 200, None, {}
    if request.method == "GET":
        return None
    if request.method != "POST":
        return 405, mcp_error(None, -32600, f"Method Not Allowed: {request.method}"), {}
    method = message.get("method")
    if not isinstance(method, str) or "id" not in message:  # a notification or a response
        if message.get("method") != "notifications/cancelled":  # kept above already
            sessions.heard(session, message)
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


def mcp_events(
    scenario: Scenario, request: RecordedRequest, stream: str | None = None
) -> list[bytes]:
    """The events of the complete ``tools/call`` stream, its response last (``stream``:
    its id, on each event's id)."""
    token, total = _progress_token(request), len(scenario.content)
    messages: list[dict[str, Any]] = []
    if scenario.mcp_elicit:
        messages.append(_elicitation(stream))
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
    return [
        _event(message, scenario.crlf, None if stream is None else f"{stream}-{i}")
        for i, message in enumerate(messages)
    ]


def _elicitation(stream: str | None) -> dict[str, Any]:
    """The server's ``elicitation/create`` request (its id: ``elicit-`` and the stream's)."""
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}}
    params = {"mode": "form", "message": "Which one?", "requestedSchema": schema}
    ident = f"elicit-{stream or uuid.uuid4().hex}"
    return {"jsonrpc": "2.0", "id": ident, "method": "elicitation/create", "params": params}


class _McpStream(WireStream):
    """A ``tools/call`` stream (or the rest of one, resumed) that, opened by an ask, waits
    for its answer before the event after it."""

    def __init__(
        self,
        events: list[bytes],
        scenario: Scenario,
        error: bytes,
        answered: threading.Event | None = None,
        stopping: threading.Event | None = None,
    ) -> None:
        super().__init__(events, think_at=0, keepalive=sse_comment(scenario.crlf), error=error)
        self._answered, self._stopping, self._hold = answered, stopping, scenario.hold

    def event(self, index: int) -> bytes:
        answered = self._answered
        if index == 1 and answered is not None:
            deadline = time.monotonic() + self._hold
            while not answered.wait(0.02) and time.monotonic() < deadline:
                if self._stopping is not None and self._stopping.is_set():
                    break
        return super().event(index)


def mcp_attempt(
    fault: FaultServer, scenario: Scenario, request: RecordedRequest, streaming: bool
) -> WireStream | Answer:
    """A ``tools/call``'s answer, or a resume's (a ``GET`` with ``Last-Event-ID``): the
    stream to play under ``scenario``, or a status, JSON payload and headers."""
    sessions = fault._mcp_sessions
    if request.method == "GET":
        last = request.headers.get("last-event-id", "")
        resumed, _, index = last.rpartition("-")
        kept = sessions.stream(resumed)
        if kept is None or not index.isdigit():
            return 404, mcp_error(None, -32600, f"Not Found: no stream has event {last!r}"), {}
        return _McpStream(kept[0][int(index) + 1 :], scenario, kept[1])
    if not streaming:
        return 200, mcp_result(request, scenario), {}
    error = _event(mcp_error(request, -32603, scenario.message), scenario.crlf)
    stream = uuid.uuid4().hex if scenario.mcp_event_ids else None
    events = mcp_events(scenario, request, stream)
    if stream is not None:
        sessions.keep(stream, events, error)
    answered = None
    if scenario.mcp_elicit:
        ask = json.loads(events[0].rsplit(b"data: ", 1)[1])["id"]
        answered = sessions.ask(request.headers.get(_SESSION, ""), ask)
    return _McpStream(events, scenario, error, answered, fault._stopping)


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
