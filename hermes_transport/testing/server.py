"""The fault server itself: binding, threads, recording and stopping.

Owns :class:`FaultServer` and :class:`FaultHTTPServer`, the ``http.server`` subclass
that accepts connections and serves each (TLS handshake included) on a thread of its
own with the request handler.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from http.server import HTTPServer
from socketserver import TCPServer
from typing import Any
from urllib.parse import urlsplit

from .background import is_resume
from .gemini import gemini_route
from .handler import Handler
from .mcp import McpSessions
from .messages import MESSAGES_PATH
from .recording import heard
from .responses import RESPONSES_PATH
from .scenarios import (
    CHAT_COMPLETIONS_PATH,
    SENT_LIMIT,
    SENT_WRITES_LIMIT,
    RecordedRequest,
    Scenario,
    SentResponse,
)
from .store import ResponseStore
from .websocket import ResponsesWebSocket

__all__ = ["FaultHTTPServer", "FaultServer", "Sending"]

_CREATE_PATHS = (CHAT_COMPLETIONS_PATH, MESSAGES_PATH, RESPONSES_PATH)


class FaultServer:
    """A threaded HTTP server on 127.0.0.1 answering according to :attr:`scenario`.

    Use it as a context manager, or call :meth:`start` (once) and :meth:`stop` (idempotent).
    With a server-side ``ssl_context`` it speaks HTTPS (the handshake runs on the
    connection's own thread, so a client stalling it blocks nothing else). It keeps every
    Responses response it answered, for retrieval, until it is dropped; a background one
    can be resumed for ``resume_window`` seconds after its creation (the real API's five
    minutes by default; any number > 0, ``math.inf`` for ever), and cancelled. A cancel
    takes effect as it arrives, and is answered ``cancel_delay`` seconds later (0 by default;
    ``math.inf``: never, until the server stops), to test a client that must not wait
    for it.
    """

    def __init__(
        self,
        scenario: Scenario | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        ssl_context: ssl.SSLContext | None = None,
        resume_window: float = 300.0,
        cancel_delay: float = 0.0,
    ) -> None:
        window: object = resume_window
        if isinstance(window, bool) or not isinstance(window, int | float) or not window > 0:
            raise ValueError(f"FaultServer resume_window must be a number > 0, got {window!r}")
        delay: object = cancel_delay
        if isinstance(delay, bool) or not isinstance(delay, int | float) or not delay >= 0:
            raise ValueError(f"FaultServer cancel_delay must be a number >= 0, got {delay!r}")
        self._resume_window = float(resume_window)
        self._cancel_delay = float(cancel_delay)
        self._scenario = scenario if scenario is not None else Scenario()
        self._address = (host, port)
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._recorded = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._sent_lock = threading.Lock()  # its own: taken on every write
        self._sent: collections.deque[Sending] = collections.deque(maxlen=SENT_LIMIT)
        self._attempts = 0
        self._mcp_sessions = McpSessions()
        self._connections_opened = 0
        self._sockets: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._ids = itertools.count()
        self._responses = ResponseStore()
        self._stopping = threading.Event()
        self._httpd: FaultHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._websocket: ResponsesWebSocket | None = None

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
    def resume_window(self) -> float:
        """Seconds after its creation during which a background response can be resumed."""
        return self._resume_window

    @property
    def mcp_cancelled(self) -> list[object]:
        """The request ids of the MCP ``notifications/cancelled`` heard, in order."""
        return list(self._mcp_sessions.cancelled)

    @property
    def cancel_delay(self) -> float:
        """Seconds between a cancel's arrival (when it takes effect) and its answer."""
        return self._cancel_delay

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
    def websocket_base_url(self) -> str:
        """The Responses WebSocket base URL, ``ws://127.0.0.1:PORT2/v1``: see ``websocket.py``."""
        with self._lock:  # started on first use, stopped by stop()
            self._websocket = self._websocket or ResponsesWebSocket(self)
            return self._websocket.base_url

    @property
    def requests(self) -> list[RecordedRequest]:
        """A copy of the requests received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def sent(self) -> list[SentResponse]:
        """What the server sent for each of the latest :data:`SENT_LIMIT` requests, in
        arrival order (a snapshot: a response still being answered has more to come)."""
        with self._sent_lock:
            return [sending.snapshot() for sending in self._sent]

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
            self._httpd = FaultHTTPServer(self, self._address)
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

    def _record(self, handler: Handler, body: bytes, arrived: float) -> RecordedRequest:
        request = heard(handler, body, arrived)
        method, target = handler.command, handler.path
        counts = method == "POST" and urlsplit(target).path in _CREATE_PATHS
        counts = counts or (method == "POST" and gemini_route(target) is not None)
        counts = counts or is_resume(method, target)
        return self._counted(request, counts)

    def _counted(
        self,
        request: RecordedRequest,
        counts: bool,
        stream_of: Callable[[int], bool | None] | None = None,
    ) -> RecordedRequest:
        """``request`` recorded, with its attempt number if it ``counts`` (and its ``stream``
        from ``stream_of(attempt)`` if given): what every wire's recording ends with."""
        with self._recorded:
            attempt = self._attempts if counts else -1
            self._attempts += counts
            stream = request.stream if stream_of is None else stream_of(attempt)
            request = dataclasses.replace(request, attempt=attempt, stream=stream)
            self._requests.append(request)
            self._recorded.notify_all()
        return request

    def _sending(self, request: RecordedRequest) -> Sending:
        """The record of what is sent for ``request``, kept from now on."""
        sending = Sending(request, self._sent_lock)
        with self._sent_lock:
            self._sent.append(sending)
        return sending


class Sending:
    """The growing record of one response, written by its handler's thread: see
    :class:`SentResponse`, its snapshot."""

    def __init__(self, request: RecordedRequest, lock: threading.Lock) -> None:
        self._request, self._lock = request, lock
        self._status: int | None = None
        self._headers_at: float | None = None
        self._writes: list[tuple[float, bytes]] = []
        self._body_bytes = 0
        self._ended_at: float | None = None

    def headers(self, status: int) -> None:
        """The status line and headers are about to be written."""
        now = time.monotonic()
        with self._lock:
            self._status, self._headers_at = status, now

    def wrote(self, data: bytes) -> None:
        """Body bytes ``data`` are about to be written."""
        now = time.monotonic()
        with self._lock:
            if len(self._writes) < SENT_WRITES_LIMIT:
                self._writes.append((now, data))
            self._body_bytes += len(data)

    def ended(self) -> None:
        """The server is done with the request."""
        now = time.monotonic()
        with self._lock:
            self._ended_at = now

    def snapshot(self) -> SentResponse:
        """What was sent so far (call with the lock held)."""
        return SentResponse(
            request=self._request,
            status=self._status,
            headers_at=self._headers_at,
            writes=tuple(self._writes),
            body_bytes=self._body_bytes,
            ended_at=self._ended_at,
        )


class FaultHTTPServer(HTTPServer):
    request_queue_size = 128  # benchmarks open many connections at once

    def __init__(self, fault: FaultServer, address: tuple[str, int]) -> None:
        self.fault = fault
        super().__init__(address, Handler)

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
