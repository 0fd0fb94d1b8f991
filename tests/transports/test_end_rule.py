"""The end rule through a real connection: a read ends the stream only if its last event is the end.

A loopback server of its own (the fault server sends ``[DONE]`` last, always) answers
with one write that the client reads at once: headers and a first chunk holding whole
events (and the body's end, or after a pause more events, then the end). A
``[DONE]`` that ends such a read ends the stream: a caller that closes then has its
connection drained and pooled. A ``[DONE]`` followed by another event (a keepalive too)
in the same read does not: the stream goes on (every byte reaches the reader, watched
for stalls as before), and a caller that closes there has its connection closed.
"""

from __future__ import annotations

import contextlib
import http.server
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from hermes_transport import StreamPolicy
from hermes_transport._core.body import AFTER_DONE_SECONDS

from _support import Flavor, chat_body

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

POLICY = StreamPolicy(stale_timeout=5.0, retries=0)
PATH = "/chat/completions"
OUTPUT = b'data: {"choices": [{"index": 0, "delta": {"content": "x"}}]}\n\n'
DONE = b"data: [DONE]\n\n"
KEEPALIVE = b"event: ping\ndata: {}\n\n"
HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunked(part: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(part), part) if part else b""


class _Answer(http.server.BaseHTTPRequestHandler):
    """Answers each request with the server's ``writes``: (pause before, body bytes) each,
    the first with the headers, the last with the body's end; keeps connections alive."""

    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length") or 0))
        writes = self.server.writes
        for number, (pause, part) in enumerate(writes):
            time.sleep(pause)
            head = HEAD if number == 0 else b""
            end = b"0\r\n\r\n" if number == len(writes) - 1 else b""
            try:
                self.wfile.write(head + _chunked(part) + end)
            except OSError:  # the client closed the connection: nothing more to send
                self.close_connection = True
                return

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, writes: Sequence[tuple[float, bytes]]) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.writes = writes
        self.lock = threading.Lock()
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1{PATH}"


@contextlib.contextmanager
def _serving(writes: Sequence[tuple[float, bytes]]) -> Iterator[_Server]:
    httpd = _Server(writes)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _closed_after_the_first_read(flavor: Flavor, first: bytes) -> tuple[Any, int]:
    """Read one chunk (``first``, sent with the body's end: a drain finds it at once) and
    close; send a second request on the same client. The first stream's statistics, and
    the connections the server saw."""
    with _serving([(0.0, first)]) as server:
        transport = flavor.WatchdogTransport(policy=POLICY)
        with flavor.http.Client(transport=transport, timeout=30.0) as client:
            with client.stream("POST", server.url, json=chat_body()) as response:
                assert next(response.iter_raw()) == first
            client.post(server.url, json=chat_body()).read()
        return response.extensions["stream_stats"], server.connections


@pytest.mark.parametrize(
    "after", [OUTPUT, KEEPALIVE, OUTPUT + DONE + KEEPALIVE], ids=["output", "keepalive", "done"]
)
def test_a_read_with_events_after_done_does_not_end_the_stream(
    flavor: Flavor, after: bytes
) -> None:
    """A caller that closes after a read holding [DONE] and then another event (a keepalive too) has its connection closed, not pooled, and the stream is reported closed, not completed."""
    stats, connections = _closed_after_the_first_read(flavor, OUTPUT + DONE + after)
    assert (stats.outcome, connections) == ("closed", 2)


@pytest.mark.parametrize(
    "after", [b"", b": keepalive\n\n", b"data: unfinished"], ids=["nothing", "comment", "partial"]
)
def test_a_read_ending_in_done_ends_the_stream(flavor: Flavor, after: bytes) -> None:
    """A caller that closes after a read whose last complete event is [DONE] (comments and an unfinished event after it are no events) has its connection pooled, and the stream is reported completed."""
    stats, connections = _closed_after_the_first_read(flavor, OUTPUT + DONE + after)
    assert (stats.outcome, connections) == ("completed", 1)


def test_events_after_done_in_its_read_reach_the_reader_however_late_the_rest(
    flavor: Flavor,
) -> None:
    """After a read holding [DONE] and then more output, the stream is not cut at the short wait that follows a [DONE]: the reader gets every byte, the rest of the body too."""
    writes = [(0.0, OUTPUT + DONE + OUTPUT), (AFTER_DONE_SECONDS + 0.5, OUTPUT + DONE)]
    with _serving(writes) as server:
        transport = flavor.WatchdogTransport(policy=POLICY)
        with flavor.http.Client(transport=transport, timeout=30.0) as client:
            response = client.post(server.url, json=chat_body())
    assert response.content == b"".join(part for _, part in writes)
    stats = response.extensions["stream_stats"]
    assert (stats.outcome, stats.events) == ("completed", 5)
