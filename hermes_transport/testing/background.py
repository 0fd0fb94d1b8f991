"""Background mode of the Responses wire: the routes on one stored response and their rules.

Owns the routes (``GET /v1/responses/{id}`` retrieves, with ``?stream=true`` resumes,
``POST /v1/responses/{id}/cancel`` cancels), what a resume or a cancel may do, and the
replay of stored events that a resume streams. Like the real API: only a response created
with ``"background": true`` (streamed or not) can be resumed or cancelled; any stored
response can be retrieved. The answers, in OpenAI's error JSON:

* resume of an unknown or non-background response: 404 ``Response with id '<id>' not
  found.``;
* resume of a cancelled one: 400 ``Response '<id>' was cancelled.`` (a choice: the real
  API's answer is not documented);
* resume more than ``resume_window`` seconds after creation: 400 ``Response '<id>' can no
  longer be streamed because it is more than 5 minutes old.`` (the window's length in the
  message);
* cancel of an unknown response: 404; of a non-background one: 400 ``Only background
  responses can be cancelled.``; of a background one: 200 with the response, its status
  now ``cancelled``, kept so. The server finishes every response at once, so this cancel
  always lands, where the real API returns a finished response unchanged.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlsplit

from .chat import chat_error
from .responses import RESPONSES_PATH, ResponsesStream, failed_response, wire_error
from .scenarios import Scenario
from .store import ResponseStore, StoredResponse

__all__ = [
    "cancel_answer",
    "is_resume",
    "not_found",
    "replay_stream",
    "responses_route",
    "resumable",
    "starting_after",
]


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


def not_found(response_id: str) -> tuple[int, dict[str, object]]:
    """The 404 status and JSON for a response id the server does not know."""
    return 404, chat_error(404, f"Response with id '{response_id}' not found.")


def _age(seconds: float) -> str:
    """The window's length as the message says it: ``5 minutes``, ``0.2 seconds``."""
    value, unit = (
        (seconds / 60, "minute")
        if seconds >= 60 and seconds % 60 == 0
        else (
            seconds,
            "second",
        )
    )
    return f"{value:g} {unit}{'' if value == 1 else 's'}"


def resumable(
    store: ResponseStore, response_id: str, window: float, now: float
) -> StoredResponse | tuple[int, dict[str, object]]:
    """The stored response a resume at ``now`` (monotonic) streams, or the error status and
    JSON that refuse it."""
    stored = store.get(response_id)
    if stored is None or not stored.background or stored.events is None:
        return not_found(response_id)
    if stored.response.get("status") == "cancelled":
        return 400, chat_error(400, f"Response '{response_id}' was cancelled.")
    if now - stored.created > window:
        message = f"Response '{response_id}' can no longer be streamed because it is more"
        return 400, chat_error(400, f"{message} than {_age(window)} old.")
    return stored


def cancel_answer(store: ResponseStore, response_id: str) -> tuple[int, object]:
    """The status and JSON that answer a cancel, after cancelling if it may."""
    stored = store.get(response_id)
    if stored is None:
        return not_found(response_id)
    if not stored.background:
        return 400, chat_error(400, "Only background responses can be cancelled.")
    response: dict[str, Any] | None = store.cancel(response_id)
    return (200, response) if response is not None else not_found(response_id)


def replay_stream(scenario: Scenario, stored: StoredResponse, after: int) -> ResponsesStream:
    """A resume: the stored events numbered above ``after``, under ``scenario``'s faults.

    They are sent as they were kept; keepalives repeat the number before them and an
    error of ``scenario`` takes the number after the last stored one.
    """
    kept = stored.events or []
    events = [event for event in kept if event["sequence_number"] > after]
    think_at = next(
        (i for i, event in enumerate(events) if event["sequence_number"] >= stored.think_seq),
        len(events),
    )
    end = max((event["sequence_number"] for event in kept), default=-1) + 1
    error = wire_error(scenario, failed_response(scenario, stored.response))
    return ResponsesStream(events, scenario, think_at=think_at, error=error, fixed=(after, end))
