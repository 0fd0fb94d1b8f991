"""Where a read of a server-sent-events body may go unparsed. Pure: bytes in, offsets out.

``SSEScanner`` (``sse``) parses line by line only what a decision needs; these find,
with a few C searches, what that is. Until the first output (on a tracked stream,
always) every event is read. After it, a read whose last complete event is output by
its form alone (one data line, ``lone_last``; on a classifying wire, an event line of
a type that is always output and one data line, ``typed_output``; on Gemini, one data
line whose ``GenerateContentResponse`` is output or the end: ``judged_last``) is judged
from that event, and the rest of the read before it goes unread, if longer than
``SMALL_MIDDLE``. Else the read is parsed up to the end of the event pending when it
came and from its last complete event on (``run_start``, ``long_run``), and the run
between, if that long, only when that event is not progress. Decisions stay exact;
the scanner's ``events``, ``heartbeats`` and ``comment_bytes`` then become lower
bounds (``counted`` false). Events ended by CR or CRLF are read one by one.

A blank line ending in LF (``\\n\\n``) always ends an event, whatever line endings came
before it (after CRLF or LF, the second LF is an empty line): the parser is between
events after it. So the bytes after a read's last ``\\n\\n`` begin a new event, and the
bytes between two of them are whole events. Other boundaries (CR, CRLF) are left to the
line parser.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Literal

from .sse_lines import CAPTURE_LIMIT
from .wires import Wire, classify, leading_type, sure_output

__all__ = [
    "SMALL_MIDDLE",
    "judged_last",
    "lone_data",
    "lone_events",
    "lone_last",
    "long_run",
    "run_start",
    "typed_output",
]

#: A run of complete events longer than this is read only when the read's last event is
#: not progress (see ``sse``); a shorter one is read and counted.
SMALL_MIDDLE = 2048


def lone_data(event: bytes) -> bool:
    """Whether ``event`` is one whole event of one ``data`` line, ended by ``\\n\\n``."""
    return (
        event.startswith(b"data:")
        and event.find(b"\n") == len(event) - 2
        and event[-1] == 10  # LF: the blank line that ends the event
        and b"\r" not in event
    )


def lone_events(chunk: bytes, head: int) -> tuple[int, int, int] | None:
    """Whether the complete events of ``chunk`` from ``head`` (where the parser is between
    events) are all one data line each, ended by ``\\n\\n``, with no CR: then how many,
    and where the last one starts and ends. A few C counts, however many events: for a
    short read of a stream whose untyped events are all progress, counted without the
    line parser and exactly as it would count them."""
    stop = chunk.rfind(b"\n\n", head) + 2
    if stop < 2:
        return None
    run = chunk[head:stop]
    events = run.count(b"\n\n")
    # Every LF in a pair, every pair but the last opening a data line, the first one too:
    # n events of one line each (an empty one would put a pair before a pair).
    if (
        not run.startswith(b"data:")
        or run.count(b"\n") != 2 * events
        or run.count(b"\n\ndata:") != events - 1
        or b"\r" in run
    ):
        return None
    return events, chunk.rfind(b"\n\n", head, stop - 2) + 2 if events > 1 else head, stop


def run_start(chunk: bytes, line_pending: bool, event_pending: bool) -> int:
    """Where ``chunk``'s run of complete events starts: at once between events, else after
    the boundary that ends the pending event (a blank line first, if no line is pending and
    the chunk opens with one); ``len(chunk)``: there is no such boundary."""
    if not (line_pending or event_pending):
        return 0
    if not line_pending and chunk[:1] == b"\n":
        return 1
    found = chunk.find(b"\n\n")
    return found + 2 if found >= 0 else len(chunk)


def long_run(chunk: bytes, head: int) -> tuple[int, int] | None:
    """Where the last complete event of ``chunk``'s run lies, if the run is long enough
    not to be read one by one: the start and end of that event. The run starts at
    ``head``, where the parser is between events; it ends at the chunk's last ``\\n\\n``."""
    last = chunk.rfind(b"\n\n", head)
    if last < 0:
        return None
    end = last
    if end > head and chunk[end - 1] == 10:  # a run of blank lines: the event ends before
        end = head + len(chunk[head:last].rstrip(b"\n"))
    before = chunk.rfind(b"\n\n", head, end)
    if before < 0 or before + 2 - head <= SMALL_MIDDLE:
        return None
    return before + 2, last + 2


def lone_last(chunk: bytes, between: bool) -> tuple[int, int] | None:
    """Where ``chunk``'s last complete event lies, if it is one data line ended by
    ``\\n\\n`` and what comes before it is nothing (``between``: the chunk begins between
    events) or longer than ``SMALL_MIDDLE``: its start and end."""
    stop = chunk.rfind(b"\n\n") + 2
    if stop < 2:
        return None
    start = chunk.rfind(b"\n\n", 0, stop - 2) + 2
    if start == 1:  # no boundary before it: it is the whole chunk, or ends a pending one
        if not between:
            return None
        start = 0
    elif start <= SMALL_MIDDLE:
        return None
    return (start, stop) if lone_data(chunk[start:stop]) else None


def typed_output(event: bytes, wire: Wire, heartbeats: Collection[bytes]) -> bool:
    """Whether ``event``, a whole one ended by ``\\n\\n``, is an ``event`` line then one
    ``data`` line (no CR) that ``classify`` finds output on ``wire``, whatever its data."""
    if not event.startswith(b"event:"):
        return False
    data = event.find(b"\n") + 1
    if not (event.startswith(b"data:", data) and event.find(b"\n", data) == len(event) - 2):
        return False
    event_type = event[6 : data - 1]
    if event_type[:1] == b" ":
        event_type = event_type[1:]
    value = data + (6 if event[data + 5 : data + 6] == b" " else 5)
    return (
        b"\r" not in event
        and event_type.isascii()  # else compared decoded, as the line parser does
        and event_type not in heartbeats
        and not event.startswith(b"[DONE]", value)
        and sure_output(wire, event_type)
    )


def judged_last(
    event: bytes, wire: Wire, heartbeats: Collection[bytes]
) -> Literal["output", "end"] | None:
    """How ``event``, a whole one ended by ``\\n\\n``, counts where its form decides as the
    line parser would (``None``: it must read it): ``typed_output``'s events; on Gemini,
    one data line that ``classify`` finds output or the end, of its data's first
    ``CAPTURE_LIMIT`` bytes (what the parser keeps)."""
    if wire != "gemini":
        return "output" if typed_output(event, wire, heartbeats) else None
    if not lone_data(event):
        return None
    value = event[6:-2] if event[5:6] == b" " else event[5:-2]
    # Gemini's data has no leading "type": it only matters when a heartbeat is named.
    event_type = (leading_type(value) or b"message") if heartbeats else b"message"
    if event_type in heartbeats:
        return None
    kind = classify(
        wire, event_type, value[:CAPTURE_LIMIT], heartbeats, done=value.startswith(b"[DONE]")
    )
    return kind if kind == "output" or kind == "end" else None
