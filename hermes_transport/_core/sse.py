"""Incremental server-sent-events progress scanner. Pure: no I/O, clock or threads.

It says how many *progress* events have completed in a text/event-stream body
fed in arbitrary chunks, and whether the stream has ended. A progress event is
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

The end rule: a read (one ``feed``) ends the stream for good (``done``) when
its last complete event is an end event: data starting with ``[DONE]`` (the
openai SDK's test) or ``classify``'s ``end`` (``response.completed``, ...). An
end followed in the same read by any complete event, a heartbeat too, is no
end; comments, blank lines and an unfinished event are not events.

Reading an event costs a Python step. A read that is one whole event of one data
line, between events, is judged without the line parser. Until the first output
(on a tracked stream, always) every event is read; after it, a chunk is read
event by event up to its first boundary (a blank line ending in LF) and from its
last complete event on, which alone decides ``done``; the run between, if longer
than ``_SMALL_MIDDLE``, only when that last event is not progress. Decisions stay
exact; ``events``, ``heartbeats`` and ``comment_bytes`` then become lower bounds
(``counted`` false). A chunk without an LF boundary (CR, CRLF) is read event by event.

Memory is bounded whatever the server sends: of the line in progress only its
first ``_PREFIX`` bytes are kept (all a generic decision needs: a field name,
a ``[DONE]``, a heartbeat type), and on a classifying wire at most
``CAPTURE_LIMIT`` bytes of an event's data (what ``classify`` reads).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from .wires import ErrorEvent, Wire, classify, leading_type, response_id, sequence_number

__all__ = ["CAPTURE_LIMIT", "MAX_EVENT_TYPE", "SSEScanner"]

_BOM = b"\xef\xbb\xbf"
_DONE = b"[DONE]"
# A lone data line that starts with [DONE], with or without the space after the colon.
_DONE_LINES = (b"data:" + _DONE, b"data: " + _DONE)
# Longest heartbeat event type name that can be recognised, plus "event: ".
MAX_EVENT_TYPE = 56
_PREFIX = MAX_EVENT_TYPE + 8
#: Bytes of an event's data kept for ``classify`` on a classifying wire (see ``wires``).
CAPTURE_LIMIT = 64 * 1024
# The type of an event without an ``event`` field (or with an empty one).
_MESSAGE = b"message"
# A run of complete events longer than this is read only when the last event
# is not progress (see the module docstring); a shorter one is read and counted.
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

    ``feed(chunk)`` scans one read (``feed_pieces``: one read in pieces) and
    returns the progress events it completed; ``events`` is their total (while
    ``counted``; else lower bounds, the first non-zero if any completed);
    ``done``: a read ended the stream (the end rule above). ``heartbeat_events``:
    event types (the ``event`` field, or on the JSON wires the data's leading
    ``"type"``) that are keepalives, such as ``ping``; ``message`` makes every
    untyped event one. ``wire``: what the events mean; ``error``: the first
    error event before any progress. ``track`` (Responses): ``response_id``
    (named by the first lifecycle event), ``sequence`` (of the last completed
    event that had one, heartbeats included; -1 before any), and ``finished``
    (an end or error event completed, even one followed by events in its read).
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
        "_skims",
        "_track",
        "_wire",
        "comment_bytes",
        "counted",
        "done",
        "error",
        "events",
        "fed",
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
        self._track = track and wire == "responses"
        self.response_id: str | None = None
        self.sequence = -1
        self.finished = False
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
        self._idle = False  # see _read_ended: not before the BOM is settled
        self.fed = 0  # bytes given to ``feed``

    def feed(self, chunk: bytes) -> int:
        """Scan ``chunk``, one read; return the number of progress events it completed."""
        self.fed += len(chunk)
        if (
            self._idle
            and chunk.startswith(b"data:")
            and chunk.find(b"\n") == len(chunk) - 2
            and chunk[-1] == 10  # LF: the blank line that ends the event
            and b"\r" not in chunk
        ):
            # How a stream read as it comes mostly arrives; judged as the line parser
            # would. The read's only event decides ``done`` (``_end`` is left alone).
            self.events += 1
            if chunk.startswith(_DONE_LINES):
                self.done = True
            return 1
        return self._read_ended(self._scan(chunk))

    def feed_pieces(self, pieces: Iterable[bytes]) -> int:
        """Scan ``pieces``, one read in pieces, as ``feed`` would scan them joined."""
        return self._read_ended(sum(map(self._scan, pieces)))

    def _read_ended(self, completed: int) -> int:
        """A read was scanned: its last event decides ``done``; and whether the next read
        may be judged at once (``feed``: no event or line pending, untyped is progress)."""
        self.done |= self._end
        pending = self._line_size or self._event_has_data or self._event_type
        self._idle = self._plain and not (pending or self._at_start or self._cr_pending)
        return completed

    def _scan(self, chunk: bytes) -> int:
        """Scan ``chunk``, all or part of a read: ``done`` is the read's to decide."""
        if self._at_start:
            chunk = self._strip_bom(chunk)
        if self._cr_pending and chunk:
            self._cr_pending = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        if not chunk:
            return 0
        run = _long_run(chunk, not self._line_size and chunk[:1] == b"\n") if self._skims else None
        if run is None:
            return self._feed_lines(chunk)
        # The head ends the pending event; the run after it is complete events (no
        # state left over). The last event is read first: progress, it decides alone.
        head, start, stop = run
        events = self._feed_lines(chunk[:head])
        others = self.heartbeats + self.others
        ending = self._feed_lines(chunk[start:stop])
        if ending:
            self.counted = False
        else:
            last_is_event = self.heartbeats + self.others > others  # not just a comment
            ending = self._feed_lines(chunk[head:start])
            if last_is_event:  # it, not the run read after it, is the read's last event
                self._end = False
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
        """Note a completed Responses event's number, its response's id, and an end."""
        number = sequence_number(data)
        if number is not None:
            self.sequence = number
        if self.response_id is None and kind == "preamble":  # lifecycle events name it
            self.response_id = response_id(data)
        if kind == "end" or isinstance(kind, ErrorEvent):
            self.finished = True
