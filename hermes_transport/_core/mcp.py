"""MCP over streamable HTTP: which requests speak it, and what their events mean.

Owns ``McpCall`` (what a request is on the ``mcp`` wire: a JSON-RPC request's method,
id and tool, or the server's GET channel), ``mcp_call`` (recognising one from the
request: a POST whose JSON body is a JSON-RPC 2.0 request, or a GET carrying
``Mcp-Session-Id``), ``mcp_class`` (an event's class: the response ends the stream,
any other message about the request is progress, the server's ``ping`` a heartbeat, a
request of the server's to the client not progress), and the methods that change
nothing on the server (``SAFE_METHODS``: the only ones sent again). And what the watch
writes in a stalled or interrupted server's place for a client that asked for it
(``error_event``: a JSON-RPC error for the request), and the errors so answered, kept
(``keep_answered``) for ``errors.stream_error`` to find from the client's error
(``answered_for``). Pure: a dict and its lock.

Limits: a batch (a JSON array of messages, which MCP dropped in 2025-06-18) is not
recognised: it is watched as any other stream. A notification or a client's response
to the server (no ``id``, or no ``method``) is not a call: its answer is a 202.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

__all__ = [
    "IN_BAND_CODE",
    "IN_BAND_KEY",
    "SAFE_METHODS",
    "SERVER_REQUESTS",
    "McpCall",
    "McpStats",
    "answer_id",
    "answered_for",
    "error_event",
    "keep_answered",
    "mcp_call",
    "mcp_class",
    "mcp_stats",
    "message_method",
    "server_request_id",
]

#: The methods that change nothing on the server: a stall before their first event may be
#: re-sent, as on the model wires. Any other (``tools/call`` first) has effects, and a
#: request that may have reached the server is never sent twice.
SAFE_METHODS: Final = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    }
)
#: The JSON-RPC error code of a request the watch ended (stalled or interrupted), written in
#: the server's place: MCP's own range (-32000 to -32099) for implementation errors.
IN_BAND_CODE: Final = -32001
#: The key of the error's ``data`` under which the watch says what it ended.
IN_BAND_KEY: Final = "hermes_transport"
#: The requests a server sends its client in the middle of a request's stream, which
#: wait for the client's answer (a person's, for an elicitation).
SERVER_REQUESTS: Final = frozenset({"sampling/createMessage", "elicitation/create", "roots/list"})


@dataclass(frozen=True)
class McpCall:
    """One request on the ``mcp`` wire.

    ``method``: the JSON-RPC method (``None``: the server's GET channel, on which the
    server speaks when it has something to say); ``id``: the request's id; ``tool``:
    the tool a ``tools/call`` names (``params.name``), if it names one.
    """

    method: str | None
    id: str | int | None = None
    tool: str | None = None

    @property
    def channel(self) -> bool:
        """Whether this is the server's GET channel, silent for as long as it likes."""
        return self.method is None

    @property
    def resendable(self) -> bool:
        """Whether a stall before the first event may send the request again."""
        return self.method in SAFE_METHODS


def mcp_call(
    http_method: str, headers: Mapping[str, str], payload: Mapping[str, Any] | None
) -> McpCall | None:
    """The MCP call a request makes, if it makes one: a POST whose JSON body (``payload``,
    parsed once by the exchange) is a JSON-RPC 2.0 request (``"jsonrpc": "2.0"``, a
    string ``method``, an ``id`` that is a string or an integer), or a GET carrying an
    ``Mcp-Session-Id`` header (the server's channel)."""
    if http_method == "GET":
        return McpCall(None) if headers.get("mcp-session-id") else None
    if http_method != "POST" or payload is None or payload.get("jsonrpc") != "2.0":
        return None
    method, request_id = payload.get("method"), payload.get("id")
    if not isinstance(method, str) or not method:
        return None
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
        return None  # a notification, or no JSON-RPC request
    tool: str | None = None
    params = payload.get("params")
    if method == "tools/call" and isinstance(params, dict):
        name = params.get("name")
        tool = name if isinstance(name, str) and name else None
    return McpCall(method, request_id, tool)


@dataclass(frozen=True)
class McpStats:
    """What one MCP request was and what its stream carried (``StreamStats.mcp``).

    ``method``: the JSON-RPC method (``None``: the server's GET channel); ``tool``: the
    tool a ``tools/call`` named; ``request_id``: its id; ``session``: the session's id
    cut to its first ``SESSION_SHOWN`` characters and an ellipsis (never kept in full: a
    server may take it for a credential); ``progress``, ``logs`` and ``asks``: the
    progress notifications, logging notifications and requests of the server's (an
    elicitation, a sampling, the roots) its stream carried (0 for a compressed one, which
    is not read message by message).
    """

    method: str | None
    tool: str | None
    request_id: str | int | None
    session: str | None
    progress: int = 0
    logs: int = 0
    asks: int = 0

    @property
    def attributes(self) -> dict[str, str]:
        """Its OpenTelemetry attributes, as the MCP semantic conventions name them:
        ``mcp.method.name``, ``gen_ai.tool.name``, ``jsonrpc.request.id`` and
        ``mcp.session.id`` (cut), where known."""
        named = {
            "mcp.method.name": self.method,
            "gen_ai.tool.name": self.tool,
            "jsonrpc.request.id": None if self.request_id is None else str(self.request_id),
            "mcp.session.id": self.session,
        }
        return {key: value for key, value in named.items() if value is not None}


#: Characters of a session's id kept in ``McpStats.session``.
SESSION_SHOWN = 8


def mcp_stats(call: McpCall | None, session: str) -> McpStats | None:
    """The statistics of ``call`` (``None``: no MCP call) on ``session`` ("" : none), before
    its stream is read."""
    if call is None:
        return None
    shown = session[:SESSION_SHOWN] + "…" if len(session) > SESSION_SHOWN else session or None
    return McpStats(call.method, call.tool, call.id, shown)


def message_method(data: bytes) -> str | None:
    """The method of the JSON-RPC message one event's data carries, if it names one."""
    try:
        message = json.loads(data)
    except ValueError:
        return None
    method = message.get("method") if isinstance(message, dict) else None
    return method if isinstance(method, str) else None


def answer_id(http_method: str, payload: Mapping[str, Any] | None) -> str | int | None:
    """The id of the server's request that a client's ``POST`` answers, if it answers one:
    its JSON body (``payload``) is a JSON-RPC 2.0 response (an ``id``, a ``result`` or an
    ``error``, no ``method``)."""
    if http_method != "POST" or payload is None or payload.get("jsonrpc") != "2.0":
        return None
    if "method" in payload or not ("result" in payload or "error" in payload):
        return None
    return _plain_id(payload.get("id"))


def server_request_id(data: bytes) -> str | int | None:
    """The id of the request of the server's (``SERVER_REQUESTS``) that one event's data
    carries (``mcp_class`` said ``preamble``)."""
    try:
        message = json.loads(data)
    except ValueError:
        return None
    return _plain_id(message.get("id")) if isinstance(message, dict) else None


def _plain_id(value: object) -> str | int | None:
    """A JSON-RPC id (a string or an integer, never a bool), else ``None``."""
    return value if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def mcp_class(data: bytes) -> Literal["output", "preamble", "heartbeat", "end"]:
    """The class of one event's data on the ``mcp`` wire (one JSON-RPC message).

    A response (an ``id`` with a ``result`` or an ``error``) ends the request's stream;
    the server's ``ping`` is a heartbeat, and so is an event of empty data (a priming
    event, which only gives the client an id to resume from); a request of the server's
    to the client (``SERVER_REQUESTS``) is no progress: the stream then waits for the
    client; any other message (a progress or logging notification) is output. Data that is not one
    JSON-RPC message (cut short, or not JSON) is output: it may carry anything.
    """
    if not data:
        return "heartbeat"  # a server's priming event: an id to resume from, no message
    try:
        message = json.loads(data)
    except ValueError:
        return "output"
    if not isinstance(message, dict):
        return "output"
    method = message.get("method")
    if isinstance(method, str):
        if method == "ping":
            return "heartbeat"
        if method in SERVER_REQUESTS and "id" in message:
            return "preamble"
        return "output"
    if "id" in message and ("result" in message or "error" in message):
        return "end"
    return "output"


def error_event(request_id: str | int | None, message: str, data: dict[str, Any]) -> bytes:
    """One SSE event (``event: message``) carrying a JSON-RPC error response to
    ``request_id``: what the watch writes in a stalled or interrupted server's place, so
    that an MCP client fails that request alone, with ``message``; ``data`` goes under
    ``IN_BAND_KEY`` in the error's ``data``."""
    error = {"code": IN_BAND_CODE, "message": message, "data": {IN_BAND_KEY: data}}
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error})
    return b"event: message\ndata: " + body.encode() + b"\n\n"


#: The errors answered in band (``errors.in_band_answer``), by the key written with them,
#: for ``errors.stream_error``: the latest ``_IN_BAND_KEPT``.
_in_band: dict[str, BaseException] = {}
_IN_BAND_KEPT = 1024
_in_band_keys = itertools.count()
_in_band_lock = threading.Lock()


def keep_answered(error: BaseException) -> str:
    """Keep ``error``, answered in band; the key to write with it."""
    key = f"{os.getpid()}-{next(_in_band_keys)}"
    with _in_band_lock:
        _in_band[key] = error
        if len(_in_band) > _IN_BAND_KEPT:
            del _in_band[next(iter(_in_band))]  # the oldest
    return key


def answered_for(exc: BaseException) -> BaseException | None:
    """The error answered in band for the request ``exc`` failed (an MCP client's error
    whose ``error.data`` carries our key), if it is still kept."""
    data = getattr(getattr(exc, "error", None), "data", None)
    ours = data.get(IN_BAND_KEY) if isinstance(data, dict) else None
    key = ours.get("key") if isinstance(ours, dict) else None
    return _in_band.get(key) if isinstance(key, str) else None
