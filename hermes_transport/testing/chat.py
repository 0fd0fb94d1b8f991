"""What the fault server answers on OpenAI's Chat Completions API (``POST /v1/chat/completions``).

Owns the payloads of that wire: the completion JSON, the SSE data events of a stream
(``[DONE]`` included) and its in-stream error event, the usage object, the ``chatcmpl-``
envelope and the OpenAI-style error body (which the server also uses for unknown paths
and the Responses API, which shares it).
"""

from __future__ import annotations

import json
import time
from typing import Any

from .scenarios import (
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    RecordedRequest,
    Scenario,
    tool_call_pieces,
)
from .stream import WireStream, sse_comment

__all__ = ["chat_completion", "chat_error", "chat_events", "chat_stream"]

_TOOL_PIECES = tool_call_pieces()


def chat_error(status: int, message: str) -> dict[str, object]:
    """OpenAI's error body for this status."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _envelope(kind: str, request: RecordedRequest, n: int) -> dict[str, Any]:
    model = request.json.get("model") if isinstance(request.json, dict) else None
    return {
        "id": f"chatcmpl-hermes{n}",
        "object": kind,
        "created": int(time.time()),
        "model": model if isinstance(model, str) else "hermes-fault",
    }


def _finish_reason(scenario: Scenario) -> str:
    return scenario.finish_reason or ("tool_calls" if scenario.tool_call else "stop")


def _usage(scenario: Scenario, request: RecordedRequest) -> dict[str, int]:
    prompt = max(1, len(request.body) // 4)  # rough but deterministic
    completion = len(scenario.content) + (len(_TOOL_PIECES) if scenario.tool_call else 0)
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def chat_completion(scenario: Scenario, request: RecordedRequest, n: int) -> dict[str, Any]:
    """A complete, non-streamed chat completion."""
    text = "".join(scenario.content)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if scenario.tool_call:
        function = {"name": TOOL_CALL_NAME, "arguments": TOOL_CALL_ARGUMENTS}
        message["content"] = text or None
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": function}]
    choice = {"index": 0, "message": message, "logprobs": None}
    completion = _envelope("chat.completion", request, n)
    completion["choices"] = [{**choice, "finish_reason": _finish_reason(scenario)}]
    if scenario.usage:
        completion["usage"] = _usage(scenario, request)
    return completion


def chat_events(scenario: Scenario, request: RecordedRequest, n: int) -> list[bytes]:
    """The SSE data events of the complete stream, ``[DONE]`` included."""
    deltas: list[dict[str, Any]] = [{"content": piece} for piece in scenario.content]
    if scenario.tool_call:
        function = {"name": TOOL_CALL_NAME, "arguments": ""}
        start = {"index": 0, "id": f"call_{n}", "type": "function", "function": function}
        deltas.append({"tool_calls": [start]})
        for piece in _TOOL_PIECES:
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    deltas = deltas or [{"content": ""}]
    deltas[0] = {"role": "assistant", **deltas[0]}
    reasons: list[str | None] = [None] * len(deltas) + [_finish_reason(scenario)]
    chunks = [
        {
            **_envelope("chat.completion.chunk", request, n),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        for delta, reason in zip([*deltas, {}], reasons, strict=True)
    ]
    if scenario.usage:
        chunks[-1]["usage"] = _usage(scenario, request)
    newline = b"\r\n" if scenario.crlf else b"\n"
    payloads = [json.dumps(chunk).encode() for chunk in chunks] + [b"[DONE]"]
    return [b"data: " + payload + newline + newline for payload in payloads]


def chat_stream(scenario: Scenario, request: RecordedRequest, n: int) -> WireStream:
    """The stream, its ``: keepalive`` comment and its in-stream error event.

    The error is a data event holding an OpenAI error object (no ``[DONE]`` follows it),
    which the openai SDK raises as ``APIError``. ``think`` pauses before the first event.
    """
    newline = b"\r\n" if scenario.crlf else b"\n"
    kind = scenario.error_event or "server_error"
    error = {"message": scenario.message, "type": kind, "param": None, "code": kind}
    return WireStream(
        chat_events(scenario, request, n),
        think_at=0,
        keepalive=sse_comment(scenario.crlf),
        error=b"data: " + json.dumps({"error": error}).encode() + newline + newline,
    )
