"""The contract this library grew out of, ported to its own API.

Delegated children and cron turns must stream on the wire, on the calling
thread (a worker thread wedges inside their nested thread pools), keep the
stale detector and the cross-thread interrupt; interactive contexts keep a
worker thread so /stop stays responsive. Against a real loopback SSE server.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from hermes_transport import (
    Interrupt,
    openai_client_for,
    should_stream_inline,
    stream_chat_completion,
)

from _support import KW, Flavor, Wire


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
