"""Progress judgement for one response body: content decoding plus the SSE scanner.

Pure like the scanner: the transports feed it the raw (possibly compressed)
bytes they pass up untouched, and it judges progress on the decoded text.
"""

from __future__ import annotations

import json
import logging
import re
import zlib
from collections.abc import Callable, Collection, Iterator
from typing import Any

from .sse import SSEScanner
from .wires import ErrorEvent, Wire

__all__ = ["ProgressMeter", "is_event_stream", "stream_asked"]

logger = logging.getLogger("hermes_transport")

# Decompress in slices so a small compressed chunk that inflates to gigabytes
# never lands in memory at once.
_SLICE = 64 * 1024
_STREAM_KEY = re.compile(rb'"stream"\s*:\s*true')


def stream_asked(
    headers_accept: str, content_type: str, body: bytes | None
) -> tuple[bool, dict[str, Any] | None]:
    """Whether a request asks for a streamed (SSE) response, and the body's top-level JSON
    object if it may (``None``: no JSON object, or not parsed).

    It asks with ``Accept: text/event-stream`` or a JSON body whose top-level ``"stream"``
    is ``true``. A cheap byte search filters bodies before the JSON is parsed, so ordinary
    requests cost a scan, not a parse; the object is parsed once, for every later question
    about a streaming request (its model, whether it runs in the background), since an
    agent's request body can be megabytes.
    """
    sse = "text/event-stream" in headers_accept.lower()
    if not body:
        return sse, None
    if not sse and ("json" not in content_type.lower() or not _STREAM_KEY.search(body)):
        return False, None
    try:
        payload = json.loads(body)
    except ValueError:
        return sse, None
    if not isinstance(payload, dict):
        return sse, None
    return sse or payload.get("stream") is True, payload


def is_event_stream(status_code: int, content_type: str) -> bool:
    """Whether a response is a successful server-sent-events stream."""
    media = content_type.split(";", 1)[0].strip().lower()
    return 200 <= status_code < 300 and media == "text/event-stream"


Decoder = Callable[[bytes], Iterator[bytes]]


class ProgressMeter:
    """Counts progress events in a response body, decoding it first if needed.

    An encoding it cannot decode, or a body that fails to decode, makes every
    chunk count as progress: the watchdog can then miss a keepalive-only
    stall, but never kills a healthy stream. httpx reports the decoding
    failure itself to the consumer.
    """

    __slots__ = ("_blind_chunks", "_bytes", "_decoders", "_scan", "_scanner", "blind", "tracks")

    def __init__(
        self,
        content_encoding: str = "",
        heartbeat_events: Collection[str] = (),
        wire: Wire = "generic",
        *,
        track: bool = False,
    ) -> None:
        self._scanner = SSEScanner(heartbeat_events, wire, track=track)
        # The scanner's own feed while the body is scanned as it comes (``identity``).
        self._scan: Callable[[bytes], int] | None = self._scanner.feed
        #: Whether the stream's ids, numbers and end are tracked (see the scanner).
        self.tracks = track and wire in ("responses", "mcp")
        self._decoders: list[Decoder] = []
        # True when progress cannot be judged: every chunk then counts.
        self.blind = False
        self._blind_chunks = 0
        self._bytes = 0  # fed to ``feed`` and not to the scanner as they came (see ``bytes``)
        # Content-Encoding lists codings in the order applied: undo them in reverse.
        for coding in reversed([c.strip().lower() for c in content_encoding.split(",")]):
            if coding in ("", "identity"):
                continue
            decoder = _decoder_for(coding)
            if decoder is None:
                logger.warning(
                    "cannot decode content-encoding %r; every chunk"
                    " counts as progress on this stream",
                    coding,
                )
                self.blind = True
                self._scan = None
                return
            self._decoders.append(decoder)
            self._scan = None

    @property
    def scanner(self) -> SSEScanner:
        """The scanner of the decoded text (its ``done`` read without a property's call)."""
        return self._scanner

    @property
    def feed_chunk(self) -> Callable[[bytes], int]:
        """``feed``, or where the body is scanned as it comes, the scanner's own ``feed``:
        one call fewer a chunk, for the hot path."""
        return self._scan if self._scan is not None else self.feed

    @property
    def done(self) -> bool:
        """Whether a chunk ended the stream: its last complete event was an end event
        (``[DONE]``, ``response.completed``, ...; the scanner's end rule)."""
        return self._scanner.done

    @property
    def error(self) -> ErrorEvent | None:
        """The first error event that completed before any progress (never while blind)."""
        return self._scanner.error

    @property
    def identity(self) -> bool:
        """Whether the body is scanned as it comes (no content coding undone, not blind)."""
        return not self._decoders and not self.blind

    @property
    def response_id(self) -> str | None:
        """With ``track``: the id of the response the stream's lifecycle events named."""
        return self._scanner.response_id

    @property
    def sequence(self) -> int:
        """With ``track``: the ``sequence_number`` of the last completed event (-1: none)."""
        return self._scanner.sequence

    @property
    def finished(self) -> bool:
        """With ``track``: an end or error event has completed (the response is over)."""
        return self._scanner.finished

    @property
    def heartbeats(self) -> int:
        """Keepalive events completed so far."""
        return self._scanner.heartbeats

    @property
    def comment_bytes(self) -> int:
        """Bytes of comment lines so far (decoded)."""
        return self._scanner.comment_bytes

    @property
    def before_output(self) -> str:
        """What came that was not output, as a first-event stall says it ("" if nothing):
        before the first output every event is read, so the counts are exact."""
        scanner = self._scanner
        if scanner.events or not (scanner.heartbeats or scanner.others):
            return ""
        return (
            f"; {scanner.others} preamble event(s) and {scanner.heartbeats} heartbeat(s)"
            " arrived, none of them output"
        )

    @property
    def seen_event(self) -> bool:
        """Whether any event with data has completed (progress or not)."""
        scanner = self._scanner
        return bool(scanner.events or scanner.heartbeats or scanner.others or self._blind_chunks)

    @property
    def counted(self) -> bool:
        """Whether ``events``, ``heartbeats`` and ``comment_bytes`` are exact (never while
        blind: chunks are not events)."""
        return self._scanner.counted and not self.blind

    @property
    def events(self) -> int:
        """Progress events completed so far (chunks, while blind)."""
        return self._scanner.events + self._blind_chunks

    @property
    def progress(self) -> str:
        """What is known of the events read so far, as an error says it: a count only
        where it is exact, never a wrong number."""
        if self.blind:
            return f"{self._blind_chunks} chunk(s) that could not be decoded to events"
        if self.counted:
            return f"{self.events} event(s)"
        return f"at least {self.events} event(s) in {self.bytes} bytes"

    def feed(self, chunk: bytes) -> int:
        """Return how many progress events ``chunk`` completed (1 per chunk when blind)."""
        scan = self._scan
        if scan is not None:
            return scan(chunk)  # which counts its bytes
        self._bytes += len(chunk)
        if self.blind:
            if not chunk:
                return 0
            self._blind_chunks += 1
            return 1
        if not self._decoders:
            return self._scanner.feed(chunk)
        pieces: Iterator[bytes] = iter((chunk,))
        for decoder in self._decoders:
            pieces = _chain(decoder, pieces)
        try:
            # One read, whatever slices it decodes to: its last event decides ``done``.
            return self._scanner.feed_pieces(pieces)
        except zlib.error:
            logger.debug("body failed to decode; counting chunks as progress")
            self.blind = True
            self._blind_chunks += 1
            return 1

    # Last in the class: above it, ``bytes`` in an annotation would name this.
    @property
    def bytes(self) -> int:
        """Bytes fed, as they came (before decoding)."""
        return self._bytes + self._scanner.fed


def _chain(decoder: Decoder, pieces: Iterator[bytes]) -> Iterator[bytes]:
    for piece in pieces:
        yield from decoder(piece)


def _decoder_for(coding: str) -> Decoder | None:
    if coding in ("gzip", "x-gzip"):
        return _zlib_decoder(zlib.MAX_WBITS | 16)
    if coding == "deflate":
        return _zlib_decoder(None)
    return None


def _zlib_decoder(wbits: int | None) -> Decoder:
    # wbits None: "deflate", which servers send both zlib-wrapped and raw;
    # decided on the first two bytes (the zlib header), as httpx does. Until both
    # have arrived (a first chunk may be empty or one byte long) they are held.
    obj: Any = None if wbits is None else zlib.decompressobj(wbits)
    head = b""

    def decode(data: bytes) -> Iterator[bytes]:
        nonlocal obj, head
        if obj is None:
            data = head + data
            if len(data) < 2:
                head = data
                return
            head = b""
            try:
                zlib.decompressobj().decompress(data[:2])
                obj = zlib.decompressobj()
            except zlib.error:
                obj = zlib.decompressobj(-zlib.MAX_WBITS)
        # Lazily, in slices: the scanner consumes each before the next exists.
        # A full slice may leave output inside zlib with no unconsumed input,
        # so keep asking until a slice comes back short.
        out = obj.decompress(data, _SLICE)
        yield out
        while obj.unconsumed_tail or (len(out) == _SLICE and not obj.eof):
            out = obj.decompress(obj.unconsumed_tail, _SLICE)
            yield out

    return decode
