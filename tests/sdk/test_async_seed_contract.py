"""The seed contract (test_seed_contract.py), for async callers.

An async caller always streams on its own event loop, whatever its platform: there is no
worker thread to choose, so the routing gate and the worker-thread test have no twin here.
The rest holds as it does for sync callers: the request goes out with stream=True from the
loop's own thread, the stale detector still fires, and an interrupt from another thread
(or from the loop itself) still aborts the stream promptly. Against the same real loopback
SSE server.
"""

from __future__ import annotations

import threading
import time
import warnings
from typing import Any

import anyio
import httpx
import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    astream_chat_completion,
    async_openai_client_for,
)

from _support import KW, OPENAI_MAJOR, Flavor, Wire

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def _sdk_abandons_async_generators(anyio_backend: str) -> None:
    """As in test_async_runner: openai 2.x and 3.x drop an async stream's generators unclosed
    at `data: [DONE]`, and trio warns about each one; ignored there and only there."""
    if anyio_backend == "trio" and OPENAI_MAJOR >= 2:
        warnings.filterwarnings(
            "ignore",
            message=r"Async generator '[\w.]+' was garbage collected",
            category=ResourceWarning,
        )


@pytest.mark.parametrize("platform", ["subagent", "cron", "cli"])
async def test_every_context_streams_on_the_wire_and_on_the_loop_thread(
    wire: Wire, sdk_flavor: Flavor, platform: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sub-agents, cron turns and interactive turns alike send stream=True from the event loop's own thread, start no worker, and assemble the reply."""
    issued_on: list[int] = []
    started: list[str] = []
    real_start = threading.Thread.start

    def start(thread: threading.Thread) -> None:
        started.append(thread.name)
        real_start(thread)

    async def record(request: Any) -> None:
        issued_on.append(threading.get_ident())

    monkeypatch.setattr(threading.Thread, "start", start)
    http_client = sdk_flavor.async_http_client_for(platform, event_hooks={"request": [record]})
    async with async_openai_client_for(
        platform, base_url=wire.base_url, api_key="test-key", http_client=http_client
    ) as client:
        response = await astream_chat_completion(client, **KW)

    completions = [r for r in wire.requests if "messages" in r]
    assert completions, "no chat completion reached the wire"
    assert completions[-1].get("stream") is True
    assert issued_on == [threading.get_ident()]
    assert not [name for name in started if name.startswith("hermes-transport")]
    assert response.choices[0].message.content == "hello world"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.total_tokens == 5


async def test_the_loop_stays_responsive_while_a_stream_waits(
    stalling_wire: Wire, sdk_flavor: Flavor
) -> None:
    """A stream waiting on the wire never blocks the loop: other tasks (a /stop handler) keep running meanwhile."""
    token = Interrupt()
    waiting = anyio.Event()
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while not token.interrupted:
            await anyio.sleep(0.01)
            now = time.monotonic()
            if waiting.is_set():
                gaps.append(now - last)
            last = now

    async def stop() -> None:
        await anyio.to_thread.run_sync(stalling_wire.hits.acquire, True, 5.0)
        await anyio.sleep(0.05)  # the first chunk lands; then only keepalives come
        waiting.set()
        await anyio.sleep(0.3)
        token.interrupt("user pressed /stop")

    async with async_openai_client_for(
        "cli",
        base_url=stalling_wire.base_url,
        api_key="test-key",
        interrupt=token,
        flavor=sdk_flavor.name,
    ) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(ticker)
            tasks.start_soon(stop)
            with anyio.fail_after(10.0), pytest.raises(InterruptedError):
                await astream_chat_completion(client, **KW)

    assert len(gaps) > 5
    assert max(gaps) < 0.5, f"the loop was blocked for {max(gaps):.2f} s"


async def test_async_stream_stale_detector_still_fires(
    stalling_wire: Wire, sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One chunk then only keepalives is killed at the stale budget: httpx.RemoteProtocolError (and the flavor's own), well inside 6 s."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "0.3")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "0")
    async with async_openai_client_for(
        "subagent", base_url=stalling_wire.base_url, api_key="test-key", flavor=sdk_flavor.name
    ) as client:
        started = time.monotonic()
        with pytest.raises(httpx.RemoteProtocolError) as info:
            await astream_chat_completion(client, **KW)
        elapsed = time.monotonic() - started

    assert isinstance(info.value, sdk_flavor.http.RemoteProtocolError)
    assert elapsed >= 0.3, f"the stream was cut before its budget ({elapsed:.2f}s)"
    assert elapsed < 6.0, f"async stream was not bounded by the stale detector ({elapsed:.1f}s)"
    assert len(stalling_wire.requests) == 1


@pytest.mark.parametrize("source", ["thread", "loop"])
async def test_async_stream_cross_thread_interrupt_aborts_promptly(
    stalling_wire: Wire, sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    """An interrupt from another thread (or from a task on the loop) aborts the async stream with an InterruptedError well inside 5 s."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "60")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "0")
    token = Interrupt()

    def interrupt_from_a_thread() -> None:
        if stalling_wire.hits.acquire(timeout=5.0):
            time.sleep(0.3)  # let the first chunk land
            token.interrupt("test interrupt")

    async def interrupt_from_the_loop() -> None:
        if await anyio.to_thread.run_sync(stalling_wire.hits.acquire, True, 5.0):
            await anyio.sleep(0.3)  # let the first chunk land
            token.interrupt("test interrupt")

    async with async_openai_client_for(
        "cron",
        base_url=stalling_wire.base_url,
        api_key="test-key",
        interrupt=token,
        flavor=sdk_flavor.name,
    ) as client:
        async with anyio.create_task_group() as tasks:
            if source == "thread":
                interrupter = threading.Thread(target=interrupt_from_a_thread, daemon=True)
                interrupter.start()
            else:
                tasks.start_soon(interrupt_from_the_loop)
            started = time.monotonic()
            with anyio.fail_after(10.0), pytest.raises(InterruptedError) as info:
                await astream_chat_completion(client, **KW)
            elapsed = time.monotonic() - started

    assert token.interrupted, "the call ended before it was interrupted"
    assert isinstance(info.value, StreamInterrupted)
    assert info.value.reason == "test interrupt"
    assert elapsed < 5.0
    assert len(stalling_wire.requests) == 1
