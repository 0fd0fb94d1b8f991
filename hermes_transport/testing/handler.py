"""The fault server's request handler: reading a request, shaping its answer.

Owns :class:`Handler`, which records each request, picks the wire (Chat Completions,
Messages, Gemini, MCP, or Responses, whose stored responses it also retrieves, resumes and
cancels) and plays the scenario's faults over that wire's :class:`~.stream.WireStream`
(stalls, thinking, keep-alives, truncation, connection resets, in-stream errors,
lingering), and the body helper it writes with: incremental gzip, chunked framing, a
byte per write.
"""

from __future__ import annotations

import contextlib
import json
import socket
import struct
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler
from io import BufferedIOBase
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .background import (
    cancel_answer,
    not_found,
    replay_stream,
    responses_route,
    resumable,
    starting_after,
)
from .chat import chat_completion, chat_error, chat_stream
from .gemini import gemini_completion, gemini_error, gemini_route, gemini_stream
from .mcp import mcp_answer, mcp_attempt, mcp_channel, mcp_error, mcp_record, mcp_route
from .messages import MESSAGES_PATH, messages_completion, messages_error, messages_stream
from .responses import RESPONSES_PATH, responses_completion, responses_stream
from .scenarios import RecordedRequest, Scenario
from .stream import Writes

if TYPE_CHECKING:
    from .server import FaultHTTPServer, Sending
    from .stream import WireStream

__all__ = ["Handler"]

_POLL = 0.05  # how often a silent stall checks whether its client hung up
_DRAIN = 0.05  # the pause before a reset, for the bytes sent to reach the client


class _Abort(Exception):
    """End the response now and close the connection (stop, hold over, client gone)."""


class _Body:
    """Writes a response body: incremental gzip, chunked framing, maybe a byte per write."""

    def __init__(self, handler: Handler, scenario: Scenario, *, chunked: bool) -> None:
        self._wfile: BufferedIOBase = handler.wfile
        self._sent = handler.sent
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
            self._sent.wrote(piece)
            self._wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if self._chunked else piece)
            self._wfile.flush()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hermes-fault"
    sys_version = ""
    disable_nagle_algorithm = True  # every event leaves at once, so client timings are real
    server: FaultHTTPServer
    sent: Sending  # what is sent for the current request

    def log_message(self, format: str, *args: Any) -> None:
        pass  # no access log on the test's stderr

    def do_POST(self) -> None:
        fault, arrived = self.server.fault, time.monotonic()
        try:
            body = self._read_body()
        except ValueError:  # a malformed Content-Length or chunked body
            self.close_connection = True
            return
        mcp = mcp_route(self.path)
        request = (
            mcp_record(fault, self, body, arrived) if mcp else fault._record(self, body, arrived)
        )
        self.sent = fault._sending(request)
        try:
            route = responses_route(request.method, request.path)
            if request.attempt >= 0:
                self._chat(fault.scenario.for_attempt(request.attempt), request)
            elif mcp:
                self._mcp(request)
            elif route is not None:
                self._stored(*route)
            else:
                message = f"Invalid URL ({self.command} {urlsplit(self.path).path})"
                self._send_json(404, chat_error(404, message), Scenario())
        except (_Abort, OSError):
            self.close_connection = True
        finally:
            self.sent.ended()

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
        path = urlsplit(request.path).path
        resume = request.method == "GET"  # the one attempt that is a GET: a stream resume
        gemini = gemini_route(request.path)  # Gemini's path, not its body, says it streams
        mcp = mcp_route(request.path)
        streaming = gemini[1] if gemini else resume or request.stream is True
        if scenario.stall_before_headers:
            self._hold(scenario, None)
        if not streaming and scenario.json_delay and stopping.wait(scenario.json_delay):
            raise _Abort
        n, store = next(self.server.fault._ids), self.server.fault._responses
        if scenario.status != 200:
            error = messages_error if path == MESSAGES_PATH else chat_error
            error = gemini_error if gemini else error
            failed = error(scenario.status, scenario.message)
            failed = mcp_error(request, -32603, scenario.message) if mcp else failed
            self._send_json(scenario.status, failed, scenario)
        elif mcp:
            answer = mcp_attempt(self.server.fault, scenario, request, streaming)
            if isinstance(answer, tuple):
                self._send_json(answer[0], answer[1], scenario, answer[2])
            else:
                self._stream(scenario, answer)
        elif resume:
            response_id = path.rsplit("/", 1)[-1]
            window = self.server.fault._resume_window
            found = resumable(store, response_id, window, time.monotonic())
            if isinstance(found, tuple):
                self._send_json(*found, scenario)
            else:
                after = starting_after(request.path)
                self._stream(scenario, replay_stream(scenario, found, after))
        elif gemini is not None:
            if streaming:
                self._stream(scenario, gemini_stream(scenario, request, n))
            else:
                self._send_json(200, gemini_completion(scenario, request, n), scenario)
        elif path == MESSAGES_PATH:
            if streaming:
                self._stream(scenario, messages_stream(scenario, request, n))
            else:
                self._send_json(200, messages_completion(scenario, request, n), scenario)
        elif path == RESPONSES_PATH:
            if streaming:
                self._stream(scenario, responses_stream(scenario, request, n, store))
            else:
                self._send_json(200, responses_completion(scenario, request, n, store), scenario)
        elif streaming:
            self._stream(scenario, chat_stream(scenario, request, n))
        else:
            self._send_json(200, chat_completion(scenario, request, n), scenario)

    def _mcp(self, request: RecordedRequest) -> None:
        """An MCP request that is no attempt (see ``mcp.py``), or the session's channel."""
        answer = mcp_answer(self.server.fault, request)
        if answer is None:
            self._stream(*mcp_channel(self.server.fault.scenario))
        else:
            self._send_json(answer[0], answer[1], Scenario(), answer[2])

    def _stored(self, response_id: str, action: str) -> None:
        """Retrieve or cancel a stored response (no scenario applies: these are no attempts)."""
        store = self.server.fault._responses
        stored = store.get(response_id)
        if action == "cancel":
            answer = cancel_answer(store, response_id)
            delay = self.server.fault._cancel_delay
            if delay and self.server.fault._stopping.wait(min(delay, threading.TIMEOUT_MAX)):
                raise _Abort
            self._send_json(*answer, Scenario())
        elif stored is None:
            self._send_json(*not_found(response_id), Scenario())
        else:
            self._send_json(200, stored.response, Scenario())

    def _stream(self, scenario: Scenario, wire: WireStream) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        if scenario.gzip:
            self.send_header("Content-Encoding", "gzip")
        self.sent.headers(200)
        self.end_headers()
        try:
            self._play(scenario, wire, _Body(self, scenario, chunked=True))
        finally:
            wire.ended()

    def _play(self, scenario: Scenario, wire: WireStream, body: _Body) -> None:
        stopping = self.server.fault._stopping
        limit = scenario.events_played(len(wire))
        writes = Writes(body.send, scenario.write_size)
        for index in range(limit + 1):
            if index == wire.think_at < len(wire) and scenario.think:
                writes.flush()
                self._wait(scenario.think, body, wire, scenario.keepalive_interval)
            if index == limit:
                break
            if index and scenario.event_interval and stopping.wait(scenario.event_interval):
                raise _Abort
            writes.send(wire.event(index))
        if scenario.error_event is not None:
            writes.send(wire.error())
        writes.flush()
        if scenario.truncate_after_events is not None:
            raise _Abort  # no terminating chunk: the client must see a protocol error
        if scenario.drop_after_events is not None:
            if scenario.drop_mid_event and limit < len(wire):
                data = wire.event(limit)
                body.send(data[: len(data) // 2])
            self._reset()
        if scenario.stall_after_events is not None:
            self._hold(scenario, body, wire)
        if scenario.linger_after_done and stopping.wait(scenario.linger_after_done):
            raise _Abort
        body.finish()

    def _reset(self) -> None:
        """Reset the connection after a short pause, so the client reads ECONNRESET
        mid-body rather than a clean end (always raises)."""
        fault = self.server.fault
        if fault._stopping.wait(_DRAIN):
            raise _Abort
        sock = self.connection
        fault._closing(sock)  # stop() must not shut down a socket being closed
        with contextlib.suppress(OSError):  # linger 0: close sends RST, not FIN
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()  # the makefile's reference would defer the close
        sock.close()
        raise _Abort

    def _hold(
        self, scenario: Scenario, body: _Body | None, wire: WireStream | None = None
    ) -> None:
        """Stall for at most ``scenario.hold`` seconds, then hang up (always raises).

        With a ``comment_interval`` and a body, the wire's keepalive is sent that often.
        """
        self._wait(scenario.hold, body, wire, scenario.comment_interval)
        raise _Abort

    def _wait(
        self, seconds: float, body: _Body | None, wire: WireStream | None, interval: float | None
    ) -> None:
        """Wait ``seconds``, sending ``wire``'s keepalive after every full ``interval``.

        Raises :class:`_Abort` on stop, and, when it sends nothing, once the client hangs up
        (a keepalive sent to a gone client raises by itself).
        """
        stopping = self.server.fault._stopping
        if body is None or wire is None:
            interval = None
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            step = min(interval or _POLL, remaining)
            if stopping.wait(step):
                raise _Abort
            if body is not None and wire is not None and interval is not None:
                if step == interval:
                    body.send(wire.keepalive())
            elif self._client_gone():
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

    def _send_json(
        self,
        status: int,
        payload: object,
        scenario: Scenario,
        headers: dict[str, str] | None = None,
    ) -> None:
        data = b"" if payload is None else json.dumps(payload).encode()
        if scenario.gzip:
            zipper = zlib.compressobj(wbits=31)
            data = zipper.compress(data) + zipper.flush()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        if scenario.gzip:
            self.send_header("Content-Encoding", "gzip")
        if status != 200 and scenario.retry_after is not None:
            self.send_header("Retry-After", f"{scenario.retry_after:g}")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.sent.headers(status)
        self.end_headers()
        _Body(self, scenario, chunked=False).send(data)
