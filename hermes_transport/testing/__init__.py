"""An embedded OpenAI-compatible fault server for tests, demos and benchmarks.

:class:`FaultServer` answers ``POST /v1/chat/completions`` on 127.0.0.1 from background
threads, shaping each response after a :class:`Scenario`: healthy, silent before the status
line, silent mid-stream, only SSE keep-alive comments, cut off, trickled a byte at a time,
or an error status. It answers Anthropic's ``POST /v1/messages`` too, in that API's
event format, with ``event: ping`` as its keepalive (``comment_interval``) instead of a
comment. Every request is recorded as a :class:`RecordedRequest`::

    import openai
    from hermes_transport.testing import FaultServer, Scenario

    def test_sdk_retries_a_stalled_request() -> None:
        with FaultServer(Scenario.stall_first(1)) as server, openai.OpenAI(
            base_url=server.base_url, api_key="x", timeout=0.5, max_retries=1
        ) as client:
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.choices[0].message.content == "hello world"
            assert [r.attempt for r in server.requests] == [0, 1]  # attempt 0 stalled
            server.scenario = Scenario.silent_after(1)  # for the requests that follow

Good to know:

* Standard library only; HTTP/1.1 with keep-alive, chunked SSE, TCP_NODELAY; HTTPS when
  given an ``ssl_context``.
* Every stall lasts at most :attr:`Scenario.hold` seconds (then the server hangs up without
  finishing the response), ends at once on :meth:`FaultServer.stop`, and ends early when
  its client hangs up.
* ``stall_after_events``, ``truncate_after_events``, ``comment_interval`` and
  ``event_interval`` shape streams only; a non-streaming request gets the whole JSON after
  ``json_delay``. ``stall_before_headers``, ``status``, ``gzip`` and ``byte_by_byte`` apply
  to both.
* The ``openai`` SDK retries timeouts and 5xx by itself: pass ``max_retries=0`` when a test
  counts requests.
* Combine fields with :func:`dataclasses.replace`, e.g.
  ``replace(Scenario.silent_after(2), crlf=True, hold=1.0)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import socket
import ssl
import sys
import threading
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from io import BufferedIOBase
from socketserver import TCPServer
from typing import Any
from urllib.parse import urlsplit

from .messages import (
    MESSAGES_PATH,
    messages_completion,
    messages_error,
    messages_events,
    ping,
)

__all__ = [
    "CHAT_COMPLETIONS_PATH",
    "MESSAGES_PATH",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_NAME",
    "FaultServer",
    "RecordedRequest",
    "Scenario",
]

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
_CHAT_PATHS = (CHAT_COMPLETIONS_PATH, MESSAGES_PATH)
#: Function name of the tool call sent when ``Scenario.tool_call`` is set.
TOOL_CALL_NAME = "get_weather"
#: JSON arguments of that tool call; streams split them into 8-character pieces.
TOOL_CALL_ARGUMENTS = '{"city": "Paris", "unit": "celsius"}'
_TOOL_PIECES = [TOOL_CALL_ARGUMENTS[i : i + 8] for i in range(0, len(TOOL_CALL_ARGUMENTS), 8)]
_ERROR_MESSAGE = "The server had an error while processing your request."
_NON_NEGATIVE: tuple[str, ...] = ("hold", "byte_delay", "event_interval", "json_delay")
_NON_NEGATIVE += ("stall_attempts", "stall_after_events", "truncate_after_events")
_NON_NEGATIVE += ("linger_after_done", "write_size")
_POLL = 0.05  # how often a silent stall checks whether its client hung up


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it.

    ``headers`` has lower-cased names; ``json`` is the parsed body (None if empty or not
    JSON); ``stream`` is the body's ``"stream"`` if it is a bool; ``time`` is
    :func:`time.monotonic` once the request head was read; ``attempt`` is the 0-based index
    among chat-completion and messages requests since the server started (-1 for any
    other request).
    """

    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: object | None
    stream: bool | None
    time: float
    attempt: int


@dataclass(frozen=True)
class Scenario:
    """How the server answers a chat-completion request; the classmethods cover common cases.

    Content: one data event per ``content`` piece (the first carries ``role``); ``tool_call``
    then adds a :data:`TOOL_CALL_NAME` call with its arguments split across events;
    ``finish_reason`` defaults to ``"tool_calls"`` or ``"stop"``; ``usage`` adds a usage
    object. A ``status`` other than 200 answers with an OpenAI-style error and ``message``.

    Faults, at most one: ``stall_before_headers`` sends nothing at all;
    ``stall_after_events`` sends that many data events, then nothing, or only ``: keepalive``
    comments every ``comment_interval`` seconds; ``truncate_after_events`` sends that many
    data events, then closes without the terminating chunk. A stall ends, and the connection
    closes, after ``hold`` seconds. The first ``stall_attempts`` chat requests are answered by
    ``stall_scenario`` instead (default: :meth:`silent_before_headers`).

    Delivery: ``byte_by_byte`` writes each body byte as its own chunk, ``byte_delay`` apart;
    ``event_interval`` pauses between data events; ``json_delay`` pauses before a
    non-streaming answer; ``gzip`` compresses (sync-flushed per event); ``crlf`` ends SSE
    lines with CRLF; ``linger_after_done`` pauses between ``data: [DONE]`` and the end of
    the body; ``write_size`` (bytes, 0 for one write per event) coalesces events into
    fewer, larger writes, so that a benchmark measures the client rather than this server.
    """

    content: tuple[str, ...] = ("hello", " world")
    finish_reason: str | None = None
    usage: bool = True
    tool_call: bool = False
    status: int = 200
    message: str = _ERROR_MESSAGE
    stall_before_headers: bool = False
    stall_after_events: int | None = None
    comment_interval: float | None = None
    truncate_after_events: int | None = None
    hold: float = 30.0
    stall_attempts: int = 0
    stall_scenario: Scenario | None = None
    byte_by_byte: bool = False
    byte_delay: float = 0.0
    event_interval: float = 0.0
    json_delay: float = 0.0
    gzip: bool = False
    crlf: bool = False
    linger_after_done: float = 0.0
    write_size: int = 0

    def __post_init__(self) -> None:
        content: object = self.content
        if isinstance(content, str | bytes) or not isinstance(content, Sequence):
            raise ValueError(f"Scenario.content must be a sequence of str, got {content!r}")
        if not all(isinstance(piece, str) for piece in content):
            raise ValueError(f"Scenario.content must hold only str, got {content!r}")
        object.__setattr__(self, "content", tuple(content))  # accept lists, stay hashable
        if not (self.status == 200 or 400 <= self.status <= 599):
            raise ValueError(f"Scenario.status must be 200 or 400-599, got {self.status}")
        for name in _NON_NEGATIVE:
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"Scenario.{name} must be >= 0, got {value}")
        fault_fields = {
            "stall_before_headers": self.stall_before_headers,
            "stall_after_events": self.stall_after_events is not None,
            "truncate_after_events": self.truncate_after_events is not None,
        }
        faults = [name for name, on in fault_fields.items() if on]
        if len(faults) > 1:
            raise ValueError(f"Scenario.{faults[1]} cannot be combined with {faults[0]}")
        if self.comment_interval is not None and not self.comment_interval > 0:
            raise ValueError(f"Scenario.comment_interval must be > 0, got {self.comment_interval}")
        if self.comment_interval is not None and self.stall_after_events is None:
            raise ValueError("Scenario.comment_interval requires stall_after_events")
        if self.byte_delay and not self.byte_by_byte:
            raise ValueError("Scenario.byte_delay requires byte_by_byte=True")
        if self.write_size and (self.event_interval or self.byte_by_byte or self.gzip):
            raise ValueError(
                "Scenario.write_size cannot be combined with event_interval, byte_by_byte or gzip"
            )
        if not isinstance(self.stall_scenario, Scenario | None):
            raise ValueError("Scenario.stall_scenario must be a Scenario or None")

    @classmethod
    def healthy(
        cls, *, content: Sequence[str] = ("hello", " world"), gzip: bool = False
    ) -> Scenario:
        """A normal, complete response, streamed or as JSON."""
        return cls(content=tuple(content), gzip=gzip)

    @classmethod
    def silent_before_headers(cls, *, gzip: bool = False) -> Scenario:
        """Read the request, then send nothing at all, not even a status line."""
        return cls(stall_before_headers=True, gzip=gzip)

    @classmethod
    def silent_after(cls, events: int, *, gzip: bool = False) -> Scenario:
        """Send the headers and the first ``events`` data events, then nothing."""
        return cls(stall_after_events=events, gzip=gzip)

    @classmethod
    def comments_after(
        cls, events: int, *, interval: float = 0.05, gzip: bool = False
    ) -> Scenario:
        """After ``events`` data events, send only ``: keepalive`` comments every ``interval``."""
        return cls(stall_after_events=events, comment_interval=interval, gzip=gzip)

    @classmethod
    def stall_first(
        cls, attempts: int, *, then: Scenario | None = None, stall: Scenario | None = None
    ) -> Scenario:
        """Answer the first ``attempts`` chat requests like ``stall``, later ones like ``then``.

        ``stall`` defaults to :meth:`silent_before_headers`, ``then`` to :meth:`healthy`.
        """
        return dataclasses.replace(
            then if then is not None else cls(),
            stall_attempts=attempts,
            stall_scenario=stall if stall is not None else cls.silent_before_headers(),
        )

    @classmethod
    def truncated(cls, events: int = 1) -> Scenario:
        """Send ``events`` data events, then close without the terminating chunk."""
        return cls(truncate_after_events=events)

    @classmethod
    def trickle(cls, *, delay: float = 0.0) -> Scenario:
        """A healthy response written one byte per chunk, ``delay`` seconds apart."""
        return cls(byte_by_byte=True, byte_delay=delay)

    @classmethod
    def error(cls, status: int = 500, *, message: str = _ERROR_MESSAGE) -> Scenario:
        """An OpenAI-style JSON error with this status, for streaming requests too."""
        return cls(status=status, message=message)

    def for_attempt(self, attempt: int) -> Scenario:
        """The scenario that answers chat request number ``attempt`` (0-based)."""
        if 0 <= attempt < self.stall_attempts:
            stall = self.stall_scenario or Scenario.silent_before_headers()
            return stall.for_attempt(attempt)
        return self


class FaultServer:
    """A threaded HTTP server on 127.0.0.1 answering according to :attr:`scenario`.

    Use it as a context manager, or call :meth:`start` (once) and :meth:`stop` (idempotent).
    With a server-side ``ssl_context`` it speaks HTTPS (the handshake runs on the
    connection's own thread, so a client stalling it blocks nothing else).
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self._scenario = scenario if scenario is not None else Scenario()
        self._address = (host, port)
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._recorded = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._attempts = 0
        self._connections_opened = 0
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._ids = itertools.count()
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._serve_thread: threading.Thread | None = None

    def __enter__(self) -> FaultServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def scenario(self) -> Scenario:
        """The scenario for requests arriving from now on; may be replaced at any time."""
        with self._lock:
            return self._scenario

    @scenario.setter
    def scenario(self, scenario: Scenario) -> None:
        if not isinstance(scenario, Scenario):
            raise TypeError(f"expected a Scenario, got {type(scenario).__name__}")
        with self._lock:
            self._scenario = scenario

    @property
    def port(self) -> int:
        """The bound TCP port (RuntimeError before :meth:`start`)."""
        if self._httpd is None:
            raise RuntimeError("FaultServer is not started")
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        """The OpenAI base URL, ``http://127.0.0.1:PORT/v1`` (``https`` with TLS)."""
        scheme = "http" if self._ssl_context is None else "https"
        return f"{scheme}://{self._address[0]}:{self.port}/v1"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def connections_opened(self) -> int:
        """The number of TCP connections accepted so far."""
        with self._lock:
            return self._connections_opened

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> bool:
        """Block until ``n`` requests were recorded; False on timeout or stop."""
        with self._recorded:
            self._recorded.wait_for(
                lambda: len(self._requests) >= n or self._stopping.is_set(), timeout
            )
            return len(self._requests) >= n

    def start(self) -> FaultServer:
        """Bind and serve on background threads; returns ``self``."""
        with self._lock:
            if self._httpd is not None:
                raise RuntimeError("a FaultServer can only be started once")
            self._httpd = _HTTPServer(self, self._address)
            self._serve_thread = threading.Thread(
                target=self._httpd.serve_forever,
                kwargs={"poll_interval": 0.02},  # the longest stop() waits for the accept loop
                name="FaultServer",
                daemon=True,
            )
            self._serve_thread.start()
        return self

    def stop(self) -> None:
        """End every stall, close all connections and the listener, and join all threads."""
        with self._lock:
            httpd, serve_thread = self._httpd, self._serve_thread
            if httpd is None or serve_thread is None or self._stopping.is_set():
                return
            self._stopping.set()
            self._recorded.notify_all()
        httpd.shutdown()  # returns once the accept loop has exited: no new connections
        serve_thread.join()
        with self._lock:
            # Wakes handlers blocked in recv (idle keep-alive) or in sendall (full buffers).
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    # The plain-socket method: SSLSocket.shutdown would also drop the TLS
                    # state that the handler thread may be using right now.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout=5.0)
        httpd.server_close()

    def _accepted(self, sock: socket.socket, thread: threading.Thread) -> None:
        with self._lock:
            self._connections_opened += 1
            self._sockets.add(sock)
            # Finished threads are kept until here so that stop() can join the last ones.
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def _closing(self, sock: socket.socket) -> None:
        with self._lock:  # so that stop() never shuts down a socket being closed
            self._sockets.discard(sock)

    def _record(self, handler: _Handler, body: bytes, arrived: float) -> RecordedRequest:
        try:
            parsed: object | None = json.loads(body) if body else None
        except ValueError:
            parsed = None
        stream = parsed.get("stream") if isinstance(parsed, dict) else None
        headers: dict[str, str] = {}
        for name, value in handler.headers.items():
            key = name.lower()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        is_chat = handler.command == "POST" and urlsplit(handler.path).path in _CHAT_PATHS
        with self._recorded:
            attempt = self._attempts if is_chat else -1
            self._attempts += is_chat
            request = RecordedRequest(
                method=handler.command,
                path=handler.path,
                headers=headers,
                body=body,
                json=parsed,
                stream=stream if isinstance(stream, bool) else None,
                time=arrived,
                attempt=attempt,
            )
            self._requests.append(request)
            self._recorded.notify_all()
        return request


class _HTTPServer(HTTPServer):
    request_queue_size = 128  # benchmarks open many connections at once

    def __init__(self, fault: FaultServer, address: tuple[str, int]) -> None:
        self.fault = fault
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        # HTTPServer.server_bind calls getfqdn(), a reverse DNS lookup that can take seconds.
        TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = super().get_request()
        context = self.fault._ssl_context
        if context is not None:
            sock = context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        return sock, address

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(
            target=self._serve_connection,
            args=(request, client_address),
            name=f"FaultServer-{client_address[1]}",
            daemon=True,
        )
        self.fault._accepted(request, thread)
        thread.start()

    def _serve_connection(self, request: socket.socket, client_address: Any) -> None:
        try:
            if isinstance(request, ssl.SSLSocket):
                request.do_handshake()
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.fault._closing(request)
            self.shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients hanging up and stop() closing sockets are routine, not worth a traceback.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Abort(Exception):
    """End the response now and close the connection (stop, hold over, client gone)."""


class _Body:
    """Writes a response body: incremental gzip, chunked framing, maybe a byte per write."""

    def __init__(self, handler: _Handler, scenario: Scenario, *, chunked: bool) -> None:
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hermes-fault"
    sys_version = ""
    disable_nagle_algorithm = True  # every event leaves at once, so client timings are real
    server: _HTTPServer

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
                self._send_json(404, _error_json(message, "invalid_request_error"), Scenario())
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
            kind = "server_error" if scenario.status >= 500 else "invalid_request_error"
            self._send_json(scenario.status, _error_json(scenario.message, kind), scenario)
        elif not request.stream:
            self._send_json(200, _completion(scenario, request, n), scenario)
        else:
            self._stream(scenario, _stream_events(scenario, request, n))

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


def _error_json(message: str, kind: str) -> dict[str, object]:
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


def _envelope(kind: str, request: RecordedRequest, n: int) -> dict[str, Any]:
    model = request.json.get("model") if isinstance(request.json, dict) else None
    return {
        "id": f"chatcmpl-hermes{n}",
        "object": kind,
        "created": int(time.time()),
        "model": model if isinstance(model, str) else "hermes-fault",
    }


def _finish_reason(scenario: Scenario) -> str:
    return scenario.finish_reason or ("tool_calls" if scenario.tool_call else "stop")


def _usage(scenario: Scenario, request: RecordedRequest) -> dict[str, int]:
    prompt = max(1, len(request.body) // 4)  # rough but deterministic
    completion = len(scenario.content) + (len(_TOOL_PIECES) if scenario.tool_call else 0)
    total = prompt + completion
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _completion(scenario: Scenario, request: RecordedRequest, n: int) -> dict[str, Any]:
    text = "".join(scenario.content)
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": None}
    if scenario.tool_call:
        function = {"name": TOOL_CALL_NAME, "arguments": TOOL_CALL_ARGUMENTS}
        message["content"] = text or None
        message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": function}]
    choice = {"index": 0, "message": message, "logprobs": None}
    completion = _envelope("chat.completion", request, n)
    completion["choices"] = [{**choice, "finish_reason": _finish_reason(scenario)}]
    if scenario.usage:
        completion["usage"] = _usage(scenario, request)
    return completion


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


def _stream_events(scenario: Scenario, request: RecordedRequest, n: int) -> list[bytes]:
    """The SSE data events of the complete stream, ``[DONE]`` included."""
    deltas: list[dict[str, Any]] = [{"content": piece} for piece in scenario.content]
    if scenario.tool_call:
        function = {"name": TOOL_CALL_NAME, "arguments": ""}
        start = {"index": 0, "id": f"call_{n}", "type": "function", "function": function}
        deltas.append({"tool_calls": [start]})
        for piece in _TOOL_PIECES:
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})
    deltas = deltas or [{"content": ""}]
    deltas[0] = {"role": "assistant", **deltas[0]}
    reasons: list[str | None] = [None] * len(deltas) + [_finish_reason(scenario)]
    chunks = [
        {
            **_envelope("chat.completion.chunk", request, n),
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}],
        }
        for delta, reason in zip([*deltas, {}], reasons, strict=True)
    ]
    if scenario.usage:
        chunks[-1]["usage"] = _usage(scenario, request)
    newline = b"\r\n" if scenario.crlf else b"\n"
    payloads = [json.dumps(chunk).encode() for chunk in chunks] + [b"[DONE]"]
    return [b"data: " + payload + newline + newline for payload in payloads]
