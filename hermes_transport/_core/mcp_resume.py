"""One MCP request's stream, resumed and cancelled on its behalf: ``McpResumable``.

Owns the two requests the transport sends for an MCP request that streams: the ``GET``
that resumes its stream after the last event id the client has (``Last-Event-ID``, on the
same session: every header of the request kept but its body's, ``Accept:
text/event-stream``), and the ``notifications/cancelled`` that tells the server the request
is given up (its id, once; never for ``initialize``, which the protocol forbids). The body
watch (``resuming``) decides when; the shells send. Pure.

Limits: a stream is resumed only after an event that carried an ``id`` (an id longer than
``sse_lines.ID_LIMIT`` is none); the server's GET channel is not resumed here (the mcp
SDK reconnects it itself).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, ClassVar

import httpx

from .mcp import McpCall
from .resume import CANCEL_TIMEOUT, Resumable

if TYPE_CHECKING:
    from .guard import Guard
    from .progress import ProgressMeter

__all__ = ["AnyResumable", "McpResumable", "unanswered_cancel"]

# Headers not carried over: the body's (the resume has none, the cancel its own), and
# those the resume and the cancel set.
_REPLACED = frozenset(
    {b"content-length", b"content-type", b"transfer-encoding", b"accept", b"last-event-id"}
)


class McpResumable:
    """How to resume or cancel the stream of one MCP request (``call``) sent as ``request``."""

    __slots__ = ("_cancelled", "call", "http", "request")

    #: Never known up front: the stream is the request's own (see ``resume.Resumable``).
    response_id: ClassVar[None] = None

    def __init__(self, request: httpx.Request, call: McpCall, http: Any) -> None:
        self.request = request
        self.call = call
        self.http = http  # the flavor's httpx-like module, whose Request is built
        self._cancelled = False

    def resume_from(self, meter: ProgressMeter) -> tuple[httpx.Request, str] | str:
        """The ``GET`` that resumes the stream after the last event id ``meter`` saw, and
        where it resumes (for the log); or why it cannot be, as an error's note says it."""
        last = meter.scanner.last_id
        if not last:
            return "; not resumed: the server gave its events no ids"
        headers = self._headers(b"text/event-stream")
        headers.append((b"last-event-id", last))
        request: httpx.Request = self.http.Request(
            "GET", self.request.url, headers=headers, extensions=dict(self.request.extensions)
        )
        return request, f"request {self.call.id!r} after event {last.decode(errors='replace')!r}"

    def cancels_given_up(self, handed: bool) -> bool:
        """Whether a stall given up cancels the request: when it has effects (a tool call),
        handed to the caller or not: the client gets an error for it and will not cancel
        it; a request that changes nothing may be sent again with its id, and is not."""
        return not self.call.resendable

    def cancel_from(self, meter: ProgressMeter | None, reason: str) -> httpx.Request | None:
        """The ``notifications/cancelled`` for the request, with ``reason``: once, and never
        for ``initialize``; bounded by ``CANCEL_TIMEOUT`` however the client's timeouts are
        set."""
        if self._cancelled or self.call.method in (None, "initialize"):
            return None
        self._cancelled = True
        params = {"requestId": self.call.id, "reason": reason}
        body = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": params}
        headers = self._headers(b"application/json, text/event-stream")
        headers.append((b"content-type", b"application/json"))
        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), CANCEL_TIMEOUT)
        request: httpx.Request = self.http.Request(
            "POST",
            self.request.url,
            headers=headers,
            content=json.dumps(body).encode(),
            extensions={**self.request.extensions, "timeout": timeouts},
        )
        return request

    def _headers(self, accept: bytes) -> list[tuple[bytes, bytes]]:
        """The request's headers (its session, protocol version, credentials), but for
        those of its body, with ``accept``."""
        raw = self.request.headers.raw
        return [(k, v) for k, v in raw if k.lower() not in _REPLACED] + [(b"accept", accept)]


#: A stream that can be resumed: a background Responses one, or an MCP request's.
AnyResumable = Resumable | McpResumable


def unanswered_cancel(
    resumable: object, guard: Guard | None, cancel_on_interrupt: bool
) -> httpx.Request | None:
    """The ``notifications/cancelled`` for an MCP request (``resumable``) given up before
    its response came (``guard``: its last attempt's), once it may have reached the server:
    after an interrupt (unless not ``cancel_on_interrupt``), or a stall of a request with
    effects (the client has an error for it and will not cancel it). ``None``: nothing to
    send (a stream given up later sends its own; one at most either way)."""
    if not isinstance(resumable, McpResumable) or guard is None:
        return None
    if guard.fired_stage not in ("sending", "headers", "first_event"):
        return None  # not sent yet
    if guard.fired == "interrupted":
        wanted = cancel_on_interrupt
    else:
        wanted = guard.fired == "stalled" and resumable.cancels_given_up(False)
    reason = guard.reason or f"the stream {guard.fired}"
    return resumable.cancel_from(None, reason) if wanted else None
