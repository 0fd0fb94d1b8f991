"""What the fault server answers on OpenAI's Responses API (``/v1/responses``).

Owns the payloads of that wire: the Response object, its stream of named, numbered
events (``event: <type>`` plus ``data: {"type": ..., "sequence_number": N, ...}``, no
``[DONE]``), its ``keepalive`` data event, its ``error`` and ``response.failed`` events,
the routes on one stored response (retrieve, resume, cancel) and the replay of its stored
events that a resume streams (the store itself is in ``store.py``).

Limits, on purpose: text and one function call only; ``finish_reason`` is ignored; every
streamed response can be resumed (the real API resumes only ``background`` ones), for as
long as the server runs; a cancel marks the stored response ``cancelled`` but leaves its
stored events as they were.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from copy import deepcopy
from typing import Any
from urllib.parse import parse_qs, urlsplit

from .scenarios import (
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    RecordedRequest,
    Scenario,
    tool_call_pieces,
)
from .store import ResponseStore, StoredResponse
from .stream import WireStream

__all__ = [
    "RESPONSES_PATH",
    "ResponsesStream",
    "is_resume",
    "replay_stream",
    "responses_completion",
    "responses_route",
    "responses_stream",
    "starting_after",
]

RESPONSES_PATH = "/v1/responses"
_TOOL_PIECES = tool_call_pieces()
_Event = dict[str, Any]


def is_resume(method: str, target: str) -> bool:
    """Whether the request is a stream resume, ``GET /v1/responses/{id}?stream=true``."""
    found = responses_route(method, target)
    return found is not None and found[1] == "resume"


def responses_route(method: str, target: str) -> tuple[str, str] | None:
    """``(id, action)`` for a request on one stored response, action ``resume``,
    ``retrieve`` or ``cancel``; None for any other request."""
    parts = urlsplit(target)
    rest = parts.path.removeprefix(RESPONSES_PATH + "/")
    if rest == parts.path or not rest:
        return None
    response_id, _, tail = rest.partition("/")
    if method == "POST" and tail == "cancel":
        return response_id, "cancel"
    if method != "GET" or tail:
        return None
    stream = parse_qs(parts.query).get("stream", [""])[-1].lower()
    return response_id, "resume" if stream in ("true", "1") else "retrieve"


def starting_after(target: str) -> int:
    """The resume's ``starting_after`` query parameter, -1 when absent or not a number."""
    value = parse_qs(urlsplit(target).query).get("starting_after", [""])[-1]
    return int(value) if value.lstrip("-").isdigit() else -1


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


def responses_completion(
    scenario: Scenario, request: RecordedRequest, n: int, store: ResponseStore
) -> dict[str, Any]:
    """A complete, non-streamed Response, also kept in ``store``."""
    response = _completed(scenario, request, n, int(time.time()))
    store.put(StoredResponse(response))
    return response


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


def _error_event(scenario: Scenario, failed: dict[str, Any]) -> _Event:
    kind, message = scenario.error_event or "server_error", scenario.message
    if scenario.error_as_response_failed:
        return {"type": "response.failed", "response": failed}
    # The API reference and openai-python's ResponseErrorEvent put code, message and param
    # at the top; the live API nests them under "error" (openai-dotnet#881), which is what
    # makes openai-python raise APIError. Both are sent, so that either reader finds them.
    error = {"type": kind, "code": kind, "message": message, "param": None}
    return {"type": "error", "code": kind, "message": message, "param": None, "error": error}


def _failed(scenario: Scenario, response: dict[str, Any]) -> dict[str, Any]:
    kind = scenario.error_event or "server_error"
    error = {"code": kind, "message": scenario.message}
    return response | {"status": "failed", "error": error, "output": [], "usage": None}


def responses_stream(
    scenario: Scenario, request: RecordedRequest, n: int, store: ResponseStore
) -> ResponsesStream:
    """The live stream of a new response, which keeps its events in ``store`` once over."""
    created = int(time.time())
    background = isinstance(request.json, dict) and request.json.get("background") is True
    start = _response(request, n, created, "queued" if background else "in_progress")
    lifecycle: list[_Event] = [{"type": "response.created", "response": start}]
    if background:
        lifecycle.append({"type": "response.queued", "response": start})
    running = start | {"status": "in_progress"}
    lifecycle.append({"type": "response.in_progress", "response": running})
    items, think_at = _items(scenario, n)
    done = _completed(scenario, request, n, created)
    events = [*lifecycle, *items, {"type": "response.completed", "response": done}]
    failed = _failed(scenario, running)

    def keep(log: list[_Event], think_seq: int, errored: bool) -> None:
        store.put(StoredResponse(failed if errored else done, log, think_seq))

    return ResponsesStream(
        events, scenario, think_at=len(lifecycle) + think_at, error=failed, on_end=keep
    )


def replay_stream(scenario: Scenario, stored: StoredResponse, after: int) -> ResponsesStream:
    """A resume: the stored events numbered above ``after``, under ``scenario``'s faults."""
    events = [event for event in stored.events or [] if event["sequence_number"] > after]
    think_at = next(
        (i for i, event in enumerate(events) if event["sequence_number"] >= stored.think_seq),
        len(events),
    )
    end = max((event["sequence_number"] for event in stored.events or []), default=-1) + 1
    failed = _failed(scenario, stored.response)
    return ResponsesStream(events, scenario, think_at=think_at, error=failed, resume=(after, end))


class ResponsesStream(WireStream):
    """Responses events, numbered as they are sent so that keepalives take numbers too.

    Live, every event, keepalive and error takes the next number from 0; once the stream
    is over, the events it did not send are numbered on after the last one sent (the
    response completes on the server, as it would in background mode) and kept. A resume
    (``resume=(starting_after, end)``) sends the stored numbers; its keepalives repeat
    the number of the event before them and its error takes ``end``, so that the stored
    numbering never shifts.
    """

    def __init__(
        self,
        events: list[_Event],
        scenario: Scenario,
        *,
        think_at: int,
        error: dict[str, Any],
        on_end: Callable[[list[_Event], int, bool], None] | None = None,
        resume: tuple[int, int] | None = None,
    ) -> None:
        super().__init__([], think_at=think_at, keepalive=b"", error=b"")
        self._pending, self._newline = events, b"\r\n" if scenario.crlf else b"\n"
        self._error_event = _error_event(scenario, error)
        self._on_end, self._resume = on_end, resume
        self._next = 0
        self._last = resume[0] if resume is not None else -1
        self._log: list[_Event] = []
        self._think_seq = 0
        self._errored = False

    def __len__(self) -> int:
        return len(self._pending)

    def _encode(self, event: _Event, seq: int) -> bytes:
        kind: str = event["type"]
        payload = {"type": kind, "sequence_number": seq} | event
        data = json.dumps(payload).encode()
        newline = self._newline
        return b"event: " + kind.encode() + newline + b"data: " + data + newline + newline

    def _number(self, index: int) -> _Event:
        event = deepcopy(self._pending[index])
        if self._resume is None:
            if index == self.think_at:
                self._think_seq = self._next
            event["sequence_number"], self._next = self._next, self._next + 1
        self._last = event["sequence_number"]
        return event

    def event(self, index: int) -> bytes:
        event = self._number(index)
        self._log.append(event)
        return self._encode(event, event["sequence_number"])

    def keepalive(self) -> bytes:
        seq = self._last
        if self._resume is None:
            seq, self._next = self._next, self._next + 1
        return self._encode({"type": "keepalive"}, seq)

    def error(self) -> bytes:
        self._errored = True
        seq = self._resume[1] if self._resume is not None else self._next
        self._next += 1
        event = {**self._error_event, "sequence_number": seq}
        self._log.append(event)
        return self._encode(event, seq)

    def ended(self) -> None:
        if self._on_end is None:
            return
        if not self._errored:
            for index in range(len(self._log), len(self._pending)):
                self._log.append(self._number(index))
        self._on_end(self._log, self._think_seq, self._errored)
