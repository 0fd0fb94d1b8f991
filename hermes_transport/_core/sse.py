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
throughout), each completed event the scanner reads is sorted by
``wires.classify``: only output and end events are progress; an error event
before any output is kept as ``error``. A resumable Responses stream is also
tracked (``track``): the response id, the ``sequence_number`` of the last
completed event, and whether an end or error event has completed.

Reading every event costs a Python step each. Until the first output every
event is read. After it, a chunk is read event by event only around its event
boundaries (a blank line ending in LF): up to its first boundary (which ends
the event pending from the last chunk), its last complete event, and what
follows. A run of complete events between those, longer than
``_SMALL_MIDDLE``, is read only if a decision depends on it: if the last
event is not progress (then the run may hold the chunk's progress), or if the
run contains the bytes of an end event (``wires.end_markers``: a ``[DONE]``,
an end type's name; a C search). Decisions stay exact; the counts (``events``,
``heartbeats``, ``comment_bytes``) then stop being exact, and ``counted``
turns false: never a wrong number, only a lower bound that says so. A chunk
without an LF boundary (CR or CRLF line endings) is read event by event.

Memory is bounded whatever the server sends: for the line in progress only its
first ``_PREFIX`` bytes are kept, which is all a generic decision needs (the
field name ``data``/``event``, a ``[DONE]`` value, a heartbeat type name), and
on a classifying wire at most ``CAPTURE_LIMIT`` bytes of an event's data (what
``classify`` reads). A 100 MB line costs that much state and no more.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Collection

from .wires import ErrorEvent, Wire, classify, end_markers, leading_type

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
# Complete events between a chunk's first and last boundary that together are
# no longer than this are read one by one, and counted; longer runs are read
# only when a decision depends on them (``counted`` then turns false).
_SMALL_MIDDLE = 2048
#: Whether a chunk holds a marker between two offsets.
_Finder = Callable[[bytes, int, int], bool]


def _finder(marker: bytes) -> _Finder:
    # Two C searches: on short needles the regex engine's literal scan is the
    # faster, on long ones bytes.find's skip table (measured on LLM streams).
    if len(marker) < 8:
        search = re.compile(re.escape(marker)).search
        return lambda chunk, start, end: search(chunk, start, end) is not None
    return lambda chunk, start, end: chunk.find(marker, start, end) >= 0


@functools.cache  # one tuple per wire for every stream
def _finders(wire: Wire, track: bool) -> tuple[_Finder, ...]:
    return tuple(_finder(marker) for marker in end_markers(wire, track))


# A Responses event's number, and the id of the response a lifecycle event
# carries: read from the event's data (the first ``CAPTURE_LIMIT`` bytes),
# where the API puts both near the start.
_SEQUENCE = re.compile(rb'"sequence_number"\s*:\s*(\d{1,18})')
_RESPONSE_ID = re.compile(rb'"response"\s*:\s*\{[^{}]*?"id"\s*:\s*"([^"\\]{1,256})"')


class SSEScanner:
    """Count completed progress events in an SSE byte stream fed in chunks.

    ``feed(chunk)`` returns how many progress events the chunk completed
    (while ``counted``; else at least one if it completed any), ``events``
    the running total (while ``counted``; else a lower bound); ``done``
    turns true once an end event has completed (a generic or Chat
    Completions event whose data starts with ``[DONE]``, the openai SDK's own test; Responses'
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
        "_ends",
        "_event_done",
        "_event_has_data",
        "_event_type",
        "_heartbeats",
        "_line",
        "_line_size",
        "_plain",
        "_track",
        "_wire",
        "comment_bytes",
        "counted",
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
        # What a run of events not read one by one is searched for: the bytes
        # one of which every event that ends the stream contains; none until
        # the first output (before it every event is read).
        generic = wire == "generic"
        self._ends: tuple[_Finder, ...] | None = _finders(wire, track) if generic else None
        self.events = 0
        # Not progress, counted for the statistics: keepalive events, other
        # completed events with data (preamble, errors), and comment lines' bytes.
        self.heartbeats = 0
        self.others = 0
        self.comment_bytes = 0
        # Whether ``events``, ``heartbeats`` and ``comment_bytes`` are exact: they
        # stop being so once a long run of events was not read one by one.
        self.counted = True
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
        # Events without a type are progress, and nothing is classified: a lone
        # data line is judged at once (see ``feed``).
        self._plain = _MESSAGE not in self._heartbeats and not self._capture

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
        ends = self._ends
        if ends is None:
            return self._feed_lines(chunk)
        if (
            chunk[:5] == b"data:"
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk[-1:] == b"\n"
            and self._plain
            and not (self._line_size or self._event_has_data or self._event_type)
            and b"\r" not in chunk
        ):
            # One whole event of one data line: how a stream read as it comes
            # mostly arrives. As the line parser would judge it, without it.
            self.events += 1
            if chunk[5:11] == _DONE or (chunk[6:12] == _DONE and chunk[5:6] == b" "):
                self.done = True
            return 1
        # The head: up to the first event boundary (a blank line), through the
        # line parser: it ends the event pending from the last chunk.
        if not self._line_size and chunk[:1] == b"\n":
            head = 1  # a blank line: the last chunk ended its line
        else:
            head = chunk.find(b"\n\n") + 2
            if head == 1:  # no LF boundary (there may be CR ones)
                return self._feed_lines(chunk)
        if head >= len(chunk):
            return self._feed_lines(chunk)
        events = self._feed_lines(chunk[:head])
        # The last complete event: from the boundary before it to the last one.
        last = chunk.rfind(b"\n\n", head)
        if last < 0:
            return events + self._feed_lines(chunk[head:])
        end = last
        if chunk[end - 1] == 10:  # a run of blank lines: the event ends before it
            end = head + len(chunk[head:last].rstrip(b"\n"))
        before = chunk.rfind(b"\n\n", head, end)
        start = head if before < 0 else before + 2
        if start - head <= _SMALL_MIDDLE:
            return events + self._feed_lines(chunk[head:])
        # Between the head and the last event: complete events (a boundary on
        # each side leaves no state over). Read only when a decision depends on
        # them: when the last event is not progress, or one may be an end.
        stop = last + 2
        ending = self._feed_lines(chunk[start:stop])
        if not ending or any(found(chunk, head, start) for found in ends):
            ending += self._feed_lines(chunk[head:start])
        else:
            self.counted = False
        if stop < len(chunk):
            ending += self._feed_lines(chunk[stop:])
        return events + ending

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
        if self.events == 1:
            # Past the first output, runs of events are read only where a decision
            # depends on them; on Chat Completions nothing more is classified.
            self._ends = _finders(self._wire, self._track)
            if self._wire == "chat_completions":
                self._capture = False
                self._cap = _PREFIX
                self._plain = _MESSAGE not in self._heartbeats

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
