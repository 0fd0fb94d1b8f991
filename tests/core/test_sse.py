"""Tests for ``SSEScanner``: the pure, incremental SSE progress scanner."""

from __future__ import annotations

import itertools
import re
import tracemalloc
from collections.abc import Collection, Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_transport._core.sse import SSEScanner
from hermes_transport._core.sse_runs import lone_events

from _support import events_read_one_by_one_up_to

# Pure scanning: the same under every openai major (see the `once` marker).
pytestmark = pytest.mark.once

BOM = b"\xef\xbb\xbf"
ENDINGS = (b"\n", b"\r", b"\r\n")
ENDING_IDS = ("LF", "CR", "CRLF")
KIB = 1024
MIB = 1024 * KIB

_LINE_END = re.compile(rb"\r\n|\r|\n")


# --------------------------------------------------------------------------- helpers


def reference(body: bytes, heartbeats: Collection[str] = ()) -> tuple[int, bool]:
    """Count progress events in a body read at once, and whether that read ends the stream.

    Independent of the scanner: split the whole body into lines with a regex,
    then apply the SSE field rules line by line. The part after the last line
    ending is an unfinished line and is ignored. The read ends the stream when
    its last complete event (any event with data, a heartbeat too) is a progress
    event whose data starts with ``[DONE]``.
    """
    heartbeat_types = {name.encode() for name in heartbeats}
    if body.startswith(BOM):
        body = body[len(BOM) :]
    lines = _LINE_END.split(body)[:-1]
    events, done = 0, False
    has_data, first_data, event_type = False, b"", b""
    for line in lines:
        if not line:
            # An event without a type is of type "message", as the SSE spec defines it.
            if has_data:
                progress = (event_type or b"message") not in heartbeat_types
                events += progress
                done = progress and first_data.startswith(b"[DONE]")
            has_data, first_data, event_type = False, b"", b""
            continue
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            if not has_data:
                first_data = value
            has_data = True
        elif name == b"event":
            event_type = value
    return events, done


def reference_reads(chunks: Iterable[bytes], heartbeats: Collection[str] = ()) -> tuple[int, bool]:
    """The reference's events and done after ``chunks`` fed as reads: done once a read ended the stream."""
    fed, done = b"", False
    for chunk in chunks:
        fed += chunk
        done = done or reference(fed, heartbeats)[1]
    return reference(fed, heartbeats)[0], done


def scan(chunks: Iterable[bytes], heartbeats: Collection[str] = ()) -> SSEScanner:
    """Feed every chunk to a fresh scanner and return it."""
    scanner = SSEScanner(heartbeats)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner


def count(body: bytes, heartbeats: Collection[str] = ()) -> int:
    """Progress events in ``body`` fed in one piece."""
    return scan([body], heartbeats).events


def split_at(body: bytes, points: Iterable[int]) -> list[bytes]:
    """Split ``body`` at the given offsets (duplicates and ends allowed)."""
    cuts = [0, *sorted(set(points)), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


def bytewise(body: bytes) -> list[bytes]:
    """``body`` as one-byte chunks."""
    return [body[i : i + 1] for i in range(len(body))]


def lines(items: Sequence[bytes], ending: bytes) -> bytes:
    """Join SSE lines, each followed by ``ending``."""
    return b"".join(item + ending for item in items)


# --------------------------------------------------------------------------- what counts


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"data: x\n\n", 1),
        (b"data:x\n\n", 1),
        (b"data\n\n", 1),
        (b"data:\n\n", 1),
        (b"data: \n\n", 1),
        (b"data: a:b: c\n\n", 1),
        (b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n', 1),
        (b"data: a\ndata: b\ndata: c\n\n", 1),
        (b"data: a\n\ndata: b\n\n", 2),
        (b"data: a\n\ndata: b\n\ndata: c\n\n", 3),
        (b"id: 1\ndata: x\nretry: 10\n\n", 1),
        (b"event: message\ndata: x\n\n", 1),
        (b": keepalive\ndata: x\n\n", 1),
        (b"data: x\n\n\n\n\n", 1),
        (b"\n\n\ndata: x\n\n", 1),
        (b"data: caf\xc3\xa9 \xf0\x9f\x98\x80\n\n", 1),
        (b"data: \xff\xfe not utf-8\n\n", 1),
    ],
)
def test_complete_event_with_data_is_progress(body: bytes, expected: int) -> None:
    """A complete event carrying at least one ``data`` field counts once, whatever else it has."""
    assert count(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b": keepalive\n\n",
        b":\n\n",
        b": keepalive\n: keepalive\n\n\n",
        b"\n",
        b"\n\n\n\n",
        b"id: 1\n\n",
        b"id\n\n",
        b"retry: 1000\n\n",
        b"event: message\n\n",
        b"event\n\n",
        b"id: 1\nevent: x\nretry: 5\n: comment\n\n",
        b"data: x",
        b"data: x\n",
        b"data\n",
        b"data: a\ndata: b\n",
    ],
    ids=repr,
)
def test_no_data_or_unfinished_event_is_not_progress(body: bytes) -> None:
    """Comments, blank lines, events without ``data`` and an unfinished event are not progress."""
    assert count(body) == 0


@pytest.mark.parametrize(
    "field",
    [
        b"datax: 1",
        b"data1",
        b"Data: 1",
        b"DATA: 1",
        b" data: 1",
        b"\tdata: 1",
        b"data : 1",
        b"dat: 1",
        b"xdata: 1",
        b"data-: 1",
        b"\xef\xbb\xbfdata: 1",
    ],
    ids=repr,
)
def test_field_name_must_be_exactly_data(field: bytes) -> None:
    """Only the exact field name ``data`` (everything before the first colon) is data."""
    scanner = scan([b"data: ok\n\n", field + b"\n\n"])
    assert scanner.events == 1


def test_feed_returns_events_completed_by_that_chunk() -> None:
    """``feed`` returns how many events the chunk completed and ``events`` is the running total."""
    scanner = SSEScanner()
    chunks = [b"data: a\n", b"\n", b"data: b\n\ndata: c\n\n", b": ping\n\n", b"data: d", b""]
    returns = [scanner.feed(chunk) for chunk in chunks]
    assert returns == [0, 1, 2, 0, 0, 0]
    assert scanner.events == 3
    assert scanner.done is False


def test_new_scanner_starts_empty() -> None:
    """A fresh scanner has no events and is not done."""
    scanner = SSEScanner()
    assert (scanner.events, scanner.done) == (0, False)


# --------------------------------------------------------------------------- [DONE]


@pytest.mark.parametrize(
    ("body", "events", "done"),
    [
        (b"data: [DONE]\n\n", 1, True),
        (b"data:[DONE]\n\n", 1, True),
        (b"data: [DONE] trailing\n\n", 1, True),
        (b"data: [DONE]\ndata: more\n\n", 1, True),
        (b"data: x\n\ndata: [DONE]\n\n", 2, True),
        (b"data: [DONE]\n\ndata: x\n\n", 2, False),
        (b"data: [DONE]\n\n: comment\n\nid: 1\n\n", 1, True),
        (b"data: [DONE]\n\ndata: x", 1, True),
        (b"event: done\nid: 9\ndata: [DONE]\n\n", 1, True),
        (b"data: [DONE]\r\n\r\n", 1, True),
        (b"data: [DONE]\r\r", 1, True),
        (b"data:  [DONE]\n\n", 1, False),
        (b"data: [done]\n\n", 1, False),
        (b"data: [DONE\n\n", 1, False),
        (b'data: "[DONE]"\n\n', 1, False),
        (b"data: x[DONE]\n\n", 1, False),
        (b"data: x\ndata: [DONE]\n\n", 1, False),
        (b"data\n\n", 1, False),
        (b"data: [DONE]", 0, False),
        (b"data: [DONE]\n", 0, False),
        (b"id: [DONE]\n\n", 0, False),
        (b"event: [DONE]\n\n", 0, False),
        (b": [DONE]\n\n", 0, False),
        (b"[DONE]\n\n", 0, False),
    ],
    ids=repr,
)
def test_done_event(body: bytes, events: int, done: bool) -> None:
    """A read ends the stream when its last complete event's data starts with ``[DONE]`` (one optional space); comments and an unfinished event after it change nothing."""
    scanner = scan([body])
    assert (scanner.events, scanner.done) == (events, done)


@pytest.mark.parametrize("ending", ENDINGS, ids=ENDING_IDS)
def test_done_is_set_only_when_the_event_completes(ending: bytes) -> None:
    """``done`` stays false until the blank line that completes the ``[DONE]`` event."""
    scanner = SSEScanner()
    assert scanner.feed(b"data: [DONE]" + ending) == 0
    assert scanner.done is False
    assert scanner.feed(ending) == 1
    assert scanner.done is True


@pytest.mark.parametrize(
    ("after", "progress"),
    [
        (b"data: x\n\n", 1),
        (b"data: x\r\n\r\n", 1),
        (b"data: x\r\r", 1),
        (b"event: ping\ndata: {}\n\n", 0),
        (b"event: delta\ndata: {}\n\n", 1),
    ],
    ids=["output", "crlf", "cr", "keepalive", "typed"],
)
def test_an_end_followed_by_an_event_in_the_same_read_is_no_end(
    after: bytes, progress: int
) -> None:
    """A ``[DONE]`` followed in the same read by any complete event, a keepalive too, does not end the stream; a later read that ends in one does."""
    scanner = SSEScanner(("ping",))
    assert scanner.feed(b"data: x\n\ndata: [DONE]\n\n" + after) == 2 + progress
    assert scanner.done is False
    assert scanner.feed(b"data: [DONE]\n\n") == 1
    assert scanner.done is True


@pytest.mark.parametrize(
    "after",
    [b": keepalive\n\n", b"id: 7\n\n", b"event: ping\n\n", b"\n\n\n", b"data: x", b"data: x\n"],
    ids=["comment", "id only", "type only", "blank lines", "unfinished", "unfinished line"],
)
def test_what_is_no_event_after_an_end_leaves_it_the_end(after: bytes) -> None:
    """Comments, fields without data, blank lines and an unfinished event after a ``[DONE]`` in its read leave the stream ended."""
    scanner = SSEScanner(("ping",))
    assert scanner.feed(b"data: x\n\ndata: [DONE]\n\n" + after) == 2
    assert scanner.done is True


def test_done_stays_true_after_the_read_that_ended_the_stream() -> None:
    """Once a read ended in ``[DONE]``, events read after it leave the stream ended."""
    scanner = SSEScanner(("ping",))
    scanner.feed(b"data: [DONE]\n\n")
    assert scanner.feed(b"data: x\n\nevent: ping\ndata: {}\n\n") == 1
    assert (scanner.events, scanner.done) == (2, True)


def test_an_end_completed_in_a_read_with_more_events_is_no_end() -> None:
    """A ``[DONE]`` begun in one read and completed in the next, which holds another event, does not end the stream."""
    scanner = SSEScanner()
    assert scanner.feed(b"data: [DO") == 0
    assert scanner.feed(b"NE]\n\ndata: x\n\n") == 2
    assert scanner.done is False


def test_every_read_of_one_event_is_judged_alone() -> None:
    """Fed one event per read, as a stream read as it comes arrives, a ``[DONE]`` ends the stream at its own read."""
    scanner = SSEScanner()
    assert [scanner.feed(b"data: x\n\n"), scanner.feed(b"data: [DONE]\n\n")] == [1, 1]
    assert scanner.done is True
    scanner = SSEScanner()
    assert scanner.feed(b"data: [DONE]\n\n" + b"data: x\n\n") == 2
    assert scanner.done is False


# --------------------------------------------------------------------------- line endings


@pytest.mark.parametrize("ending", ENDINGS, ids=ENDING_IDS)
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_every_line_ending_is_recognised(ending: bytes, chunked: bool) -> None:
    """LF, CR and CRLF each end lines, whether the body arrives whole or byte by byte."""
    body = lines(
        [b": hi", b"id: 1", b"data: a", b"", b"data: b", b"data: c", b"", b"event: e", b""],
        ending,
    )
    chunks = bytewise(body) if chunked else [body]
    assert scan(chunks).events == 2


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"data: a\r\n\rdata: b\n\r\ndata: c\r\r", 3),
        (b"data: a\n\r", 1),
        (b"data: a\r\r", 1),
        (b"data: a\r\n\n", 1),
        (b"data: a\n\r\n", 1),
        (b"data: a\r\n", 0),
        (b"data: a\r\n\r\n", 1),
        (b"data: a\n\rdata: b\r\n\r\n", 2),
        (b"data: a\rdata: b\r\r", 1),
        (b"data: a\r\r\r\r", 1),
        (b"data: a\r\n\r\n\r\n", 1),
        (b"\r\n\r\ndata: a\r\n\r\n", 1),
    ],
    ids=repr,
)
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_mixed_line_endings(body: bytes, expected: int, chunked: bool) -> None:
    """Mixed CR, LF and CRLF endings are each one line ending, and CRLF is never two."""
    chunks = bytewise(body) if chunked else [body]
    assert scan(chunks).events == expected
    assert reference(body) == (expected, False)


@pytest.mark.parametrize(
    ("chunks", "returns"),
    [
        ([b"data: a\r", b"\n", b"\n"], [0, 0, 1]),
        ([b"data: a\r", b"\n\r\n"], [0, 1]),
        ([b"data: a\r", b"\n", b"\r\n"], [0, 0, 1]),
        ([b"data: a\r", b"\n\r", b"\n"], [0, 1, 0]),
        ([b"data: a\r", b"\n"], [0, 0]),
        ([b"data: a\r", b"\r"], [0, 1]),
        ([b"data: a\r", b"\r", b"\n"], [0, 1, 0]),
        ([b"data: a\r\n", b"\r\n"], [0, 1]),
        ([b"data: a\n", b"\r", b"\n"], [0, 1, 0]),
        ([b"data: a\r", b"", b"\n", b"\n"], [0, 0, 0, 1]),
        ([b"data: a\r", b"\n", b"data: b\n\n"], [0, 0, 1]),
        ([b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n"], [0, 0, 1, 0]),
        ([b"data: a\r", b"\n\r", b"\ndata: b\r", b"\n\r\n"], [0, 1, 0, 1]),
        ([b"data: [DONE]\r", b"\n\r", b"\n"], [0, 1, 0]),
    ],
    ids=repr,
)
def test_crlf_split_across_chunks_is_one_line_ending(
    chunks: list[bytes], returns: list[int]
) -> None:
    """A CR ending one chunk and an LF starting the next are a single line ending."""
    scanner = SSEScanner()
    assert [scanner.feed(chunk) for chunk in chunks] == returns
    assert scanner.events == reference(b"".join(chunks))[0]


@pytest.mark.parametrize(
    "body",
    [b"data: a\n\r", b"data: a\r\r", b"data: a\r\n\r", b"data: [DONE]\n\r", b"data: a\r"],
    ids=repr,
)
def test_trailing_cr_is_a_complete_line_ending(body: bytes) -> None:
    """A body ending in CR has ended its last line; a following LF changes nothing."""
    scanner = scan([body])
    before = (scanner.events, scanner.done)
    assert before == reference(body)
    assert scanner.feed(b"\n") == 0
    assert (scanner.events, scanner.done) == before


# --------------------------------------------------------------------------- BOM


BOM_BODY = BOM + b"data: a\n\n"


@pytest.mark.parametrize(
    "cuts",
    [(i,) for i in range(1, 8)] + [(i, j) for i in range(1, 5) for j in range(i + 1, 6)],
    ids=str,
)
def test_bom_at_start_is_ignored_even_when_split(cuts: tuple[int, ...]) -> None:
    """A UTF-8 BOM at the very start is ignored, wherever chunk boundaries cut it."""
    assert scan(split_at(BOM_BODY, cuts)).events == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_bom_at_start_is_ignored(chunked: bool) -> None:
    """A leading BOM does not hide the first field name."""
    assert scan(bytewise(BOM_BODY) if chunked else [BOM_BODY]).events == 1


@pytest.mark.parametrize(
    "chunks",
    [
        [BOM + BOM + b"data: a\n\n"],
        bytewise(BOM + BOM + b"data: a\n\n"),
        [BOM, BOM + b"data: a\n\n"],
        [BOM, BOM, b"data: a\n\n"],
    ],
    ids=["whole", "bytewise", "bom-then-rest", "bom-bom-rest"],
)
def test_only_the_first_bom_is_stripped(chunks: list[bytes]) -> None:
    """A second BOM is part of the first line, so that line's field name is not ``data``."""
    assert scan(chunks).events == 0


@pytest.mark.parametrize(
    "chunks",
    [
        [b"data: a\n\n" + BOM + b"data: b\n\n"],
        [b"data: a\n\n", BOM + b"data: b\n\n"],
        [b"data: a\n\n", BOM, b"data: b\n\n"],
        [b"\n", BOM + b"data: b\n\n", b"data: a\n\n"],
    ],
    ids=["same-chunk", "next-chunk", "own-chunk", "after-blank-line"],
)
def test_bom_later_in_stream_is_not_stripped(chunks: list[bytes]) -> None:
    """A BOM after the first byte of the stream belongs to the line it starts."""
    assert scan(chunks).events == 1


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([b"\xef", b"data: a\n\n"], 0),
        ([b"\xef\xbb", b"data: a\n\n"], 0),
        ([b"\xef\xbb", b"\ndata: a\n\n"], 1),
        ([b"\xef", b"\xbb", b"\n\ndata: a\n\n"], 1),
        ([b"\xef\xbb", b"\r", b"\ndata: a\n\n"], 1),
        ([b"\xef\xbbdata: a\n\n"], 0),
        ([b"\xef\xbb\xbe", b"data: a\n\n"], 0),
        ([BOM], 0),
        ([BOM, b"\n\n"], 0),
        ([BOM, b"", b"data: a\n\n"], 1),
        ([BOM + b"\r", b"\ndata: a\r\n\r\n"], 1),
    ],
    ids=repr,
)
def test_partial_bom_bytes_are_line_content(chunks: list[bytes], expected: int) -> None:
    """Bytes that only begin a BOM are ordinary content of the first line."""
    assert scan(chunks).events == expected
    assert reference(b"".join(chunks))[0] == expected


# --------------------------------------------------------------------------- heartbeats


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"event: ping\ndata: {}\n\n", 0),
        (b"event:ping\ndata: {}\n\n", 0),
        (b"data: {}\nevent: ping\n\n", 0),
        (b'event: ping\ndata: {"type": "ping"}\r\n\r\n', 0),
        (b"event: message\ndata: x\n\n", 1),
        (b"data: x\n\n", 1),
        (b"event: Ping\ndata: x\n\n", 1),
        (b"event:  ping\ndata: x\n\n", 1),
        (b"event: pingx\ndata: x\n\n", 1),
        (b"event: pin\ndata: x\n\n", 1),
        (b"event: ping \ndata: x\n\n", 1),
        (b"event: ping\n\ndata: x\n\n", 1),
        (b"event: ping\ndata: {}\n\ndata: x\n\n", 1),
        (b"event: message\ndata: x\n\nevent: ping\ndata: {}\n\n", 1),
        (b"event: ping\ndata: {}\n\nevent: ping\ndata: {}\n\n", 0),
        (b"event: ping\nevent: message\ndata: x\n\n", 1),
        (b"event: message\nevent: ping\ndata: x\n\n", 0),
        (b"event: ping\nevent\ndata: x\n\n", 1),
        (b"event: ping\nevent:\ndata: x\n\n", 1),
        (b"Event: ping\ndata: x\n\n", 1),
        (b"events: ping\ndata: x\n\n", 1),
    ],
    ids=repr,
)
def test_heartbeat_event_types_are_not_progress(body: bytes, expected: int) -> None:
    """Events whose exact ``event`` type is a configured heartbeat are not progress."""
    assert count(body, {"ping"}) == expected
    assert reference(body, {"ping"})[0] == expected


@pytest.mark.parametrize(
    "heartbeats",
    [(), ["ping"], ("ping",), {"ping"}, frozenset({"ping", "keepalive"})],
    ids=lambda v: f"{type(v).__name__}{sorted(v)}",  # sorted: stable across hash seeds
)
def test_heartbeat_events_accept_any_collection(heartbeats: Collection[str]) -> None:
    """Any collection of names configures heartbeats; with none, a ping event is progress."""
    expected = 1 if "ping" not in heartbeats else 0
    assert count(b"event: ping\ndata: {}\n\n", heartbeats) == expected
    assert count(b"event: message\ndata: x\n\n", heartbeats) == 1


def test_several_heartbeat_types() -> None:
    """Every configured heartbeat type is excluded, other types still count."""
    body = (
        b"event: ping\ndata: {}\n\n"
        b"event: keepalive\ndata: {}\n\n"
        b"event: content_block_delta\ndata: {}\n\n"
    )
    assert count(body, ["ping", "keepalive"]) == 1


@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_heartbeat_done_is_not_done(chunked: bool) -> None:
    """A heartbeat event whose data is ``[DONE]`` neither counts nor sets ``done``."""
    body = b"event: ping\ndata: [DONE]\n\n"
    scanner = scan(bytewise(body) if chunked else [body], {"ping"})
    assert (scanner.events, scanner.done) == (0, False)


@pytest.mark.parametrize(
    "name",
    ["x" * 56, "\u00e9" * 28, "p", "content_block_delta"],
    ids=["56-ascii", "56-bytes-utf8", "one-char", "typical"],
)
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_longest_heartbeat_names_are_recognised(name: str, chunked: bool) -> None:
    """Heartbeat names up to 56 UTF-8 bytes are matched, whatever the chunking."""
    body = b"event: " + name.encode() + b"\ndata: {}\n\ndata: x\n\n"
    assert scan(bytewise(body) if chunked else [body], [name]).events == 1


@pytest.mark.parametrize(
    "heartbeats",
    [[""], ["x" * 57], ["\u00e9" * 29], ["ping", ""], ("ok", "y" * 100)],
    ids=["empty", "57-ascii", "58-bytes-utf8", "one-empty-among-valid", "one-long-among-valid"],
)
def test_invalid_heartbeat_names_raise(heartbeats: Collection[str]) -> None:
    """An empty heartbeat name or one longer than 56 UTF-8 bytes raises ``ValueError``."""
    with pytest.raises(ValueError, match="heartbeat_events"):
        SSEScanner(heartbeats)


@pytest.mark.parametrize(
    "event_type",
    [b"p" * 57, b"p" * 56 + b"q", b"p" * 56 + b"p" * 1000, b"p" * 56 + b" " * 10],
    ids=["57", "56+q", "56+1000", "56+spaces"],
)
@pytest.mark.parametrize("colon", [b": ", b":"], ids=["colon-space", "colon"])
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_long_event_type_never_matches_a_heartbeat(
    event_type: bytes, colon: bytes, chunked: bool
) -> None:
    """An event type longer than any heartbeat name is progress even if it starts with one."""
    body = b"event" + colon + event_type + b"\ndata: x\n\n"
    assert scan(bytewise(body) if chunked else [body], ["p" * 56]).events == 1


def test_very_long_event_type_with_heartbeat_prefix_is_progress() -> None:
    """A megabyte-long event type that starts with a heartbeat name is not that heartbeat."""
    scanner = SSEScanner({"ping"})
    scanner.feed(b"event: ping")
    for _ in range(16):
        scanner.feed(b"g" * (64 * KIB))
    assert scanner.feed(b"\ndata: x\n\n") == 1


# Found by the differential fuzzing in test_sse_reference.py: the SSE spec gives an
# event with no (or an empty) `event` field the type "message".
@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"data\n\n", 0),
        (b"data: ping\n\r\n", 0),
        (b"data: x\n\n" * 3, 0),
        (b"data: x\r\n\r\n", 0),
        (b"event:\ndata: x\n\n", 0),
        (b"event: ping\nevent\ndata: x\n\n", 0),
        (b"event: message\ndata: x\n\n", 0),
        (b"event: delta\ndata: x\n\n", 1),
        (b"data: x\n\nevent: delta\ndata: y\n\ndata: z\n\n", 1),
    ],
    ids=repr,
)
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_message_heartbeat_covers_events_without_a_type(
    body: bytes, expected: int, chunked: bool
) -> None:
    """With ``message`` a heartbeat type, an event without an ``event`` field is a heartbeat too, as the spec types it ``message``."""
    scanner = scan(bytewise(body) if chunked else [body], ["ping", "message"])
    assert (scanner.events, scanner.done) == (expected, False)
    assert reference(body, ["ping", "message"]) == (expected, False)


def test_message_heartbeat_done_event_is_not_done() -> None:
    """With ``message`` a heartbeat type, an untyped ``[DONE]`` event neither counts nor sets ``done``."""
    scanner = scan([b"data: x\n\ndata: [DONE]\n\n"], ["message"])
    assert (scanner.events, scanner.done) == (0, False)


# Found by the differential fuzzing in test_sse_reference.py: an event type is text,
# and bytes that are not UTF-8 decode to U+FFFD, so they can match such a name.
@pytest.mark.parametrize(
    ("event_type", "heartbeat", "expected"),
    [
        (b"\xff", "\ufffd", 0),
        (b"\xe2\x82", "\ufffd", 0),
        (b"\xef\xbf\xbd", "\ufffd", 0),
        (b"\xff\xff\xff", "\ufffd\ufffd\ufffd", 0),
        (b"\xed\xa0\x80", "\ufffd\ufffd\ufffd", 0),
        (b"p\xffng", "p\ufffdng", 0),
        (b"\xff\xff", "\ufffd", 1),
        (b"\xc3\xa9" * 28, "\u00e9" * 28, 0),
        (b"\xff" * 18, "\ufffd" * 18, 0),
        (b"\xff" * 19, "\ufffd" * 18, 1),
        (b"\xff" * 57, "\ufffd" * 18, 1),
    ],
    ids=repr,
)
@pytest.mark.parametrize("chunked", [False, True], ids=["whole", "bytewise"])
def test_event_type_is_compared_as_decoded_text(
    event_type: bytes, heartbeat: str, expected: int, chunked: bool
) -> None:
    """An event type that is not valid UTF-8 is compared with the heartbeat names as its decoded text, U+FFFD for each bad sequence."""
    body = b"event: " + event_type + b"\ndata: x\n\n"
    scanner = scan(bytewise(body) if chunked else [body], [heartbeat])
    assert scanner.events == expected
    assert len(scanner._event_type) <= 64


# --------------------------------------------------------------------------- bounded memory


@pytest.mark.parametrize(
    ("chunk_size", "total"),
    [(MIB, 100 * MIB), (64 * KIB, 16 * MIB)],
    ids=["1MiB-chunks-100MiB", "64KiB-chunks-16MiB"],
)
def test_long_line_keeps_state_bounded(chunk_size: int, total: int) -> None:
    """A line with no newline costs a bounded prefix of state and a transient at most one chunk."""
    chunk = b"x" * chunk_size
    scanner = SSEScanner()
    scanner.feed(b"data: ")
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for _ in range(total // chunk_size):
            assert scanner.feed(chunk) == 0
            assert len(scanner._line) <= 64
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Nothing of the line is retained, and the working memory is about one
    # chunk (a transient copy), never proportional to the line's length.
    assert current - baseline < 16 * KIB
    assert peak - baseline < chunk_size + 256 * KIB
    assert scanner.feed(b"\n\n") == 1
    assert scanner.done is False


@pytest.mark.parametrize("ending", ENDINGS, ids=ENDING_IDS)
@pytest.mark.parametrize(
    ("head", "expected"),
    [
        (b"data: ", 1),
        (b"data:", 1),
        (b": ", 0),
        (b"id: ", 0),
        (b"event: ", 0),
        (b"data", 0),
        (b"x", 0),
    ],
    ids=repr,
)
def test_long_line_then_blank_line_is_counted(head: bytes, ending: bytes, expected: int) -> None:
    """A multi-megabyte line followed by a line ending and a blank line is judged correctly."""
    scanner = SSEScanner()
    scanner.feed(head)
    for _ in range(4):
        scanner.feed(b"y" * MIB)
    assert scanner.feed(ending) == 0
    assert scanner.feed(ending) == expected
    assert scanner.feed(b"data: next" + ending + ending) == 1
    assert scanner.events == expected + 1


@pytest.mark.parametrize("ending", ENDINGS, ids=ENDING_IDS)
def test_long_line_inside_one_chunk(ending: bytes) -> None:
    """A long data line sharing a chunk with its terminator and a following event counts both
    when the run is read one by one; skimmed, the read is progress, its count a lower bound."""
    body = b"data: " + b"z" * MIB + ending + ending + b"data: y" + ending + ending
    with events_read_one_by_one_up_to(len(body)):
        assert count(body) == 2
    skimmed = scan([body])
    assert skimmed.events == 2 if skimmed.counted else skimmed.events == 1


def test_long_done_value_sets_done() -> None:
    """A ``[DONE]`` data value followed by megabytes of text still marks the stream done."""
    scanner = SSEScanner()
    scanner.feed(b"data: [DONE]")
    for _ in range(4):
        scanner.feed(b"!" * MIB)
    scanner.feed(b"\n\n")
    assert (scanner.events, scanner.done) == (1, True)


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 6, 63, 64, 65, 100])
def test_field_name_split_across_chunks(cut: int) -> None:
    """A field name cut by a chunk boundary, even past the kept prefix, is judged on the whole."""
    body = b"data: " + b"v" * 200 + b"\n\n"
    assert scan(split_at(body, [cut])).events == 1
    body = b"dat" + b"a" * 200 + b": v\n\n"
    assert scan(split_at(body, [cut])).events == 0


# --------------------------------------------------------------------------- fuzzing

_text = st.text(
    alphabet=st.characters(exclude_characters="\r\n", exclude_categories=["Cs"]),
    max_size=12,
).map(str.encode)
_value = st.one_of(
    _text,
    st.sampled_from(
        [b"[DONE]", b"[DONE]x", b" [DONE]", b"ping", b" ping", b"message", b"a:b", b""]
    ),
)
_name = st.sampled_from(
    [b"data"] * 6
    + [b"event"] * 3
    + [b"id", b"retry", b"", b"datax", b"Data", b" data", b"dat", b"data ", b"event "]
    + [BOM + b"data", b"foo"]
)
_separator = st.sampled_from([b"", b":", b": ", b":  "])
_field_line = st.builds(lambda n, s, v: n + s + (v if s else b""), _name, _separator, _value)
_line = st.one_of(_field_line, st.just(b""), st.just(b": keepalive"))
# An event: some field lines, then the blank line that completes it.
_block = st.lists(_field_line, min_size=1, max_size=4).map(lambda fields: [*fields, b""])
_ending = st.sampled_from(ENDINGS)


@st.composite
def sse_bodies(draw: st.DrawFn) -> bytes:
    """Arbitrary SSE-ish bodies: events, stray field, comment and blank lines, any line endings."""
    groups = draw(st.lists(st.one_of(_block, _line.map(lambda line: [line])), max_size=10))
    body = b"".join(line + draw(_ending) for group in groups for line in group)
    if draw(st.booleans()):
        body += draw(_field_line)  # an unfinished last line
    if draw(st.integers(0, 4)) == 0:
        body = BOM + body
    return body


_soup = st.lists(
    st.sampled_from(
        [b"\r", b"\n", b"\r\n", b"data", b"event", b":", b" ", b"[DONE]", b"ping", BOM, b"x"]
    ),
    max_size=40,
).map(b"".join)
_heartbeats = st.sampled_from([(), ("ping",), ("ping", "message")])


def _check_chunking(body: bytes, heartbeats: Collection[str], points: list[int]) -> None:
    expected = reference(body, heartbeats)
    whole = scan([body], heartbeats)
    assert (whole.events, whole.done) == expected

    scanner = SSEScanner(heartbeats)
    fed, total, done = b"", 0, False
    for chunk in split_at(body, points):
        total += scanner.feed(chunk)
        fed += chunk
        # Incremental: after every chunk the scanner agrees with the reference on
        # exactly the bytes seen so far, read by read (done once a read ended it).
        events, ended = reference(fed, heartbeats)
        done = done or ended
        assert (scanner.events, scanner.done) == (events, done)
    assert total == scanner.events == whole.events

    one_byte = scan(bytewise(body), heartbeats)
    assert (one_byte.events, one_byte.done) == reference_reads(bytewise(body), heartbeats)


@settings(max_examples=300, deadline=None)
@given(body=sse_bodies(), heartbeats=_heartbeats, data=st.data())
def test_fuzz_chunked_equals_whole_equals_reference(
    body: bytes, heartbeats: tuple[str, ...], data: st.DataObject
) -> None:
    """Any SSE body split anywhere counts the same as whole and as the reference implementation, and ends where the reference's reads do."""
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="split points")
    _check_chunking(body, heartbeats, points)


@settings(max_examples=200, deadline=None)
@given(body=st.one_of(st.binary(max_size=120), _soup), heartbeats=_heartbeats, data=st.data())
def test_fuzz_arbitrary_bytes_never_raise(
    body: bytes, heartbeats: tuple[str, ...], data: st.DataObject
) -> None:
    """Arbitrary bytes never make the scanner raise, and chunking never changes its answer."""
    points = data.draw(st.lists(st.integers(0, len(body)), max_size=12), label="split points")
    _check_chunking(body, heartbeats, points)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (b"data: a\n\r", (1, False)),
        (b"data: a\r\n", (0, False)),
        (b"data: a\r\r\n", (1, False)),
        (BOM + b"data: [DONE]\r\r", (1, True)),
        (BOM + BOM + b"data: a\n\n", (0, False)),
        (b"event: ping\ndata: a\n\n", (0, False)),
        (b"data: x\ndata: [DONE]\n\n", (1, False)),
        (b"data: [DONE]\n\ndata: x\n\n", (2, False)),
        (b"data: [DONE]\n\nevent: ping\ndata: a\n\n", (1, False)),
        (b"data: [DONE]\n\n: c\n\nid: 1\n\ndata: a", (1, True)),
    ],
    ids=repr,
)
def test_reference_implementation(body: bytes, expected: tuple[int, bool]) -> None:
    """The test's reference implementation itself follows the SSE rules and the end rule on known cases."""
    assert reference(body, ["ping"]) == expected


@pytest.mark.parametrize(
    ("body", "events", "done"),
    [
        (b"data: a\n\n" * 50, 50, False),
        (b"data: a\n\n" * 3 + b"data: [DONE]\n\n", 4, True),
        (b"data: a\n\n" * 3 + b"data:[DONE]\n\n" + b"data: b\n\n", 5, False),
        (b"id: 7\ndata: a\n\n" + b"data: b\n\n" * 2, 3, False),
        (b": keepalive\n\n" + b"data: a\n\n" * 2 + b": keepalive\n\n", 2, False),
        (b"data\n\n" + b"data: a\n\n", 2, False),
        (b"event: ping\ndata: {}\n\n" + b"data: a\n\n" * 2, 2, False),
        (b"data: a\ndata: b\n\n" + b"data: c\n\n", 2, False),
        (b"data: a\n\n\n\ndata: b\n\n", 2, False),
    ],
)
def test_plain_event_runs_count_exactly_however_split(
    body: bytes, events: int, done: bool
) -> None:
    """The C-speed path over runs of plain data events agrees with line-by-line scanning at every split, and the whole body read at once ends the stream only at a final ``[DONE]``."""
    for size in (1, 2, 3, 7, 16, len(body)):
        scanner = SSEScanner(heartbeat_events={"ping"})
        chunks = [body[i : i + size] for i in range(0, len(body), size)]
        total = sum(scanner.feed(chunk) for chunk in chunks)
        assert (total, scanner.done) == reference_reads(chunks, {"ping"}), size
        assert (total, scanner.events) == (events, events), size
        # The same body with CRLF endings takes the line-by-line path only.
        crlf = SSEScanner(heartbeat_events={"ping"})
        assert crlf.feed(body.replace(b"\n", b"\r\n")) == events
    assert scan([body], {"ping"}).done is done


# --------------------------------------------------------------------------- long runs of events

PLAIN = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'
#: Events enough to make one chunk's run of complete events longer than the scanner reads one by one.
BURST = PLAIN * 200


def _burst(*chunks: bytes, heartbeats: Collection[str] = ("ping",)) -> SSEScanner:
    """A generic scanner past its first output, then fed ``chunks``."""
    scanner = SSEScanner(heartbeats)
    assert scanner.feed(PLAIN) == 1
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner


def test_a_long_run_of_events_in_one_chunk_is_progress_without_a_count() -> None:
    """A chunk of 200 plain events is progress and not done; its events are not counted one by one, and the scanner says so."""
    scanner = SSEScanner(("ping",))
    scanner.feed(PLAIN)
    assert scanner.feed(BURST) >= 1
    assert not scanner.done
    assert not scanner.counted
    assert 1 < scanner.events < 201


ENDS = [b"data: [DONE]\n\n", b"data:[DONE] and more\n\n", b"event: x\r\ndata: [DONE]\r\n\r\n"]
END_IDS = ["plain", "prefix", "typed-crlf"]


@pytest.mark.parametrize("done", ENDS, ids=END_IDS)
def test_an_end_among_a_long_run_of_events_is_no_end(done: bytes) -> None:
    """A ``[DONE]`` in the middle of a long run, with more events after it in the same chunk, does not end the stream, and the run is not read one by one."""
    scanner = _burst(BURST + done + BURST + b"data: tail")
    assert not scanner.done
    assert not scanner.counted
    scanner.feed(b"\n\ndata: [DONE]\n\n")
    assert scanner.done


@pytest.mark.parametrize("done", ENDS, ids=END_IDS)
def test_a_long_run_ending_in_an_end_ends_the_stream(done: bytes) -> None:
    """A long run of events whose last complete event is a ``[DONE]`` ends the stream, its run unread."""
    scanner = _burst(BURST + done + b"data: unfinished")
    assert scanner.done
    assert not scanner.counted


@pytest.mark.parametrize(
    "after",
    [b"event: ping\ndata: {}\n\n", b"event: ping\ndata: {}\n\n: comment\n\n\n"],
    ids=["keepalive", "keepalive-comment"],
)
def test_a_long_run_ending_in_an_end_then_a_keepalive_is_no_end(after: bytes) -> None:
    """A long run whose ``[DONE]`` is followed by a keepalive in the same chunk does not end the stream; the run is read for its progress."""
    scanner = _burst(BURST + b"data: [DONE]\n\n" + after)
    assert not scanner.done
    assert (scanner.counted, scanner.events, scanner.heartbeats) == (True, 202, 1)


@pytest.mark.parametrize(
    "after",
    [b": keepalive\n\n", b"id: 7\nretry: 5\n\n", b"event: ping\n\n\n\n"],
    ids=["comment", "fields", "type only"],
)
def test_a_long_run_ending_in_an_end_then_no_event_ends_the_stream(after: bytes) -> None:
    """A long run whose ``[DONE]`` is followed in the chunk only by blocks without data (no events) ends the stream."""
    scanner = _burst(BURST + b"data: [DONE]\n\n" + after)
    assert scanner.done
    assert scanner.events == 202


def test_a_long_run_whose_last_event_is_a_keepalive_is_read_for_its_progress() -> None:
    """A chunk that ends in a keepalive is still progress when the run before it holds output; then every event is counted."""
    scanner = SSEScanner(("ping",))
    scanner.feed(PLAIN)
    assert scanner.feed(BURST + b"event: ping\ndata: {}\n\n") == 200
    assert (scanner.counted, scanner.heartbeats) == (True, 1)


def test_a_run_of_only_keepalives_is_not_progress() -> None:
    """A chunk of many keepalive events after output completes no progress event, and they are all counted."""
    scanner = _burst(b"event: ping\ndata: {}\n\n" * 300)
    assert (scanner.events, scanner.heartbeats, scanner.counted) == (1, 300, True)


def test_a_stream_read_a_few_events_at_a_time_stays_counted() -> None:
    """Thousands of events in reads of a few each are counted exactly: only a long run in one read is skipped."""
    scanner = _burst(*[PLAIN * 3] * 2000)
    assert (scanner.events, scanner.counted) == (6001, True)


def test_blank_line_runs_around_a_long_run_of_events_keep_the_decisions() -> None:
    """Runs of blank lines between the events of a long run change no decision: the last event is still found, and a ``[DONE]`` after it too."""
    scanner = _burst(BURST + b"\n\n\n\n" + PLAIN + b"\n\n\n" + b"data: [DONE]\n\n\n")
    assert scanner.done
    assert scanner.events >= 2


PENDING = [b"", b'data: {"par', b"event: ping\n", b"data: x\n", b": comm"]
PENDING_IDS = ["none", "data-line", "typed", "data-event", "comment"]
LAST = [
    PLAIN,
    b"data: [DONE]\n\n",
    b"data:[DONE]\n\n",
    b"event: ping\ndata: {}\n\n",
    b"data: {}\revent: ping\n\n",  # a keepalive: its type after a CR
]
LAST_IDS = ["output", "done", "done-no-space", "keepalive", "keepalive-cr"]
KEEPALIVES = b"event: ping\ndata: {}\n\n" * 100
TAILS = [
    b"",
    b'data: {"ch',
    b"data: [DONE]",
    b"event: ping\ndata: {}",
    b"data: a\r\rdata: b",
    b"data: a\r",
    b": c\n",
]
TAIL_IDS = ["none", "data-line", "done-line", "typed", "cr-event", "cr-pending", "comment"]


@pytest.mark.parametrize("tail", TAILS, ids=TAIL_IDS)
@pytest.mark.parametrize("last", LAST, ids=LAST_IDS)
@pytest.mark.parametrize("pending", PENDING, ids=PENDING_IDS)
@pytest.mark.parametrize("run", [BURST, KEEPALIVES], ids=["output", "keepalives"])
def test_a_skimmed_read_decides_as_a_read_one_by_one(
    run: bytes, pending: bytes, last: bytes, tail: bytes
) -> None:
    """A long read that ends a pending event and leaves one unfinished, judged from its last event, makes every decision a read parsed line by line makes: progress, done, and the reads after it."""
    # The read after the long one completes its unfinished event alone: decided by it.
    reads = [
        PLAIN + pending,
        b"al}\n\n" + run + last + tail,
        b"\n\n",
        PLAIN + b"data: [DONE]\n\n",
    ]
    with events_read_one_by_one_up_to(10**9):
        exact = SSEScanner(("ping",))
        exact_steps = [(exact.feed(read) > 0, exact.done) for read in reads]
    skimmed = SSEScanner(("ping",))
    assert [(skimmed.feed(read) > 0, skimmed.done) for read in reads] == exact_steps
    assert exact.counted
    assert (exact.events, exact.done) == reference_reads(reads, ("ping",))
    assert skimmed.events == exact.events if skimmed.counted else skimmed.events <= exact.events


@pytest.mark.parametrize(
    ("chunk", "head", "expected"),
    [
        (b"data: a\n\n", 0, (1, 0, 9)),
        (b"data: a\n\ndata:[DONE]\n\nda", 0, (2, 9, 22)),
        (b'x"}\n\ndata: a\n\ndata: b\n\ndata: c\n\n', 5, (3, 23, 32)),
        (b"data:\n\ndata: b\n\n", 0, (2, 7, 16)),
        (b"data: a\n\n\n\ndata: b\n\n", 0, None),  # a blank line between
        (b"data: a\nid: 1\n\n", 0, None),  # two lines
        (b"data: a\n\n: keepalive\n\n", 0, None),  # a comment
        (b"event: ping\ndata: a\n\n", 0, None),
        (b"data: a\r\n\r\n", 0, None),
        (b"data: a\n\ndata: b\r\n\n", 0, None),  # a CR inside the run
        (b"data a\n\n", 0, None),  # a field named otherwise
        (b"datum: a\n\n", 0, None),
        (b"data: a\n", 0, None),  # nothing complete
        (b"data: a\n\ndata: b", 0, (1, 0, 9)),  # the unfinished rest is not counted
    ],
    ids=[
        "one",
        "two-then-done",
        "after-a-pending-end",
        "empty-data",
        "blank-line-run",
        "two-lines",
        "comment",
        "typed",
        "crlf",
        "cr-inside",
        "no-colon",
        "other-field",
        "incomplete",
        "unfinished-rest",
    ],
)
def test_lone_events_counts_only_runs_of_one_data_line_events(
    chunk: bytes, head: int, expected: tuple[int, int, int] | None
) -> None:
    """A run of complete events is counted at once only when every event is one data line ended by a blank line, with no CR: how many, where the last starts and where the run ends."""
    assert lone_events(chunk, head) == expected


@pytest.mark.parametrize("size", [1, 7, 64, 300])
def test_short_reads_of_a_plain_stream_are_counted_exactly(size: int) -> None:
    """A plain stream read in short reads, past its first output, is counted event by event exactly, with [DONE] ending it, as the line parser counts it."""
    body = (
        b"data: first\n\n"
        + b"".join(b"data: %d\n\n" % i for i in range(200))
        + b"data: [DONE]\n\n"
    )
    scanner = SSEScanner()
    completed = sum(scanner.feed(body[i : i + size]) for i in range(0, len(body), size))
    assert (completed, scanner.events, scanner.counted, scanner.done) == (202, 202, True, True)
