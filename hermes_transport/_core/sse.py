"""Incremental server-sent-events progress scanner.

Pure: bytes in, counts out. No I/O, no clock, no threads.

It answers two questions about a text/event-stream body fed to it in arbitrary
chunks: how many *progress* events have completed, and has a ``[DONE]`` event
been seen. A progress event is a complete event (ended by a blank line) that
carried at least one ``data`` field and whose event type is not one of the
configured heartbeat types. The event type is, as the specification defines it,
the value of the event's last ``event`` field, or ``message`` when it has none
(or an empty one), compared as text: bytes that are not UTF-8 read as U+FFFD.
Comment lines, blank lines, other fields and the bytes of an unfinished event
are not progress.

Line rules follow the WHATWG SSE specification: a line ends at CRLF, LF or
CR; a CRLF split across two chunks is one line ending; a UTF-8 BOM at the very
start is ignored; a field name is everything up to the first colon (the whole
line if there is none); one space after the colon is not part of the value.

On the wires whose events mean more than "progress" (``wires``: Chat
Completions before its first output, Responses and Anthropic Messages
throughout), each completed event is sorted by ``wires.classify`` instead:
only output and end events are progress; an error event before any output is
kept as ``error``. That costs a Python step per event; a plain Chat
Completions or generic stream keeps the per-chunk fast path below. A
resumable Responses stream is also tracked (``track``): the response id, the
``sequence_number`` of the last completed event, and whether an end or error
event has completed.

Memory is bounded whatever the server sends: for the line in progress only its
first ``_PREFIX`` bytes are kept, which is all a generic decision needs (the
field name ``data``/``event``, a ``[DONE]`` value, a heartbeat type name), and
on a classifying wire at most ``CAPTURE_LIMIT`` bytes of an event's data (what
``classify`` reads). A 100 MB line costs that much state and no more.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from .wires import ErrorEvent, Wire, classify, leading_type

__all__ = ["CAPTURE_LIMIT", "MAX_EVENT_TYPE", "SSEScanner"]

_BOM = b"\xef\xbb\xbf"
_DONE = b"[DONE]"
# Longest heartbeat event type name that can be recognised, plus "event: ".
MAX_EVENT_TYPE = 56
_PREFIX = MAX_EVENT_TYPE + 8
#: Bytes of one event's data kept for ``classify`` on a classifying wire; an
#: event whose data is longer is judged on what was kept (see ``wires``).
CAPTURE_LIMIT = 64 * 1024
# The type of an event without an ``event`` field (or with an empty one).
_MESSAGE = b"message"
# A run of events that are each exactly one data line (not [DONE]) and a blank
# line, LF endings: the bulk of any LLM stream, counted without a Python loop.
_PLAIN_RUN = re.compile(rb"(?:data:(?! ?\[DONE\])[^\n]*\n\n)+")
# Used instead when such events are of a heartbeat type (``message``), or must
# each be classified: matches nothing.
_NO_RUN = re.compile(rb"(?!)")
# A Responses event's number, and the id of the response a lifecycle event
# carries: read from the event's data (the first ``CAPTURE_LIMIT`` bytes),
# where the API puts both near the start.
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d{1,18})')
_RESPONSE_ID = re.compile(rb'"response"\s*:\s*\{[^{}]*?"id"\s*:\s*"([^"\\]{1,256})"')


class SSEScanner:
    """Count completed progress events in an SSE byte stream fed in chunks.

    ``feed(chunk)`` returns how many progress events the chunk completed.
    ``events`` is the running total; ``done`` turns true once an end event
    has completed (a generic or Chat Completions event whose data starts
    with ``[DONE]``, the openai SDK's own test; Responses'
    ``response.completed``; Anthropic's ``message_stop``; an event of a
    heartbeat type never sets it). ``heartbeat_events`` names event types
    (the ``event:`` field, or on the Responses and Messages wires the
    data's leading ``"type"``) that are keepalives rather than progress, such
    as Anthropic's ``ping``; naming ``message`` makes every event without an
    ``event`` field a keepalive too. ``wire`` says what the events mean
    (``wires.classify``); ``error`` is the first error event that completed
    before any progress, if any. With ``track`` (the Responses wire),
    ``response_id`` is the id the first lifecycle event named, ``sequence`` the
    ``sequence_number`` of the last completed event that had one (heartbeats
    included; -1 before any), and ``finished`` turns true once an end or error
    event has completed: the server ended the response.
    """

    __slots__ = (
        "_at_start",
        "_cap",
        "_capture",
        "_cr_pending",
        "_data",
        "_data_size",
        "_event_done",
        "_event_has_data",
        "_event_type",
        "_heartbeats",
        "_line",
        "_line_size",
        "_plain_run",
        "_track",
        "_wire",
        "comment_bytes",
        "done",
        "error",
        "events",
        "finished",
        "heartbeats",
        "others",
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
                raise ValueError(
                    f"heartbeat_events: event type names must be 1 to {MAX_EVENT_TYPE} bytes,"
                    f" got {name!r}"
                )
        self._heartbeats = frozenset(name.encode() for name in heartbeat_events)
        self._wire = wire
        # Events are classified, and their data kept for it, on every wire but
        # generic; Chat Completions only until its first output (only an error
        # before it changes anything), then it takes the fast path.
        self._capture = wire != "generic"
        self._cap = CAPTURE_LIMIT if self._capture else _PREFIX
        plain = _MESSAGE not in self._heartbeats and wire == "generic"
        self._plain_run = _PLAIN_RUN if plain else _NO_RUN
        self.events = 0
        # Not progress, counted for the statistics: keepalive events, other
        # completed events with data (preamble, errors), and comment lines' bytes.
        self.heartbeats = 0
        self.others = 0
        self.comment_bytes = 0
        self.done = False
        self.error: ErrorEvent | None = None
        self._track = track and wire == "responses"
        self.response_id: str | None = None
        self.sequence = -1
        self.finished = False
        # Bytes of the current, unterminated line: at most _cap, since the
        # rest never changes a decision.
        self._line = b""
        self._line_size = 0  # the whole unterminated line's, beyond what _line keeps
        self._cr_pending = False  # the last chunk ended in CR: a leading LF is its partner
        self._at_start = True  # nothing seen yet: a BOM may still be stripped
        self._event_has_data = False
        self._event_done = False
        self._event_type = b""
        self._data: list[bytes] = []  # the event's data lines, while capturing
        self._data_size = 0

    def feed(self, chunk: bytes) -> int:
        """Scan ``chunk``; return the number of progress events it completed."""
        if not chunk:
            return 0
        if self._at_start:
            chunk = self._strip_bom(chunk)
            if not chunk:
                return 0
        if self._cr_pending:
            self._cr_pending = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
                if not chunk:
                    return 0
        if b"\r" in chunk:
            return self._feed_lines(chunk)
        # LF only (the usual case): scan line by line only up to the first event
        # boundary, skip the run of plain data events after it in C, then go on.
        if self._line or self._event_has_data or self._event_type:
            if not self._line and chunk[:1] == b"\n":
                cut = 1  # a blank line: it ends the pending event
            else:
                boundary = chunk.find(b"\n\n")
                cut = len(chunk) if boundary < 0 else boundary + 2
        else:
            cut = 0
        events = self._feed_lines(chunk[:cut]) if cut else 0
        if cut < len(chunk):
            run = self._plain_run.match(chunk, cut)
            if run is not None:
                # Each plain event is one data line and a blank line: exactly two
                # LFs. Counting one byte is three times faster than counting b"\n\n".
                plain = chunk.count(b"\n", cut, run.end()) // 2
                self.events += plain
                events += plain
                cut = run.end()
            if cut < len(chunk):
                events += self._feed_lines(chunk[cut:])
        return events

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
            self._event_has_data = False
            self._event_done = False
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

    def _event_ended(self) -> None:
        """An event with data completed: count it if it is progress."""
        event_type = self._event_type
        if not self._capture:
            if (event_type or _MESSAGE) not in self._heartbeats:
                self.events += 1
                if self._event_done:
                    self.done = True
            else:
                self.heartbeats += 1
            return
        data = b"\n".join(self._data)
        if not event_type and self._wire != "chat_completions":
            event_type = leading_type(data) or b""
        kind = classify(
            self._wire, event_type or _MESSAGE, data, self._heartbeats, done=self._event_done
        )
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
        if kind == "end":
            self.done = True
        if self._wire == "chat_completions" and self.events == 1:
            # Past the first output nothing on this wire is classified: the fast path.
            self._capture = False
            self._cap = _PREFIX
            self._plain_run = _PLAIN_RUN if _MESSAGE not in self._heartbeats else _NO_RUN

    def _tracked(self, data: bytes, kind: object) -> None:
        """Note a completed Responses event's number, its response's id, and an end."""
        number = _SEQUENCE.search(data)
        if number is not None:
            self.sequence = int(number.group(1))
        if self.response_id is None and kind == "preamble":  # lifecycle events name it
            found = _RESPONSE_ID.search(data)
            if found is not None:
                self.response_id = found.group(1).decode("utf-8", "replace")
        if kind == "end" or isinstance(kind, ErrorEvent):
            self.finished = True
