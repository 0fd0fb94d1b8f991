"""The wires agents speak, and what each of their events means to the watch.

Owns the event classes (``output``, ``preamble``, ``heartbeat``, ``error``, ``end``), the
tables that sort each wire's event types into them, and ``ErrorEvent``: an error event that
arrived before any output, and whether it says the server failed transiently (then the
transport sends the request again). Pure; the scanner (``sse``) calls ``classify`` once per
completed event, never per chunk, and only on the wires that need it (``read_types``: the
types it reads on a wire).

Only ``output`` and ``end`` events are progress. A ``preamble`` event (Responses' lifecycle
events, Anthropic's ``message_start``, the opening of an item or block that carries no
content yet) and a ``heartbeat`` neither end the first-event wait nor reset the stale one: a
model thinking silently behind them is covered by the first-event budget. An ``error`` event
before any output is handed to the exchange; after output it is progress like any other
event (the SDK raises on it; nothing is re-sent). An ``end`` event ends the stream only as
the last complete event of its read (``sse``'s end rule). Gemini's events are untyped, each
a ``GenerateContentResponse``: output when a candidate's part holds content (a thought
summary too), an end when every candidate has its ``finishReason``, an error (``{"error":
...}``), else preamble (a chunk of usage only, or prompt feedback).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Final, Literal

from .mcp import mcp_class
from .wire_paths import WIRES, Wire

__all__ = [
    "TRANSIENT_ERRORS",
    "WIRES",
    "ErrorEvent",
    "EventClass",
    "Wire",
    "classify",
    "leading_type",
    "read_types",
    "response_id",
    "sequence_number",
    "sure_output",
]

EventClass = Literal["output", "preamble", "heartbeat", "error", "end"]

#: Event types that are always preamble, per wire.
_LIFECYCLE: Final[dict[Wire, frozenset[bytes]]] = {
    "responses": frozenset({b"response.created", b"response.in_progress", b"response.queued"}),
    "messages": frozenset({b"message_start"}),
}
#: Event types that open an item, part or block: preamble while it carries no content.
_OPENINGS: Final[dict[Wire, frozenset[bytes]]] = {
    "responses": frozenset(
        {
            b"response.output_item.added",
            b"response.content_part.added",
            b"response.reasoning_summary_part.added",
        }
    ),
    "messages": frozenset({b"content_block_start"}),
}
_ENDS: Final[dict[Wire, frozenset[bytes]]] = {
    "responses": frozenset({b"response.completed", b"response.incomplete"}),
    "messages": frozenset({b"message_stop"}),
}
_ERRORS: Final[dict[Wire, frozenset[bytes]]] = {
    "responses": frozenset({b"error", b"response.failed"}),
    "messages": frozenset({b"error"}),
}
# The event types whose class ``classify`` may take from their data, per wire (MCP's
# events are all ``message``s, each a JSON-RPC message: ``mcp.mcp_class``).
_READ: Final[dict[Wire, frozenset[bytes]]] = {
    **{w: _LIFECYCLE[w] | _OPENINGS[w] | _ENDS[w] | _ERRORS[w] for w in _LIFECYCLE},
    "mcp": frozenset({b"message"}),
}

# The object an opening event carries, and the keys of it that hold content.
_OPENED = ("item", "part", "content_block")
_CONTENT_KEYS = frozenset(
    {"text", "thinking", "content", "arguments", "input", "summary", "output", "partial_json"}
    | {"data", "result", "refusal"}
)

#: The error kinds (an error's ``type`` or ``code``) that say the server is
#: overloaded or failed transiently, per wire: an error event of one of these
#: before any output is re-sent. Chat Completions also counts a numeric code
#: of 429 or 500 to 599 (as gateways send them).
TRANSIENT_ERRORS: Final[dict[Wire, frozenset[str]]] = {
    "messages": frozenset({"overloaded_error", "api_error"}),
    "responses": frozenset({"server_error", "internal_error", "service_unavailable"}),
    # Google's status names, and the HTTP codes its errors carry.
    "gemini": frozenset(
        {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"}
        | {"429", "500", "503", "504"}
    ),
    "chat_completions": frozenset(
        {
            "server_error",
            "internal_error",
            "service_unavailable",
            "overloaded_error",
            "api_error",
            "rate_limit_exceeded",
            "rate_limit_error",
        }
    ),
}

# A JSON object's leading "type": how a data-only event names its type.
_LEADING_TYPE = re.compile(rb'\s*\{\s*"type"\s*:\s*"([^"\\]{1,56})"')


@dataclass(frozen=True)
class ErrorEvent:
    """An error event that arrived before any output.

    ``kind`` is the error's type or code as the server named it (``None``
    when the event did not say, or could not be read); ``transient``: it is
    one of ``TRANSIENT_ERRORS``, and the request may be sent again.
    """

    event_type: str
    kind: str | None
    message: str | None
    transient: bool

    def __str__(self) -> str:
        said = f": {self.message}" if self.message else ""
        return f"{self.event_type} event ({self.kind or 'no error kind'}){said}"


# A Responses event's number, and the id of the response a lifecycle event
# carries: read from the event's data (what the scanner kept of it), where the
# API puts both near the start.
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d{1,18})')
_RESPONSE_ID = re.compile(rb'"response"\s*:\s*\{[^{}]*?"id"\s*:\s*"([^"\\]{1,256})"')


def sequence_number(data: bytes) -> int | None:
    """A Responses event's ``sequence_number``, from its data, if it has one."""
    found = _SEQUENCE.search(data)
    return None if found is None else int(found.group(1))


def response_id(data: bytes) -> str | None:
    """The id of the response a Responses lifecycle event's data names, if it does."""
    found = _RESPONSE_ID.search(data)
    return None if found is None else found.group(1).decode("utf-8", "replace")


def leading_type(data: bytes) -> bytes | None:
    """The leading ``"type"`` of a JSON object's text, if it starts with one."""
    match = _LEADING_TYPE.match(data)
    return match.group(1) if match is not None else None


def read_types(wire: Wire) -> frozenset[bytes]:
    """The event types ``classify`` reads on ``wire``: any other but a heartbeat is output."""
    return _READ.get(wire, frozenset())


def sure_output(wire: Wire, event_type: bytes) -> bool:
    """Whether ``classify`` finds an event of this type output whatever its data, unless the
    type is a heartbeat or the data starts with ``[DONE]`` (neither is checked here)."""
    read = _READ.get(wire)
    return read is None or event_type not in read


def classify(
    wire: Wire,
    event_type: bytes,
    data: bytes,
    heartbeats: Collection[bytes],
    *,
    done: bool = False,
) -> EventClass | ErrorEvent:
    """The class of a completed event on ``wire``; an ``ErrorEvent`` for an error event.

    ``event_type`` is the event's type (its ``event`` field, or for a JSON
    wire without one the data's leading ``"type"``; ``message`` when neither
    says); ``data`` its data (possibly cut short: then an opening is output
    and an error is not transient); ``done``: the data starts with ``[DONE]``.
    """
    if event_type in heartbeats:
        return "heartbeat"
    if done:
        return "end"
    if wire == "gemini":
        return _gemini_class(data)
    if wire == "mcp":
        return mcp_class(data)
    if wire == "chat_completions":
        if b'"error"' in data:
            error = _chat_error(data)
            if error is not None:
                return error
        return "output"
    if wire not in _LIFECYCLE:
        return "output"
    if event_type in _LIFECYCLE[wire]:
        return "preamble"
    if event_type in _OPENINGS[wire]:
        return "output" if _opens_with_content(data) else "preamble"
    if event_type in _ENDS[wire]:
        return "end"
    if event_type in _ERRORS[wire]:
        return _wire_error(wire, event_type, data)
    return "output"


def _json(data: bytes) -> Any:
    try:
        return json.loads(data)
    except ValueError:  # cut short, or not JSON at all
        return None


def _opens_with_content(data: bytes) -> bool:
    payload = _json(data)
    if not isinstance(payload, dict):
        return True  # unreadable (or too large to keep): it may carry anything
    opened = next((payload[key] for key in _OPENED if isinstance(payload.get(key), dict)), None)
    if opened is None:
        return False
    return any(opened.get(key) for key in _CONTENT_KEYS)


def _text(value: object) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    return value if isinstance(value, str) else str(value)


def _wire_error(wire: Wire, event_type: bytes, data: bytes) -> ErrorEvent:
    payload = _json(data)
    kind = message = None
    if isinstance(payload, dict):
        error = payload.get("error")
        if event_type == b"response.failed":
            response = payload.get("response")
            error = response.get("error") if isinstance(response, dict) else None
        if isinstance(error, dict):
            kind = _text(error.get("code")) or _text(error.get("type"))
            message = _text(error.get("message"))
        if kind is None:  # Responses' own error event puts them at the top
            kind = _text(payload.get("code"))
            message = message or _text(payload.get("message"))
    transient = kind in TRANSIENT_ERRORS[wire]
    return ErrorEvent(event_type.decode("utf-8", "replace"), kind, message, transient)


def _chat_error(data: bytes) -> ErrorEvent | None:
    """A Chat Completions ``data: {"error": ...}`` chunk's error (``None``: not one)."""
    payload = _json(data)
    if not isinstance(payload, dict) or "error" not in payload or payload.get("choices"):
        return None
    error = payload["error"]
    kind = message = None
    transient = False
    if isinstance(error, dict):
        code, kind_text = error.get("code"), _text(error.get("type"))
        message = _text(error.get("message"))
        status = code if isinstance(code, int) and not isinstance(code, bool) else None
        if isinstance(code, str) and code.isdigit():
            status = int(code)
        kind = _text(code) or kind_text
        transient = status is not None and (status == 429 or 500 <= status <= 599)
        named = TRANSIENT_ERRORS["chat_completions"]
        transient = transient or kind in named or kind_text in named
    else:
        message = _text(error)
    return ErrorEvent("message", kind, message, transient)


#: The keys of a Gemini part that hold something a caller is shown: text (a thought
#: summary too), a function call or its response, inline or file data, code, its result.
_GEMINI_CONTENT = frozenset(
    {"text", "functionCall", "functionResponse", "inlineData", "fileData"}
    | {"executableCode", "codeExecutionResult"}
)


# How a streamed answer's chunk mostly starts: its first candidate's first part is text
# (non-empty). Without a finishReason anywhere, such a chunk is output: no parse needed.
# The spellings servers send are compared first (a C compare, where the pattern takes
# several times as long); any other spacing goes to the pattern.
_GEMINI_TEXT_STARTS = (
    b'{"candidates": [{"content": {"parts": [{"text": "',
    b'{"candidates": [{"content": {"role": "model", "parts": [{"text": "',
    b'{"candidates":[{"content":{"parts":[{"text":"',
    b'{"candidates":[{"content":{"role":"model","parts":[{"text":"',
)
_GEMINI_TEXT = re.compile(
    rb'\s*\{\s*"candidates"\s*:\s*\[\s*\{\s*"content"\s*:\s*\{\s*(?:"role"\s*:\s*"model"\s*,\s*)?'
    rb'"parts"\s*:\s*\[\s*\{\s*"text"\s*:\s*"(?:[^"\\]|\\.)'
)


def _gemini_class(data: bytes) -> EventClass | ErrorEvent:
    """A ``GenerateContentResponse`` event: an error (``{"error": ...}``), an end (every
    candidate has a ``finishReason``), output (a candidate part with content), or else
    (usage only, prompt feedback) preamble."""
    if b'"finishReason"' not in data and _starts_with_text(data):
        return "output"
    payload = _json(data)
    if not isinstance(payload, dict):
        return "output"  # unreadable (or too large to keep): it may carry anything
    error = payload.get("error")
    if error is not None and "candidates" not in payload:
        return _gemini_error(error)
    candidates = payload.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        return "preamble"
    if all(isinstance(c, dict) and c.get("finishReason") for c in candidates):
        return "end"
    for candidate in candidates:
        content = candidate.get("content") if isinstance(candidate, dict) else None
        parts = content.get("parts") if isinstance(content, dict) else None
        if isinstance(parts, list) and any(
            isinstance(part, dict) and any(part.get(key) for key in _GEMINI_CONTENT)
            for part in parts
        ):
            return "output"
    return "preamble"


def _starts_with_text(data: bytes) -> bool:
    """Whether ``data``'s first candidate's first part is non-empty text (``_GEMINI_TEXT``)."""
    for start in _GEMINI_TEXT_STARTS:
        if data.startswith(start):
            return data[len(start) : len(start) + 1] not in (b'"', b"")
    return _GEMINI_TEXT.match(data) is not None


def _gemini_error(error: object) -> ErrorEvent:
    """Gemini's ``{"error": {"code": 503, "message": ..., "status": "UNAVAILABLE"}}``."""
    kind = message = None
    transient = False
    if isinstance(error, dict):
        code, status = _text(error.get("code")), _text(error.get("status"))
        message = _text(error.get("message"))
        kind = status or code
        named = TRANSIENT_ERRORS["gemini"]
        transient = code in named or status in named
    else:
        message = _text(error)
    return ErrorEvent("error", kind, message, transient)
