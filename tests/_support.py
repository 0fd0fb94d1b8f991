"""Helpers shared by the tests."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import os
import re
import socket
import ssl
import threading
import time
import warnings
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal, TypeVar
from unittest import mock

import anyio
import httpx
import openai

import hermes_transport
from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._core import sse_runs
from hermes_transport._core.progress import stream_asked
from hermes_transport.testing import Scenario

# One of each setting the factories must hand to the inner transport.
CONNECTION_SETTINGS: list[dict[str, Any]] = [
    {"verify": False},
    {"cert": "client.pem"},
    {"trust_env": False},
    {"limits": httpx.Limits(max_connections=3)},
    {"proxy": "http://proxy.invalid:3128"},
    {"http1": True},
    {"local_address": "127.0.0.1"},
    {"socket_options": [(6, 1, 1)]},
]

# Generous: the target is milliseconds; shared CI machines are noisy.
PROMPT = 1.0

# Builds an httpx.Client over a WatchdogTransport: see the watchdog_client fixture.
ClientFactory = Callable[..., httpx.Client]

#: The HTTP libraries the transports run on: the factories' ``flavor`` argument.
FlavorName = Literal["httpx", "httpx2"]
FLAVOR_NAMES: tuple[FlavorName, ...] = ("httpx", "httpx2")

_T = TypeVar("_T")


@dataclass(frozen=True)
class Flavor:
    """One HTTP library the transports run on, as the tests see it.

    ``http`` is the library (``httpx`` or ``httpx2``); the rest are
    hermes-transport's classes and factories for it.
    """

    name: FlavorName
    http: Any
    WatchdogTransport: Any
    AsyncWatchdogTransport: Any
    http_client_for: Callable[..., Any]
    async_http_client_for: Callable[..., Any]
    StreamStalled: type[StreamStalled]

    def __repr__(self) -> str:
        return self.name

    def byte_stream_class(self, body: type[_T]) -> type[_T]:
        """``body`` (a class with ``__iter__``) made this library's ``SyncByteStream``: a
        response takes only its own library's streams."""
        made: type[_T] = type(body.__name__, (body, self.http.SyncByteStream), {})
        return made


def load_flavor(name: FlavorName) -> Flavor:
    """The tests' view of flavor ``name``."""
    http = importlib.import_module(name)
    ours = (
        hermes_transport if name == "httpx" else importlib.import_module("hermes_transport.httpx2")
    )
    return Flavor(
        name,
        http,
        ours.WatchdogTransport,
        ours.AsyncWatchdogTransport,
        ours.http_client_for,
        ours.async_http_client_for,
        ours.StreamStalled,
    )


#: Every flavor installed (httpx2 needs Python 3.11+): the behavioural tests run on each.
FLAVORS = tuple(name for name in FLAVOR_NAMES if importlib.util.find_spec(name))
OPENAI_MAJOR = int(openai.__version__.split(".")[0])
#: The flavors the installed openai SDK accepts an http_client of: httpx2 from the 2.x
#: releases that know it (they have DefaultHttpx2Client; 3.x builds on it), httpx always.
SDK_FLAVORS = (
    FLAVORS if OPENAI_MAJOR >= 3 or hasattr(openai, "DefaultHttpx2Client") else ("httpx",)
)

_E = TypeVar("_E", bound=BaseException)


def anthropic_wraps_body_errors() -> bool:
    """Whether the installed anthropic SDK wraps an error raised while iterating a stream's
    body (2.17 and newer, which read it through ``anthropic._streaming.iter_response_bytes``):
    a timeout (our stall) in its ``APITimeoutError``, anything else (our interrupt) in its
    ``APIConnectionError``, the error as their ``__cause__``. Earlier 2.x releases let it
    through as it is. Imports anthropic, which makes our errors raised before a response
    ``AnthropicError``s too: call it only where anthropic is loaded anyway."""
    return hasattr(importlib.import_module("anthropic._streaming"), "iter_response_bytes")


def anthropic_body_error(error: BaseException, raised: type[_E]) -> _E:
    """The ``raised`` error (the transport's) in ``error``, which a bare anthropic client
    raised while iterating a stream's body: ``error`` itself where the SDK lets it through;
    where it wraps it, ``error`` is exactly its ``APITimeoutError`` (for a timeout) or
    ``APIConnectionError``, with it as ``__cause__``. Either way ``stream_error(error)``
    finds ours (a stall or an interrupt), and nothing else."""
    if anthropic_wraps_body_errors():
        anthropic = importlib.import_module("anthropic")
        httpx2 = importlib.import_module("httpx2")
        cause = error.__cause__
        assert isinstance(cause, raised), repr(error)
        timeout = isinstance(cause, httpx2.TimeoutException)
        wrapper = anthropic.APITimeoutError if timeout else anthropic.APIConnectionError
        assert type(error) is wrapper, repr(error)
    else:
        assert isinstance(error, raised), repr(error)
        cause = error
    ours = cause if isinstance(cause, (StreamStalled, StreamInterrupted)) else None
    assert hermes_transport.stream_error(error) is ours
    return cause


def inner_transport_settings(monkeypatch: Any, transport_class: type[Any]) -> list[dict[str, Any]]:
    """Record the keyword arguments of every ``transport_class`` built (a ``cert`` is
    recorded but not loaded: the test's file does not exist)."""
    seen: list[dict[str, Any]] = []
    real_init = transport_class.__init__

    def spy(self: Any, **kwargs: Any) -> None:
        seen.append(kwargs)
        real_init(self, **{k: v for k, v in kwargs.items() if k != "cert"})

    monkeypatch.setattr(transport_class, "__init__", spy)
    return seen


def chat_body(stream: bool = True, **extra: Any) -> dict[str, Any]:
    """A minimal chat-completions request body."""
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "m", "messages": messages, "stream": stream, **extra}


def threads_started_since(before: set[threading.Thread]) -> list[threading.Thread]:
    """The threads alive now that were not in ``before`` (a set of ``threading.enumerate()``).
    Not a count: other tests' threads may end meanwhile, which a count reads as ours."""
    return [thread for thread in threading.enumerate() if thread not in before]


def open_fds() -> int:
    """File descriptors this process has open (Linux)."""
    return len(os.listdir("/proc/self/fd"))


@dataclass
class Endpoint:
    """Where to connect, and how to trust it."""

    base_url: str
    verify: ssl.SSLContext | bool


def read_responses(
    mode: str,
    base_url: str,
    flavor: Flavor,
    body: dict[str, Any],
    api_key: str,
    policy: StreamPolicy,
    token: Interrupt | None,
    *,
    bound: bool = False,
    seen: list[Any] | None = None,
) -> BaseException | None:
    """Read ``client.responses.create(stream=True, **body)`` to its end in ``mode``
    (sync: openai.OpenAI; asyncio or trio: openai.AsyncOpenAI on that loop) over the
    flavor's ``cron`` client, its events appended to ``seen``; the error that ended it
    (``None``: it ended well). ``token`` is the client's interrupt or, with ``bound``,
    bound to the call (``token.bind()``)."""
    events = seen if seen is not None else []
    factory: dict[str, Any] = {"policy": policy, "interrupt": None if bound else token}
    sdk: dict[str, Any] = {"base_url": base_url, "api_key": api_key, "max_retries": 0}
    binding = token.bind() if bound and token is not None else contextlib.nullcontext()
    if mode == "sync":
        with openai.OpenAI(http_client=flavor.http_client_for("cron", **factory), **sdk) as client:
            try:
                with binding:
                    for event in client.responses.create(stream=True, **body):
                        events.append(event)
            except Exception as exc:
                return exc
        return None
    if mode == "trio" and OPENAI_MAJOR >= 2:
        ignore_abandoned_async_generators()

    async def main() -> BaseException | None:
        http_client = flavor.async_http_client_for("cron", **factory)
        async with openai.AsyncOpenAI(http_client=http_client, **sdk) as client:
            try:
                with binding:
                    async for event in await client.responses.create(stream=True, **body):
                        events.append(event)
            except Exception as exc:
                return exc
        return None

    result: BaseException | None = anyio.run(main, backend=mode)
    return result


def answered_in_turn(*answers: Scenario) -> Scenario:
    """A scenario answering attempt n (0-based: creations and Responses resumes) like
    ``answers[n]``, and every later attempt healthy."""
    inner = answers[0]
    for n in range(1, len(answers)):
        inner = Scenario.stall_first(n, then=answers[n], stall=inner)
    return Scenario.stall_first(len(answers), stall=inner)


def interrupt_when(token: Interrupt, ready: Callable[[], bool], delay: float = 0.1) -> list[float]:
    """Interrupt from another thread once `ready()` holds; returns [monotonic time of interrupt]."""
    when: list[float] = []

    def run() -> None:
        deadline = time.monotonic() + 10
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(delay)
        when.append(time.monotonic())
        token.interrupt("user pressed stop")

    threading.Thread(target=run, daemon=True).start()
    return when


def assert_prompt(when: list[float], caught: StreamInterrupted, stage: str) -> None:
    latency = time.monotonic() - when[0]
    assert latency < PROMPT, f"interrupt took {latency:.3f} s"
    assert caught.reason == "user pressed stop"
    assert caught.stage == stage


@contextlib.contextmanager
def black_hole() -> Iterator[str]:
    """A listener whose accept queue is full: connect() hangs (SYNs are dropped)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers = []
    for _ in range(4):
        filler = socket.socket()
        filler.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            filler.connect(listener.getsockname())
        fillers.append(filler)
    time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        for sock in [*fillers, listener]:
            sock.close()


@contextlib.contextmanager
def deaf_server(
    context: ssl.SSLContext | None, handshake: bool = True
) -> Iterator[tuple[str, threading.Event]]:
    """Accepts connections (completing TLS if asked) and then never reads or answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = threading.Event()
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            accepted.set()
            if context is not None and handshake:
                try:
                    conn = context.wrap_socket(conn, server_side=True)
                except OSError:  # the client gave up mid-handshake
                    conn.close()
                    continue
            held.append(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    scheme = "https" if context is not None else "http"
    try:
        yield f"{scheme}://127.0.0.1:{listener.getsockname()[1]}/v1", accepted
    finally:
        stop.set()
        thread.join()
        for sock in [*held, listener]:
            sock.close()


@contextlib.contextmanager
def redirector(status: int, target: str) -> Iterator[str]:
    """A loopback server answering every request with ``status`` and a ``Location`` on
    ``target`` (a base URL) plus the request's own path; yields its own base URL."""
    import http.server

    class Redirect(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            self.rfile.read(length)
            self.send_response(status)
            self.send_header("location", target + self.path.removeprefix("/v1"))
            self.send_header("content-length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


# The HTTP library the installed openai builds its own clients on.
NATIVE: FlavorName = "httpx2" if OPENAI_MAJOR >= 3 else "httpx"

KW: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def in_flavor(settings: dict[str, Any], flavor: Flavor) -> dict[str, Any]:
    """`settings` with httpx's ``Limits`` made the flavor's own, as its users would pass them."""
    return {
        name: flavor.http.Limits(
            max_connections=value.max_connections,
            max_keepalive_connections=value.max_keepalive_connections,
            keepalive_expiry=value.keepalive_expiry,
        )
        if isinstance(value, httpx.Limits)
        else value
        for name, value in settings.items()
    }


def normalised(body: bytes) -> bytes:
    """The body without its per-request ids."""
    return re.sub(rb'hermes\d+|call_\d+|"created": \d+', b"ID", body)


def gunzip(body: bytes) -> bytes:
    """A gzip body, decompressed."""
    return zlib.decompressobj(wbits=31).decompress(body)


class Wire:
    """A real OpenAI-wire SSE server that records the wire `stream` flag per request."""

    def __init__(self, *, stall_after_first_chunk: bool = False) -> None:
        self.requests: list[dict[str, Any]] = []
        self.stall = stall_after_first_chunk
        self.hits = threading.Semaphore(0)
        self.closing = threading.Event()
        wire = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self.send_response(404)
                    self.end_headers()
                    return
                wire.requests.append(body)
                wire.hits.release()
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.end_headers()
                first = _chunk({"role": "assistant", "content": "hello"})
                self.wfile.write(f"data: {json.dumps(first)}\n\n".encode())
                self.wfile.flush()
                if wire.stall:
                    try:
                        for _ in range(400):
                            if wire.closing.wait(0.05):
                                return
                            self.wfile.write(b": keepalive\n\n")
                            self.wfile.flush()
                    except OSError:
                        pass
                    return
                second = _chunk({"content": " world"})
                usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
                fin = _chunk({}, finish_reason="stop", usage=usage)
                for chunk in (second, fin):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.write(b"data: [DONE]\n\n")
                self.wfile.flush()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        # A short poll: close() waits for serve_forever to notice the shutdown.
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.closing.set()
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()


def _chunk(
    delta: dict[str, Any], finish_reason: str | None = None, **extra: Any
) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        **extra,
    }


def async_sdk_client(
    server: Any, flavor: Flavor, platform: str = "cron", **kwargs: Any
) -> openai.AsyncOpenAI:
    """An async factory client of `flavor` on the fault server (stale budget 0.3 s by default)."""
    kwargs.setdefault("policy", StreamPolicy(stale_timeout=0.3, retries=2))
    return hermes_transport.async_openai_client_for(
        platform, base_url=server.base_url, api_key="x", flavor=flavor.name, **kwargs
    )


def ignore_abandoned_async_generators() -> None:
    """Let trio's warnings about async generators collected unexhausted pass, for this test.

    The openai SDK's stream is a chain of async generators (the SDK's, httpx's, httpcore's
    and the transport's body) that it never closes itself: a chain left suspended at a
    yield is collected unexhausted, and trio warns about each generator in it (asyncio does
    not). openai 2.x and 3.x leave it so at every `data: [DONE]`, plain openai.AsyncOpenAI
    included; any SDK leaves it so when the consumer stops early (cancelled in on_delta).
    """
    warnings.filterwarnings(
        "ignore",
        # A test's own generator (a mock's body) has `<locals>` in its name.
        message=r"Async generator '[\w.<>]+' was garbage collected",
        category=ResourceWarning,
    )


#: The events of a healthy Responses stream from the fault server, in order (a background
#: one has ``response.queued`` after ``response.created``).
RESPONSE_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def record_sdk_sleeps(monkeypatch: Any, base_client: Any) -> list[int]:
    """Skip an SDK's retry back-offs (its ``_base_client`` module, sync and async clients);
    returns the ``retries_taken`` of each, recorded."""
    sleeps: list[int] = []

    def sleep(self: object, *, retries_taken: int, **kwargs: object) -> None:
        sleeps.append(retries_taken)

    async def async_sleep(self: object, *, retries_taken: int, **kwargs: object) -> None:
        sleeps.append(retries_taken)

    monkeypatch.setattr(base_client.SyncAPIClient, "_sleep_for_retry", sleep)
    monkeypatch.setattr(base_client.AsyncAPIClient, "_sleep_for_retry", async_sleep)
    return sleeps


def build_responses_models() -> None:
    """Have the openai SDK build its Responses event models (once per process, and slower
    than a short stale budget), so that no test's budget pays for it."""
    from hermes_transport.testing import FaultServer

    with FaultServer() as server, openai.OpenAI(base_url=server.base_url, api_key="x") as sdk:
        with sdk.responses.stream(model="m", input="hi", background=True) as stream:
            stream.get_final_response()
        response_id = stream.get_final_response().id
        with sdk.responses.retrieve(response_id, stream=True, starting_after=3) as resumed:
            list(resumed)


#: The sizes of the run of events between a chunk's first and last boundary that the scanner
#: reads one by one: its own (small fuzzed chunks stay below it), and none (every run skipped).
MIDDLES = [sse_runs.SMALL_MIDDLE, 0]


@contextlib.contextmanager
def events_read_one_by_one_up_to(size: int) -> Iterator[None]:
    """Meanwhile the scanner reads runs of complete events up to ``size`` bytes one by one."""
    with mock.patch.object(sse_runs, "SMALL_MIDDLE", size):
        yield


def streaming_json(body: bytes | None) -> dict[str, Any] | None:
    """``body``'s top-level JSON object as the exchange parses it once for a streaming
    request (``None``: no body, not JSON, not an object), for what reads it."""
    return stream_asked("text/event-stream", "application/json", body)[1]


_Result = TypeVar("_Result")


def run_bounded(main: Callable[[], Awaitable[_Result]], bound: float = 20.0) -> _Result:
    """Run ``main`` on a fresh event loop, failing after ``bound`` seconds: no test hangs."""

    async def bounded() -> _Result:
        with anyio.fail_after(bound):
            return await main()

    return asyncio.run(bounded())


def rpc(method: str | None, id_: object = 1, **fields: Any) -> dict[str, Any]:
    """A JSON-RPC 2.0 message: a request (``id_`` given), or a notification (``id_`` None)."""
    message: dict[str, Any] = {"jsonrpc": "2.0", **fields}
    if method is not None:
        message["method"] = method
    if id_ is not None:
        message["id"] = id_
    return message
