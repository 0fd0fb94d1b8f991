"""HTTP/2 behind an inner transport the watchdog cannot see into: one stream's stall or
interrupt never hurts a sibling stream on the same connection.

A real cleartext HTTP/2 server (prior knowledge, built on ``h2``) on loopback; the client is
a user's own transport class wrapping ``HTTPTransport(http1=False, http2=True)``, so the
watchdog only learns that a response is HTTP/2 from the response itself. Shutting the shared
socket down would kill every sibling, so such a stream is stopped only when its next bytes
arrive, or by the read timeout (which httpcore counts on the whole connection: the sibling's
traffic keeps it from firing); async, before its first event, by cancelling the read.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy

from _support import PROMPT, Flavor

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

try:
    import h2.config
    import h2.connection
    import h2.events
except ImportError:  # pragma: no cover - h2 is in the test extra
    pytest.skip(
        "HTTP/2 tests need h2 (the server's, and httpx's own HTTP/2): pip install h2",
        allow_module_level=True,
    )

# Budgets with room for a busy 2-core machine: the sibling's events come every INTERVAL,
# well inside STALE, and it outlives the other stream's stall deadline by a good margin.
STALE = 0.4
INTERVAL = 0.05
EVENTS = 12
SIBLING = (EVENTS - 1) * INTERVAL
# Above STALE, so the watchdog has fired (and names the error) before it runs out.
READ_TIMEOUT = 0.7
KEEPALIVE = b": keepalive\n\n"
SSE = {"accept": "text/event-stream"}


def _event(number: int) -> bytes:
    return b'data: {"n": %d}\n\n' % number


@dataclass
class _Plan:
    """What the server still sends on one stream."""

    path: str
    left: int  # data events still to send
    then: str  # after them: "end" the stream, keep it open "silent", or send "keepalive"s
    due: float = 0.0
    sent: int = 0


class H2Server:
    """A cleartext HTTP/2 server (prior knowledge) on loopback, one thread per connection.

    ``/steady``: ``EVENTS`` events ``INTERVAL`` apart, then the end. ``/stall``: one event,
    then silence with the stream kept open. ``/keepalive``: one event, then only keepalive
    comments, ``INTERVAL`` apart. ``/silent``: headers, then silence. ``/short``: one event,
    then the end.
    """

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.connections = 0
        self.resets: list[str] = []  # paths of the streams the client reset (RST_STREAM)
        self.goaways = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def __enter__(self) -> H2Server:
        self._spawn(self._accept)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(5)
        self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                sock, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            with self._lock:
                self.connections += 1
            self._spawn(self._serve, sock)

    def _serve(self, sock: socket.socket) -> None:
        config = h2.config.H2Configuration(client_side=False, header_encoding=None)
        conn = h2.connection.H2Connection(config=config)
        conn.initiate_connection()
        streams: dict[int, _Plan] = {}
        with sock, contextlib.suppress(OSError):
            sock.sendall(conn.data_to_send())
            while not self._stop.is_set():
                now = time.monotonic()
                waits = [
                    max(0.0, plan.due - now)
                    for plan in streams.values()
                    if plan.left or plan.then == "keepalive"
                ]
                readable, _, _ = select.select([sock], [], [], min([0.05, *waits]))
                if readable:
                    data = sock.recv(65536)
                    if not data or not self._receive(conn, data, streams):
                        return
                self._send_due(conn, streams)
                sock.sendall(conn.data_to_send())

    def _receive(
        self, conn: h2.connection.H2Connection, data: bytes, streams: dict[int, _Plan]
    ) -> bool:
        """Handle what the client sent; whether the connection goes on."""
        for event in conn.receive_data(data):
            if isinstance(event, h2.events.RequestReceived):
                assert event.stream_id is not None
                path = dict(event.headers or [])[b":path"].decode()
                plan = {
                    "/steady": _Plan(path, left=EVENTS, then="end"),
                    "/stall": _Plan(path, left=1, then="silent"),
                    "/keepalive": _Plan(path, left=1, then="keepalive"),
                    "/silent": _Plan(path, left=0, then="silent"),
                    "/short": _Plan(path, left=1, then="end"),
                }[path]
                plan.due = time.monotonic()
                streams[event.stream_id] = plan
                conn.send_headers(
                    event.stream_id,
                    [(":status", "200"), ("content-type", "text/event-stream")],
                )
            elif isinstance(event, h2.events.StreamReset):
                assert event.stream_id is not None
                gone = streams.pop(event.stream_id, None)
                with self._lock:
                    self.resets.append(gone.path if gone is not None else "?")
            elif isinstance(event, h2.events.ConnectionTerminated):
                with self._lock:
                    self.goaways += 1
                return False
        return True

    def _send_due(self, conn: h2.connection.H2Connection, streams: dict[int, _Plan]) -> None:
        now = time.monotonic()
        for stream_id, plan in list(streams.items()):
            while (plan.left or plan.then == "keepalive") and plan.due <= now:
                conn.send_data(stream_id, _event(plan.sent) if plan.left else KEEPALIVE)
                plan.left = max(0, plan.left - 1)
                plan.sent += 1
                plan.due += INTERVAL
            if not plan.left and plan.then == "end":
                conn.end_stream(stream_id)
                del streams[stream_id]


@pytest.fixture
def server() -> Iterator[H2Server]:
    with H2Server() as h2_server:
        yield h2_server


def _all_events(body: bytes) -> None:
    """The sibling's body is every event the server sent, in order."""
    assert body == b"".join(_event(n) for n in range(EVENTS))


class _Delegating:
    """A user's own transport: does nothing but hand each request to the one it wraps."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    def handle_request(self, request: Any) -> Any:
        return self._wrapped.handle_request(request)

    def close(self) -> None:
        self._wrapped.close()


class _AsyncDelegating:
    """The async twin of ``_Delegating``."""

    def __init__(self, wrapped: Any) -> None:
        self._wrapped = wrapped

    async def handle_async_request(self, request: Any) -> Any:
        return await self._wrapped.handle_async_request(request)

    async def aclose(self) -> None:
        await self._wrapped.aclose()


def _hidden_http2(flavor: Flavor) -> Any:
    """A user's own transport class around the flavor's HTTP/2 transport: opaque to the watchdog."""
    wrapper = type("Wrapper", (_Delegating, flavor.http.BaseTransport), {})
    return wrapper(flavor.http.HTTPTransport(http1=False, http2=True))


def _client(flavor: Flavor, inner: Any = None, stale: float = STALE) -> Any:
    """A client of the flavor: the watchdog over ``inner`` (a new hidden HTTP/2 transport)."""
    policy = StreamPolicy(stale_timeout=stale, retries=0)
    transport = flavor.WatchdogTransport(
        inner if inner is not None else _hidden_http2(flavor), policy=policy
    )
    timeout = flavor.http.Timeout(5.0, read=READ_TIMEOUT)
    return flavor.http.Client(transport=transport, timeout=timeout)


def _async_client(flavor: Flavor) -> Any:
    """An async client of the flavor: the watchdog over a hidden HTTP/2 transport."""
    wrapper = type("AsyncWrapper", (_AsyncDelegating, flavor.http.AsyncBaseTransport), {})
    inner = wrapper(flavor.http.AsyncHTTPTransport(http1=False, http2=True))
    transport = flavor.AsyncWatchdogTransport(
        inner, policy=StreamPolicy(stale_timeout=STALE, retries=0)
    )
    timeout = flavor.http.Timeout(5.0, read=READ_TIMEOUT)
    return flavor.http.AsyncClient(transport=transport, timeout=timeout)


@dataclass
class _Outcome:
    """How one stream ended, seen by its reader."""

    body: bytes = b""
    error: BaseException | None = None
    ended: float = 0.0  # monotonic
    started: threading.Event = field(default_factory=threading.Event)  # its first chunk came


def _read_sync(client: Any, url: str, outcome: _Outcome, token: Interrupt | None = None) -> None:
    """Stream ``url`` to its end or its error, on this thread, into ``outcome``."""
    with contextlib.ExitStack() as stack:
        if token is not None:
            stack.enter_context(token.bind())
        try:
            with client.stream("GET", url, headers=SSE) as response:
                assert response.http_version == "HTTP/2"
                for chunk in response.iter_raw():
                    outcome.body += chunk
                    outcome.started.set()
        except Exception as exc:
            outcome.error = exc
        finally:
            outcome.ended = time.monotonic()
            outcome.started.set()


def _in_thread(target: Callable[[], None]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def _stalled_beside_sibling(
    stalled_client: Any, sibling_client: Any, server: H2Server, path: str
) -> tuple[_Outcome, _Outcome, float]:
    """Stream ``path`` on this thread and ``/steady`` on another once the first has its
    first event; both outcomes, and when the first was sent."""
    stalled, sibling = _Outcome(), _Outcome()
    started = time.monotonic()
    with stalled_client.stream("GET", server.url(path), headers=SSE) as response:
        assert response.http_version == "HTTP/2"
        worker = _in_thread(lambda: _read_sync(sibling_client, server.url("/steady"), sibling))
        try:
            for chunk in response.iter_raw():
                stalled.body += chunk
        except Exception as exc:
            stalled.error = exc
        stalled.ended = time.monotonic()
    worker.join(10)
    return stalled, sibling, started


def _assert_sibling_whole(sibling: _Outcome) -> None:
    assert sibling.error is None, f"the sibling was hurt: {sibling.error!r}"
    _all_events(sibling.body)


def test_sync_keepalive_stall_leaves_sibling_stream_whole(
    flavor: Flavor, server: H2Server
) -> None:
    """A sync stream that sends only keepalives after its first event fails with
    StreamStalled as the first bytes after its budget arrive, while its sibling on the
    same HTTP/2 connection, through the same client, gets every event."""
    with _client(flavor) as client:
        stalled, sibling, started = _stalled_beside_sibling(client, client, server, "/keepalive")
    _assert_sibling_whole(sibling)
    assert stalled.body.startswith(_event(0))
    assert isinstance(stalled.error, flavor.StreamStalled), repr(stalled.error)
    assert stalled.error.stage == "mid_stream"
    took = stalled.ended - started
    assert STALE <= took < STALE + PROMPT, took
    assert server.connections == 1
    assert server.goaways == 0


def test_sync_silent_stall_leaves_sibling_stream_whole(flavor: Flavor, server: H2Server) -> None:
    """A sync stream silent after its first event fails with StreamStalled by the read
    timeout once its connection falls silent, while its sibling on the same HTTP/2
    connection gets every event (the sibling's own watchdog has a longer budget: httpcore's
    sync HTTP/2 holds back a sibling's events while another thread is blocked reading)."""
    inner = _hidden_http2(flavor)
    with _client(flavor, inner) as client, _client(flavor, inner, stale=30.0) as patient:
        stalled, sibling, started = _stalled_beside_sibling(client, patient, server, "/stall")
    _assert_sibling_whole(sibling)
    assert stalled.body == _event(0)
    assert isinstance(stalled.error, flavor.StreamStalled), repr(stalled.error)
    assert stalled.error.stage == "mid_stream"
    assert isinstance(stalled.error.__cause__, flavor.http.ReadTimeout)
    # Never before its budget; at the latest once the connection has been silent for the
    # read timeout after the sibling ended.
    took = stalled.ended - started
    assert STALE <= took < SIBLING + READ_TIMEOUT + PROMPT, took
    assert server.connections == 1
    assert server.goaways == 0


def test_sync_interrupt_leaves_sibling_stream_whole(flavor: Flavor, server: H2Server) -> None:
    """An interrupted sync stream fails with StreamInterrupted as its next bytes arrive,
    while its sibling on the same HTTP/2 connection gets every event."""
    token = Interrupt()
    with _client(flavor) as client:
        doomed, sibling = _Outcome(), _Outcome()
        first = _in_thread(lambda: _read_sync(client, server.url("/steady"), doomed, token))
        assert doomed.started.wait(5)
        second = _in_thread(lambda: _read_sync(client, server.url("/steady"), sibling))
        assert sibling.started.wait(5)
        time.sleep(3 * INTERVAL)
        interrupted = time.monotonic()
        token.interrupt("user pressed stop")
        first.join(10)
        second.join(10)
    _assert_sibling_whole(sibling)
    assert isinstance(doomed.error, StreamInterrupted), repr(doomed.error)
    assert doomed.error.reason == "user pressed stop"
    assert doomed.ended - interrupted < INTERVAL + PROMPT
    assert len(doomed.body) < len(sibling.body)
    assert server.connections == 1


async def _read_async(client: Any, url: str, outcome: _Outcome, token: Interrupt | None) -> None:
    """Stream ``url`` to its end or its error, in this task, into ``outcome``."""
    with contextlib.ExitStack() as stack:
        if token is not None:
            stack.enter_context(token.bind())
        try:
            async with client.stream("GET", url, headers=SSE) as response:
                assert response.http_version == "HTTP/2"
                async for chunk in response.aiter_raw():
                    outcome.body += chunk
                    outcome.started.set()
        except Exception as exc:
            outcome.error = exc
        finally:
            outcome.ended = time.monotonic()
            outcome.started.set()


async def _started(outcome: _Outcome) -> None:
    """Wait (on the loop) until the stream behind ``outcome`` has its first chunk."""
    with anyio.fail_after(5):
        while not outcome.started.is_set():
            await anyio.sleep(0.01)


@pytest.mark.anyio
async def test_async_silent_stall_leaves_sibling_stream_whole(
    flavor: Flavor, server: H2Server, anyio_backend: str
) -> None:
    """An async stream silent after its first event fails with StreamStalled by the read
    timeout once its connection falls silent, while its sibling on the same HTTP/2
    connection, through the same client, gets every event."""
    stalled, sibling = _Outcome(), _Outcome()
    async with _async_client(flavor) as client, anyio.create_task_group() as tasks:
        started = time.monotonic()
        tasks.start_soon(_read_async, client, server.url("/stall"), stalled, None)
        await _started(stalled)
        tasks.start_soon(_read_async, client, server.url("/steady"), sibling, None)
    _assert_sibling_whole(sibling)
    assert stalled.body == _event(0)
    assert isinstance(stalled.error, flavor.StreamStalled), repr(stalled.error)
    assert stalled.error.stage == "mid_stream"
    assert isinstance(stalled.error.__cause__, flavor.http.ReadTimeout)
    took = stalled.ended - started
    assert STALE <= took < SIBLING + READ_TIMEOUT + PROMPT, took
    assert server.connections == 1
    assert server.goaways == 0


# A body stopped mid-stream leaves httpcore's (httpcore2's) own async generators suspended,
# as plain httpx does when a caller closes a response early; trio warns when they are
# collected unfinished.
_ABANDONED_CORE_GENERATORS = pytest.mark.filterwarnings(
    r"ignore:Async generator 'httpcore2?\._async\.[\w.]+' was garbage collected:ResourceWarning",
    r"ignore:Exception ignored in. <async_generator object"
    r" (AsyncHTTP2Connection|HTTP2ConnectionByteStream|PoolByteStream)\."
    ":pytest.PytestUnraisableExceptionWarning",
)


@_ABANDONED_CORE_GENERATORS
@pytest.mark.anyio
async def test_async_interrupt_leaves_sibling_stream_whole(
    flavor: Flavor, server: H2Server, anyio_backend: str
) -> None:
    """An interrupted async stream fails with StreamInterrupted as its next bytes arrive,
    while its sibling on the same HTTP/2 connection gets every event."""
    token = Interrupt()
    doomed, sibling = _Outcome(), _Outcome()
    async with _async_client(flavor) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(_read_async, client, server.url("/steady"), doomed, token)
        await _started(doomed)
        tasks.start_soon(_read_async, client, server.url("/steady"), sibling, None)
        await _started(sibling)
        await anyio.sleep(3 * INTERVAL)
        interrupted = time.monotonic()
        await anyio.to_thread.run_sync(token.interrupt, "user pressed stop")
    _assert_sibling_whole(sibling)
    assert isinstance(doomed.error, StreamInterrupted), repr(doomed.error)
    assert doomed.error.reason == "user pressed stop"
    assert doomed.ended - interrupted < INTERVAL + PROMPT
    assert len(doomed.body) < len(sibling.body)
    assert server.connections == 1


@pytest.mark.anyio
async def test_async_first_event_stall_cancels_only_its_stream(
    flavor: Flavor, server: H2Server, anyio_backend: str
) -> None:
    """An async stream silent after its headers fails with StreamStalled at its budget (its
    read is cancelled, the socket untouched) while its sibling gets every event, and the
    connection then serves the next request."""
    stalled, sibling, after = _Outcome(), _Outcome(), _Outcome()
    async with _async_client(flavor) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(_read_async, client, server.url("/steady"), sibling, None)
            await _started(sibling)
            started = time.monotonic()
            await _read_async(client, server.url("/silent"), stalled, None)
        await _read_async(client, server.url("/short"), after, None)
    _assert_sibling_whole(sibling)
    assert isinstance(stalled.error, flavor.StreamStalled), repr(stalled.error)
    assert stalled.error.stage == "first_event"
    took = stalled.ended - started
    assert STALE <= took < STALE + PROMPT, took
    assert after.error is None, repr(after.error)
    assert after.body == _event(0)
    assert server.connections == 1
