"""A faithful minimal model of the seed's design, so that comparisons are measured, not quoted.

The seed (hermes-agent's streaming call, before this library) watched each call with its
own monitor thread:

* the monitor wakes every 0.3 s (``POLL_INTERVAL``) and compares the time since the last
  chunk the SDK yielded with the stale budget. Keep-alive comments never reach the caller
  (the SDK drops them), so they do not count as progress, exactly as in the seed;
* it checks the call's interrupt flag at the same wake-ups (and the reading loop checks it
  at every chunk);
* on a stall or an interrupt it shuts the call's socket down (never closes it: the reading
  thread owns it), which wakes the blocked reader; the reader then raises;
* interactive calls also run the request on a worker thread, and the caller polls that
  worker every 0.3 s so that it can leave at once on an interrupt.

The socket is found after the headers in ``response.extensions["network_stream"]``; before
them, on a new connection, from httpcore's ``connection.connect_tcp.complete`` trace event
(a request hook installs the trace; httpcore2, under the httpx2 flavor, has the same
extensions and events). A pooled connection that a call reuses gives no such event, so
before its headers this model, like any design that finds the socket this way, has nothing
to shut down. (The seed itself sidestepped reuse by building a new client, so a
new connection, for every call.)

What is left out, because it changes no figure: re-sends after a stall, status messages,
heartbeats and the non-streaming fallbacks.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

import openai

from .flavor import http

__all__ = [
    "POLL_INTERVAL",
    "SeedCall",
    "SeedStalled",
    "seed_chunks",
    "seed_stream_chat",
    "trace_hook",
]

#: How often the seed's monitor (and its interactive caller) woke up, in seconds.
POLL_INTERVAL = 0.3

Trace = Callable[[str, dict[str, Any]], None]

_current: ContextVar[SeedCall | None] = ContextVar("seed_call", default=None)


class SeedStalled(http.RemoteProtocolError):
    """The monitor cut the stream for making no progress within the stale budget."""


class SeedCall:
    """The monitor of one call: its thread, its clock of progress, its socket."""

    def __init__(
        self,
        stale_timeout: float,
        interrupt: threading.Event | None = None,
        *,
        poll_interval: float = POLL_INTERVAL,
    ) -> None:
        self.stale_timeout = stale_timeout
        self.interrupt = interrupt if interrupt is not None else threading.Event()
        self.poll_interval = poll_interval
        self.last_progress = time.monotonic()
        self.stalled = False
        self.interrupted = False
        #: Set once a socket to shut down is known (for benchmarks that need that stage).
        self.socket_found = threading.Event()
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()

    @contextlib.contextmanager
    def running(self) -> Iterator[SeedCall]:
        """Run the monitor thread while the block runs on this thread."""
        context = _current.set(self)
        self.last_progress = time.monotonic()  # the budget counts from the call's start
        monitor = threading.Thread(target=self._watch, name="seed-monitor", daemon=True)
        monitor.start()
        try:
            yield self
        finally:
            self._done.set()
            monitor.join()
            _current.reset(context)

    def progressed(self) -> None:
        """The reading loop got a chunk: one clock read and one attribute write, as the seed."""
        self.last_progress = time.monotonic()

    def attach(self, network_stream: Any) -> None:
        """Remember the socket of ``network_stream`` (an httpcore or httpcore2 network stream)."""
        sock = network_stream.get_extra_info("socket") if network_stream is not None else None
        if isinstance(sock, socket.socket):
            with self._lock:
                self._socket = sock
            self.socket_found.set()

    def attach_response(self, response: http.Response) -> None:
        """Remember the socket of a response whose headers have arrived."""
        self.attach(response.extensions.get("network_stream"))

    def _watch(self) -> None:
        while not self._done.wait(self.poll_interval):
            if time.monotonic() - self.last_progress > self.stale_timeout:
                self.stalled = True
                self._kill()
                self.last_progress = time.monotonic()  # as the seed: do not kill again at once
            if self.interrupt.is_set():
                self.interrupted = True
                self._kill()
                return

    def _kill(self) -> None:
        with self._lock:
            sock = self._socket
        if sock is not None:
            # The plain-socket call: from a foreign thread, never close, only shut down.
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def trace_hook(request: http.Request) -> None:
    """Request hook: let the running ``SeedCall`` see the socket of a new connection.

    Chains any trace extension already on the request.
    """
    call = _current.get()
    if call is None:
        return
    previous: Trace | None = request.extensions.get("trace")

    def trace(event: str, info: dict[str, Any]) -> None:
        if event == "connection.connect_tcp.complete":
            call.attach(info.get("return_value"))
        if previous is not None:
            previous(event, info)

    request.extensions["trace"] = trace


def seed_stream_chat(
    client: openai.OpenAI,
    call: SeedCall,
    *,
    inline: bool = True,
    on_chunk: Callable[[Any], None] | None = None,
    **create_kwargs: Any,
) -> int:
    """Stream one chat completion the seed's way; return the number of chunks read.

    ``client`` must carry ``trace_hook`` as a request hook. Raises ``InterruptedError`` on
    interrupt and ``SeedStalled`` when the monitor cut a stalled stream.
    """
    if inline:
        return _stream_inline(client, call, on_chunk, create_kwargs)
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["chunks"] = _stream_inline(client, call, on_chunk, create_kwargs)
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=work, name="seed-worker", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(call.poll_interval)
        if call.interrupt.is_set():
            raise InterruptedError("interrupted")  # the worker is left to unwind by itself
    if "error" in box:
        raise box["error"]
    return int(box["chunks"])


def seed_chunks(client: openai.OpenAI, call: SeedCall, **create_kwargs: Any) -> Iterator[Any]:
    """The seed's reading loop, one SDK chunk at a time, with the monitor running meanwhile.

    ``client`` must carry ``trace_hook`` as a request hook. Raises ``InterruptedError`` on
    interrupt and ``SeedStalled`` when the monitor cut a stalled stream.
    """
    with call.running():
        try:
            stream = client.chat.completions.create(stream=True, **create_kwargs)
            call.attach_response(stream.response)
            for chunk in stream:
                call.progressed()
                if call.interrupt.is_set():
                    raise InterruptedError("interrupted")
                yield chunk
        except InterruptedError:
            raise
        except Exception as exc:
            if call.interrupted or call.interrupt.is_set():
                raise InterruptedError("interrupted") from exc
            if call.stalled:
                raise SeedStalled(f"no chunk for {call.stale_timeout:g} s: stream killed") from exc
            raise


def _stream_inline(
    client: openai.OpenAI,
    call: SeedCall,
    on_chunk: Callable[[Any], None] | None,
    create_kwargs: dict[str, Any],
) -> int:
    chunks = 0
    for chunk in seed_chunks(client, call, **create_kwargs):
        chunks += 1
        if on_chunk is not None:
            on_chunk(chunk)
    return chunks
