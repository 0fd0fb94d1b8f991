"""What a request is and how the fault server answers it.

Owns :class:`Scenario` (the recipe for one answer), :class:`RecordedRequest` (what
arrived) and the public constants they speak of: the Chat Completions path and the
tool call (with the pieces every wire streams its arguments in). It imports no wire
module; the wires import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CHAT_COMPLETIONS_PATH",
    "SENT_LIMIT",
    "SENT_WRITES_LIMIT",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_NAME",
    "RecordedRequest",
    "Scenario",
    "SentResponse",
    "tool_call_pieces",
]

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
#: Function name of the tool call sent when ``Scenario.tool_call`` is set.
TOOL_CALL_NAME = "get_weather"
#: JSON arguments of that tool call; streams split them into 8-character pieces.
TOOL_CALL_ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'


def tool_call_pieces() -> list[str]:
    """:data:`TOOL_CALL_ARGUMENTS` in the 8-character pieces that streams send."""
    return [TOOL_CALL_ARGUMENTS[i : i + 8] for i in range(0, len(TOOL_CALL_ARGUMENTS), 8)]


#: How many responses :attr:`FaultServer.sent <hermes_transport.testing.FaultServer.sent>`
#: keeps: the latest ones.
SENT_LIMIT = 1000
#: How many writes a :class:`SentResponse` keeps: the first ones (all are counted).
SENT_WRITES_LIMIT = 10_000

_ERROR_MESSAGE = "The server had an error while processing your request."
_NON_NEGATIVE: tuple[str, ...] = ("hold", "byte_delay", "event_interval", "json_delay")
_NON_NEGATIVE += ("stall_attempts", "stall_after_events", "truncate_after_events")
_NON_NEGATIVE += ("linger_after_done", "write_size", "think", "error_after_events")
_NON_NEGATIVE += ("drop_after_events", "end_after_events", "keepalive_numbers", "retry_after")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    ``headers`` has lower-cased names; ``json`` is the parsed body (None if empty or not
    JSON); ``stream`` is the body's ``"stream"`` if it is a bool; ``time`` is
    :func:`time.monotonic` once the request head was read; ``attempt`` is the 0-based index,
    since the server started, among the requests a :class:`Scenario` answers: chat
    completions, messages, Responses creations (``POST /v1/responses``), Responses
    stream resumes (``GET /v1/responses/{id}?stream=true``) and Gemini ``POST``s to
    ``...:generateContent`` or ``...:streamGenerateContent`` (their model is in the path:
    :func:`gemini_model`; ``stream`` is None there) and MCP ``tools/call`` requests of a
    known session (``stream``: whether answered as SSE; None for MCP's other requests); -1 for
    any other request.
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: object | None
    stream: bool | None
    time: float
    attempt: int


@dataclass(frozen=True)
class SentResponse:
    """What the server sent in answer to one request, as of when it was read.

    Times are :func:`time.monotonic`, each taken just before the write it times (so no
    client can have read those bytes earlier). ``status`` and ``headers_at``: the status
    line and headers (None: none sent yet, e.g. a stall before the headers); ``writes``:
    each write of body bytes with its time, in order, the bytes as they went on the wire
    (compressed with ``gzip``) without the chunked framing, the first
    :data:`SENT_WRITES_LIMIT` only; ``body_bytes``: all the body bytes written, kept in
    ``writes`` or not; ``ended_at``: when the server was done with the request, however it
    ended (None while it is still answering it).
    """

    request: RecordedRequest
    status: int | None = None
    headers_at: float | None = None
    writes: tuple[tuple[float, bytes], ...] = ()
    body_bytes: int = 0
    ended_at: float | None = None


@dataclass(frozen=True)
class Scenario:
    """How the server answers a request of any wire; the classmethods cover common cases.

    Content: one output event per ``content`` piece; ``tool_call`` then adds a
    :data:`TOOL_CALL_NAME` call with its arguments split across events (Gemini: whole, in
    one event); ``thoughts`` (Gemini only) sends one thought-summary part per piece before
    the content; ``finish_reason`` (Chat Completions, Messages and Gemini only) defaults
    to ``"tool_calls"`` or ``"stop"``; ``usage`` adds a usage object. A ``status`` other
    than 200 answers with the wire's error JSON and ``message``, and a ``Retry-After:
    retry_after`` header if set.

    Faults, at most one: ``stall_before_headers`` sends nothing at all;
    ``stall_after_events`` sends that many events, then nothing, or only the wire's
    keepalive every ``comment_interval`` seconds (Chat and Gemini: ``: keepalive``
    comments, Messages: ``event: ping``, Responses: numbered ``keepalive`` events);
    ``truncate_after_events`` sends that many events, then closes without the
    terminating chunk; ``error_event`` (the error's type or code, such as
    ``"overloaded_error"``; Gemini: a status such as ``"UNAVAILABLE"``, or a code) sends
    ``error_after_events`` events (at most all but the last), then the wire's in-stream
    error event in place of the rest, then ends the body cleanly, with status 200
    (Responses: an ``error`` event, or with ``error_as_response_failed`` a
    ``response.failed``; Gemini: Google's error object, coded as ``gemini.py`` says);
    ``drop_after_events`` sends that many events (with ``drop_mid_event``, the first half
    of the next one's bytes too), then, after 50 ms for those bytes to arrive, resets the
    connection (``SO_LINGER`` 0 and close: the client reads a connection reset mid-body,
    not a clean end);
    ``end_after_events`` sends that many events, then ends the body cleanly, as a proxy
    that cuts a long response short does. A stall ends,
    and the connection closes, after ``hold`` seconds. The first ``stall_attempts``
    requests that count as attempts (see :class:`RecordedRequest`; Responses resumes
    count) are answered by ``stall_scenario`` instead (default:
    :meth:`silent_before_headers`), so ``stall_first(1, stall=silent_after(3))`` stalls a
    background stream's creation and serves its resume healthy, and
    ``stall_first(2, stall=stall_first(1, then=fault, stall=Scenario()))`` faults only the
    second attempt.

    Thinking: ``think`` seconds of silence after the wire's preamble, before its first
    output event (Chat and Gemini: before the first data event; Messages: after
    ``message_start``, ``content_block_start`` and a ping; Responses: after ``response.created``,
    ``response.in_progress`` (and ``response.queued``), ``response.output_item.added``
    and ``response.content_part.added``), with the wire's keepalive every
    ``keepalive_interval`` seconds meanwhile if set. It combines with every fault that
    lets the stream reach that point. A background Responses stream's keepalives repeat
    the number of the event before them, unless ``keepalive_numbers`` leaves that many
    numbers free before the first output event (the kept events skip them): keepalives
    then take those, as the real API's consume numbers, until they are used up.

    Delivery: ``byte_by_byte`` writes each body byte as its own chunk, ``byte_delay`` apart;
    ``event_interval`` pauses between events; ``json_delay`` pauses before a
    non-streaming answer; ``gzip`` compresses (sync-flushed per event); ``crlf`` ends SSE
    lines with CRLF; ``linger_after_done`` pauses between the last event and the end of
    the body; ``write_size`` (bytes, 0 for one write per event) coalesces events into
    fewer, larger writes, so that a benchmark measures the client rather than this server.

    MCP only: ``mcp_json`` answers a ``tools/call`` as JSON, not SSE; ``mcp_event_ids``
    gives each of its SSE events an ``id:`` line (and its stream can be resumed);
    ``mcp_elicit`` opens it with an elicitation and waits for the client's answer.
    """

    content: tuple[str, ...] = ("hello", " world")
    finish_reason: str | None = None
    usage: bool = True
    tool_call: bool = False
    status: int = 200
    message: str = _ERROR_MESSAGE
    stall_before_headers: bool = False
    stall_after_events: int | None = None
    comment_interval: float | None = None
    truncate_after_events: int | None = None
    hold: float = 30.0
    stall_attempts: int = 0
    stall_scenario: Scenario | None = None
    byte_by_byte: bool = False
    byte_delay: float = 0.0
    event_interval: float = 0.0
    json_delay: float = 0.0
    gzip: bool = False
    crlf: bool = False
    linger_after_done: float = 0.0
    write_size: int = 0
    think: float = 0.0
    keepalive_interval: float | None = None
    error_event: str | None = None
    error_after_events: int = 0
    error_as_response_failed: bool = False
    drop_after_events: int | None = None
    drop_mid_event: bool = False
    end_after_events: int | None = None
    keepalive_numbers: int = 0
    retry_after: float | None = None
    thoughts: tuple[str, ...] = ()
    mcp_json: bool = False
    mcp_event_ids: bool = False
    mcp_elicit: bool = False

    def __post_init__(self) -> None:
        for name in ("content", "thoughts"):
            pieces: object = getattr(self, name)
            if isinstance(pieces, str | bytes) or not isinstance(pieces, Sequence):
                raise ValueError(f"Scenario.{name} must be a sequence of str, got {pieces!r}")
            if not all(isinstance(piece, str) for piece in pieces):
                raise ValueError(f"Scenario.{name} must hold only str, got {pieces!r}")
            object.__setattr__(self, name, tuple(pieces))  # accept lists, stay hashable
        if not (self.status == 200 or 400 <= self.status <= 599):
            raise ValueError(f"Scenario.status must be 200 or 400-599, got {self.status}")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"Scenario.{name} must be >= 0, got {value}")
        fault_fields = {
            "stall_before_headers": self.stall_before_headers,
            "stall_after_events": self.stall_after_events is not None,
            "truncate_after_events": self.truncate_after_events is not None,
            "error_event": self.error_event is not None,
            "drop_after_events": self.drop_after_events is not None,
            "end_after_events": self.end_after_events is not None,
        }
        faults = [name for name, on in fault_fields.items() if on]
        if len(faults) > 1:
            raise ValueError(f"Scenario.{faults[1]} cannot be combined with {faults[0]}")
        if self.comment_interval is not None and not self.comment_interval > 0:
            raise ValueError(f"Scenario.comment_interval must be > 0, got {self.comment_interval}")
        if self.comment_interval is not None and self.stall_after_events is None:
            raise ValueError("Scenario.comment_interval requires stall_after_events")
        self._check_think_and_error()
        if self.byte_delay and not self.byte_by_byte:
            raise ValueError("Scenario.byte_delay requires byte_by_byte=True")
        if self.write_size and (self.event_interval or self.byte_by_byte or self.gzip):
            raise ValueError(
                "Scenario.write_size cannot be combined with event_interval, byte_by_byte or gzip"
            )
        if not isinstance(self.stall_scenario, Scenario | None):
            raise ValueError("Scenario.stall_scenario must be a Scenario or None")
        for name in ("mcp_json", "mcp_event_ids", "mcp_elicit"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"Scenario.{name} must be a bool, got {getattr(self, name)!r}")

    def _check_think_and_error(self) -> None:
        interval = self.keepalive_interval
        if interval is not None and not interval > 0:
            raise ValueError(f"Scenario.keepalive_interval must be > 0, got {interval}")
        if interval is not None and not self.think:
            raise ValueError("Scenario.keepalive_interval requires think > 0")
        kind = self.error_event
        if kind is not None and not (isinstance(kind, str) and kind):
            raise ValueError(f"Scenario.error_event must be a non-empty str, got {kind!r}")
        if self.error_after_events and kind is None:
            raise ValueError("Scenario.error_after_events requires error_event")
        if self.error_as_response_failed and kind is None:
            raise ValueError("Scenario.error_as_response_failed requires error_event")
        if self.drop_mid_event and self.drop_after_events is None:
            raise ValueError("Scenario.drop_mid_event requires drop_after_events")

    @classmethod
    def healthy(
        cls, *, content: Sequence[str] = ("hello", " world"), gzip: bool = False
    ) -> Scenario:
        """A normal, complete response, streamed or as JSON."""
        return cls(content=tuple(content), gzip=gzip)

    @classmethod
    def silent_before_headers(cls, *, gzip: bool = False) -> Scenario:
        """Read the request, then send nothing at all, not even a status line."""
        return cls(stall_before_headers=True, gzip=gzip)

    @classmethod
    def silent_after(cls, events: int, *, gzip: bool = False) -> Scenario:
        """Send the headers and the first ``events`` events, then nothing."""
        return cls(stall_after_events=events, gzip=gzip)

    @classmethod
    def comments_after(
        cls, events: int, *, interval: float = 0.05, gzip: bool = False
    ) -> Scenario:
        """After ``events`` events, send only the wire's keepalive every ``interval``."""
        return cls(stall_after_events=events, comment_interval=interval, gzip=gzip)

    @classmethod
    def stall_first(
        cls, attempts: int, *, then: Scenario | None = None, stall: Scenario | None = None
    ) -> Scenario:
        """Answer the first ``attempts`` attempts like ``stall``, later ones like ``then``.

        ``stall`` defaults to :meth:`silent_before_headers`, ``then`` to :meth:`healthy`.
        """
        return dataclasses.replace(
            then if then is not None else cls(),
            stall_attempts=attempts,
            stall_scenario=stall if stall is not None else cls.silent_before_headers(),
        )

    @classmethod
    def truncated(cls, events: int = 1) -> Scenario:
        """Send ``events`` events, then close without the terminating chunk."""
        return cls(truncate_after_events=events)

    @classmethod
    def dropped_after(cls, events: int, *, mid_event: bool = False) -> Scenario:
        """Send ``events`` events (and half the next with ``mid_event``), then reset."""
        return cls(drop_after_events=events, drop_mid_event=mid_event)

    @classmethod
    def trickle(cls, *, delay: float = 0.0) -> Scenario:
        """A healthy response written one byte per chunk, ``delay`` seconds apart."""
        return cls(byte_by_byte=True, byte_delay=delay)

    @classmethod
    def error(cls, status: int = 500, *, message: str = _ERROR_MESSAGE) -> Scenario:
        """The wire's JSON error with this status, for streaming requests too."""
        return cls(status=status, message=message)

    @classmethod
    def thinking(
        cls,
        seconds: float,
        *,
        keepalive_interval: float | None = None,
        content: Sequence[str] = ("hello", " world"),
    ) -> Scenario:
        """A healthy stream silent for ``seconds`` before its first output event.

        With ``keepalive_interval``, the wire's keepalive is sent that often meanwhile.
        """
        return cls(think=seconds, keepalive_interval=keepalive_interval, content=tuple(content))

    @classmethod
    def error_in_stream(
        cls, kind: str = "server_error", *, after_events: int = 0, message: str = _ERROR_MESSAGE
    ) -> Scenario:
        """An HTTP 200 stream that fails with the wire's error event after ``after_events``."""
        return cls(error_event=kind, error_after_events=after_events, message=message)

    def events_played(self, total: int) -> int:
        """How many of a stream's ``total`` events come before this scenario's fault (an
        in-stream error stands in for at least the last one)."""
        if self.error_event is not None:
            return max(0, min(self.error_after_events, total - 1))  # as ``stream.error_cut``
        cuts = (self.stall_after_events, self.truncate_after_events, self.drop_after_events)
        return min([total, *(cut for cut in (*cuts, self.end_after_events) if cut is not None)])

    def for_attempt(self, attempt: int) -> Scenario:
        """The scenario that answers attempt number ``attempt`` (0-based)."""
        if 0 <= attempt < self.stall_attempts:
            stall = self.stall_scenario or Scenario.silent_before_headers()
            return stall.for_attempt(attempt)
        return self
