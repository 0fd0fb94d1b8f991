"""Incremental server-sent-events progress scanner. Pure: no I/O, clock or threads.

It says how many *progress* events have completed in a text/event-stream body
fed in arbitrary chunks, and whether an end (``[DONE]``) has. A progress event
is a complete event (ended by a blank line) with at least one ``data`` field
whose type (its last ``event`` field, else ``message``; compared as text,
invalid UTF-8 as U+FFFD) is not a configured heartbeat type. Comments, blank
lines, other fields and an unfinished event are not progress.

Line rules are the WHATWG specification's: a line ends at CRLF, LF or CR (a
CRLF split across chunks is one); a leading UTF-8 BOM is ignored; a field name
is all up to the first colon; one space after it is not part of the value.

On the wires whose events mean more than "progress" (``wires``: Chat
Completions before its first output, Responses and Anthropic Messages
throughout), each completed event the scanner reads is sorted by
``wires.classify``: only output and end events are progress; an error event
before any output is kept as ``error``. A resumable Responses stream is also
tracked (``track``): the response id, the ``sequence_number`` of the last
completed event, and whether an end or error event has completed.

Reading an event costs a Python step. Until the first output (on a tracked
stream, always) every event is read; after it, a chunk is read event by event
only up to its first boundary (a blank line ending in LF), and from its last
complete event on. The run of complete events between, if longer than
``_SMALL_MIDDLE``, is read only when a decision depends on it: when the last
event is not progress, or when the run holds an end event's bytes
(``wires.end_finders``, a C search). Decisions stay exact; ``events``,
``heartbeats`` and ``comment_bytes`` then become lower bounds, and ``counted``
turns false. A chunk without an LF boundary (CR, CRLF) is read event by event.

Memory is bounded whatever the server sends: of the line in progress only its
first ``_PREFIX`` bytes are kept (all a generic decision needs: a field name,
a ``[DONE]``, a heartbeat type), and on a classifying wire at most
``CAPTURE_LIMIT`` bytes of an event's data (what ``classify`` reads).
"""

from __future__ import annotations

from collections.abc import Collection

from .wires import (
    EndFinder,
    ErrorEvent,
    Wire,
    classify,
    end_finders,
    leading_type,
    response_id,
    sequence_number,
)

__all__ = ["CAPTURE_LIMIT", "MAX_EVENT_TYPE", "SSEScanner"]

_BOM = b"\xef\xbb\xbf"
_DONE = b"[DONE]"
# Longest heartbeat event type name that can be recognised, plus "event: ".
MAX_EVENT_TYPE = 56
_PREFIX = MAX_EVENT_TYPE + 8
#: Bytes of an event's data kept for ``classify`` on a classifying wire (see ``wires``).
CAPTURE_LIMIT = 64 * 1024
# The type of an event without an ``event`` field (or with an empty one).
_MESSAGE = b"message"
# A run of complete events longer than this is read only where a decision
# depends on it (see the module docstring); a shorter one is read and counted.
_SMALL_MIDDLE = 2048


def _long_run(chunk: bytes, blank_first: bool) -> tuple[int, int, int] | None:
    """Where ``chunk``'s run of complete events lies, if it is long enough not to be read
    one by one: the end of the chunk's first boundary (``blank_first``: the chunk opens
    with a blank line), the start of its last complete event, the end of that one."""
    head = 1 if blank_first else chunk.find(b"\n\n") + 2
    last = chunk.rfind(b"\n\n", head) if head > 1 or blank_first else -1
    if last < 0:
        return None
    end = last
    if chunk[end - 1] == 10:  # a run of blank lines: the event ends before it
        end = head + len(chunk[head:last].rstrip(b"\n"))
    before = chunk.rfind(b"\n\n", head, end)
    if before < 0 or before + 2 - head <= _SMALL_MIDDLE:
        return None
    return head, before + 2, last + 2


class SSEScanner:
    """Count completed progress events in an SSE byte stream fed in chunks.

    ``feed(chunk)`` returns how many progress events the chunk completed and
    ``events`` their total (while ``counted``; else lower bounds, the first
    non-zero if any completed). ``done``: an end event completed (data starting
    with ``[DONE]``, the openai SDK's test; ``response.completed``;
    ``message_stop``; never a heartbeat). ``heartbeat_events``: event types
    (the ``event`` field, or on the JSON wires the data's leading ``"type"``)
    that are keepalives, such as ``ping``; ``message`` makes every untyped
    event one. ``wire``: what the events mean (``wires.classify``); ``error``
    is the first error event before any progress. With ``track`` (Responses):
    ``response_id`` (named by the first lifecycle event), ``sequence`` (of the
    last completed event that had one, heartbeats included; -1 before any),
    and ``finished`` (an end or error event completed).
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
        self._ends: tuple[EndFinder, ...] | None = end_finders(wire) if generic else None
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
        run = _long_run(chunk, not self._line_size and chunk[:1] == b"\n")
        if run is None:
            return self._feed_lines(chunk)
        # The head ends the event pending from the last chunk; the run after it
        # is complete events (a boundary on each side leaves no state over).
        head, start, stop = run
        events = self._feed_lines(chunk[:head])
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
            # Past the first output, runs are read only where a decision depends on them
            # (a resume needs a tracked run's last number); Chat: nothing more classified.
            self._ends = None if self._track else end_finders(self._wire)
            if self._wire == "chat_completions":
                self._capture = False
                self._cap = _PREFIX
                self._plain = _MESSAGE not in self._heartbeats

    def _tracked(self, data: bytes, kind: object) -> None:
        """Note a completed Responses event's number, its response's id, and an end."""
        number = sequence_number(data)
        if number is not None:
            self.sequence = number
        if self.response_id is None and kind == "preamble":  # lifecycle events name it
            self.response_id = response_id(data)
        if kind == "end" or isinstance(kind, ErrorEvent):
            self.finished = True
