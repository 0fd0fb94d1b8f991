"""What the fault server answers on Google's Gemini API and Vertex AI (``generateContent``).

Owns the routes and payloads of that wire. The routes, POST only, ``?alt=sse`` or not:
``{prefix}/{version}/models/{model}:streamGenerateContent`` and ``:generateContent`` (the
Gemini API; ``tunedModels/{model}`` too) and
``{prefix}/{version}/projects/{p}/locations/{l}/publishers/google/models/{model}:...``
(Vertex AI), any version segment (``v1``, ``v1beta``, ``v1beta1``...) under any prefix (a
proxy's). The model is in the path, not the body: :func:`gemini_model` reads it back from
:attr:`RecordedRequest.path <hermes_transport.testing.RecordedRequest.path>`.

A stream is data-only SSE (``data: {json}`` and a blank line, CRLF with ``crlf``), each
event one ``GenerateContentResponse`` with one part: a ``{"text": ..., "thought": true}``
part per ``Scenario.thoughts`` piece, a text part per ``content`` piece, then with
``tool_call`` a whole ``functionCall`` part (:data:`TOOL_CALL_NAME
<hermes_transport.testing.TOOL_CALL_NAME>`, its arguments as an object); the last event
carries the ``finishReason`` (and the ``usageMetadata`` with ``usage``). There is no
``[DONE]``: the body's end ends the stream (the Gemini API's own stream ends so too; without
``?alt=sse`` it would be a JSON array, which this server never sends). ``finish_reason``
maps ``stop`` and ``tool_calls`` to ``STOP`` (Gemini ends a function call so), ``length``
to ``MAX_TOKENS``, ``content_filter`` to ``SAFETY``, and is sent as is otherwise. A
non-streamed answer is one ``GenerateContentResponse``: the thoughts in one thought part,
the text in one part, then the function call. Gemini has no keepalive event of its own:
this wire's keepalive (``comment_interval``, ``keepalive_interval``) is the ``: keepalive``
comment a proxy sends, which google-genai (3.6.1) does not skip: it raises
``UnknownApiResponseError`` on it. ``think`` pauses before the first event (there is no
preamble).

Errors: a ``status`` other than 200 answers Google's error JSON, ``{"error": {"code":
status, "message": message, "status": "UNAVAILABLE"}}`` (the status named after the code:
400 ``INVALID_ARGUMENT``, 401 ``UNAUTHENTICATED``, 403 ``PERMISSION_DENIED``, 404
``NOT_FOUND``, 409 ``ABORTED``, 429 ``RESOURCE_EXHAUSTED``, 499 ``CANCELLED``, 500
``INTERNAL``, 501 ``NOT_IMPLEMENTED``, 503 ``UNAVAILABLE``, 504 ``DEADLINE_EXCEEDED``;
another 5xx ``INTERNAL``, another 4xx ``INVALID_ARGUMENT``). ``error_event`` sends that
error object as a data event inside the HTTP 200 stream, its code from the scenario's
kind: one of those statuses names its code (``"UNAVAILABLE"`` 503, ``"RESOURCE_EXHAUSTED"``
429, ``"INTERNAL"`` 500, ``"DEADLINE_EXCEEDED"`` 504...), a number is the code itself
(``"503"``), the other wires' kinds mean what they mean there (``"server_error"`` and
``"api_error"`` 500, ``"overloaded_error"`` 503, ``"rate_limit_error"`` 429), anything else
is 400 ``INVALID_ARGUMENT``. The error always has a code: google-genai raises ``APIError``
(``ClientError`` 4xx, ``ServerError`` 5xx) with it, and a ``TypeError`` without one.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from .scenarios import TOOL_CALL_ARGUMENTS, TOOL_CALL_NAME, RecordedRequest, Scenario
from .stream import WireStream, sse_comment

__all__ = [
    "gemini_completion",
    "gemini_error",
    "gemini_events",
    "gemini_model",
    "gemini_route",
    "gemini_stream",
]

_PATH = re.compile(
    r"/v\d[a-z0-9]*/(?:projects/[^/]+/locations/[^/]+/)?(?:publishers/[^/]+/)?"
    r"(?:models|tunedModels)/([^/:]+):(streamGenerateContent|generateContent)$"
)
_STATUSES = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# The other wires' error kinds too, so that one Scenario means the same failure on each.
_CODES = {status: code for code, status in _STATUSES.items()} | {
    "server_error": 500,
    "api_error": 500,
    "overloaded_error": 503,
    "rate_limit_error": 429,
}
_FINISH_REASONS = {
    "stop": "STOP",
    "tool_calls": "STOP",
    "length": "MAX_TOKENS",
    "content_filter": "SAFETY",
}


def gemini_route(target: str) -> tuple[str, bool] | None:
    """The model a Gemini ``generateContent`` request target names, and whether it streams
    (``streamGenerateContent``); None for any other target."""
    found = _PATH.search(urlsplit(target).path)
    if found is None:
        return None
    return found.group(1), found.group(2) == "streamGenerateContent"


def gemini_model(path: str) -> str | None:
    """The model a Gemini API or Vertex AI ``generateContent`` or ``streamGenerateContent``
    request path names, query string or not, such as a :class:`RecordedRequest`'s
    ``path``: ``/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse`` gives
    ``"gemini-2.5-pro"``; None for any other path."""
    route = gemini_route(path)
    return None if route is None else route[0]


def _status(code: int) -> str:
    return _STATUSES.get(code, "INTERNAL" if code >= 500 else "INVALID_ARGUMENT")


def gemini_error(status: int, message: str) -> dict[str, Any]:
    """Google's error body for this HTTP status."""
    return {"error": {"code": status, "message": message, "status": _status(status)}}


def _error_code(kind: str) -> int:
    """The code of an in-stream error of the scenario's kind (see the module docstring)."""
    if re.fullmatch(r"[0-9]{1,9}", kind):
        return int(kind)
    return _CODES.get(kind, 400)


def _usage(scenario: Scenario, request: RecordedRequest) -> dict[str, int]:
    prompt = max(1, len(request.body) // 4)  # rough but deterministic, like the other wires'
    candidates = len(scenario.content) + scenario.tool_call
    usage = {"promptTokenCount": prompt, "candidatesTokenCount": candidates}
    if scenario.thoughts:
        usage["thoughtsTokenCount"] = len(scenario.thoughts)
    usage["totalTokenCount"] = prompt + candidates + len(scenario.thoughts)
    return usage


def _function_call() -> dict[str, Any]:
    return {"functionCall": {"name": TOOL_CALL_NAME, "args": json.loads(TOOL_CALL_ARGUMENTS)}}


def _response(
    parts: list[dict[str, Any]],
    scenario: Scenario,
    request: RecordedRequest,
    n: int,
    *,
    last: bool,
) -> dict[str, Any]:
    """A ``GenerateContentResponse`` with these parts; the ``last`` one says how it ended."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    response: dict[str, Any] = {"candidates": [candidate]}
    if last:
        reason = scenario.finish_reason or "stop"
        candidate["finishReason"] = _FINISH_REASONS.get(reason, reason)
        if scenario.usage:
            response["usageMetadata"] = _usage(scenario, request)
    response["modelVersion"] = gemini_model(request.path) or "hermes-fault"
    response["responseId"] = f"hermes{n}"
    return response


def gemini_completion(scenario: Scenario, request: RecordedRequest, n: int) -> dict[str, Any]:
    """A complete, non-streamed ``GenerateContentResponse``."""
    parts: list[dict[str, Any]] = []
    if scenario.thoughts:
        parts.append({"text": "".join(scenario.thoughts), "thought": True})
    if scenario.content or not scenario.tool_call:  # a tool-only answer has no text
        parts.append({"text": "".join(scenario.content)})
    if scenario.tool_call:
        parts.append(_function_call())
    return _response(parts, scenario, request, n, last=True)


def gemini_events(scenario: Scenario, request: RecordedRequest, n: int) -> list[bytes]:
    """The data events of the complete stream, one part each (see the module docstring)."""
    parts: list[dict[str, Any]] = [{"text": text, "thought": True} for text in scenario.thoughts]
    parts += [{"text": piece} for piece in scenario.content]
    if scenario.tool_call:
        parts.append(_function_call())
    parts = parts or [{"text": ""}]
    newline = b"\r\n" if scenario.crlf else b"\n"
    return [
        b"data: "
        + json.dumps(_response([part], scenario, request, n, last=i == len(parts) - 1)).encode()
        + newline
        + newline
        for i, part in enumerate(parts)
    ]


def gemini_stream(scenario: Scenario, request: RecordedRequest, n: int) -> WireStream:
    """The stream, its ``: keepalive`` comment and its in-stream error event.

    The error is a data event holding Google's error object, after which the body ends.
    ``think`` pauses before the first event.
    """
    newline = b"\r\n" if scenario.crlf else b"\n"
    code = _error_code(scenario.error_event or "INTERNAL")
    error = {"error": {"code": code, "message": scenario.message, "status": _status(code)}}
    return WireStream(
        gemini_events(scenario, request, n),
        think_at=0,
        keepalive=sse_comment(scenario.crlf),
        error=b"data: " + json.dumps(error).encode() + newline + newline,
    )
