"""Tests for ``wires``: which wire a request speaks, and how the scanner sorts each wire's events."""

from __future__ import annotations

import itertools
import json
import re
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_transport._core.progress import ProgressMeter
from hermes_transport._core.sse import CAPTURE_LIMIT, SSEScanner
from hermes_transport._core.wire_paths import wire_of
from hermes_transport._core.wires import (
    ErrorEvent,
    Wire,
    classify,
)

from _support import MIDDLES, events_read_one_by_one_up_to

# Pure scanning: the same under every openai major (see the `once` marker).
pytestmark = pytest.mark.once


def event(kind: str | None, payload: dict[str, Any], *, newline: bytes = b"\n") -> bytes:
    """One SSE event: an ``event:`` line when ``kind`` is given, and one data line."""
    head = b"event: " + kind.encode() + newline if kind is not None else b""
    return head + b"data: " + json.dumps(payload).encode() + newline + newline


def responses(kind: str, **fields: Any) -> bytes:
    """A Responses API event, named and typed alike."""
    return event(kind, {"type": kind, "sequence_number": 0, **fields})


def messages(kind: str, **fields: Any) -> bytes:
    """An Anthropic Messages event, named and typed alike."""
    return event(kind, {"type": kind, **fields})


CREATED = responses("response.created", response={"id": "resp_1", "status": "in_progress"})
IN_PROGRESS = responses("response.in_progress", response={"id": "resp_1"})
ITEM_ADDED = responses("response.output_item.added", item={"type": "message", "content": []})
PART_ADDED = responses("response.content_part.added", part={"type": "output_text", "text": ""})
KEEPALIVE = responses("keepalive")
DELTA = responses("response.output_text.delta", delta="hi")
COMPLETED = responses("response.completed", response={"id": "resp_1", "status": "completed"})
RESPONSES_PREAMBLE = CREATED + IN_PROGRESS + ITEM_ADDED + PART_ADDED

MESSAGE_START = messages("message_start", message={"id": "msg_1", "content": []})
BLOCK_START = messages("content_block_start", index=0, content_block={"type": "text", "text": ""})
PING = messages("ping")
BLOCK_DELTA = messages("content_block_delta", delta={"type": "text_delta", "text": "hi"})
MESSAGE_STOP = messages("message_stop")


def scan(
    wire: Wire, *chunks: bytes, heartbeats: tuple[str, ...] = (), track: bool = False
) -> SSEScanner:
    """A scanner of ``wire`` fed ``chunks`` one by one."""
    scanner = SSEScanner(heartbeats, wire, track=track)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner


@pytest.mark.parametrize(
    ("path", "wire"),
    [
        ("/v1/chat/completions", "chat_completions"),
        ("/openai/deployments/gpt/chat/completions", "chat_completions"),
        ("/v1/responses", "responses"),
        ("/v1/responses/resp_123", "responses"),
        ("/v1/responses/", "responses"),
        ("/v1/messages", "messages"),
        ("/anthropic/v1/messages/", "messages"),
        ("/v1/responses/resp_123/cancel", "generic"),
        ("/v1/responses/resp_123/input_items", "generic"),
        ("/v1/messages/count_tokens", "generic"),
        ("/v1/completions", "generic"),
        ("/", "generic"),
    ],
)
def test_the_wire_is_known_from_the_request_path(path: str, wire: Wire) -> None:
    """Chat Completions, Responses (create and resume) and Messages paths name their wire; others are generic."""
    assert wire_of(path) == wire


@pytest.mark.parametrize(
    ("wire", "event_type", "data", "expected"),
    [
        ("responses", b"response.created", b"{}", "preamble"),
        ("responses", b"response.queued", b"{}", "preamble"),
        ("responses", b"response.output_item.added", b'{"item": {"content": []}}', "preamble"),
        (
            "responses",
            b"response.output_item.added",
            b'{"item": {"type": "function_call", "arguments": ""}}',
            "preamble",
        ),
        (
            "responses",
            b"response.output_item.added",
            b'{"item": {"type": "web_search_call", "output": "found"}}',
            "output",
        ),
        ("responses", b"response.output_item.added", b'{"item": {"content": [', "output"),
        ("responses", b"response.output_text.delta", b"{}", "output"),
        ("responses", b"response.some_future_event", b"{}", "output"),
        ("responses", b"response.completed", b"{}", "end"),
        ("responses", b"response.incomplete", b"{}", "end"),
        ("responses", b"keepalive", b"{}", "heartbeat"),
        ("messages", b"message_start", b"{}", "preamble"),
        ("messages", b"content_block_start", b'{"content_block": {"text": ""}}', "preamble"),
        (
            "messages",
            b"content_block_start",
            b'{"content_block": {"type": "web_search_tool_result", "content": [{}]}}',
            "output",
        ),
        ("messages", b"content_block_delta", b"{}", "output"),
        ("messages", b"message_delta", b"{}", "output"),
        ("messages", b"message_stop", b"{}", "end"),
        ("messages", b"ping", b"{}", "heartbeat"),
        ("chat_completions", b"message", b'{"choices": []}', "output"),
        (
            "chat_completions",
            b"message",
            b'{"choices": [{"delta": {"content": "error"}}]}',
            "output",
        ),
        ("generic", b"message", b'{"error": {"code": 500}}', "output"),
        ("generic", b"response.created", b"{}", "output"),
    ],
)
def test_each_event_type_has_its_class(
    wire: Wire, event_type: bytes, data: bytes, expected: str
) -> None:
    """Lifecycle and empty openings are preamble, content is output, the last event is the end."""
    assert classify(wire, event_type, data, {b"keepalive", b"ping"}) == expected


@pytest.mark.parametrize(
    ("wire", "event_type", "data", "kind", "transient"),
    [
        (
            "messages",
            b"error",
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}',
            "overloaded_error",
            True,
        ),
        ("messages", b"error", b'{"error": {"type": "api_error"}}', "api_error", True),
        (
            "messages",
            b"error",
            b'{"error": {"type": "invalid_request_error"}}',
            "invalid_request_error",
            False,
        ),
        (
            "responses",
            b"error",
            b'{"type": "error", "code": "server_error"}',
            "server_error",
            True,
        ),
        ("responses", b"error", b'{"error": {"code": "server_error"}}', "server_error", True),
        (
            "responses",
            b"response.failed",
            b'{"response": {"status": "failed", "error": {"code": "server_error"}}}',
            "server_error",
            True,
        ),
        (
            "responses",
            b"response.failed",
            b'{"response": {"error": {"code": "invalid_prompt"}}}',
            "invalid_prompt",
            False,
        ),
        ("responses", b"error", b'{"code": "rate_limit_exceeded"}', "rate_limit_exceeded", False),
        ("responses", b"error", b"not json", None, False),
        ("chat_completions", b"message", b'{"error": {"code": 502}}', "502", True),
        ("chat_completions", b"message", b'{"error": {"code": "429"}}', "429", True),
        (
            "chat_completions",
            b"message",
            b'{"error": {"type": "server_error", "code": null}}',
            "server_error",
            True,
        ),
        ("chat_completions", b"message", b'{"error": {"code": 400}}', "400", False),
        ("chat_completions", b"message", b'{"error": "something broke"}', None, False),
    ],
)
def test_error_events_say_whether_the_server_failed_transiently(
    wire: Wire, event_type: bytes, data: bytes, kind: str | None, transient: bool
) -> None:
    """Overloaded and server errors are transient; request errors, rate limits on Responses and unreadable ones are not."""
    error = classify(wire, event_type, data, frozenset())
    assert isinstance(error, ErrorEvent)
    assert (error.kind, error.transient) == (kind, transient)


def test_responses_preamble_and_keepalives_are_not_progress() -> None:
    """Lifecycle events, empty openings and keepalives leave the count at zero; the first delta is progress."""
    scanner = scan("responses", RESPONSES_PREAMBLE, KEEPALIVE * 3, heartbeats=("keepalive",))
    assert (scanner.events, scanner.done, scanner.error) == (0, False, None)
    assert scanner.feed(DELTA) == 1
    assert scanner.feed(KEEPALIVE) == 0
    assert scanner.feed(COMPLETED) == 1
    assert scanner.done


def test_messages_preamble_and_pings_are_not_progress() -> None:
    """message_start, an empty content_block_start and pings leave the count at zero; message_stop ends."""
    scanner = scan("messages", MESSAGE_START + BLOCK_START + PING, heartbeats=("ping",))
    assert scanner.events == 0
    assert scanner.feed(BLOCK_DELTA + PING) == 1
    assert scanner.feed(MESSAGE_STOP) == 1
    assert scanner.done


# Per wire: output, its end event, and a keepalive the default heartbeats name.
ENDINGS: dict[Wire, tuple[bytes, bytes, bytes]] = {
    "responses": (DELTA, COMPLETED, KEEPALIVE),
    "messages": (BLOCK_DELTA, MESSAGE_STOP, PING),
    "chat_completions": (b'data: {"choices": []}\n\n', b"data: [DONE]\n\n", PING),
}


@pytest.mark.parametrize("middle", MIDDLES)
@pytest.mark.parametrize("burst", [1, 100], ids=["one event", "long run"])
@pytest.mark.parametrize("wire", sorted(ENDINGS))
def test_an_end_event_ends_the_stream_only_as_the_last_event_of_its_read(
    wire: Wire, burst: int, middle: int
) -> None:
    """A wire's end event ends the stream when it is its read's last complete event; followed in the read by a keepalive or more output, it does not, and a later read ending in it does."""
    output, end, keepalive = ENDINGS[wire]
    opening = {"responses": RESPONSES_PREAMBLE, "messages": MESSAGE_START + BLOCK_START}
    with events_read_one_by_one_up_to(middle):
        for after, done in [(b"", True), (b": comment\n\n", True), (keepalive, False)]:
            scanner = scan(wire, opening.get(wire, b"") + output, heartbeats=HB)
            scanner.feed(output * burst + end + after)
            assert scanner.done is done, after
        body = (opening.get(wire, b"") + output, output * burst + end + output)
        scanner = scan(wire, *body, heartbeats=HB)
        assert not scanner.done
        scanner.feed(keepalive + end)
        assert scanner.done
        scanner.feed(output)
        assert scanner.done  # once ended, for good


def test_a_tracked_response_is_over_at_its_end_event_even_with_events_after_it() -> None:
    """A resumable Responses stream whose ``response.completed`` is followed by a keepalive in the same read is over (not resumed), though its read did not end the stream."""
    scanner = scan("responses", RESPONSES_PREAMBLE + DELTA, heartbeats=HB, track=True)
    scanner.feed(COMPLETED + _numbered(KEEPALIVE, 9))
    assert (scanner.finished, scanner.done, scanner.sequence) == (True, False, 9)


def test_without_an_event_field_the_data_type_names_the_event() -> None:
    """On a JSON wire an event with no ``event:`` line is typed by its data's leading "type"."""
    plain = [event(None, {"type": kind, "sequence_number": 1}) for kind in ("response.created",)]
    keepalive = event(None, {"type": "keepalive", "sequence_number": 2})
    delta = event(None, {"type": "response.output_text.delta", "delta": "x"})
    scanner = scan("responses", *plain, keepalive, heartbeats=("keepalive",))
    assert scanner.events == 0
    assert scanner.feed(delta) == 1


@pytest.mark.parametrize(
    ("wire", "before", "error"),
    [
        (
            "messages",
            MESSAGE_START,
            messages("error", error={"type": "overloaded_error", "message": "Overloaded"}),
        ),
        ("responses", CREATED, responses("error", code="server_error", message="boom")),
        ("chat_completions", b"", event(None, {"error": {"message": "boom", "code": 503}})),
    ],
)
def test_an_error_before_any_output_is_kept_not_counted(
    wire: Wire, before: bytes, error: bytes
) -> None:
    """An error event after only preamble is kept as ``error``; after output it is plain progress."""
    scanner = scan(wire, before, error)
    assert scanner.events == 0
    assert scanner.error is not None
    assert scanner.error.transient
    after = scan(wire, before, BLOCK_DELTA if wire == "messages" else DELTA, error)
    assert after.error is None
    assert after.events == 2


def test_chat_completions_keeps_its_fast_path_after_the_first_output() -> None:
    """After its first output a Chat Completions stream counts every data event, an error chunk too."""
    chunk = b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n'
    scanner = scan("chat_completions", chunk)
    assert not scanner._capture
    assert scanner.feed(chunk * 5 + b'data: {"error": {"code": 500}}\n\n') == 6
    assert scanner.feed(b"data: [DONE]\n\n") == 1
    assert scanner.done


def test_captured_data_stays_bounded() -> None:
    """A huge data line on a classifying wire keeps at most CAPTURE_LIMIT bytes, and is judged on them."""
    huge = b"x" * (3 * CAPTURE_LIMIT)
    scanner = SSEScanner((), "responses")
    scanner.feed(b'event: response.output_item.added\ndata: {"item": {"content": "')
    for _ in range(4):
        scanner.feed(huge)
        assert len(scanner._line) <= CAPTURE_LIMIT
    scanner.feed(b'"}}\n')
    assert sum(map(len, scanner._data)) <= CAPTURE_LIMIT
    assert scanner.feed(b"\n") == 1  # unreadable once cut short: it may carry content


def test_the_meter_reads_compressed_wires() -> None:
    """Through gzip the meter sorts Responses events as plainly as without it."""
    body = RESPONSES_PREAMBLE + KEEPALIVE + DELTA + COMPLETED
    zipper = zlib.compressobj(wbits=31)
    packed = zipper.compress(body) + zipper.flush()
    meter = ProgressMeter("gzip", {"keepalive"}, "responses")
    counts = [meter.feed(packed[i : i + 7]) for i in range(0, len(packed), 7)]
    assert sum(counts) == 2
    assert meter.done


STREAMS: dict[Wire, bytes] = {
    "responses": RESPONSES_PREAMBLE + KEEPALIVE + DELTA + KEEPALIVE + DELTA + COMPLETED,
    "messages": MESSAGE_START + BLOCK_START + PING + BLOCK_DELTA + PING + MESSAGE_STOP,
    "chat_completions": b'data: {"choices": []}\n\n' * 3 + b"data: [DONE]\n\n",
}


@pytest.mark.parametrize("wire", sorted(STREAMS))
@given(cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=30), crlf=st.booleans())
def test_any_chunking_gives_the_same_verdict(wire: Wire, cuts: list[int], crlf: bool) -> None:
    """However a stream is split into chunks, and with CRLF or LF, the scanner counts the same events."""
    body = STREAMS[wire].replace(b"\n", b"\r\n") if crlf else STREAMS[wire]
    whole = scan(wire, body, heartbeats=("keepalive", "ping"))
    points = sorted({min(cut, len(body)) for cut in cuts} | {0, len(body)})
    pieces = [body[a:b] for a, b in itertools.pairwise(points)]
    split = scan(wire, *pieces, heartbeats=("keepalive", "ping"))
    assert (split.events, split.done) == (whole.events, whole.done)
    assert whole.events == {"responses": 3, "messages": 2, "chat_completions": 4}[wire]


# Events of each wire with the class the scanner must give them (None: not an event).
_POOL: dict[Wire, list[tuple[bytes, str | None]]] = {
    "responses": [
        (CREATED, "preamble"),
        (ITEM_ADDED, "preamble"),
        (PART_ADDED, "preamble"),
        (KEEPALIVE, "heartbeat"),
        (event(None, {"type": "keepalive", "sequence_number": 9}), "heartbeat"),
        (DELTA, "output"),
        (event(None, {"type": "response.output_text.delta", "delta": "x"}), "output"),
        (responses("response.output_item.added", item={"content": [{"text": "x"}]}), "output"),
        (COMPLETED, "end"),
        (responses("error", code="server_error"), "transient"),
        (
            b'event: response.failed\ndata: {"type": "response.failed",\n'
            b'data:  "response": {"error": {"code": "invalid_prompt"}}}\n\n',
            "error",
        ),
        (b": a comment\n\n", None),
        (b"event: response.output_text.delta\nid: 7\n\n", None),  # no data: no event
    ],
    "messages": [
        (MESSAGE_START, "preamble"),
        (BLOCK_START, "preamble"),
        (PING, "heartbeat"),
        (BLOCK_DELTA, "output"),
        (messages("message_delta", delta={"stop_reason": "end_turn"}), "output"),
        (MESSAGE_STOP, "end"),
        (messages("error", error={"type": "overloaded_error"}), "transient"),
        (messages("error", error={"type": "invalid_request_error"}), "error"),
        (b"event: ping\n:comment\ndata: {}\n\n", "heartbeat"),
    ],
    "chat_completions": [
        (b'data: {"choices": [{"delta": {"content": "x"}}]}\n\n', "output"),
        (b'data: {"error": {"code": 503, "message": "busy"}}\n\n', "transient"),
        (b'data: {"error": {"code": 400}}\n\n', "error"),
        (b"event: ping\ndata: {}\n\n", "heartbeat"),
        (b": keepalive\n\n", None),
        (b"data: [DONE]\n\n", "end"),
    ],
}


def _expected(classes: list[str | None]) -> tuple[int, str | None]:
    """(progress events, the class of the error kept) the scanner must end with."""
    progress, error = 0, None
    for kind in classes:
        if kind in ("output", "end") or (kind in ("error", "transient") and progress):
            progress += 1
        elif kind in ("error", "transient") and error is None:
            error = kind
    return progress, error


def _ended(classes: list[str | None], completed_at: list[int], reads: list[int]) -> bool:
    """Whether a read (ending at each offset of ``reads``) ended the stream: the last event
    it had completed, of any class (``None``: no event), was an end."""
    events = [(at, kind) for at, kind in zip(completed_at, classes, strict=True) if kind]
    for end in reads:
        done = [kind for at, kind in events if at <= end]
        if done and done[-1] == "end":
            return True
    return False


@pytest.mark.parametrize("middle", MIDDLES)
@pytest.mark.parametrize("wire", sorted(_POOL))
@given(
    picks=st.lists(st.integers(min_value=0, max_value=99), min_size=1, max_size=25),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=40),
    crlf=st.booleans(),
    track=st.booleans(),
)
def test_the_scanner_sorts_any_mix_of_a_wires_events_however_chunked(
    middle: int, wire: Wire, picks: list[int], cuts: list[int], crlf: bool, track: bool
) -> None:
    """Any sequence of a wire's events, split anywhere, ends where a read's last event is an end, and keeps its first early error as the events say, counted exactly while the scanner says so; a tracked stream sees any end."""
    pool = _POOL[wire]
    chosen = [pool[pick % len(pool)] for pick in picks]
    raws = [_numbered(raw, number) for number, (raw, _) in enumerate(chosen)]
    if crlf:
        raws = [raw.replace(b"\n", b"\r\n") for raw in raws]
    body = b"".join(raws)
    # Where each event completes: at the CR of its last CRLF, or its last LF.
    completed_at = list(itertools.accumulate(len(raw) for raw in raws))
    completed_at = [at - 1 if crlf else at for at in completed_at]
    points = sorted({min(cut, len(body)) for cut in cuts} | {0, len(body)})
    with events_read_one_by_one_up_to(middle):
        scanner = scan(
            wire, *(body[a:b] for a, b in itertools.pairwise(points)), heartbeats=HB, track=track
        )
    kinds = [kind for _, kind in chosen]
    progress, error = _expected(kinds)
    assert scanner.done == _ended(kinds, completed_at, points[1:])
    assert (scanner.events == progress) if scanner.counted else (scanner.events <= progress)
    kept = None if scanner.error is None else ("transient" if scanner.error.transient else "error")
    assert kept == error
    if track and wire == "responses":
        assert scanner.finished == any(kind in ("end", "error", "transient") for kind in kinds)
        numbers = [_SEQUENCE.findall(_numbered(raw, n)) for n, (raw, _) in enumerate(chosen)]
        last = [int(found[-1]) for found in numbers if found]
        assert scanner.sequence == (last[-1] if last else -1)  # where a resume would start


_SEQUENCE = re.compile(rb'"sequence_number": ?(\d+)')


def _numbered(raw: bytes, number: int) -> bytes:
    """``raw`` with its ``sequence_number`` (if it has one) set to ``number``."""
    return raw.replace(b'"sequence_number": 0', b'"sequence_number": %d' % number)


HB = ("keepalive", "ping")


@pytest.mark.parametrize("middle", MIDDLES)
@pytest.mark.parametrize(
    "last",
    [KEEPALIVE, ITEM_ADDED, DELTA],
    ids=["keepalive", "item added", "output"],
)
@pytest.mark.parametrize("text", ["hi", "the task is complete"], ids=["plain", "end word"])
def test_a_tracked_stream_knows_the_number_of_the_last_event_of_a_long_chunk(
    middle: int, last: bytes, text: str
) -> None:
    """A burst of numbered events in one read, whatever it ends with and says, leaves the number of its last event: a resume starts right after it."""
    burst = [responses("response.output_text.delta", delta=text) for _ in range(40)] + [last]
    numbered = [_numbered(raw, number) for number, raw in enumerate(burst, start=5)]
    with events_read_one_by_one_up_to(middle):
        scanner = scan("responses", RESPONSES_PREAMBLE + DELTA, b"".join(numbered), track=True)
    assert scanner.sequence == 5 + len(burst) - 1


#: Per wire: an event of a type that is always output, an opening that may be preamble,
#: and a keepalive; each whole, one event line and one data line.
TYPED: dict[Wire, tuple[bytes, bytes, bytes]] = {
    "responses": (DELTA, ITEM_ADDED, KEEPALIVE),
    "messages": (BLOCK_DELTA, BLOCK_START, PING),
}
LAST_TYPED = ["output", "done-data", "opening", "keepalive", "keepalive-cr", "end", "crlf"]


def _typed_last(wire: Wire, which: str) -> bytes:
    output, opening, keepalive = TYPED[wire]
    end = {"responses": COMPLETED, "messages": MESSAGE_STOP}[wire]
    return {
        "output": output,
        "done-data": output.split(b"\n")[0] + b"\ndata: [DONE]\n\n",
        "opening": opening,
        "keepalive": keepalive,
        "keepalive-cr": keepalive.replace(b"\n", b"\r\n", 1),  # its type line ends in CRLF
        "end": end,
        "crlf": output.replace(b"\n", b"\r\n"),
    }[which]


@pytest.mark.parametrize(
    "tail", [b"", b"event: ping\ndata: {", b'data: {"ty'], ids=["none", "typed", "data"]
)
@pytest.mark.parametrize(
    "pending",
    [b"", b"event: ping\n", b"event: error\ndata: {"],
    ids=["none", "keepalive", "error"],
)
@pytest.mark.parametrize("last", LAST_TYPED)
@pytest.mark.parametrize("run", ["output", "keepalives"])
@pytest.mark.parametrize("wire", sorted(TYPED))
def test_a_read_judged_from_its_typed_last_event_decides_as_one_read_one_by_one(
    wire: Wire, run: str, last: str, pending: bytes, tail: bytes
) -> None:
    """On a classifying wire, a long read whose last event's type alone makes it output is judged from that event, and every decision (progress, done, the reads after it) is the one a read parsed line by line makes; a ``[DONE]`` in its data still ends the stream."""
    output, _, keepalive = TYPED[wire]
    opening = {"responses": RESPONSES_PREAMBLE, "messages": MESSAGE_START + BLOCK_START}[wire]
    ends_pending = b"}\n\n" if pending.endswith(b"{") else b"\n"
    events = (output if run == "output" else keepalive) * 100
    reads = [
        opening + output + pending,
        ends_pending + events + _typed_last(wire, last) + tail,
        b"}\n\n",
        output + MESSAGE_STOP + COMPLETED,
    ]
    with events_read_one_by_one_up_to(10**9):
        exact = SSEScanner(HB, wire)
        exact_steps = [(exact.feed(read) > 0, exact.done) for read in reads]
    skimmed = SSEScanner(HB, wire)
    assert [(skimmed.feed(read) > 0, skimmed.done) for read in reads] == exact_steps
    assert exact.counted
    assert skimmed.events == exact.events if skimmed.counted else skimmed.events <= exact.events
    if last == "done-data":
        assert exact_steps[1] == (True, True)


@pytest.mark.parametrize("wire", sorted(TYPED))
def test_a_first_read_is_read_event_by_event_only_up_to_its_first_output(wire: Wire) -> None:
    """A first read that holds the preamble and a long burst of output is read event by event up to its first output only: the rest is judged from its last event, and its count is a lower bound."""
    output = TYPED[wire][0]
    opening = {"responses": RESPONSES_PREAMBLE, "messages": MESSAGE_START + BLOCK_START}[wire]
    scanner = scan(wire, opening + output * 200 + b"event: ping\ndata: {")
    assert (scanner.events >= 1, scanner.done, scanner.counted) == (True, False, False)
    with events_read_one_by_one_up_to(10**9):
        exact = scan(wire, opening + output * 200 + b"event: ping\ndata: {")
    assert (exact.events, exact.counted) == (200, True)
