"""Differential fuzzing of ``SSEScanner`` and ``ProgressMeter`` against an independent SSE parser.

``parse_events`` is written from the WHATWG HTML specification ("Interpreting an
event stream") and shares nothing with the scanner: it decodes the whole byte string
at once, turns every line ending into LF, splits, and applies the field rules to
whole lines. The scanner works on bytes, incrementally, with a bounded buffer.
Hypothesis feeds both the same adversarial bytes, the scanner (and the meter, through
gzip and deflate) in random chunks, and compares them after every chunk.

By default each property runs a few hundred derandomized examples (the same ones on
every run), each body under one chunking. ``HERMES_FUZZ_EXAMPLES=200000`` runs that
many random examples of each main property instead (a share of it for the slow
ones), each body under four chunkings, to hunt for disagreements; add
``--hypothesis-show-statistics`` to see how many ran.
"""

from __future__ import annotations

import os
import zlib
from collections.abc import Callable, Collection, Sequence

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hermes_transport._core.progress import ProgressMeter
from hermes_transport._core.sse import SSEScanner
from hermes_transport._core.sse_lines import _PREFIX

from _support import MIDDLES, events_read_one_by_one_up_to

BOM = b"\xef\xbb\xbf"
GZIP = zlib.MAX_WBITS | 16
ZLIB = zlib.MAX_WBITS
RAW = -zlib.MAX_WBITS

# No "explain" phase: on a failure it reruns the test hundreds of times for little.
_PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink)
HEAVY_EXAMPLES = int(os.environ.get("HERMES_FUZZ_EXAMPLES", "0") or "0")
# Chunkings of each example's body checked by the chunking properties.
SPLITS = 4 if HEAVY_EXAMPLES > 0 else 1
# Pure scanning, the same under every openai major (see the `once` marker); the heavy
# mode runs for minutes: past the suite's per-test timeout.
pytestmark = [pytest.mark.once, *([pytest.mark.timeout(0)] if HEAVY_EXAMPLES > 0 else [])]


def fuzz(
    default_examples: int, heavy_share: float = 1.0
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Hypothesis settings: ``default_examples`` derandomized, or ``heavy_share`` of the heavy count at random."""
    if HEAVY_EXAMPLES > 0:
        return settings(
            max_examples=max(1, int(HEAVY_EXAMPLES * heavy_share)),
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
            phases=_PHASES,
        )
    return settings(
        max_examples=default_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        phases=_PHASES,
    )


# --------------------------------------------------------------------------- the reference


def parse_events(stream: bytes) -> list[tuple[str, str]]:
    """The (type, data) of every event a conforming parser dispatches for ``stream``, in order.

    From the WHATWG HTML specification, "Interpreting an event stream": the bytes
    are UTF-8 decoded (one leading BOM removed, invalid bytes become U+FFFD); a line
    ends at CRLF, LF or CR; a blank line dispatches the event, if its data buffer is
    not empty, with the type ``message`` when no ``event`` field set one; a line
    starting with a colon is a comment; otherwise the field name is everything up to
    the first colon (the whole line without one) and the value the rest, less one
    leading space; ``data`` appends the value and an LF to the data buffer, ``event``
    sets the type (the last one wins). Text after the last line ending is an
    unfinished line and is never interpreted.
    """
    text = stream.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    # CRLF first, so that the CR of a CRLF is not taken for a line ending of its own.
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    del lines[-1]  # whatever follows the last line ending
    dispatched: list[tuple[str, str]] = []
    data_buffer = ""
    event_type = ""
    for line in lines:
        if line == "":
            if data_buffer != "":
                dispatched.append((event_type or "message", data_buffer[:-1]))
            data_buffer = ""
            event_type = ""
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            data_buffer += value + "\n"
        elif name == "event":
            event_type = value
        # "id", "retry" and unknown fields change nothing that is dispatched.
    return dispatched


def reference(stream: bytes, heartbeats: Collection[str] = ()) -> tuple[int, bool]:
    """Progress events in ``stream``, and whether ``stream`` read at once ends it, per the scanner's documented contract.

    A progress event is a dispatched event whose type is not a heartbeat type. The
    end rule: a read ends the stream when the last event it dispatches (whatever
    its type: a heartbeat too) is a progress event whose data starts with
    ``[DONE]``, which is the openai SDK's own test (``sse.data.startswith("[DONE]")``):
    its first data line's value starts with ``[DONE]``. Read in several reads, a
    stream is done once one of them ended it (the checks below carry that along).
    """
    events = parse_events(stream)
    progress = [data for kind, data in events if kind not in heartbeats]
    last = events[-1] if events else None
    ends = last is not None and last[0] not in heartbeats and last[1].startswith("[DONE]")
    return len(progress), ends


class PrefixReference:
    """The reference's answer for each prefix of one stream, computed once per line.

    The reference ignores what follows the last line ending, so a prefix has the
    same answer as its longest part that ends in CR or LF (a property of its own
    below checks this).
    """

    def __init__(self, stream: bytes, heartbeats: Collection[str]) -> None:
        self._stream = stream
        self._heartbeats = heartbeats
        self._answers: dict[int, tuple[int, bool]] = {}

    def at(self, end: int) -> tuple[int, bool]:
        """The reference's (events, whether a read ending there ends the stream) for ``stream[:end]``."""
        cut = max(self._stream.rfind(b"\n", 0, end), self._stream.rfind(b"\r", 0, end)) + 1
        if cut not in self._answers:
            self._answers[cut] = reference(self._stream[:cut], self._heartbeats)
        return self._answers[cut]


# --------------------------------------------------------------------------- generators

_NAMES = [b"id", b"retry", b"dat", b"datax", b"data ", b" data", b"Data", b"data\x00", b"event "]
_NAMES += [b"Event", b"events", b"even", b"", BOM + b"data", b"\xffdata", b"d\xc3\xa4ta"]
_SEPARATORS = [b"", b":", b":", b": ", b": ", b":  ", b"::", b": :", b":\t"]
_DONES = [b"[DONE]", b"[DONE]x", b" [DONE]", b"[DONE", b"[done]", b"[DONE] ", b"[DONE]\xff"]
# Event types: the heartbeat names below, near misses, and bytes that are not UTF-8.
_TYPES = [b"ping", b" ping", b"ping ", b"Ping", b"pin", b"message", b" message", b"[DONE]"]
_TYPES += [b"\xff", b"\xe2\x82", b"\xed\xa0\x80", b"\xef\xbf\xbd", b"\xff\xff\xff", BOM + b"ping"]
_TYPES += [
    b"p" * 55,
    b"p" * 56,
    b"p" * 57,
    b"\xc3\xa9" * 28,
    b"\xc3\xa9" * 27 + b"\xc3",
    b"x",
    b"",
]
_VALUES = _DONES + _TYPES
_VALUES += [
    b"caf\xc3\xa9 \xf0\x9f\x98\x80",
    b"\xc2\x85\xe2\x80\xa8\x0b\x0c\x1c",
    b'{"choices": [{"delta": {"content": "hi"}}]}',
    b"a:b",
    b":",
    b" ",
]
# Values longer than the scanner's kept prefix, starting with something that matters.
_LONG = [
    head + fill * count
    for head in (b"", b"[DONE]", b" [DONE]", b"ping", b"p" * 56)
    for fill in (b"x", b"\xc3\xa9", b" ")
    for count in (40, 58, 59, 64, 65, 300)
]
_ENDINGS = [b"\n", b"\n", b"\r", b"\r\n"]
_DATA = [b"data" + sep + value for sep in _SEPARATORS for value in _VALUES]
_EVENTS = [b"event" + sep + value for sep in _SEPARATORS for value in _TYPES + _DONES]
_OTHERS = [name + sep + value for name in _NAMES for sep in _SEPARATORS for value in _VALUES]
_LONG_FIELDS = [
    name + sep + value
    for name in (b"data", b"event", b"")
    for sep in (b":", b": ")
    for value in _LONG
]
_FIELDS = _DATA + _EVENTS + _OTHERS + _LONG_FIELDS
_COMMENTS = [b":" + value for value in _VALUES + _LONG]


# Lines with their endings, in groups drawn with these weights (percent): blank lines
# (each completes an event), data fields, event types, other fields, long lines and
# comments.
_LINE_GROUPS = [
    (25, _ENDINGS),
    (32, [line + ending for line in _DATA for ending in _ENDINGS]),
    (20, [line + ending for line in _EVENTS for ending in _ENDINGS]),
    (13, [line + ending for line in _OTHERS for ending in _ENDINGS]),
    (5, [line + ending for line in _LONG_FIELDS for ending in _ENDINGS]),
    (5, [line + ending for line in _COMMENTS for ending in _ENDINGS]),
]
_GROUP_BY_PERCENT = [lines for weight, lines in _LINE_GROUPS for _ in range(weight)]


def pooled_lines(choices: bytes) -> bytes:
    """Lines picked by each three bytes of ``choices`` from the weighted groups (one draw for many lines)."""
    picks = [int.from_bytes(choices[i : i + 3], "big") for i in range(0, len(choices) - 2, 3)]
    picked = [(_GROUP_BY_PERCENT[pick % 100], pick // 100) for pick in picks]
    return b"".join(lines[rest % len(lines)] for lines, rest in picked)


# Now and then a field with an arbitrary Unicode value.
_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r\n"),
    max_size=8,
).map(str.encode)
_text_line = st.builds(
    lambda name, sep, value, ending: name + sep + value + ending,
    st.sampled_from([b"data", b"event", *_NAMES]),
    st.sampled_from(_SEPARATORS),
    _text,
    st.sampled_from(_ENDINGS),
)
_SOUP = [b"\r", b"\n", b"\r\n", b"\n\n", b"data", b"data:", b"event", b"event:", b":", b" "]
_SOUP += [b"[DONE]", b"ping", b"message", BOM, b"\xef", b"\xbb", b"\xbf", b"x", b"\xff", b"id"]
_start = st.sampled_from([b""] * 6 + [BOM, BOM, BOM + BOM, b"\xef", b"\xef\xbb", b"\xef\xbb\xbe"])
_tail = st.one_of(st.just(b""), st.sampled_from(_FIELDS))  # an unfinished last line


def soup(choices: bytes) -> bytes:
    """Tokens of SSE syntax picked by each byte of ``choices``, with no structure at all."""
    return b"".join(_SOUP[byte % len(_SOUP)] for byte in choices)


@st.composite
def structured_streams(draw: st.DrawFn) -> bytes:
    """SSE-like streams: fields, comments and blank lines with mixed endings, maybe a BOM."""
    if draw(st.integers(0, 4)) == 0:
        lines = b"".join(draw(st.lists(st.one_of(_text_line, _pooled), min_size=2, max_size=20)))
    else:
        count = draw(st.integers(2, 50))
        lines = pooled_lines(draw(st.binary(min_size=3 * count, max_size=3 * count)))
    return draw(_start) + lines + draw(_tail)


_pooled = st.binary(min_size=3, max_size=3).map(pooled_lines)
_structured = structured_streams()
# Mostly structured SSE, some token soup, some arbitrary bytes.
streams = st.one_of(
    _structured,
    _structured,
    _structured,
    st.integers(4, 80).flatmap(lambda n: st.binary(min_size=n, max_size=n)).map(soup),
    st.binary(max_size=200),
)


# Every name some generated event type matches or nearly matches (see _TYPES).
_ODD_HEARTBEATS = (
    " ping",
    "Ping",
    "\ufffd",
    "\ufffd\ufffd\ufffd",
    "\ufeffping",
    "p" * 56,
    "é" * 28,
)
heartbeat_sets = st.sampled_from(
    [
        (),
        ("ping",),
        ("ping",),
        ("ping", "message"),
        ("message",),
        ("[DONE]", "x"),
        ("ping", *_ODD_HEARTBEATS),
        _ODD_HEARTBEATS,
        ("\ufffd",),
        ("p" * 56,),
    ]
)


@st.composite
def chunk_ends(
    draw: st.DrawFn, size: int, *, newlines: bytes = b"", most: int = 3000
) -> list[int]:
    """Where the chunks of a ``size``-byte body end (the last at ``size``; repeats are empty chunks).

    Random cuts, fixed-size chunks, one byte at a time, a cut after every CR and LF
    of ``newlines`` (CR ending a chunk, every CRLF split), or the whole body at once;
    about ``most`` chunks at most.
    """
    mode = draw(st.sampled_from(["random", "random", "fixed", "bytewise", "endings", "whole"]))
    if mode == "bytewise" and size > most:
        mode = "fixed"
    ends: list[int] = []
    if mode == "random":
        ends = draw(st.lists(st.integers(0, size), max_size=min(24, most)))
    elif mode == "fixed":
        step = max(draw(st.sampled_from([1, 2, 3, 5, 7, 64, 65, 4096])), size // most)
        ends = list(range(step, size, step))
    elif mode == "bytewise":
        ends = list(range(1, size))
    elif mode == "endings":
        ends = [i + 1 for i, byte in enumerate(newlines) if byte in b"\r\n"]
        ends = ends[:: len(ends) // most + 1]
        ends += [1, 2, *draw(st.lists(st.integers(0, size), max_size=4))]
    empty = draw(st.lists(st.integers(0, size), max_size=3))
    return sorted(end for end in [*ends, *empty, size] if 0 <= end <= size)


def chunks_of(body: bytes, ends: Sequence[int]) -> list[bytes]:
    """``body`` cut at ``ends`` (each the end offset of one chunk)."""
    return [body[start:end] for start, end in zip([0, *ends], ends, strict=False)]


# --------------------------------------------------------------------------- the reference itself


@pytest.mark.parametrize(
    ("stream", "events"),
    [
        # The specification's own examples.
        (b"data: YHOO\ndata: +2\ndata: 10\n\n", [("message", "YHOO\n+2\n10")]),
        (
            b": test stream\n\ndata: first event\nid: 1\n\ndata:second event\nid\n\n"
            b"data:  third event\n",
            [("message", "first event"), ("message", "second event")],
        ),
        (b"data\n\ndata\ndata\n\ndata:", [("message", ""), ("message", "\n")]),
        (b"data:test\n\ndata: test\n\n", [("message", "test"), ("message", "test")]),
        # Line endings, BOM, field names, types.
        (b"data: a\r\rdata: b\r\n\r\ndata: c\n\n", [("message", x) for x in "abc"]),
        (b"data: a\r\n", []),
        (b"data: a\r\n\r", [("message", "a")]),
        (b"data: a\n\r\n", [("message", "a")]),
        (BOM + b"data: a\n\n", [("message", "a")]),
        (BOM + BOM + b"data: a\n\n", []),
        (b"\xef\xbbdata: a\n\n", []),
        (b"data: a\n\n" + BOM + b"data: b\n\n", [("message", "a")]),
        (b"event: x\nevent: y\ndata: a\n\n", [("y", "a")]),
        (b"data: a\nevent: x\n\n", [("x", "a")]),
        (b"event: x\nevent\ndata: a\n\n", [("message", "a")]),
        (b"event: x\n\ndata: a\n\n", [("message", "a")]),
        (b"event:  x\ndata:\xff\n\n", [(" x", "\ufffd")]),
        (b"event: \xff\ndata: a\n\n", [("\ufffd", "a")]),
        (b"datax: a\ndat: b\nData: c\n data: d\ndata : e\n\n", []),
        (b"data: a\xc2\x85b\xe2\x80\xa8c\x0bd\n\n", [("message", "a\x85b\u2028c\x0bd")]),
        (b"data: [DONE]\n\n", [("message", "[DONE]")]),
        (b"id: 1\nretry: 5\n: c\n\n", []),
    ],
    ids=repr,
)
def test_parse_events_follows_the_specification(
    stream: bytes, events: list[tuple[str, str]]
) -> None:
    """The reference parser dispatches exactly the events the specification describes for a stream."""
    assert parse_events(stream) == events


@pytest.mark.parametrize(
    ("stream", "heartbeats", "expected"),
    [
        (b"data: [DONE]\n\n", (), (1, True)),
        (b"data:[DONE]x\n\n", (), (1, True)),
        (b"data:  [DONE]\n\n", (), (1, False)),
        (b"data: x\ndata: [DONE]\n\n", (), (1, False)),
        (b"data: [DONE]\ndata: x\n\n", (), (1, True)),
        (b"data: [DONE]\n\ndata: x\n\n", (), (2, False)),
        (b"data: [DONE]\n\nevent: ping\ndata: {}\n\n", ("ping",), (1, False)),
        (b"data: [DONE]\n\n: c\n\nevent: ping\n\ndata: x", ("ping",), (1, True)),
        (b"data: [DONE]\n", (), (0, False)),
        (b"event: ping\ndata: [DONE]\n\n", ("ping",), (0, False)),
        (b"data: {}\nevent: ping\n\n", ("ping",), (0, False)),
        (b"event: ping\nevent: delta\ndata: {}\n\n", ("ping",), (1, False)),
        (b"data: x\n\n", ("message",), (0, False)),
        (b"event:\ndata: x\n\n", ("message",), (0, False)),
        (b"event: \xff\ndata: x\n\n", ("\ufffd",), (0, False)),
    ],
    ids=repr,
)
def test_reference_counts_progress_and_done(
    stream: bytes, heartbeats: tuple[str, ...], expected: tuple[int, bool]
) -> None:
    """The reference counts non-heartbeat events, and a read ends the stream when its last event, of any type, is such an event whose data starts with ``[DONE]``."""
    assert reference(stream, heartbeats) == expected


@fuzz(100, heavy_share=0.1)
@given(stream=streams, heartbeats=heartbeat_sets, data=st.data())
def test_reference_ignores_the_unfinished_line(
    stream: bytes, heartbeats: tuple[str, ...], data: st.DataObject
) -> None:
    """Any prefix of a stream has the reference answer of its part up to the last line ending."""
    end = data.draw(st.integers(0, len(stream)), label="end")
    assert PrefixReference(stream, heartbeats).at(end) == reference(stream[:end], heartbeats)


# --------------------------------------------------------------------------- SSEScanner


def assert_bounded(scanner: SSEScanner) -> None:
    """The scanner keeps at most ``_PREFIX`` bytes of the line and of the event type."""
    assert len(scanner._line) <= _PREFIX
    assert len(scanner._event_type) <= _PREFIX


def assert_agrees(
    counts: SSEScanner | ProgressMeter,
    completed: int,
    expected: tuple[int, bool],
    before: int,
    where: str,
) -> None:
    """After a chunk: the decisions (progress in it, ``done``: the reads so far ended the stream) are the reference's; the counts too while they are exact, else never above it."""
    events, done = expected
    assert counts.done == done, f"done after {where}"
    assert (completed > 0) == (events > before), f"progress in {where}"
    if counts.counted:
        assert completed == events - before, f"{where} completed"
        assert counts.events == events, f"events after {where}"
    else:
        assert completed <= events - before, f"{where} completed"
        assert counts.events <= events, f"events after {where}"


@pytest.mark.parametrize("middle", MIDDLES)
@fuzz(250)  # twice: once per MIDDLES value
@given(stream=streams, heartbeats=heartbeat_sets, data=st.data())
def test_scanner_agrees_with_the_reference_after_every_chunk(
    middle: int, stream: bytes, heartbeats: tuple[str, ...], data: st.DataObject
) -> None:
    """However a stream is chunked, after each chunk the scanner's decisions are the reference's for the bytes fed so far, and so are its counts while it says they are exact."""
    expected = PrefixReference(stream, heartbeats)
    with events_read_one_by_one_up_to(middle):
        for _ in range(SPLITS):
            ends = data.draw(chunk_ends(len(stream), newlines=stream), label="chunk ends")
            check_scanner(stream, heartbeats, ends, expected)


def check_scanner(
    stream: bytes, heartbeats: tuple[str, ...], ends: Sequence[int], expected: PrefixReference
) -> None:
    """Feed ``stream`` in chunks ending at ``ends``; compare with the reference after each."""
    scanner = SSEScanner(heartbeats)
    total, before, done = 0, 0, False
    for i, (end, chunk) in enumerate(zip(ends, chunks_of(stream, ends), strict=True)):
        completed = scanner.feed(chunk)
        events, ended = expected.at(end)
        done = done or ended
        assert_agrees(scanner, completed, (events, done), before, f"chunk {i} ({chunk!r})")
        assert_bounded(scanner)
        total += completed
        before = expected.at(end)[0]
    if scanner.counted:
        assert total == reference(stream, heartbeats)[0]


@fuzz(60, heavy_share=0.05)
@given(
    head=st.sampled_from([b"", b"data:", b"data: [DONE]", b"event: ping", b"event:", b": ", b"x"]),
    fill=st.sampled_from([b"x", b"\r", b"\n", b"\r\n", b":", b" ", BOM, b"data: ", b"\xff"]),
    repeat=st.integers(1, 400_000),
    ending=st.sampled_from([b"\n\n", b"\r\r", b"\r\n\r\n", b""]),
    heartbeats=heartbeat_sets,
    data=st.data(),
)
def test_scanner_state_stays_bounded_on_long_input(
    head: bytes,
    fill: bytes,
    repeat: int,
    ending: bytes,
    heartbeats: tuple[str, ...],
    data: st.DataObject,
) -> None:
    """A long run of any repeated bytes, in chunks of any size, never grows the scanner's state past its bound."""
    stream = head + fill * repeat + ending
    step = data.draw(st.sampled_from([1, 3, 64, 65, 1000, 65536, len(stream) or 1]), label="step")
    step = max(step, len(stream) // 2000)
    scanner = SSEScanner(heartbeats)
    for start in range(0, len(stream), step):
        scanner.feed(stream[start : start + step])
        assert_bounded(scanner)
    # At most one event (the head's): however it is read, its read's last event.
    assert (scanner.events, scanner.done) == reference(stream, heartbeats)


# --------------------------------------------------------------------------- ProgressMeter

codings = st.sampled_from(
    [
        ("", None),
        ("identity", None),
        ("gzip", GZIP),
        ("x-gzip", GZIP),
        ("deflate", ZLIB),
        ("deflate", RAW),
        ("deflate", RAW),
    ]
)
_FLUSHES = [
    zlib.Z_NO_FLUSH,
    zlib.Z_PARTIAL_FLUSH,
    zlib.Z_SYNC_FLUSH,
    zlib.Z_FULL_FLUSH,
    zlib.Z_BLOCK,
]


@st.composite
def compressed(draw: st.DrawFn, stream: bytes, wbits: int) -> bytes:
    """``stream`` compressed with ``wbits``, flushed at random points, finished or cut off."""
    level = draw(st.sampled_from([0, 1, 6, 9]))
    compressor = zlib.compressobj(level, zlib.DEFLATED, wbits)
    cuts = sorted(draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    out, start = [], 0
    for cut in cuts:
        out.append(compressor.compress(stream[start:cut]))
        out.append(compressor.flush(draw(st.sampled_from(_FLUSHES))))
        start = cut
    out.append(compressor.compress(stream[start:]))
    body = b"".join(out)
    if draw(st.integers(0, 5)) > 0:
        body += compressor.flush()
    return body


def check_meter(
    stream: bytes,
    body: bytes,
    coding: tuple[str, int | None],
    heartbeats: tuple[str, ...],
    ends: Sequence[int],
) -> None:
    """Feed ``body`` (``stream`` encoded per ``coding``) in chunks; compare with the reference after each."""
    encoding, wbits = coding
    # The reference decodes with a plain, unbounded zlib object that knows the coding.
    reference_decoder = None if wbits is None else zlib.decompressobj(wbits)
    expected = PrefixReference(stream, heartbeats)
    meter = ProgressMeter(encoding, heartbeat_events=heartbeats)
    decoded, total, before, done = 0, 0, 0, False
    for i, chunk in enumerate(chunks_of(body, ends)):
        completed = meter.feed(chunk)  # one read, however many slices it inflates to
        piece = chunk if reference_decoder is None else reference_decoder.decompress(chunk)
        assert stream[decoded : decoded + len(piece)] == piece
        decoded += len(piece)
        assert not meter.blind, f"blind after chunk {i} ({chunk!r})"
        events, ended = expected.at(decoded)
        done = done or ended
        assert_agrees(meter, completed, (events, done), before, f"chunk {i} ({chunk!r})")
        assert_bounded(meter._scanner)
        total += completed
        before = expected.at(decoded)[0]
    if meter.counted:
        assert total == reference(stream[:decoded], heartbeats)[0]
    if reference_decoder is None or reference_decoder.eof:
        assert decoded == len(stream)


@pytest.mark.parametrize("middle", MIDDLES)
@fuzz(175)  # twice: once per MIDDLES value
@given(stream=streams, coding=codings, heartbeats=heartbeat_sets, data=st.data())
def test_meter_agrees_with_the_reference_after_every_chunk(
    middle: int,
    stream: bytes,
    coding: tuple[str, int | None],
    heartbeats: tuple[str, ...],
    data: st.DataObject,
) -> None:
    """However an identity, gzip or deflate body is chunked, after each chunk the meter's decisions are the reference's for the text it decodes to, and so are its counts while it says they are exact."""
    wbits = coding[1]
    body = stream if wbits is None else data.draw(compressed(stream, wbits), label="body")
    with events_read_one_by_one_up_to(middle):
        for _ in range(SPLITS):
            ends = data.draw(chunk_ends(len(body), newlines=body), label="chunk ends")
            check_meter(stream, body, coding, heartbeats, ends)


@fuzz(60, heavy_share=0.05)
@given(
    stream=streams,
    unit=st.sampled_from([b"data: [DONE]", b"data: x\n\n", b"data: ", b": ", b"event: ping"]),
    repeat=st.integers(7_300, 8_000),
    offset=st.integers(0, 1000),
    coding=codings,
    heartbeats=heartbeat_sets,
    data=st.data(),
)
def test_meter_agrees_with_the_reference_past_one_decompression_slice(
    stream: bytes,
    unit: bytes,
    repeat: int,
    offset: int,
    coding: tuple[str, int | None],
    heartbeats: tuple[str, ...],
    data: st.DataObject,
) -> None:
    """A body inflating past the meter's 64 KiB slice (one long line, or thousands of events) is judged like the reference after every chunk."""
    block = unit * repeat if unit.endswith(b"\n") else unit + b"y" * (9 * repeat) + b"\n\n"
    stream = stream[:offset] + b"\n" + block + stream[offset:]
    wbits = coding[1]
    body = stream if wbits is None else data.draw(compressed(stream, wbits), label="body")
    ends = data.draw(chunk_ends(len(body), newlines=body, most=12), label="chunk ends")
    check_meter(stream, body, coding, heartbeats, ends)
