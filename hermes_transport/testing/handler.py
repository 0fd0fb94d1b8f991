"""The fault server's request handler: reading a request, shaping its answer.

Owns :class:`Handler`, which records each request, picks the wire (Chat Completions
or Messages) and plays the scenario's faults (stalls, keep-alives, truncation,
lingering), and the body helpers it writes with: incremental gzip, chunked framing,
a byte per write, coalesced writes.
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
import zlib
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .chat import chat_completion, chat_error, chat_events
from .messages import MESSAGES_PATH, messages_completion, messages_error, messages_events, ping
from .scenarios import RecordedRequest, Scenario

if TYPE_CHECKING:
    from .server import FaultHTTPServer

__all__ = ["Handler"]

_POLL = 0.05  # how often a silent stall checks whether its client hung up


class _Abort(Exception):
    """End the response now and close the connection (stop, hold over, client gone)."""


class _Body:
    """Writes a response body: incremental gzip, chunked framing, maybe a byte per write."""

    def __init__(self, handler: Handler, scenario: Scenario, *, chunked: bool) -> None:
        self._wfile: BufferedIOBase = handler.wfile
        self._stopping = handler.server.fault._stopping
        self._scenario, self._chunked = scenario, chunked
        self._zip = zlib.compressobj(wbits=31) if chunked and scenario.gzip else None

    def send(self, data: bytes) -> None:
        if self._zip is not None:
            # A sync flush per event lets the client decode each event as it arrives.
            data = self._zip.compress(data) + self._zip.flush(zlib.Z_SYNC_FLUSH)
        self._write(data)

    def finish(self) -> None:
        if self._zip is not None:
            self._write(self._zip.flush())
        self._wfile.write(b"0\r\n\r\n")
        self._wfile.flush()

    def _write(self, data: bytes) -> None:
        scenario = self._scenario
        step = 1 if scenario.byte_by_byte else max(len(data), 1)
        for offset in range(0, len(data), step):
            if offset and scenario.byte_delay and self._stopping.wait(scenario.byte_delay):
                raise _Abort
            piece = data[offset : offset + step]
            self._wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if self._chunked else piece)
            self._wfile.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hermes-fault"
    sys_version = ""
    disable_nagle_algorithm = True  # every event leaves at once, so client timings are real
    server: FaultHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log on the test's stderr

    def do_POST(self) -> None:
        fault, arrived = self.server.fault, time.monotonic()
        try:
            body = self._read_body()
        except ValueError:  # a malformed Content-Length or chunked body
            self.close_connection = True
            return
        request = fault._record(self, body, arrived)
        try:
            if request.attempt >= 0:
                self._chat(fault.scenario.for_attempt(request.attempt), request)
            else:
                message = f"Invalid URL ({self.command} {urlsplit(self.path).path})"
                self._send_json(404, chat_error(404, message), Scenario())
        except (_Abort, OSError):
            self.close_connection = True

    do_GET = do_PUT = do_PATCH = do_DELETE = do_POST

    def _read_body(self) -> bytes:
        if "chunked" not in self.headers.get("Transfer-Encoding", "").lower():
            return self.rfile.read(max(0, int(self.headers.get("Content-Length") or 0)))
        parts = []
        while size := int(self.rfile.readline(65537).split(b";")[0], 16):
            parts.append(self.rfile.read(size))
            self.rfile.readline()
        while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
            pass  # trailer fields
        return b"".join(parts)

    def _chat(self, scenario: Scenario, request: RecordedRequest) -> None:
        stopping = self.server.fault._stopping
        if scenario.stall_before_headers:
            self._hold(scenario, None)
        if not request.stream and scenario.json_delay and stopping.wait(scenario.json_delay):
            raise _Abort
        n = next(self.server.fault._ids)
        if urlsplit(request.path).path == MESSAGES_PATH:
            self._messages(scenario, request, n)
        elif scenario.status != 200:
            self._send_json(
                scenario.status, chat_error(scenario.status, scenario.message), scenario
            )
        elif not request.stream:
            self._send_json(200, chat_completion(scenario, request, n), scenario)
        else:
            self._stream(scenario, chat_events(scenario, request, n))

    def _messages(self, scenario: Scenario, request: RecordedRequest, n: int) -> None:
        if scenario.status != 200:
            self._send_json(
                scenario.status, messages_error(scenario.status, scenario.message), scenario
            )
        elif not request.stream:
            self._send_json(200, messages_completion(scenario, request, n), scenario)
        else:
            self._stream(scenario, messages_events(scenario, request, n), ping(scenario.crlf))

    def _stream(
        self, scenario: Scenario, events: list[bytes], keepalive: bytes | None = None
    ) -> None:
        stopping = self.server.fault._stopping
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if scenario.gzip:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        body = _Body(self, scenario, chunked=True)
        cut = scenario.stall_after_events
        cut = scenario.truncate_after_events if cut is None else cut
        events = events[:cut]
        if scenario.write_size:
            events = _coalesced(events, scenario.write_size)
        for index, event in enumerate(events):
            if index and scenario.event_interval and stopping.wait(scenario.event_interval):
                raise _Abort
            body.send(event)
        if scenario.truncate_after_events is not None:
            raise _Abort  # no terminating chunk: the client must see a protocol error
        if scenario.stall_after_events is not None:
            self._hold(scenario, body, keepalive)
        if scenario.linger_after_done and stopping.wait(scenario.linger_after_done):
            raise _Abort
        body.finish()

    def _hold(
        self, scenario: Scenario, body: _Body | None, keepalive: bytes | None = None
    ) -> None:
        """Stall for at most ``scenario.hold`` seconds, then hang up (always raises).

        With a ``comment_interval``, ``keepalive`` (default: a ``: keepalive`` comment)
        is sent that often meanwhile.
        """
        stopping = self.server.fault._stopping
        comment = keepalive or b": keepalive" + (b"\r\n\r\n" if scenario.crlf else b"\n\n")
        interval = scenario.comment_interval if body is not None else None
        deadline = time.monotonic() + scenario.hold
        while (remaining := deadline - time.monotonic()) > 0:
            if stopping.wait(min(interval or _POLL, remaining)):
                break
            if body is not None and interval is not None:
                body.send(comment)  # a gone client makes this raise
            elif self._client_gone():
                break
        raise _Abort

    def _client_gone(self) -> bool:
        # A non-blocking peek rather than select(), which cannot watch fds >= 1024; on the
        # plain socket, since SSLSocket.recv refuses flags (a FIN shows up there anyway).
        sock = self.connection
        try:
            sock.setblocking(False)
            return not socket.socket.recv(sock, 1, socket.MSG_PEEK)
        except BlockingIOError:
            return False  # connected, nothing to read
        except OSError:
            return True
        finally:
            with contextlib.suppress(OSError):
                sock.setblocking(True)

    def _send_json(self, status: int, payload: object, scenario: Scenario) -> None:
        data = json.dumps(payload).encode()
        if scenario.gzip:
            zipper = zlib.compressobj(wbits=31)
            data = zipper.compress(data) + zipper.flush()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if scenario.gzip:
            self.send_header("Content-Encoding", "gzip")
        self.end_headers()
        _Body(self, scenario, chunked=False).send(data)


def _coalesced(events: list[bytes], size: int) -> list[bytes]:
    """``events`` joined into writes of at least ``size`` bytes (the last may be shorter)."""
    writes: list[bytes] = []
    pending: list[bytes] = []
    pending_size = 0
    for event in events:
        pending.append(event)
        pending_size += len(event)
        if pending_size >= size:
            writes.append(b"".join(pending))
            pending, pending_size = [], 0
    if pending:
        writes.append(b"".join(pending))
    return writes
