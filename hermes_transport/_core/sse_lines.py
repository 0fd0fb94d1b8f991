"""The event parser under ``SSEScanner`` (``sse``): lines in, events judged. Pure.

It counts the *progress* events completed in the parts of a text/event-stream
body that the scanner gives it, in arbitrary pieces. A progress event is
a complete event (ended by a blank line) with at least one ``data`` field
whose type (its last ``event`` field, else ``message``; compared as text,
invalid UTF-8 as U+FFFD) is not a configured heartbeat type. Comments, blank
lines, other fields and an unfinished event are not progress, nor events.

Line rules are the WHATWG specification's: a line ends at CRLF, LF or CR (a
CRLF split across chunks is one); a leading UTF-8 BOM is ignored; a field name
is all up to the first colon; one space after it is not part of the value.

On the wires whose events mean more than "progress" (``wires``: Chat
Completions before its first output, Responses and Anthropic Messages
throughout), each completed event the scanner reads is sorted by
``wires.classify``: only output and end events are progress; an error event
before any output is kept as ``error``. A resumable Responses stream is also
tracked (``track``: its id, its events' numbers, whether it is over).

Memory is bounded whatever the server sends: of the line in progress only its
first ``_PREFIX`` bytes are kept (all a generic decision needs: a field name,
a ``[DONE]``, a heartbeat type), and on a classifying wire at most
``CAPTURE_LIMIT`` bytes of an event's data (what ``classify`` reads).

``sse`` owns the reads: which parts of a read are parsed here, and the end rule.
"""

from __future__ import annotations

from collections.abc import Collection

from .checkpoints import created_at
from .mcp import message_method, server_request_id
from .wires import ErrorEvent, Wire, classify, leading_type, response_id, sequence_number

__all__ = ["CAPTURE_LIMIT", "MAX_EVENT_TYPE", "EventParser"]

_BOM = b"\xef\xbb\xbf"
_DONE = b"[DONE]"
# Longest heartbeat event type name that can be recognised, plus "event: ".
MAX_EVENT_TYPE = 56
_PREFIX = MAX_EVENT_TYPE + 8
#: Bytes of an event's data kept for ``classify`` on a classifying wire (see ``wires``).
CAPTURE_LIMIT = 64 * 1024
# The type of an event without an ``event`` field (or with an empty one).
_MESSAGE = b"message"
#: Bytes of an event id kept for a resume's ``Last-Event-ID``: a longer id is none.
ID_LIMIT = 1024


class EventParser:
    """The state of one body's event parsing, and the line parser that moves it.

    ``SSEScanner`` is the public face (see it for the counts and flags); its read-level
    state (``_quick``, ``_idle``, ``fed``) is kept here too, in one set of slots.
    """

    __slots__ = (
        "_at_start",
        "_cap",
        "_capture",
        "_cr_pending",
        "_data",
        "_data_size",
        "_end",
        "_event_done",
        "_event_has_data",
        "_event_type",
        "_heartbeats",
        "_idle",
        "_line",
        "_line_size",
        "_plain",
        "_quick",
        "_skims",
        "_track",
        "_wire",
        "asks",
        "comment_bytes",
        "counted",
        "created_at",
        "done",
        "error",
        "events",
        "fed",
        "finished",
        "heartbeats",
        "last_id",
        "logs",
        "others",
        "progress_notes",
        "response_id",
        "sequence",
    )

    def __init__(
        self,
        heartbeat_events: Collection[str] = (),
        wire: Wire = "generic",
        *,
        track: bool = False,
    ) -> None:
        for name in heartbeat_events:
            if not name or len(name.encode()) > MAX_EVENT_TYPE:
                must = f"event type names must be 1 to {MAX_EVENT_TYPE} bytes, got {name!r}"
                raise ValueError(f"heartbeat_events: {must}")
        self._heartbeats = frozenset(name.encode() for name in heartbeat_events)
        self._wire = wire
        # Events are classified (their data kept) on every wire but generic; Chat
        # Completions only until its first output, then it takes the fast path.
        self._capture = wire != "generic"
        self._cap = CAPTURE_LIMIT if self._capture else _PREFIX
        # A long run of events may go unread (see above); never before the first output.
        self._skims = wire == "generic"
        self.events = 0
        self.heartbeats = 0  # not progress, these: for the statistics
        self.others = 0  # other events with data: preamble, errors
        self.comment_bytes = 0
        self.counted = True  # ``events``, ``heartbeats`` and ``comment_bytes`` are exact
        self.done = False  # see the end rule above
        self._end = False  # the last complete event read was an end (see ``feed``)
        self.error: ErrorEvent | None = None
        self._track = track and wire in ("responses", "mcp")
        self.response_id: str | None = None
        self.sequence = -1
        self.finished = False
        self.created_at: float | None = None  # tracked Responses: the response's, if said
        #: Tracked: the last event id the stream gave (``None``: none, or one too long).
        self.last_id: bytes | None = None
        #: Tracked MCP: the ids of the requests of the server's that came, in order.
        self.asks: list[str | int | None] | None = [] if self._track and wire == "mcp" else None
        self.progress_notes = self.logs = 0  # tracked MCP: its notifications of each kind
        self._line = b""  # its unterminated line's first _cap bytes: all a decision needs
        self._line_size = 0  # the whole unterminated line's, beyond what _line keeps
        self._cr_pending = False  # the last chunk ended in CR: a leading LF is its partner
        self._at_start = True  # nothing seen yet: a BOM may still be stripped
        self._event_has_data = False
        self._event_done = False
        self._event_type = b""
        self._data: list[bytes] = []  # the event's data lines, while capturing
        self._data_size = 0
        # Events without a type are progress, and nothing is classified.
        self._plain = _MESSAGE not in self._heartbeats and not self._capture
        # The scanner's (``sse``): how the next read may be judged, and what was fed.
        self._quick = self._idle = False  # not before the BOM is settled
        self.fed = 0  # bytes given to ``feed``

    def _feed_lines(self, chunk: bytes) -> int:
        before = self.events
        lines = chunk.splitlines(keepends=True)
        last = lines[-1]
        complete = lines if last[-1:] in (b"\n", b"\r") else lines[:-1]
        for line in complete:
            size = len(line)
            if self._line_size:
                size += self._line_size
                line = self._line + line
                self._line = b""
                self._line_size = 0
            self._line_ended(line[: self._cap].rstrip(b"\r\n"), size)
        if last[-1:] == b"\r":
            self._cr_pending = True
        elif complete is not lines:
            cap = self._cap
            self._line = (self._line + last[:cap])[:cap]
            self._line_size += len(last)
        return self.events - before

    def _strip_bom(self, chunk: bytes) -> bytes:
        # The BOM may itself arrive split across chunks: hold a partial one.
        pending = self._line + chunk
        if len(pending) < len(_BOM) and _BOM.startswith(pending):
            self._line = pending
            return b""
        self._at_start = False
        self._line = b""
        return pending[len(_BOM) :] if pending.startswith(_BOM) else pending

    def _line_ended(self, line: bytes, size: int) -> None:
        # `line` holds at most _cap meaningful bytes of a complete line of `size` bytes.
        if not line:
            if self._event_has_data:
                self._event_ended()
            self._event_has_data = False  # and _event_done is set by the next data line
            self._event_type = b""
            if self._data:
                self._data = []
                self._data_size = 0
            return
        if line[:4] == b"data" and (len(line) == 4 or line[4:5] == b":"):
            value = line[5:]
            if value[:1] == b" ":
                value = value[1:]
            if not self._event_has_data:
                self._event_done = value.startswith(_DONE)
            self._event_has_data = True
            if self._capture and self._data_size < CAPTURE_LIMIT:
                self._data.append(value[: CAPTURE_LIMIT - self._data_size])
                self._data_size += len(value) + 1  # and the LF that joins data lines
        elif line[:5] == b"event" and (len(line) == 5 or line[5:6] == b":"):
            value = line[6:]
            if value[:1] == b" ":
                value = value[1:]
            if not value.isascii():
                # The type is text: compare it decoded, invalid bytes as U+FFFD.
                value = value.decode("utf-8", "replace").encode()
            # Kept within MAX_EVENT_TYPE + 1 bytes: too long for any name.
            self._event_type = value[: MAX_EVENT_TYPE + 1]
        elif line[:1] == b":":
            self.comment_bytes += size
        elif self._track and line[:2] == b"id" and (len(line) == 2 or line[2:3] == b":"):
            value = line[4:] if line[3:4] == b" " else line[3:]
            if b"\0" not in value:  # such an id is ignored, as the WHATWG rules say
                self.last_id = value if len(value) <= ID_LIMIT else None

    def _event_ended(self) -> None:
        """An event with data completed: count it if it is progress."""
        event_type = self._event_type
        if not self._capture:
            if (event_type or _MESSAGE) not in self._heartbeats:
                self.events += 1
                self._end = self._event_done
            else:
                self.heartbeats += 1
                self._end = False
            return
        data = b"\n".join(self._data)
        if not event_type and self._wire != "chat_completions":
            event_type = leading_type(data) or b""
        kind = classify(
            self._wire, event_type or _MESSAGE, data, self._heartbeats, done=self._event_done
        )
        self._end = kind == "end"
        if self._track:
            self._tracked(data, kind)
        if isinstance(kind, ErrorEvent):
            if self.events == 0:
                if self.error is None:
                    self.error = kind
                self.others += 1
                return
        elif kind == "heartbeat":
            self.heartbeats += 1
            return
        elif kind not in ("output", "end"):
            self.others += 1
            return  # preamble
        self.events += 1
        if self.events == 1:
            # Past the first output, runs are read only where a decision depends on them
            # (a resume needs a tracked run's last number); Chat: nothing more classified.
            self._skims = not self._track
            if self._wire == "chat_completions":
                self._capture = False
                self._cap = _PREFIX
                self._plain = _MESSAGE not in self._heartbeats

    def _tracked(self, data: bytes, kind: object) -> None:
        """Note a completed Responses event's number, its response's id, and an end; on MCP,
        a request of the server's (its id) and the response."""
        if self.asks is not None:
            if kind == "preamble":  # only a request of the server's, on this wire
                self.asks.append(server_request_id(data))
            elif kind == "output":
                method = message_method(data)
                self.progress_notes += method == "notifications/progress"
                self.logs += method == "notifications/message"
            if kind == "end":  # the response: nothing more comes, whatever follows it (a
                self.finished = self.done = True  # server's replay may stay open)
            return
        number = sequence_number(data)
        if number is not None:
            self.sequence = number
        if self.response_id is None and kind == "preamble":  # lifecycle events name it
            self.response_id = response_id(data)
            self.created_at = created_at(data)
        if kind == "end" or isinstance(kind, ErrorEvent):
            self.finished = True
