"""The fault server's WebSocket endpoint: OpenAI's Responses API over a WebSocket.

Owns :class:`ResponsesWebSocket`, the endpoint that ``FaultServer.websocket_base_url``
starts on first use, on a port of its own (the HTTP server cannot upgrade), on 127.0.0.1
only, ``ws://`` (``wss://`` with the server's ``ssl_context``), and that ``FaultServer.stop``
stops with the rest. It runs on the ``websockets`` library's threaded server, imported
only here and only then (``pip install 'hermes-transport[websocket]'``), so the package
imports without it. Point the SDK at it with ``OpenAI(base_url=server.base_url,
websocket_base_url=server.websocket_base_url)``; ``client.responses.connect()`` then
connects to ``/v1/responses``. Any path ending in ``/responses`` is accepted (below a
proxy's prefix); any other is refused with 404 at the handshake.

Each text (or binary) frame the client sends is one request, recorded like an HTTP one
(``method`` ``"WEBSOCKET"``, ``path`` the handshake's target, ``headers`` the handshake's,
``body`` the frame, ``stream`` True). A ``response.create`` counts as an attempt and is
answered under ``scenario.for_attempt(attempt)``, the server's current scenario, exactly
as ``POST /v1/responses`` with ``"stream": true`` would be: one text frame per event,
each frame the JSON the SSE wire puts in ``data:`` (the same events, numbers, keepalives
and error events, built by ``responses.py``; with a ``stream_id`` in the create, each frame
carries it too), the response kept in the server's store as it is created, so that it
can be retrieved, and in background mode resumed or cancelled, over HTTP. Any other frame
(no JSON, another ``type`` such as ``response.steer``) is no attempt and gets an ``error``
frame with status 400. Turns are answered one at a time, in order; the connection stays
open between them. The faults, per turn:

* ``status`` other than 200: one ``error`` frame (``{"type": "error", "status": ...,
  "error": {...}}``, the error's ``headers`` holding ``retry-after`` if set); the
  connection stays open;
* ``think`` (with ``keepalive_interval``), ``event_interval``, ``error_event`` (the wire's
  error frame in place of the rest; the connection stays open) and ``end_after_events``
  (the turn's frames end there; the connection stays open) as on HTTP;
* ``stall_before_headers`` and ``stall_after_events`` send nothing more (keepalive
  frames every ``comment_interval`` after events), then, after ``hold`` seconds, close
  the connection abruptly: its socket shut down, no close frame (the client reads
  1006);
* ``drop_after_events``: that many frames, then the same abrupt close at once
  (``drop_mid_event`` has no half frame to send: ignored);
* ``truncate_after_events``: that many frames, then a clean close (code 1000) mid-turn.

Ignored here, on purpose: ``byte_by_byte``, ``byte_delay``, ``gzip``, ``crlf``,
``write_size``, ``linger_after_done`` and ``json_delay`` (frames are whole messages).
``FaultServer.sent`` records each turn: ``status`` (200, or the error's), one write per
frame, and when the turn ended. No server pings, no compression, no size limit. On
``stop()``, every stall ends and every connection is closed with code 1001 (within the
close timeout, 1 s, if the client does not answer); a stall that sees its client gone
ends early.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from .chat import chat_error
from .responses import ResponsesStream, responses_stream
from .scenarios import RecordedRequest, Scenario

if TYPE_CHECKING:
    from collections.abc import Callable

    from .server import FaultServer, Sending

__all__ = ["ResponsesWebSocket"]

_POLL = 0.05  # how often an idle connection or a silent stall checks for stop
_CLOSE_TIMEOUT = 1.0  # the longest a close waits for the client's close frame
_EXTRA = "pip install 'hermes-transport[websocket]'"


class _Abort(Exception):
    """End the connection now: abruptly, or with 1001 when the server is stopping."""


def _serve() -> Callable[..., Any]:
    """The ``websockets`` library's threaded ``serve``; ImportError naming the extra."""
    try:
        from websockets.sync.server import serve
    except ImportError as error:
        raise ImportError(
            f"FaultServer's WebSocket endpoint needs the websockets library (>= 13): {_EXTRA}"
        ) from error
    return serve


def _only_responses(connection: Any, request: Any) -> Any:
    """Refuse the handshake with 404 unless the path ends in ``/responses``."""
    if str(request.path).split("?")[0].endswith("/responses"):
        return None
    message = "Not Found: this fault server answers WebSockets at /v1/responses only\n"
    return connection.respond(404, message)


class ResponsesWebSocket:
    """The Responses WebSocket endpoint of one started :class:`FaultServer`.

    Made by ``FaultServer.websocket_base_url`` with the server's lock held: it registers
    the thread that stops it among the server's threads, which ``stop()`` joins.
    """

    def __init__(self, fault: FaultServer) -> None:
        serve = _serve()
        if fault._httpd is None:
            raise RuntimeError("FaultServer is not started")
        if fault._stopping.is_set():
            raise RuntimeError("FaultServer is stopped")
        self._fault = fault
        context = fault._ssl_context
        self._server = serve(
            self._connection,
            "127.0.0.1",
            0,
            process_request=_only_responses,
            ssl=context,
            compression=None,
            ping_interval=None,
            close_timeout=_CLOSE_TIMEOUT,
            max_size=None,
        )
        port = int(self._server.socket.getsockname()[1])
        self.base_url = f"{'ws' if context is None else 'wss'}://127.0.0.1:{port}/v1"
        serving = threading.Thread(
            target=self._server.serve_forever, name="FaultServer-websocket", daemon=True
        )
        stopper = threading.Thread(
            target=self._stop_with_server, args=(serving,), name="FaultServer-websocket-stop"
        )
        stopper.daemon = True
        serving.start()
        stopper.start()
        fault._threads.append(stopper)

    def _stop_with_server(self, serving: threading.Thread) -> None:
        self._fault._stopping.wait()
        self._server.shutdown()
        serving.join()

    def _connection(self, ws: Any) -> None:
        """One connection: its turns in order, until the client or the server ends it."""
        from websockets.exceptions import ConnectionClosed

        stopping = self._fault._stopping
        try:
            while not stopping.is_set():
                try:
                    message = ws.recv(timeout=_POLL)
                except TimeoutError:
                    continue
                self._turn(ws, message, time.monotonic())
            ws.close(1001)
        except _Abort:
            if stopping.is_set():
                ws.close(1001)
            else:  # no close frame: shut the socket down (on it, not on its TLS layer)
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(ws.socket, socket.SHUT_RDWR)
        except (ConnectionClosed, OSError):
            pass  # the client is gone

    def _turn(self, ws: Any, message: str | bytes, arrived: float) -> None:
        fault = self._fault
        request = _heard(ws, message, arrived)
        body = request.json if isinstance(request.json, dict) else {}
        create = body.get("type") == "response.create"
        request = fault._counted(request, create)
        sending = fault._sending(request)
        turn = _Turn(ws, sending, body.get("stream_id"), fault._stopping)
        try:
            if not create:
                kind = body.get("type")
                text = f"Unsupported event type {kind!r}: this fault server answers"
                turn.error(400, text + " response.create only.", None)
                return
            scenario = fault.scenario.for_attempt(request.attempt)
            if scenario.stall_before_headers:
                turn.wait(scenario.hold)
                raise _Abort
            if scenario.status != 200:
                turn.error(scenario.status, scenario.message, scenario.retry_after)
                return
            sending.headers(200)
            n, store = next(fault._ids), fault._responses
            wire = responses_stream(scenario, request, n, store)
            try:
                turn.play(scenario, wire)
            finally:
                wire.ended()
        finally:
            sending.ended()


def _heard(ws: Any, message: str | bytes, arrived: float) -> RecordedRequest:
    """One frame as it arrived, not yet counted (as ``recording.heard`` does for HTTP)."""
    body = message.encode() if isinstance(message, str) else bytes(message)
    try:
        parsed: object | None = json.loads(body)
    except ValueError:
        parsed = None
    headers: dict[str, str] = {}
    for name, value in ws.request.headers.raw_items():
        key = str(name).lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else str(value)
    return RecordedRequest(
        method="WEBSOCKET",
        path=str(ws.request.path),
        headers=headers,
        body=body,
        json=parsed,
        stream=True,
        time=arrived,
        attempt=-1,
    )


class _Turn:
    """The frames of one turn, sent on ``ws`` and recorded in ``sending``."""

    def __init__(
        self, ws: Any, sending: Sending, stream_id: object, stopping: threading.Event
    ) -> None:
        self._ws, self._sending, self._stopping = ws, sending, stopping
        self._stream_id = stream_id

    def send(self, event: dict[str, Any]) -> None:
        if self._stream_id is not None:
            event = {**event, "stream_id": self._stream_id}
        data = json.dumps(event)
        self._sending.wrote(data.encode())
        self._ws.send(data)

    def send_sse(self, sse: bytes) -> None:
        """Send the JSON in the ``data:`` line of one encoded SSE event."""
        line = next(line for line in sse.splitlines() if line.startswith(b"data: "))
        if self._stream_id is not None:
            self.send(json.loads(line[len(b"data: ") :]))
            return
        data = line[len(b"data: ") :]
        self._sending.wrote(data)
        self._ws.send(data.decode())

    def error(self, status: int, message: str, retry_after: float | None) -> None:
        """The protocol ``error`` frame with ``status``, in place of a response."""
        self._sending.headers(status)
        found = chat_error(status, message)["error"]
        error: dict[str, Any] = dict(found) if isinstance(found, dict) else {}
        if retry_after is not None:
            error["headers"] = {"retry-after": f"{retry_after:g}"}
        self.send({"type": "error", "status": status, "error": error})

    def play(self, scenario: Scenario, wire: ResponsesStream) -> None:
        """The turn's events under the scenario's faults (see the module's docstring)."""
        limit = scenario.events_played(len(wire))
        for index in range(limit + 1):
            if index == wire.think_at < len(wire) and scenario.think:
                self.wait(scenario.think, wire, scenario.keepalive_interval)
            if index == limit:
                break
            if index and scenario.event_interval and self._stopping.wait(scenario.event_interval):
                raise _Abort
            self.send_sse(wire.event(index))
        if scenario.error_event is not None:
            self.send_sse(wire.error())
        if scenario.truncate_after_events is not None:
            self._ws.close(1000)  # the next recv ends the connection's loop
        if scenario.drop_after_events is not None:
            raise _Abort
        if scenario.stall_after_events is not None:
            self.wait(scenario.hold, wire, scenario.comment_interval)
            raise _Abort

    def wait(
        self, seconds: float, wire: ResponsesStream | None = None, interval: float | None = None
    ) -> None:
        """Wait ``seconds``, sending ``wire``'s keepalive after every full ``interval``.

        Raises :class:`_Abort` on stop, and, when it sends nothing, once the client is gone.
        """
        if wire is None:
            interval = None
        deadline = time.monotonic() + seconds
        while (remaining := deadline - time.monotonic()) > 0:
            step = min(interval or _POLL, remaining)
            if self._stopping.wait(step):
                raise _Abort
            if wire is not None and interval is not None:
                if step == interval:
                    self.send_sse(wire.keepalive())
            elif self._ws.protocol.state.name != "OPEN":
                raise _Abort
