"""The contract this library grew out of, ported to its own API.

Delegated children and cron turns must stream on the wire, on the calling
thread (a worker thread wedges inside their nested thread pools), keep the
stale detector and the cross-thread interrupt; interactive contexts keep a
worker thread so /stop stays responsive. Against a real loopback SSE server.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from hermes_transport import (
    Interrupt,
    openai_client_for,
    should_stream_inline,
    stream_chat_completion,
)

from _support import Flavor


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


@pytest.fixture
def wire() -> Iterator[Wire]:
    server = Wire()
    yield server
    server.close()


@pytest.fixture
def stalling_wire() -> Iterator[Wire]:
    server = Wire(stall_after_first_chunk=True)
    yield server
    server.close()


KW: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _client_recording_threads(
    base_url: str, platform: str, issued_on: list[int], flavor: Flavor
) -> Any:
    """An openai client for `platform`, over `flavor`, whose requests record the thread that sends them."""
    http_client = flavor.http_client_for(
        platform,
        event_hooks={"request": [lambda request: issued_on.append(threading.get_ident())]},
    )
    return openai_client_for(
        platform, base_url=base_url, api_key="test-key", http_client=http_client
    )


@pytest.mark.parametrize("platform", ["subagent", "cron"])
def test_direct_contexts_stream_on_the_wire_and_on_the_calling_thread(
    wire: Wire, sdk_flavor: Flavor, platform: str
) -> None:
    """Cron turns and sub-agents send stream=True from the caller's own thread and assemble the reply."""
    assert should_stream_inline(platform) is True
    issued_on: list[int] = []
    client = _client_recording_threads(wire.base_url, platform, issued_on, sdk_flavor)

    response = stream_chat_completion(client, **KW)

    completions = [r for r in wire.requests if "messages" in r]
    assert completions, "no chat completion reached the wire"
    assert completions[-1].get("stream") is True
    assert issued_on == [threading.get_ident()]
    assert response.choices[0].message.content == "hello world"
    assert response.choices[0].finish_reason == "stop"


def test_interactive_platform_still_uses_the_worker_thread(wire: Wire, sdk_flavor: Flavor) -> None:
    """The interactive context sends from a worker thread, so /stop stays responsive."""
    assert should_stream_inline("cli") is False
    issued_on: list[int] = []
    client = _client_recording_threads(wire.base_url, "cli", issued_on, sdk_flavor)

    response = stream_chat_completion(client, **KW)

    assert len(issued_on) == 1
    assert issued_on[0] != threading.get_ident()
    assert response.choices[0].message.content == "hello world"


def test_inline_stream_stale_detector_still_fires(
    stalling_wire: Wire, sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One chunk then only keepalives is killed at the stale budget: httpx.RemoteProtocolError (and the flavor's own), well inside 6 s."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "1.0")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "0")
    client = openai_client_for(
        "subagent", base_url=stalling_wire.base_url, api_key="test-key", flavor=sdk_flavor.name
    )

    started = time.monotonic()
    with pytest.raises(httpx.RemoteProtocolError) as info:
        stream_chat_completion(client, **KW)
    elapsed = time.monotonic() - started

    assert isinstance(info.value, sdk_flavor.http.RemoteProtocolError)
    assert elapsed < 6.0, f"inline stream was not bounded by the stale detector ({elapsed:.1f}s)"
    assert len(stalling_wire.requests) == 1


def test_inline_stream_cross_thread_interrupt_aborts_promptly(
    stalling_wire: Wire, sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt from another thread aborts the inline stream with an InterruptedError well inside 5 s."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "60")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "0")
    token = Interrupt()
    client = openai_client_for(
        "cron",
        base_url=stalling_wire.base_url,
        api_key="test-key",
        interrupt=token,
        flavor=sdk_flavor.name,
    )
    box: dict[str, Any] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            stream_chat_completion(client, **KW)
            box["outcome"] = "returned"
        except BaseException as exc:  # record whatever surfaces
            box["outcome"] = exc
        box["elapsed"] = time.monotonic() - started

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    assert stalling_wire.hits.acquire(timeout=5.0), "request never reached the wire"
    time.sleep(0.3)  # let the first chunk land
    token.interrupt("test interrupt")
    worker.join(timeout=10.0)

    assert not worker.is_alive(), "inline stream did not unwind after interrupt"
    assert isinstance(box["outcome"], InterruptedError)
    assert box["elapsed"] < 5.0


@pytest.mark.parametrize(
    ("platform", "api_mode", "provider", "inline"),
    [
        ("cron", "chat_completions", "openrouter", True),
        ("subagent", "chat_completions", "openrouter", True),
        ("subagent", "chat_completions", None, True),
        ("cli", "chat_completions", "openrouter", False),
        ("cron", "anthropic_messages", "openrouter", False),
        ("cron", "chat_completions", "moa", False),
        (None, "chat_completions", None, False),
    ],
)
def test_the_routing_gate(
    platform: str | None, api_mode: str, provider: str | None, inline: bool
) -> None:
    """The routing predicate's truth table."""
    assert should_stream_inline(platform, api_mode, provider) is inline
