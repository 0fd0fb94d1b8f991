"""The ``mcp`` SDK's own server, ``MCPServer`` over streamable HTTP, on loopback: a real peer
for the SDK tests, served by uvicorn in a background thread.

``serve_mcp()`` starts it and yields a ``RealServer``: its ``url`` (``.../mcp``), the
``Recorder`` of what it saw, and its event store (``None`` unless one was given). Its tools:

- ``echo(text)``: the text, at once;
- ``count(n, delay)``: one log message (``ctx.info``), then ``n`` progress notifications
  ``delay`` seconds apart, then ``"done n"``;
- ``ask(question)``: an elicitation (a form of one string field, ``answer``), then what was
  answered (or the action, when the user declined or cancelled);
- ``nap(seconds)``: one progress notification, then ``seconds`` of sleep, then ``"rested"``;
  a cancel of its task is recorded.

``MemoryEventStore`` is an in-memory ``EventStore`` (the SDK ships only the abstract one):
with it the server's streams carry event ids, and a GET with ``Last-Event-ID`` replays the
events of that stream after the id.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import (
    EventCallback,
    EventId,
    EventMessage,
    EventStore,
    StreamId,
)
from mcp.types import JSONRPCMessage
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

# Generous: the machine running the tests may be busy.
START_BOUND = 10.0
STOP_BOUND = 10


@dataclass
class Recorder:
    """What the server saw, written from its thread, read by the tests.

    ``methods``: each inbound JSON-RPC method, requests and notifications, in order;
    ``cancel_notices``: the request id of each ``notifications/cancelled``;
    ``http``: each HTTP request, as (method, its ``Last-Event-ID`` header or ``None``);
    ``cancelled``: the tools whose task was cancelled; ``nap_cancelled`` is set when
    ``nap``'s was.
    """

    methods: list[str] = field(default_factory=list)
    cancel_notices: list[Any] = field(default_factory=list)
    http: list[tuple[str, str | None]] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    nap_cancelled: threading.Event = field(default_factory=threading.Event)


class MemoryEventStore(EventStore):
    """Every event of every stream, in memory, its id its place in the whole (``"1"``, ``"2"``, ...)."""

    def __init__(self) -> None:
        self.events: list[tuple[EventId, StreamId, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        """Keep the event (``None``: a priming event) and give its id."""
        event_id = str(len(self.events) + 1)
        self.events.append((event_id, stream_id, message))
        return event_id

    async def replay_events_after(
        self, last_event_id: EventId, send_callback: EventCallback
    ) -> StreamId | None:
        """Send the messages of ``last_event_id``'s stream stored after it; its stream, or
        ``None`` for an id never given."""
        place = next((i for i, event in enumerate(self.events) if event[0] == last_event_id), None)
        if place is None:
            return None
        stream_id = self.events[place][1]
        for event_id, stream, message in self.events[place + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream_id


@dataclass
class RealServer:
    """A running ``MCPServer``: where it is and what it saw."""

    url: str
    recorder: Recorder
    event_store: MemoryEventStore | None


class _Observer:
    """Server middleware: records each inbound JSON-RPC method, and each cancel notice."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        self.recorder.methods.append(ctx.method)
        if ctx.method == "notifications/cancelled" and ctx.params is not None:
            self.recorder.cancel_notices.append(ctx.params.get("requestId"))
        return await call_next(ctx)


class _HTTPLog:
    """ASGI middleware: records each HTTP request's method and ``Last-Event-ID``."""

    def __init__(self, app: ASGIApp, recorder: Recorder) -> None:
        self.app, self.recorder = app, recorder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            last = headers.get(b"last-event-id")
            self.recorder.http.append((scope["method"], last.decode() if last else None))
        await self.app(scope, receive, send)


class Answer(BaseModel):
    """The elicitation form of ``ask``: one string field."""

    answer: str


def build_server(recorder: Recorder) -> MCPServer[Any]:
    """The ``MCPServer`` with the four tools, observed by ``recorder``."""
    server: MCPServer[Any] = MCPServer(
        "hermes-real", log_level="WARNING", middleware=[_Observer(recorder)]
    )

    @server.tool()
    async def echo(text: str) -> str:
        """The text, at once."""
        return text

    @server.tool()
    async def count(n: int, delay: float, ctx: Context) -> str:
        """One log message, then ``n`` progress notifications ``delay`` seconds apart."""
        await ctx.info(f"counting to {n}")
        for step in range(1, n + 1):
            await asyncio.sleep(delay)
            await ctx.report_progress(step, n, f"step {step}")
        return f"done {n}"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """What the user answers ``question`` in a form of one string field."""
        result = await ctx.elicit(question, Answer)
        return result.data.answer if result.action == "accept" else result.action

    @server.tool()
    async def nap(seconds: float, ctx: Context) -> str:
        """One progress notification, then ``seconds`` of sleep; a cancel is recorded."""
        await ctx.report_progress(0, seconds, "napping")
        try:
            await asyncio.sleep(seconds)
        except asyncio.CancelledError:
            recorder.cancelled.append("nap")
            recorder.nap_cancelled.set()
            raise
        return "rested"

    return server


@contextlib.contextmanager
def serve_mcp(*, event_store: MemoryEventStore | None = None) -> Iterator[RealServer]:
    """Serve the tools over streamable HTTP on 127.0.0.1 (a free port) until the block ends,
    with ``event_store`` (ids on the streams, replays) or without one; the server thread is
    gone when the block is left."""
    recorder = Recorder()
    app = _HTTPLog(build_server(recorder).streamable_http_app(event_store=event_store), recorder)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=STOP_BOUND // 2
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="mcp-real-server", daemon=True
    )
    thread.start()
    try:
        deadline = time.monotonic() + START_BOUND
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the MCP server stopped before it started")
            if time.monotonic() > deadline:
                raise RuntimeError(f"the MCP server did not start in {START_BOUND} s")
            time.sleep(0.01)
        yield RealServer(f"http://127.0.0.1:{port}/mcp", recorder, event_store)
    finally:
        server.should_exit = True
        thread.join(STOP_BOUND)
        if thread.is_alive():
            server.force_exit = True
            thread.join(STOP_BOUND)
        sock.close()
        if thread.is_alive():
            raise RuntimeError(f"the MCP server did not stop in {2 * STOP_BOUND} s")
