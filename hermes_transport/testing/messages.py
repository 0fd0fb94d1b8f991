"""What the fault server answers on Anthropic's Messages API (``POST /v1/messages``).

The shapes follow Anthropic's streaming format: named events, a ``ping``
after ``message_start`` (and, while a model is silent, as its keepalive),
``message_stop`` at the end and no ``[DONE]``; a failure mid-stream is an
``event: error`` inside the HTTP 200 stream. Text content only.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from .stream import WireStream

if TYPE_CHECKING:
    from .scenarios import RecordedRequest, Scenario

__all__ = [
    "MESSAGES_PATH",
    "messages_completion",
    "messages_error",
    "messages_events",
    "messages_stream",
    "ping",
]

MESSAGES_PATH = "/v1/messages"


def _event(kind: str, payload: dict[str, Any], newline: bytes) -> bytes:
    data = json.dumps({"type": kind, **payload}).encode()
    return b"event: " + kind.encode() + newline + b"data: " + data + newline + newline


def ping(crlf: bool) -> bytes:
    """Anthropic's keepalive event."""
    return _event("ping", {}, b"\r\n" if crlf else b"\n")


def _usage(request: RecordedRequest, output: int) -> dict[str, int]:
    return {"input_tokens": max(1, len(request.body) // 4), "output_tokens": output}


def _model(request: RecordedRequest) -> str:
    model = request.json.get("model") if isinstance(request.json, dict) else None
    return model if isinstance(model, str) else "hermes-fault"


def _message(request: RecordedRequest, n: int, content: list[Any], output: int) -> dict[str, Any]:
    return {
        "id": f"msg_hermes{n}",
        "type": "message",
        "role": "assistant",
        "model": _model(request),
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": _usage(request, output),
    }


def messages_events(scenario: Scenario, request: RecordedRequest, n: int) -> list[bytes]:
    """The events of a complete streamed message, one ``bytes`` per event."""
    newline = b"\r\n" if scenario.crlf else b"\n"
    start = _message(request, n, [], 1)
    events = [
        _event("message_start", {"message": start}, newline),
        _event(
            "content_block_start",
            {"index": 0, "content_block": {"type": "text", "text": ""}},
            newline,
        ),
        ping(scenario.crlf),
    ]
    for piece in scenario.content:
        delta = {"index": 0, "delta": {"type": "text_delta", "text": piece}}
        events.append(_event("content_block_delta", delta, newline))
    stop = {"stop_reason": _stop_reason(scenario), "stop_sequence": None}
    usage = {"output_tokens": len(scenario.content)}
    events += [
        _event("content_block_stop", {"index": 0}, newline),
        _event("message_delta", {"delta": stop, "usage": usage}, newline),
        _event("message_stop", {}, newline),
    ]
    return events


def messages_stream(scenario: Scenario, request: RecordedRequest, n: int) -> WireStream:
    """The stream, its ``ping`` keepalive and its ``event: error``.

    ``think`` pauses after ``message_start``, ``content_block_start`` and the first ping,
    before the first ``content_block_delta``.
    """
    newline = b"\r\n" if scenario.crlf else b"\n"
    kind = scenario.error_event or "api_error"
    error = {"error": {"type": kind, "message": scenario.message}}
    return WireStream(
        messages_events(scenario, request, n),
        think_at=3,
        keepalive=ping(scenario.crlf),
        error=_event("error", error, newline),
    )


def messages_completion(scenario: Scenario, request: RecordedRequest, n: int) -> dict[str, Any]:
    """A complete, non-streamed message."""
    text = {"type": "text", "text": "".join(scenario.content)}
    message = _message(request, n, [text], len(scenario.content))
    message["stop_reason"] = _stop_reason(scenario)
    return message


def messages_error(status: int, message: str) -> dict[str, Any]:
    """Anthropic's error body."""
    kind = "api_error" if status >= 500 else "invalid_request_error"
    return {"type": "error", "error": {"type": kind, "message": message}}


def _stop_reason(scenario: Scenario) -> str:
    return {"stop": "end_turn", "length": "max_tokens"}.get(
        scenario.finish_reason or "stop", scenario.finish_reason or "end_turn"
    )
