"""Tests for ``ProgressMeter`` (decoding + scanning), ``stream_asked`` and ``is_event_stream``."""

from __future__ import annotations

import itertools
import tracemalloc
import zlib
from collections.abc import Callable, Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_transport._core.progress import ProgressMeter, is_event_stream, stream_asked
from hermes_transport._core.sse import SSEScanner
from hermes_transport._core.wires import Wire

# Pure scanning: the same under every openai major (see the `once` marker).
pytestmark = pytest.mark.once

KIB = 1024
MIB = 1024 * KIB
GZIP = 31
ZLIB = 15
RAW = -15
# The meter decompresses in slices of this many bytes.
SLICE = 64 * KIB

EVENTS = [
    b": keepalive\n\n",
    b'data: {"choices": [{"delta": {"content": "Hel"}}]}\n\n',
    b": keepalive\r\n\r\n",
    b'data: {"choices": [{"delta": {"content": "lo"}}]}\r\n\r\n',
    b"event: ping\ndata: {}\n\n",
    b"id: 3\nretry: 10\n\n",
    b'data: {"choices": [{"delta": {"content": "!"}}]}\r\r',
    b"data: [DONE]\n\n",
]
EXPECTED = 5  # data events above, the ping included (no heartbeats configured)


# --------------------------------------------------------------------------- helpers


def compress(parts: Iterable[bytes], wbits: int, *, sync: bool = True, level: int = 6) -> bytes:
    """Compress ``parts`` as one stream, sync-flushing after each part when ``sync``."""
    obj = zlib.compressobj(level, zlib.DEFLATED, wbits)
    out = []
    for part in parts:
        out.append(obj.compress(part))
        if sync:
            out.append(obj.flush(zlib.Z_SYNC_FLUSH))
    out.append(obj.flush())
    return b"".join(out)


def compress_each(parts: Sequence[bytes], wbits: int) -> list[bytes]:
    """The compressed bytes of each part, sync-flushed, as one stream (the last one finished)."""
    obj = zlib.compressobj(6, zlib.DEFLATED, wbits)
    out = [obj.compress(part) + obj.flush(zlib.Z_SYNC_FLUSH) for part in parts]
    out[-1] += obj.flush()
    return out


def split_at(body: bytes, points: Iterable[int]) -> list[bytes]:
    """Split ``body`` at the given offsets."""
    cuts = [0, *sorted(set(points)), len(body)]
    return [body[a:b] for a, b in itertools.pairwise(cuts)]


def fixed(size: int) -> Callable[[bytes], list[bytes]]:
    """A splitter into chunks of ``size`` bytes."""

    def split(body: bytes) -> list[bytes]:
        return [body[i : i + size] for i in range(0, len(body), size)]

    split.__name__ = f"chunks-of-{size}"
    return split


def feed_all(meter: ProgressMeter, chunks: Iterable[bytes]) -> int:
    """Feed every chunk and return the sum of what ``feed`` returned."""
    return sum(meter.feed(chunk) for chunk in chunks)


def scanner_count(body: bytes) -> tuple[int, bool]:
    """Events and done for an undecoded body, per the scanner itself."""
    scanner = SSEScanner()
    scanner.feed(body)
    return scanner.events, scanner.done


ENCODINGS = [
    pytest.param("gzip", GZIP, id="gzip"),
    pytest.param("x-gzip", GZIP, id="x-gzip"),
    pytest.param("GZIP", GZIP, id="GZIP"),
    pytest.param(" gzip ", GZIP, id="padded-gzip"),
    pytest.param("deflate", ZLIB, id="deflate-zlib"),
    pytest.param("deflate", RAW, id="deflate-raw"),
    pytest.param("Deflate", ZLIB, id="Deflate-zlib"),
    pytest.param("gzip, identity", GZIP, id="gzip,identity"),
    pytest.param("identity, gzip", GZIP, id="identity,gzip"),
    pytest.param("identity,deflate", RAW, id="identity,deflate-raw"),
    pytest.param(",gzip,", GZIP, id="empty-members"),
]
SPLITTERS = [fixed(n) for n in (1, 2, 3, 7, 64, 10**9)]


# --------------------------------------------------------------------------- identity


@pytest.mark.parametrize(
    "encoding", ["", "identity", "IDENTITY", " identity ", "identity, identity"]
)
@pytest.mark.parametrize("split", SPLITTERS, ids=lambda f: f.__name__)
def test_identity_counts_like_the_scanner(
    encoding: str, split: Callable[[bytes], list[bytes]]
) -> None:
    """Without a content coding the meter counts exactly what the scanner counts."""
    meter = ProgressMeter(encoding)
    assert feed_all(meter, split(b"".join(EVENTS))) == EXPECTED
    assert (meter.events, meter.done, meter.blind) == (EXPECTED, True, False)


def test_heartbeat_events_are_passed_to_the_scanner() -> None:
    """Configured heartbeat event types are not progress through the meter either."""
    meter = ProgressMeter("gzip", heartbeat_events={"ping"})
    assert feed_all(meter, [compress(EVENTS, GZIP)]) == EXPECTED - 1


def test_invalid_heartbeat_name_raises() -> None:
    """An invalid heartbeat name is rejected when the meter is built."""
    with pytest.raises(ValueError, match="heartbeat_events"):
        ProgressMeter("", heartbeat_events=[""])


# --------------------------------------------------------------------------- gzip / deflate


@pytest.mark.parametrize(("encoding", "wbits"), ENCODINGS)
@pytest.mark.parametrize("split", SPLITTERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("sync", [True, False], ids=["sync-flush", "one-flush"])
def test_compressed_counts_like_identity(
    encoding: str, wbits: int, split: Callable[[bytes], list[bytes]], sync: bool
) -> None:
    """A gzip or deflate body counts the same events as the identity body, however it is split."""
    body = compress(EVENTS, wbits, sync=sync)
    chunks = split(body)
    if wbits == RAW and len(chunks[0]) < 2:
        # Raw deflate is told from zlib-wrapped by the first chunk, as httpx
        # does; a one-byte first chunk cannot be told (see the report).
        chunks = [chunks[0] + chunks[1], *chunks[2:]]
    meter = ProgressMeter(encoding)
    assert feed_all(meter, chunks) == EXPECTED
    assert (meter.events, meter.done, meter.blind) == (EXPECTED, True, False)


@pytest.mark.parametrize(
    ("encoding", "wbits"),
    [("gzip", GZIP), ("deflate", ZLIB), ("deflate", RAW)],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
@pytest.mark.parametrize("bytewise", [False, True], ids=["per-event", "bytewise"])
def test_sync_flushed_event_counts_as_soon_as_its_bytes_arrive(
    encoding: str, wbits: int, bytewise: bool
) -> None:
    """Each sync-flushed event is counted by the feed that delivers its last compressed byte."""
    meter = ProgressMeter(encoding)
    parts = compress_each(EVENTS, wbits)
    expected_after = [scanner_count(b"".join(EVENTS[: i + 1]))[0] for i in range(len(EVENTS))]
    for i, part in enumerate(parts):
        if bytewise and not (i == 0 and wbits == RAW):
            for j in range(len(part)):
                meter.feed(part[j : j + 1])
        else:
            meter.feed(part)
        assert meter.events == expected_after[i]
    assert meter.done


@pytest.mark.parametrize(
    ("encoding", "layers"),
    [
        ("deflate, gzip", [ZLIB, GZIP]),
        ("gzip, gzip", [GZIP, GZIP]),
        ("gzip, identity, deflate", [GZIP, RAW]),
    ],
)
@pytest.mark.parametrize("split", [fixed(2), fixed(5), fixed(10**9)], ids=lambda f: f.__name__)
def test_stacked_codings_are_undone_in_reverse(
    encoding: str, layers: list[int], split: Callable[[bytes], list[bytes]]
) -> None:
    """Several codings are undone last-applied first."""
    parts: list[bytes] = list(EVENTS)
    for wbits in layers:
        parts = compress_each(parts, wbits)
    meter = ProgressMeter(encoding)
    assert feed_all(meter, split(b"".join(parts))) == EXPECTED
    assert (meter.done, meter.blind) == (True, False)


_event = st.sampled_from(
    [*EVENTS, b"data: x\n\n", b"data: [DONE]x\r\n\r\n", b": c\n", b"data: y\n"]
)


@settings(max_examples=150, deadline=None)
@given(
    events=st.lists(_event, max_size=12),
    coding=st.sampled_from([("gzip", GZIP), ("deflate", ZLIB), ("deflate", RAW), ("", None)]),
    sync=st.booleans(),
    data=st.data(),
)
def test_fuzz_arbitrary_splits(
    events: list[bytes],
    coding: tuple[str, int | None],
    sync: bool,
    data: st.DataObject,
) -> None:
    """Any split of a compressed stream gives the identity body's events, and the done flag of the scanner fed what each chunk decodes to, one read each."""
    encoding, wbits = coding
    plain = b"".join(events)
    body = plain if wbits is None else compress(events, wbits, sync=sync)
    low = 2 if wbits == RAW else 1
    points = data.draw(
        st.lists(st.integers(min(low, len(body)), len(body)), max_size=15), label="split points"
    )
    meter = ProgressMeter(encoding)
    chunks = split_at(body, points)
    total = feed_all(meter, chunks)
    decoder = None if wbits is None else zlib.decompressobj(wbits)
    reads = SSEScanner()
    for chunk in chunks:
        reads.feed(chunk if decoder is None else decoder.decompress(chunk))
    assert total == meter.events == scanner_count(plain)[0] == reads.events
    assert (meter.done, meter.blind) == (reads.done, False)


# --------------------------------------------------------------------------- blind mode


@pytest.mark.parametrize(
    "encoding", ["br", "compress", "zstd", "gzip, br", "br, gzip", "x-unknown", "identity;q=1"]
)
def test_unknown_encoding_makes_meter_blind(encoding: str) -> None:
    """An encoding the meter cannot decode makes every non-empty chunk count as one event."""
    meter = ProgressMeter(encoding)
    assert meter.blind is True
    assert [meter.feed(chunk) for chunk in [b"\x00\x01", b"", b": keepalive\n\n", b"x"]] == [
        1,
        0,
        1,
        1,
    ]


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", b"this is not gzip at all\n\n"),
        ("gzip", b"\x1f\x8c\x08\x00\x00\x00\x00\x00\x00\x03garbage"),
        ("gzip", b"data: [DONE]\n\n"),
        ("deflate", b"\xff\xff\xff\xff\xff\xff\xff\xff"),
        ("deflate, gzip", compress([b"\xff\xff\xff\xff\xff\xff"], GZIP)),
    ],
    ids=["text-as-gzip", "bad-magic", "sse-as-gzip", "bad-deflate", "bad-inner-layer"],
)
def test_corrupt_body_makes_meter_blind(encoding: str, body: bytes) -> None:
    """A body that fails to decode turns the meter blind instead of raising."""
    meter = ProgressMeter(encoding)
    assert meter.feed(body) == 1
    assert meter.blind is True
    assert meter.done is False
    assert [meter.feed(chunk) for chunk in [b"more", b"", b"data: x\n\n"]] == [1, 0, 1]


@pytest.mark.parametrize(("encoding", "wbits"), [("gzip", GZIP), ("deflate", ZLIB)])
def test_corruption_mid_stream_makes_meter_blind(encoding: str, wbits: int) -> None:
    """Valid events are counted, then an undecodable chunk turns the meter blind."""
    parts = compress_each([b"data: a\n\n", b"data: b\n\n", b"data: c\n\n"], wbits)
    meter = ProgressMeter(encoding)
    assert meter.feed(parts[0]) == 1
    # After a sync flush the stream is at a block boundary: 0xff is BTYPE 11,
    # an invalid block type.
    assert meter.feed(b"\xff" * 8) == 1
    assert meter.blind is True
    assert meter.feed(parts[1]) == 1
    assert meter.feed(b"") == 0


@pytest.mark.parametrize(
    ("after", "ended"),
    [
        (b"data: y\n\n", False),
        (b"event: ping\ndata: {}\n\n", False),
        (b"", True),
        (b": c\n\n", True),
    ],
    ids=["output", "keepalive", "nothing", "comment"],
)
def test_a_chunk_inflating_past_one_slice_is_one_read(after: bytes, ended: bool) -> None:
    """A compressed chunk inflating past the meter's 64 KiB slice is one read: a ``[DONE]`` that ends the first slice ends the stream only if no event follows it in the chunk."""
    done = b"data: [DONE]\n\n"
    filler = b": " + b"x" * (SLICE - len(done) - 3) + b"\n"  # one comment line
    assert len(filler + done) == SLICE
    meter = ProgressMeter("gzip", heartbeat_events={"ping"})
    assert meter.feed(compress([filler + done + after], GZIP, sync=False)) >= 1
    assert (meter.done, meter.blind) == (ended, False)


# --------------------------------------------------------------------------- gzip bomb


@pytest.fixture(scope="module")
def gzip_bomb() -> bytes:
    """200 MiB of zeros in a data line, then ``[DONE]``, gzip-compressed (under 1 MiB)."""
    obj = zlib.compressobj(1, zlib.DEFLATED, GZIP)
    zeros = bytes(MIB)
    out = [obj.compress(b": hi\n\ndata: ")]
    out.extend(obj.compress(zeros) for _ in range(200))
    out.append(obj.compress(b"\n\ndata: [DONE]\n\n"))
    out.append(obj.flush())
    return b"".join(out)


def test_gzip_bomb_is_decoded_in_bounded_memory(gzip_bomb: bytes) -> None:
    """A small body inflating to 200 MiB is scanned in slices, never held whole."""
    assert len(gzip_bomb) < MIB
    chunk_size = 64 * KIB
    chunks = split_at(gzip_bomb, range(chunk_size, len(gzip_bomb), chunk_size))
    meter = ProgressMeter("gzip")
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        total = feed_all(meter, chunks)
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    assert peak < 5 * MIB
    assert (total, meter.events, meter.done, meter.blind) == (2, 2, True, False)


# --------------------------------------------------------------------------- known bug


def _pending_output_case(wbits: int, *, whole: bool = False) -> tuple[bytes, int] | None:
    """Find a compressed prefix whose last events sit in zlib's output buffer after one slice.

    ``decompress(data, SLICE)`` can stop with all input consumed (empty
    ``unconsumed_tail``) while zlib still holds decoded output, e.g. the rest
    of a back-reference that straddles the slice boundary. Returns the prefix
    (the whole stream when ``whole``) and how many events its bytes fully
    decode to, or ``None`` if this zlib never produces the situation for the
    bodies tried.
    """
    for k in range(7270, 7330):  # 9 * k straddles SLICE
        body = b"data: x\n\n" * k
        comp = compress([body], wbits, sync=False, level=9)
        first = len(comp) if whole else max(len(comp) - 40, 1)
        for cut in range(first, len(comp) + 1):
            prefix = comp[:cut]
            bounded = zlib.decompressobj(wbits)
            out = bounded.decompress(prefix, SLICE)
            if len(out) == SLICE and not bounded.unconsumed_tail:
                full = zlib.decompressobj(wbits).decompress(prefix)
                if scanner_count(full)[0] > scanner_count(out)[0]:
                    return prefix, scanner_count(full)[0]
    return None


@pytest.mark.parametrize(
    ("encoding", "wbits"),
    [("gzip", GZIP), ("deflate", ZLIB), ("deflate", RAW)],
    ids=["gzip", "deflate-zlib", "deflate-raw"],
)
def test_events_decoded_from_a_chunk_are_counted_by_that_chunk(encoding: str, wbits: int) -> None:
    """Every event that the bytes fed so far fully decode to is counted before the next chunk."""
    case = _pending_output_case(wbits)
    if case is None:
        pytest.skip("this zlib build never leaves output pending for these bodies")
    prefix, expected = case
    meter = ProgressMeter(encoding)
    assert meter.feed(prefix) == expected


def test_raw_deflate_stream_end_loses_no_event() -> None:
    """A complete raw deflate stream fed in one chunk yields every one of its events."""
    case = _pending_output_case(RAW, whole=True)
    if case is None:
        pytest.skip("this zlib build never leaves output pending for these bodies")
    body, expected = case
    meter = ProgressMeter("deflate")
    total = meter.feed(body)
    # Nothing more will ever arrive: the stream is complete.
    assert (total, meter.events) == (expected, expected)


# Found by the differential fuzzing in test_sse_reference.py: an empty or one-byte
# first chunk used to decide "zlib-wrapped" and turn the meter blind on raw deflate.
@pytest.mark.parametrize("wbits", [RAW, ZLIB], ids=["deflate-raw", "deflate-zlib"])
@pytest.mark.parametrize(
    "first",
    [[b""], [0], [b"", 0], [b"", b"", 0, b""], [0, b""]],
    ids=[
        "empty",
        "one-byte",
        "empty-then-one-byte",
        "empties-around-one-byte",
        "one-byte-then-empty",
    ],
)
def test_deflate_kind_waits_for_two_bytes(wbits: int, first: list[bytes | int]) -> None:
    """Deflate's zlib-or-raw choice waits for two bytes, however the body's first ones are chunked."""
    body = compress(EVENTS, wbits)
    chunks, at = [], 0
    for piece in first:
        # An int is one byte of the body; b"" an empty chunk.
        chunks.append(body[at : at + 1] if isinstance(piece, int) else piece)
        at += isinstance(piece, int)
    chunks.append(body[at:])
    meter = ProgressMeter("deflate")
    assert feed_all(meter, chunks) == EXPECTED
    assert (meter.events, meter.done, meter.blind) == (EXPECTED, True, False)


def test_raw_deflate_minimal_one_byte_chunks() -> None:
    """The minimal case the fuzzer found: an empty raw deflate stream fed one byte at a time is not blind."""
    meter = ProgressMeter("deflate")
    assert [meter.feed(bytes([byte])) for byte in b"\x01\x00\x00\xff\xff"] == [0] * 5
    assert (meter.events, meter.blind) == (0, False)


# --------------------------------------------------------------------------- stream_asked


@pytest.mark.parametrize(
    "accept",
    [
        "text/event-stream",
        "TEXT/EVENT-STREAM",
        "application/json, text/event-stream",
        "text/event-stream; q=0.9",
    ],
)
@pytest.mark.parametrize(
    ("content_type", "body"),
    [("", None), ("application/json", b'{"stream": false}'), ("text/plain", b"")],
    ids=["no-body", "stream-false", "text"],
)
def test_stream_asked_accept_header(accept: str, content_type: str, body: bytes | None) -> None:
    """``Accept: text/event-stream`` asks for a stream whatever the body says."""
    assert stream_asked(accept, content_type, body)[0] is True


@pytest.mark.parametrize(
    "body",
    [
        b'{"stream": true}',
        b'{"stream":true}',
        b'{ "stream" :\n\ttrue }',
        b'{"stream"\r\n:\r\ntrue}',
        b'{"model": "gpt-x", "stream": true, "messages": [{"role": "user", "content": "hi"}]}',
        b'{"messages": [{"content": "stream"}], "stream": true}',
        b'{"x": {"stream": false}, "stream": true}',
        b'  {"stream": true}  \n',
        '{"stream": true, "prompt": "caf\u00e9"}'.encode(),
    ],
    ids=repr,
)
@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON"],
)
def test_stream_asked_json_body(body: bytes, content_type: str) -> None:
    """A JSON body whose top-level ``"stream"`` is ``true`` asks for a stream."""
    assert stream_asked("application/json", content_type, body)[0] is True


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b'{"stream": false}'),
        ("application/json", b"{}"),
        ("application/json", b'{"model": "gpt-x"}'),
        ("application/json", b'{"x": {"stream": true}}'),
        ("application/json", b'[{"stream": true}]'),
        ("application/json", b'{"prompt": "\\"stream\\": true"}'),
        ("application/json", b'{"prompt": "{\\"stream\\":true}", "stream": false}'),
        ("application/json", b'{"stream": "true"}'),
        ("application/json", b'{"stream": 1}'),
        ("application/json", b'{"stream": true, "stream": false}'),
        ("application/json", b'{"stream": true'),
        ("application/json", b'{"stream": true,}'),
        ("application/json", b'{"stream": trueish}'),
        ("application/json", b'"stream": true'),
        ("application/json", b"\xff\xfe"),
        ("application/json", b'{"stream": true, "x": "\xff"}'),
        ("application/json", b""),
        ("application/json", None),
        ("text/plain", b'{"stream": true}'),
        ("", b'{"stream": true}'),
        ("application/x-www-form-urlencoded", b'{"stream": true}'),
        ("multipart/form-data", b'{"stream": true}'),
    ],
    ids=repr,
)
def test_stream_asked_false(content_type: str, body: bytes | None) -> None:
    """Bodies without a top-level ``"stream": true`` in JSON do not ask for a stream."""
    assert stream_asked("application/json", content_type, body)[0] is False


# --------------------------------------------------------------------------- is_event_stream


@pytest.mark.parametrize("status", [200, 201, 206, 299])
@pytest.mark.parametrize(
    "content_type",
    [
        "text/event-stream",
        "text/event-stream; charset=utf-8",
        "Text/Event-Stream",
        "TEXT/EVENT-STREAM;charset=UTF-8",
        "  text/event-stream  ; charset=utf-8",
    ],
)
def test_is_event_stream_true(status: int, content_type: str) -> None:
    """A 2xx response with media type ``text/event-stream`` (any case, any params) is a stream."""
    assert is_event_stream(status, content_type) is True


@pytest.mark.parametrize(
    ("status", "content_type"),
    [
        (100, "text/event-stream"),
        (199, "text/event-stream"),
        (300, "text/event-stream"),
        (304, "text/event-stream"),
        (400, "text/event-stream"),
        (401, "text/event-stream"),
        (429, "text/event-stream"),
        (500, "text/event-stream"),
        (503, "text/event-stream; charset=utf-8"),
        (200, "application/json"),
        (200, "text/plain"),
        (200, ""),
        (200, "text/event-streams"),
        (200, "text/event"),
        (200, "application/text/event-stream"),
        (200, "text/plain; note=text/event-stream"),
        (200, "text/html, text/event-stream"),
    ],
    ids=repr,
)
def test_is_event_stream_false(status: int, content_type: str) -> None:
    """Non-2xx statuses and other media types are not event streams."""
    assert is_event_stream(status, content_type) is False


@pytest.mark.parametrize(
    ("wire", "body", "said"),
    [
        ("chat_completions", b"", ""),
        ("chat_completions", b": keepalive\n\n", ""),
        (
            "chat_completions",
            b"event: ping\ndata: {}\n\n",
            "; 0 preamble event(s) and 1 heartbeat(s)",
        ),
        (
            "responses",
            b'event: response.created\ndata: {"type":"response.created"}\n\n'
            b'event: keepalive\ndata: {"type":"keepalive"}\n\n' * 2,
            "; 2 preamble event(s) and 2 heartbeat(s)",
        ),
        (
            "messages",
            b'event: message_start\ndata: {"type":"message_start"}\n\n'
            b'event: content_block_delta\ndata: {"type":"content_block_delta"}\n\n',
            "",
        ),
    ],
    ids=["silent", "comments only", "chat ping", "responses preamble", "after output"],
)
def test_what_came_before_the_first_output_is_said_exactly(
    wire: Wire, body: bytes, said: str
) -> None:
    """A first-event stall says how many preamble events and heartbeats came, and nothing once output came."""
    heartbeats = {"chat_completions": {"ping"}, "responses": {"keepalive"}, "messages": {"ping"}}
    meter = ProgressMeter("", heartbeats[wire], wire)
    meter.feed(body)
    expected = f"{said} arrived, none of them output" if said else ""
    assert meter.before_output == expected
