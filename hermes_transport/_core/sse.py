"""Incremental server-sent-events progress scanner. Pure: no I/O, clock or threads.

It says how many *progress* events have completed in a text/event-stream body
fed in arbitrary chunks, and whether the stream has ended. A progress event is
a complete event (ended by a blank line) with at least one ``data`` field
whose type (its last ``event`` field, else ``message``; compared as text,
invalid UTF-8 as U+FFFD) is not a configured heartbeat type. Comments, blank
lines, other fields and an unfinished event are not progress, nor events.

The line rules, the wires' event classes and the memory bound are the parser's
(``sse_lines``); this module owns the reads.

The end rule: a read (one ``feed``) ends the stream for good (``done``) when
its last complete event is an end event: data starting with ``[DONE]`` (the
openai SDK's test) or ``classify``'s ``end`` (``response.completed``, ...). An
end followed in the same read by any complete event, a heartbeat too, is no
end; comments, blank lines and an unfinished event are not events.

Reading an event costs a Python step, so past the first output a read is parsed
line by line only where a decision needs it (``sse_runs`` says where): decisions
stay exact, counts may become lower bounds (``counted`` false).
"""

from __future__ import annotations

from collections.abc import Iterable

from .sse_lines import CAPTURE_LIMIT, MAX_EVENT_TYPE, EventParser
from .sse_runs import judged_last, lone_events, lone_last, long_run, run_start

__all__ = ["CAPTURE_LIMIT", "MAX_EVENT_TYPE", "SSEScanner"]

# A lone data line that starts with [DONE], with or without the space after the colon.
_DONE_LINES = (b"data:[DONE]", b"data: [DONE]")


class SSEScanner(EventParser):
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
    (an end or error event completed, even one followed by events in its read);
    ``track`` (Responses and MCP): ``last_id`` (the last ``id`` field); on MCP ``asks``
    (the ids of the server's own requests, in order) and ``finished`` (the response came).
    """

    __slots__ = ()

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
            # How a stream read as it comes mostly arrives: one event (``lone_data``, inlined
            # for the hot path). Its only event decides ``done`` (``_end`` is left alone).
            self.events += 1
            if chunk.startswith(_DONE_LINES):
                self.done = True
            return 1
        if self._quick and (last := lone_last(chunk, self._idle)) is not None:
            # How a fast stream's reads mostly end: with an event of one data line. Judged
            # as the line parser would: progress, so it decides alone, and nothing before
            # it is read (the event pending when the read came included).
            start, stop = last
            if start:
                self._skip_to_last()
            self.events += 1
            self._end = chunk.startswith(_DONE_LINES, start)
            return self._read_ended(1 + self._tail(chunk, stop))
        return self._read_ended(self._scan(chunk))

    def feed_pieces(self, pieces: Iterable[bytes]) -> int:
        """Scan ``pieces``, one read in pieces, as ``feed`` would scan them joined."""
        return self._read_ended(sum(map(self._scan, pieces)))

    def _read_ended(self, completed: int) -> int:
        """A read was scanned: its last event decides ``done``; and whether the next read
        may be judged at once (``feed``: no event or line pending, untyped is progress)."""
        self.done |= self._end
        pending = self._line_size or self._event_has_data or self._event_type
        self._quick = self._plain and not (self._at_start or self._cr_pending)
        self._idle = self._quick and not pending
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
        if not self._skims:
            # A tracked stream is read whole, always; any other until its first output.
            return self._feed_lines(chunk) if self._track else self._until_output(chunk)
        pending = self._event_has_data or self._event_type
        head = run_start(chunk, bool(self._line_size), bool(pending))
        run = long_run(chunk, head)
        if run is None:
            if self._plain and head < len(chunk):
                return self._lone_run(chunk, head)
            return self._feed_lines(chunk)
        start, stop = run
        judged = judged_last(chunk[start:stop], self._wire, self._heartbeats)
        if judged is not None:
            self._skip_to_last()
            self.events += 1
            self._end = judged == "end"
            return 1 + self._tail(chunk, stop)
        # The head ends the pending event; the run after it is complete events (no
        # state left over). The last event is read first: progress, it decides alone.
        events = self._feed_lines(chunk[:head]) if head else 0
        others = self.heartbeats + self.others
        ending = self._feed_lines(chunk[start:stop])
        if ending:
            self.counted = False
        else:
            last_is_event = self.heartbeats + self.others > others  # not just a comment
            ending = self._feed_lines(chunk[head:start])
            if last_is_event:  # it, not the run read after it, is the read's last event
                self._end = False
        return events + ending + self._tail(chunk, stop)

    def _lone_run(self, chunk: bytes, head: int) -> int:
        """A short read of a stream whose untyped events are all progress: its run of
        events of one data line each counted at once (``lone_events``), exactly; any other
        run parsed line by line."""
        found = lone_events(chunk, head)
        if found is None:
            return self._feed_lines(chunk)
        events, last, stop = found
        completed = self._feed_lines(chunk[:head]) if head else 0  # ends the pending event
        self.events += events
        self._end = chunk.startswith(_DONE_LINES, last)
        return completed + events + self._tail(chunk, stop)

    def _until_output(self, chunk: bytes) -> int:
        """Read ``chunk`` event by event (to each blank line ending in LF) while every event
        must be read; once the first output lets the rest go unread, scan the rest so."""
        completed = start = 0
        while not self._skims:
            end = chunk.find(b"\n\n", start) + 2
            if end < 2:  # no boundary left: the rest is one event, or part of one
                return completed + self._feed_lines(chunk[start:])
            completed += self._feed_lines(chunk[start:end])
            start = end
            if start == len(chunk):
                return completed
        return completed + self._scan(chunk[start:])

    def _skip_to_last(self) -> None:
        """The read's last event is progress, and decides alone: what came before it is not
        read (the event pending when the read came included), so counts are lower bounds."""
        self.counted = False
        self._line, self._line_size = b"", 0
        self._event_has_data, self._event_type = False, b""
        if self._data:
            self._data, self._data_size = [], 0

    def _tail(self, chunk: bytes, start: int) -> int:
        """Scan ``chunk`` from ``start``, between events, to its end."""
        if start == len(chunk):
            return 0
        tail = chunk[start:]
        if b"\n" in tail or b"\r" in tail:
            return self._feed_lines(tail)
        self._line = tail[: self._cap]  # the start of the next event's first line
        self._line_size = len(tail)
        return 0
