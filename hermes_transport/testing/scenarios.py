"""What a request is and how the fault server answers it.

Owns :class:`Scenario` (the recipe for one answer), :class:`RecordedRequest` (what
arrived) and the public constants they speak of: the Chat Completions path and the
tool call. It imports no wire module; the wires import it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "CHAT_COMPLETIONS_PATH",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_NAME",
    "RecordedRequest",
    "Scenario",
]

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
#: Function name of the tool call sent when ``Scenario.tool_call`` is set.
TOOL_CALL_NAME = "get_weather"
#: JSON arguments of that tool call; streams split them into 8-character pieces.
TOOL_CALL_ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'
_ERROR_MESSAGE = "The server had an error while processing your request."
_NON_NEGATIVE: tuple[str, ...] = ("hold", "byte_delay", "event_interval", "json_delay")
_NON_NEGATIVE += ("stall_attempts", "stall_after_events", "truncate_after_events")
_NON_NEGATIVE += ("linger_after_done", "write_size")


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    ``headers`` has lower-cased names; ``json`` is the parsed body (None if empty or not
    JSON); ``stream`` is the body's ``"stream"`` if it is a bool; ``time`` is
    :func:`time.monotonic` once the request head was read; ``attempt`` is the 0-based index
    among chat-completion and messages requests since the server started (-1 for any
    other request).
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
class Scenario:
    """How the server answers a chat-completion request; the classmethods cover common cases.

    Content: one data event per ``content`` piece (the first carries ``role``); ``tool_call``
    then adds a :data:`TOOL_CALL_NAME` call with its arguments split across events;
    ``finish_reason`` defaults to ``"tool_calls"`` or ``"stop"``; ``usage`` adds a usage
    object. A ``status`` other than 200 answers with an OpenAI-style error and ``message``.

    Faults, at most one: ``stall_before_headers`` sends nothing at all;
    ``stall_after_events`` sends that many data events, then nothing, or only ``: keepalive``
    comments every ``comment_interval`` seconds; ``truncate_after_events`` sends that many
    data events, then closes without the terminating chunk. A stall ends, and the connection
    closes, after ``hold`` seconds. The first ``stall_attempts`` chat requests are answered by
    ``stall_scenario`` instead (default: :meth:`silent_before_headers`).

    Delivery: ``byte_by_byte`` writes each body byte as its own chunk, ``byte_delay`` apart;
    ``event_interval`` pauses between data events; ``json_delay`` pauses before a
    non-streaming answer; ``gzip`` compresses (sync-flushed per event); ``crlf`` ends SSE
    lines with CRLF; ``linger_after_done`` pauses between ``data: [DONE]`` and the end of
    the body; ``write_size`` (bytes, 0 for one write per event) coalesces events into
    fewer, larger writes, so that a benchmark measures the client rather than this server.
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

    def __post_init__(self) -> None:
        content: object = self.content
        if isinstance(content, str | bytes) or not isinstance(content, Sequence):
            raise ValueError(f"Scenario.content must be a sequence of str, got {content!r}")
        if not all(isinstance(piece, str) for piece in content):
            raise ValueError(f"Scenario.content must hold only str, got {content!r}")
        object.__setattr__(self, "content", tuple(content))  # accept lists, stay hashable
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
        }
        faults = [name for name, on in fault_fields.items() if on]
        if len(faults) > 1:
            raise ValueError(f"Scenario.{faults[1]} cannot be combined with {faults[0]}")
        if self.comment_interval is not None and not self.comment_interval > 0:
            raise ValueError(f"Scenario.comment_interval must be > 0, got {self.comment_interval}")
        if self.comment_interval is not None and self.stall_after_events is None:
            raise ValueError("Scenario.comment_interval requires stall_after_events")
        if self.byte_delay and not self.byte_by_byte:
            raise ValueError("Scenario.byte_delay requires byte_by_byte=True")
        if self.write_size and (self.event_interval or self.byte_by_byte or self.gzip):
            raise ValueError(
                "Scenario.write_size cannot be combined with event_interval, byte_by_byte or gzip"
            )
        if not isinstance(self.stall_scenario, Scenario | None):
            raise ValueError("Scenario.stall_scenario must be a Scenario or None")

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
        """Send the headers and the first ``events`` data events, then nothing."""
        return cls(stall_after_events=events, gzip=gzip)

    @classmethod
    def comments_after(
        cls, events: int, *, interval: float = 0.05, gzip: bool = False
    ) -> Scenario:
        """After ``events`` data events, send only ``: keepalive`` comments every ``interval``."""
        return cls(stall_after_events=events, comment_interval=interval, gzip=gzip)

    @classmethod
    def stall_first(
        cls, attempts: int, *, then: Scenario | None = None, stall: Scenario | None = None
    ) -> Scenario:
        """Answer the first ``attempts`` chat requests like ``stall``, later ones like ``then``.

        ``stall`` defaults to :meth:`silent_before_headers`, ``then`` to :meth:`healthy`.
        """
        return dataclasses.replace(
            then if then is not None else cls(),
            stall_attempts=attempts,
            stall_scenario=stall if stall is not None else cls.silent_before_headers(),
        )

    @classmethod
    def truncated(cls, events: int = 1) -> Scenario:
        """Send ``events`` data events, then close without the terminating chunk."""
        return cls(truncate_after_events=events)

    @classmethod
    def trickle(cls, *, delay: float = 0.0) -> Scenario:
        """A healthy response written one byte per chunk, ``delay`` seconds apart."""
        return cls(byte_by_byte=True, byte_delay=delay)

    @classmethod
    def error(cls, status: int = 500, *, message: str = _ERROR_MESSAGE) -> Scenario:
        """An OpenAI-style JSON error with this status, for streaming requests too."""
        return cls(status=status, message=message)

    def for_attempt(self, attempt: int) -> Scenario:
        """The scenario that answers chat request number ``attempt`` (0-based)."""
        if 0 <= attempt < self.stall_attempts:
            stall = self.stall_scenario or Scenario.silent_before_headers()
            return stall.for_attempt(attempt)
        return self
