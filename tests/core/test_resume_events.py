"""Tests for ``WholeEvents`` (a resumable stream is passed up in whole events) and the
scanner's and meter's tracking of a Responses stream (response id, event number, end)."""

from __future__ import annotations

import itertools
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_transport._core.progress import ProgressMeter
from hermes_transport._core.resume import TAIL_LIMIT, WholeEvents
from hermes_transport._core.sse import CAPTURE_LIMIT, SSEScanner
from hermes_transport._core.wires import Wire

# Pure logic: the same under every openai major (see the `once` marker).
pytestmark = pytest.mark.once

ENDINGS = (b"\n", b"\r", b"\r\n")
# The same examples on every run.
FUZZ = settings(
    deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def split_at(body: bytes, points: Iterable[int]) -> list[bytes]:
    """``body`` cut at the given offsets, in non-empty chunks (but an empty body's one)."""
    cuts = [0, *sorted(set(points) - {0, len(body)}), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


# --------------------------------------------------------------------------- SSE texts


@dataclass(frozen=True)
class Text:
    """An SSE text; per block (event or comment), where its blank line is complete (at
    the CR of a CRLF one) and whether it has data; ``cuts``: where a splice may fall."""

    body: bytes
    blank_lines: tuple[tuple[int, bool], ...]
    cuts: frozenset[int]


_VALUE = st.text(alphabet='ab z{}":,é0', max_size=10).map(str.encode)
_LINE = st.one_of(
    _VALUE.map(lambda value: b"data: " + value),
    st.sampled_from([b"data", b"data:", b"event: keepalive", b"id: 7", b"retry: 10"]),
    _VALUE.map(lambda value: b":" + value),  # a comment
)
# Lines longer than TAIL_LIMIT, or nearly: an event the tail cannot hold.
_BIG_LINE = st.sampled_from([TAIL_LIMIT - 40, TAIL_LIMIT, TAIL_LIMIT + 40]).map(
    lambda size: b"data: " + b"x" * size
)


@st.composite
def sse_texts(draw: st.DrawFn, line: st.SearchStrategy[bytes] = _LINE) -> Text:
    """Blocks of lines with mixed LF, CR and CRLF endings, each ended by a blank line,
    then maybe an unfinished block (what ``rest`` hands over)."""
    body = b""
    blank_lines: list[tuple[int, bool]] = []
    cuts = {0}
    for _ in range(draw(st.integers(0, 6), label="blocks")):
        lines = draw(st.lists(line, min_size=1, max_size=4))
        for text in lines:
            body += text + draw(st.sampled_from(ENDINGS))
        # After a CR, an LF would make it a CRLF: one line ending, not a blank line.
        blank = draw(st.sampled_from(ENDINGS[1:] if body.endswith(b"\r") else ENDINGS))
        body += blank
        complete = len(body) - 1 if blank == b"\r\n" else len(body)
        blank_lines.append((complete, any(text.startswith(b"data") for text in lines)))
        cuts.update((complete, len(body)))
    for text in draw(st.lists(line, max_size=2), label="unfinished block"):
        body += text + draw(st.sampled_from((b"", *ENDINGS)))
        if not body.endswith((b"\r", b"\n")):
            break
    return Text(body, tuple(blank_lines), frozenset(cuts))


def _check(text: Text, points: Sequence[int], *, count_events: bool) -> None:
    whole = WholeEvents()
    fed, passed = 0, b""
    for chunk in split_at(text.body, points):
        passed += whole.take(chunk)
        fed += len(chunk)
        assert fed - len(passed) <= TAIL_LIMIT + len(chunk), "held too much"
        # What is passed up ends at a splice point, unless part of a long event was.
        assert whole.mid_event == (len(passed) not in text.cuts)
        # Every blank line that arrived has been passed up: no whole event is held.
        seen = [at for at, _ in text.blank_lines if at <= fed]
        assert len(passed) >= max(seen, default=0)
        if count_events:
            # The events a fresh scanner finds in what was passed up are those whose
            # blank line was passed up.
            scanner = SSEScanner()
            scanner.feed(passed)
            assert scanner.events == sum(
                1 for at, data in text.blank_lines if data and at <= len(passed)
            )
    assert passed + whole.rest() == text.body
    assert whole.rest() == b""


@settings(FUZZ, max_examples=400)
@given(text=sse_texts(), data=st.data())
def test_fuzz_whole_events_pass_up_every_byte_and_cut_only_between_events(
    text: Text, data: st.DataObject
) -> None:
    """Any SSE text with mixed line endings and comments, chunked anywhere, is passed up byte for byte, each piece ending at an event boundary and holding back no whole event."""
    points = data.draw(st.lists(st.integers(0, len(text.body)), max_size=12), label="points")
    _check(text, points, count_events=True)


@settings(FUZZ, max_examples=40)
@given(text=sse_texts(st.one_of(_LINE, _BIG_LINE)), data=st.data())
def test_fuzz_events_longer_than_the_tail_limit_are_passed_up(
    text: Text, data: st.DataObject
) -> None:
    """With events near or past TAIL_LIMIT, every byte is still passed up, at most TAIL_LIMIT plus one chunk is held, and mid_event says exactly when what was passed up ends inside an event."""
    points = data.draw(st.lists(st.integers(0, len(text.body)), max_size=10), label="points")
    _check(text, points, count_events=False)


@pytest.mark.parametrize(
    ("chunks", "passed", "held"),
    [
        ([b"data: a\r", b"\n\r\n"], [b"", b"data: a\r\n\r\n"], b""),
        ([b"data: a\n\r", b"\ndata: b\n\n"], [b"data: a\n\r", b"\ndata: b\n\n"], b""),
        ([b"data: a\n", b"\ndata: b"], [b"", b"data: a\n\n"], b"data: b"),
        ([b"data: a\r", b"\r"], [b"", b"data: a\r\r"], b""),
        ([b"data: a\r", b"\r\n"], [b"", b"data: a\r\r\n"], b""),
        ([b"data: a\r\n", b"\r\n"], [b"", b"data: a\r\n\r\n"], b""),
        # The LF after a blank line's CR ends that line (CRLF): passed up with it.
        ([b"data: a\r\n\r", b"\n"], [b"data: a\r\n\r", b"\n"], b""),
        ([b"data: a", b"\r", b"\n", b"\r", b"\n"], [b"", b"", b"", b"data: a\r\n\r", b"\n"], b""),
        ([b": ping\n\ndata: a\ndata", b": b\n\n"], [b": ping\n\n", b"data: a\ndata: b\n\n"], b""),
        ([b"data: a\n\ndata: b\n\ndata: c"], [b"data: a\n\ndata: b\n\n"], b"data: c"),
    ],
    ids=repr,
)
def test_whole_events_cut_at_blank_lines_whatever_the_chunking(
    chunks: list[bytes], passed: list[bytes], held: bytes
) -> None:
    """A blank line split across chunks (a CRLF cut in two, "\\n" then "\\r", a lone CR) still ends the event, and only whole events are passed up."""
    whole = WholeEvents()
    assert [whole.take(chunk) for chunk in chunks] == passed
    assert not whole.mid_event
    assert whole.rest() == held


@pytest.mark.parametrize(
    ("first", "second"),
    [(b"data: a\n", b"\n"), (b"data: a\r", b"\r"), (b"data: a\r\n", b"\r\n")],
    ids=["LF", "CR", "CRLF"],
)
def test_an_empty_chunk_inside_a_blank_line_does_not_hide_it(first: bytes, second: bytes) -> None:
    """An empty chunk between a line's ending and the blank line after it (an inner stream may yield one) does not keep the event from being passed up."""
    whole = WholeEvents()
    assert whole.take(first) == b""
    assert whole.take(b"") == b""
    assert whole.take(second) == first + second
    assert whole.rest() == b""


def test_an_event_longer_than_the_tail_limit_is_passed_up_until_it_ends() -> None:
    """An event longer than TAIL_LIMIT is passed up once it outgrows the limit, mid_event is true until it ends, then false again."""
    whole = WholeEvents()
    assert whole.take(b"data: a\n\n") == b"data: a\n\n"
    big = b"data: " + b"x" * TAIL_LIMIT
    step = 256 * 1024
    passed = [whole.take(big[i : i + step]) for i in range(0, len(big), step)]
    assert b"".join(passed) == big
    assert passed[:-1] == [b""] * (len(passed) - 1), "held while within the limit"
    assert whole.mid_event
    assert whole.take(b"yyy") == b""
    assert whole.mid_event
    assert whole.take(b"\n\ndata: b") == b"yyy\n\n"
    assert not whole.mid_event
    assert whole.rest() == b"data: b"


def test_a_long_tail_after_a_boundary_is_held_for_one_chunk_only() -> None:
    """A chunk that ends an event and then brings more than TAIL_LIMIT of the next one holds that tail until the next chunk, which passes it up."""
    whole = WholeEvents()
    tail = b"data: " + b"x" * (TAIL_LIMIT + 10)
    assert whole.take(b"data: a\n\n" + tail) == b"data: a\n\n"
    assert not whole.mid_event
    assert whole.take(b"y") == tail + b"y"
    assert whole.mid_event


@pytest.mark.parametrize("blank", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_the_blank_line_right_after_a_passed_up_long_event_ends_it(blank: bytes) -> None:
    """When the chunk that outgrows TAIL_LIMIT ends with the long event's last line ending, the blank line in the next chunk ends the event: mid_event turns false at once."""
    whole = WholeEvents()
    big = b"data: " + b"x" * TAIL_LIMIT + blank
    assert whole.take(big) == big
    assert whole.mid_event
    assert whole.take(blank) == blank
    assert not whole.mid_event, "the event has ended: a resume could splice here"
    assert whole.rest() == b""


def test_drop_forgets_the_unfinished_event() -> None:
    """drop() forgets the held tail of an unfinished event: neither rest() nor the next take() passes it up."""
    whole = WholeEvents()
    assert whole.take(b"data: a\n\ndata: par") == b"data: a\n\n"
    whole.drop()
    assert whole.take(b"data: b\n\n") == b"data: b\n\n"
    assert whole.rest() == b""


# --------------------------------------------------------------------------- tracking

RESPONSE = {"id": "resp_1", "object": "response", "status": "queued"}
ITEM = {"id": "msg_1", "type": "message", "content": []}


def event(kind: str, number: int, ending: bytes = b"\n", **fields: object) -> bytes:
    """A Responses event as the API sends it: its type, its number, then its fields."""
    data = json.dumps({"type": kind, "sequence_number": number, **fields}).encode()
    return b"event: " + kind.encode() + ending + b"data: " + data + ending + ending


def stream(ending: bytes = b"\n") -> list[bytes]:
    """A background stream's events, numbered 0 to 8, with a keepalive numbered 6."""
    return [
        event("response.created", 0, ending, response=RESPONSE),
        event("response.queued", 1, ending, response=RESPONSE),
        event("response.in_progress", 2, ending, response={**RESPONSE, "status": "in_progress"}),
        event("response.output_item.added", 3, ending, output_index=0, item=ITEM),
        event("response.content_part.added", 4, ending, part={"type": "output_text", "text": ""}),
        event("response.output_text.delta", 5, ending, delta="hello"),
        event("keepalive", 6, ending),
        event("response.output_text.delta", 7, ending, delta=" world"),
        event("response.completed", 8, ending, response={**RESPONSE, "status": "completed"}),
    ]


def tracker(wire: Wire = "responses", *, track: bool = True) -> SSEScanner:
    return SSEScanner(("keepalive",), wire, track=track)


@pytest.mark.parametrize("ending", ENDINGS, ids=["LF", "CR", "CRLF"])
@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "bytewise"])
def test_tracking_follows_the_id_the_last_event_number_and_the_end(
    ending: bytes, bytewise: bool
) -> None:
    """The response id comes from response.created, the sequence is the number of the last whole event (keepalives included), and finished turns true only with response.completed; a later event naming another response changes no id."""
    scanner = tracker()
    assert (scanner.response_id, scanner.sequence, scanner.finished) == (None, -1, False)
    events = stream(ending)
    for number, raw in enumerate(events):
        for chunk in [raw[i : i + 1] for i in range(len(raw))] if bytewise else [raw]:
            scanner.feed(chunk)
        assert scanner.response_id == "resp_1"
        assert scanner.sequence == number
        assert scanner.finished == (number == len(events) - 1)
    assert scanner.events == 3, "two deltas and the end are progress, the keepalive is not"
    scanner.feed(event("response.created", 9, response={**RESPONSE, "id": "resp_2"}))
    assert scanner.response_id == "resp_1", "the first lifecycle event named the response"


@pytest.mark.parametrize(
    ("kind", "fields"),
    [
        ("response.completed", {"response": {**RESPONSE, "status": "completed"}}),
        ("response.incomplete", {"response": {**RESPONSE, "status": "incomplete"}}),
        ("error", {"code": "server_error", "message": "boom"}),
        ("response.failed", {"response": {**RESPONSE, "error": {"code": "server_error"}}}),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
@pytest.mark.parametrize("after_output", [False, True], ids=["before-output", "after-output"])
def test_an_end_or_error_event_finishes_the_response(
    kind: str, fields: dict[str, object], after_output: bool
) -> None:
    """response.completed, response.incomplete, error and response.failed each finish the response, before or after output."""
    scanner = tracker()
    events = stream()[: 6 if after_output else 3]
    for raw in events:
        scanner.feed(raw)
    assert not scanner.finished
    scanner.feed(event(kind, len(events), b"\n", **fields))
    assert scanner.finished
    assert scanner.sequence == len(events)
    assert scanner.response_id == "resp_1"


@pytest.mark.parametrize("cut", [1, 2, 20], ids=lambda cut: f"last-{cut}-bytes-missing")
def test_an_unfinished_event_does_not_move_the_sequence(cut: int) -> None:
    """The number of an event whose blank line has not arrived is not taken, nor its end."""
    scanner = tracker()
    for raw in stream()[:5]:
        scanner.feed(raw)
    last = event("response.completed", 5, response=RESPONSE)
    scanner.feed(last[:-cut])
    assert (scanner.sequence, scanner.finished) == (4, False)
    scanner.feed(last[-cut:])
    assert (scanner.sequence, scanner.finished) == (5, True)


def test_the_id_of_a_huge_response_object_is_found() -> None:
    """A response.created larger than CAPTURE_LIMIT, its id first, still names the response and its number."""
    huge = {"id": "resp_big", "object": "response", "instructions": "x" * (2 * CAPTURE_LIMIT)}
    raw = event("response.created", 0, response=huge)
    assert len(raw) > 2 * CAPTURE_LIMIT
    scanner = tracker()
    for i in range(0, len(raw), 1000):
        scanner.feed(raw[i : i + 1000])
    assert (scanner.response_id, scanner.sequence, scanner.finished) == ("resp_big", 0, False)
    scanner.feed(event("response.output_text.delta", 1, delta="hi"))
    assert scanner.sequence == 1


@pytest.mark.parametrize(
    ("wire", "track"),
    [("responses", False), ("chat_completions", True), ("messages", True), ("generic", True)],
)
def test_nothing_is_tracked_without_track_or_off_the_responses_wire(
    wire: Wire, track: bool
) -> None:
    """Without track, or on a wire other than Responses, neither the scanner nor the meter tracks an id, a number or an end (.tracks is false)."""
    scanner = tracker(wire, track=track)
    meter = ProgressMeter("", ("keepalive",), wire, track=track)
    assert not meter.tracks
    for raw in stream():
        scanner.feed(raw)
        meter.feed(raw)
    assert (scanner.response_id, scanner.sequence, scanner.finished) == (None, -1, False)
    assert (meter.response_id, meter.sequence, meter.finished) == (None, -1, False)


@pytest.mark.parametrize("encoding", ["", "gzip"])
def test_the_meter_exposes_what_its_scanner_tracks(encoding: str) -> None:
    """ProgressMeter(track=True) on the Responses wire tracks (.tracks) and shows the id, the sequence and the end, compressed or not."""
    meter = ProgressMeter(encoding, ("keepalive",), "responses", track=True)
    assert meter.tracks
    body = b"".join(stream())
    if encoding:
        packer = zlib.compressobj(6, zlib.DEFLATED, zlib.MAX_WBITS | 16)
        body = packer.compress(body) + packer.flush()
    for i in range(0, len(body), 97):
        meter.feed(body[i : i + 97])
    assert (meter.response_id, meter.sequence, meter.finished) == ("resp_1", 8, True)
