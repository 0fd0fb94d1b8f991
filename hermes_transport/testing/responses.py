"""What the fault server answers on OpenAI's Responses API (``/v1/responses``).

Owns the payloads of that wire: the Response object, its stream of named, numbered
events (``event: <type>`` plus ``data: {"type": ..., "sequence_number": N, ...}``, no
``[DONE]``), its ``keepalive`` data event, its ``error`` and ``response.failed`` events,
and how each response is kept as it is created: its final JSON, and in background mode
its numbered events (the store is in ``store.py``; the routes on one stored response,
resume and cancel, in ``background.py``).

Limits, on purpose: text and one function call only; ``finish_reason`` is ignored; a
response completes on the server at once, whatever happens to its connection.
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
from .store import ResponseStore, StoredResponse
from .stream import WireStream, error_cut

__all__ = [
    "RESPONSES_PATH",
    "ResponsesStream",
    "failed_response",
    "responses_completion",
    "responses_stream",
    "wire_error",
]

RESPONSES_PATH = "/v1/responses"
_TOOL_PIECES = tool_call_pieces()
_Event = dict[str, Any]


def _usage(scenario: Scenario, request: RecordedRequest) -> dict[str, Any] | None:
    if not scenario.usage:
        return None
    prompt = max(1, len(request.body) // 4)  # rough but deterministic, like chat's
    output = len(scenario.content) + (len(_TOOL_PIECES) if scenario.tool_call else 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + output,
    }


def _response(request: RecordedRequest, n: int, created: int, status: str) -> dict[str, Any]:
    body = request.json if isinstance(request.json, dict) else {}
    model, instructions = body.get("model"), body.get("instructions")
    return {
        "id": f"resp_hermes{n}",
        "object": "response",
        "created_at": created,
        "status": status,
        "background": body.get("background") is True,
        "error": None,
        "incomplete_details": None,
        "instructions": instructions if isinstance(instructions, str) else None,
        "max_output_tokens": None,
        "metadata": {},
        "model": model if isinstance(model, str) else "hermes-fault",
        "output": [],
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": True,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}},
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "truncation": "disabled",
        "usage": None,
        "user": None,
    }


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message(n: int, parts: list[dict[str, Any]], status: str) -> dict[str, Any]:
    item = {"id": f"msg_hermes{n}", "type": "message", "status": status}
    return {**item, "role": "assistant", "content": parts}


def _call(n: int, arguments: str, status: str) -> dict[str, Any]:
    item = {"id": f"fc_hermes{n}", "type": "function_call", "status": status}
    return {**item, "name": TOOL_CALL_NAME, "call_id": f"call_{n}", "arguments": arguments}


def _added(index: int, item: dict[str, Any], done: bool = False) -> _Event:
    kind = "response.output_item.done" if done else "response.output_item.added"
    return {"type": kind, "output_index": index, "item": item}


def _has_text(scenario: Scenario) -> bool:
    return bool(scenario.content) or not scenario.tool_call  # a tool-only answer has no text


def _output(scenario: Scenario, n: int) -> list[dict[str, Any]]:
    text = "".join(scenario.content)
    message = [_message(n, [_part(text)], "completed")] if _has_text(scenario) else []
    return message + ([_call(n, TOOL_CALL_ARGUMENTS, "completed")] if scenario.tool_call else [])


def _completed(scenario: Scenario, request: RecordedRequest, n: int, created: int) -> _Event:
    response = _response(request, n, created, "completed")
    return response | {"output": _output(scenario, n), "usage": _usage(scenario, request)}


def _items(scenario: Scenario, n: int) -> tuple[list[_Event], int]:
    """The output item events of a stream, and the index of its first output event."""
    events: list[_Event] = []
    if _has_text(scenario):
        item_id = f"msg_hermes{n}"
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        text = "".join(scenario.content)
        events += [
            _added(0, _message(n, [], "in_progress")),
            {"type": "response.content_part.added", **where, "part": _part("")},
        ]
        events += [
            {"type": "response.output_text.delta", **where, "delta": piece, "logprobs": []}
            for piece in scenario.content
        ]
        events += [
            {"type": "response.output_text.done", **where, "text": text, "logprobs": []},
            {"type": "response.content_part.done", **where, "part": _part(text)},
            _added(0, _message(n, [_part(text)], "completed"), done=True),
        ]
    if scenario.tool_call:
        index = 1 if events else 0
        where = {"item_id": f"fc_hermes{n}", "output_index": index}
        events.append(_added(index, _call(n, "", "in_progress")))
        events += [
            {"type": "response.function_call_arguments.delta", **where, "delta": piece}
            for piece in _TOOL_PIECES
        ]
        done = {"arguments": TOOL_CALL_ARGUMENTS, "name": TOOL_CALL_NAME}  # name: openai 2.x
        events += [
            {"type": "response.function_call_arguments.done", **where, **done},
            _added(index, _call(n, TOOL_CALL_ARGUMENTS, "completed"), done=True),
        ]
    # Thinking ends at the first delta: after the first item's opening events.
    return events, 2 if _has_text(scenario) else 1


def wire_error(scenario: Scenario, failed: dict[str, Any]) -> _Event:
    """The in-stream error event for the scenario (``response.failed`` on request)."""
    kind, message = scenario.error_event or "server_error", scenario.message
    if scenario.error_as_response_failed:
        return {"type": "response.failed", "response": failed}
    # The API reference and openai-python's ResponseErrorEvent put code, message and param
    # at the top; the live API nests them under "error" (openai-dotnet#881), which is what
    # makes openai-python raise APIError. Both are sent, so that either reader finds them.
    error = {"type": kind, "code": kind, "message": message, "param": None}
    return {"type": "error", "code": kind, "message": message, "param": None, "error": error}


def failed_response(scenario: Scenario, response: dict[str, Any]) -> dict[str, Any]:
    """``response`` as failed with the scenario's error."""
    kind = scenario.error_event or "server_error"
    error = {"code": kind, "message": scenario.message}
    return response | {"status": "failed", "error": error, "output": [], "usage": None}


def _generated(
    scenario: Scenario, request: RecordedRequest, n: int
) -> tuple[list[_Event], int, dict[str, Any], dict[str, Any]]:
    """A response's whole stream, its first output event's index, its completed JSON and
    the JSON it fails with."""
    created = int(time.time())
    start = _response(request, n, created, "queued" if _background(request) else "in_progress")
    lifecycle: list[_Event] = [{"type": "response.created", "response": start}]
    if _background(request):
        lifecycle.append({"type": "response.queued", "response": start})
    running = start | {"status": "in_progress"}
    lifecycle.append({"type": "response.in_progress", "response": running})
    items, think_at = _items(scenario, n)
    done = _completed(scenario, request, n, created)
    events = [*lifecycle, *items, {"type": "response.completed", "response": done}]
    return events, len(lifecycle) + think_at, done, failed_response(scenario, running)


def _background(request: RecordedRequest) -> bool:
    return isinstance(request.json, dict) and request.json.get("background") is True


def _numbered(events: list[_Event], free_at: int = 0, free: int = 0) -> list[_Event]:
    """``events`` numbered from 0, ``free`` numbers skipped before the one at ``free_at``
    (for keepalives to take)."""
    return [
        {**event, "sequence_number": i + (free if i >= free_at else 0)}
        for i, event in enumerate(events)
    ]


def _think_seq(kept: list[_Event], think_at: int) -> int:
    """The number of the first output event (``think_at``'s), or past the last one."""
    if think_at < len(kept):
        number: int = kept[think_at]["sequence_number"]
        return number
    return kept[-1]["sequence_number"] + 1 if kept else 0


def responses_completion(
    scenario: Scenario, request: RecordedRequest, n: int, store: ResponseStore
) -> dict[str, Any]:
    """A complete, non-streamed Response, kept in ``store`` (with its stream if background)."""
    events, think_at, done, _ = _generated(scenario, request, n)
    if not _background(request):
        store.put(StoredResponse(done))
        return done
    kept = _numbered(events, think_at, scenario.keepalive_numbers)
    store.put(StoredResponse(done, kept, _think_seq(kept, think_at), background=True))
    return done


def responses_stream(
    scenario: Scenario, request: RecordedRequest, n: int, store: ResponseStore
) -> ResponsesStream:
    """The live stream of a new response, kept in ``store`` before it is sent.

    The kept JSON is the completed response, or the failed one under ``error_event``; in
    background mode the kept events are numbered up front and are what a healthy stream
    sends, up to and with the error event under ``error_event``.
    """
    events, think_at, done, failed = _generated(scenario, request, n)
    error = wire_error(scenario, failed)
    if not _background(request):
        store.put(StoredResponse(done if scenario.error_event is None else failed))
        return ResponsesStream(events, scenario, think_at=think_at, error=error)
    numbered = _numbered(events, think_at, scenario.keepalive_numbers)
    if scenario.error_event is None:
        kept, error_seq = numbered, numbered[-1]["sequence_number"] + 1
    else:
        cut = error_cut(scenario.error_after_events, len(events))
        error_seq = numbered[cut]["sequence_number"]
        kept = [*numbered[:cut], {**error, "sequence_number": error_seq}]
    final = done if scenario.error_event is None else failed
    store.put(StoredResponse(final, kept, _think_seq(numbered, think_at), background=True))
    return ResponsesStream(
        numbered, scenario, think_at=think_at, error=error, fixed=(-1, error_seq)
    )


class ResponsesStream(WireStream):
    """Responses events, numbered as they are sent, or as they were numbered when kept.

    Live outside background mode, every event, keepalive and error takes the next number
    from 0. With ``fixed=(last, error_seq)`` (a background stream, live or resumed), the
    events carry the numbers they were kept with, a keepalive takes the next number if no
    kept event has it (``keepalive_numbers`` left it free) and else repeats the number
    before it (``last`` before any), and the error takes ``error_seq``, so that the kept
    numbering never shifts and ``starting_after`` the last number a client saw resumes
    exactly after it.
    """

    def __init__(
        self,
        events: list[_Event],
        scenario: Scenario,
        *,
        think_at: int,
        error: _Event,
        fixed: tuple[int, int] | None = None,
    ) -> None:
        super().__init__([], think_at=think_at, keepalive=b"", error=b"")
        self._pending, self._newline = events, b"\r\n" if scenario.crlf else b"\n"
        self._error_event, self._fixed = error, fixed
        self._next = 0
        self._last = fixed[0] if fixed is not None else -1

    def __len__(self) -> int:
        return len(self._pending)

    def _encode(self, event: _Event, seq: int) -> bytes:
        kind: str = event["type"]
        payload = {"type": kind, "sequence_number": seq} | event
        data = json.dumps(payload).encode()
        newline = self._newline
        return b"event: " + kind.encode() + newline + b"data: " + data + newline + newline

    def event(self, index: int) -> bytes:
        event = self._pending[index]
        seq = event["sequence_number"] if self._fixed is not None else self._next
        self._next, self._last = self._next + 1, seq
        return self._encode(event, seq)

    def keepalive(self) -> bytes:
        seq = self._last
        if self._fixed is None:
            seq, self._next = self._next, self._next + 1
        else:
            pending = self._pending
            coming = pending[self._next]["sequence_number"] if self._next < len(pending) else None
            if coming is not None and seq + 1 < coming:  # a number left free for keepalives
                seq = self._last = seq + 1
        return self._encode({"type": "keepalive"}, seq)

    def error(self) -> bytes:
        seq = self._fixed[1] if self._fixed is not None else self._next
        self._next += 1
        return self._encode(self._error_event, seq)
