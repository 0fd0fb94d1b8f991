"""Connection reuse: a stream closed right after `data: [DONE]` gives its connection back."""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hermes_transport import (
    StreamPolicy,
    async_openai_client_for,
    openai_client_for,
)
from hermes_transport._core.body import DRAIN_BYTES, DRAIN_SECONDS
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, chat_body

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
POLICY = StreamPolicy(stale_timeout=5.0, retries=0)


def _sdk_stream(client: openai.OpenAI) -> str:
    stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
    with stream:
        return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def test_sequential_sdk_streams_share_one_connection(
    sdk_flavor: Flavor, server: FaultServer
) -> None:
    """100 sync SDK streams open one connection (openai 2.x and 3.x alone would open 100)."""
    client = openai_client_for(
        "cron", base_url=server.base_url, api_key="x", policy=POLICY, flavor=sdk_flavor.name
    )
    assert isinstance(client._client, sdk_flavor.http.Client)
    with client:
        for _ in range(100):
            assert _sdk_stream(client) == "hello world"
    assert server.connections_opened == 1


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_server_that_lingers_after_done_is_not_waited_for(
    flavor: Flavor, server: FaultServer
) -> None:
    """If the body does not end soon after [DONE], close() returns within the bound and the
    connection is closed, not pooled."""
    server.scenario = Scenario(linger_after_done=5.0)
    transport = flavor.WatchdogTransport(policy=POLICY)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:
            # The clock starts at [DONE]: httpx closes the response when the block
            # exits, httpx2 already when the loop abandons its iter_raw() generator.
            for chunk in response.iter_raw():
                if b"[DONE]" in chunk:
                    started = time.monotonic()
                    break
        closed_in = time.monotonic() - started
        server.scenario = Scenario()
        client.post(server.base_url + "/chat/completions", json=chat_body())
    assert DRAIN_SECONDS <= closed_in < DRAIN_SECONDS + 1.0
    assert server.connections_opened == 2


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_stream_closed_before_done_is_not_drained(flavor: Flavor, server: FaultServer) -> None:
    """Closing mid-stream (no [DONE] yet) closes at once, as before: nothing is read on."""
    server.scenario = replace(Scenario.healthy(), event_interval=0.5, content=("a", "b", "c"))
    transport = flavor.WatchdogTransport(policy=POLICY)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        started = time.monotonic()
        with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:
            next(response.iter_raw())
        assert time.monotonic() - started < 0.45


class _Pulled:
    """A body that records how many bytes were pulled from it."""

    def __init__(self, parts: list[bytes]) -> None:
        self.parts = parts
        self.pulled = 0

    def __iter__(self) -> Iterator[bytes]:
        for part in self.parts:
            self.pulled += len(part)
            yield part


@functools.cache
def _pulled_type(http: Any) -> type[_Pulled]:
    """_Pulled made the library's SyncByteStream: a client accepts only its own library's."""
    return type("_Pulled", (_Pulled, http.SyncByteStream), {})


@pytest.mark.once  # no SDK: the same under every openai major
def test_draining_stops_after_the_byte_bound(flavor: Flavor) -> None:
    """No more than about DRAIN_BYTES are read after [DONE] before the stream is closed."""
    http = flavor.http
    parts = [b"data: {}\n\ndata: [DONE]\n\n", *[b":" + b"x" * 8191 + b"\n"] * 64]
    body = _pulled_type(http)(parts)

    def handler(request: Any) -> Any:
        return http.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    transport = flavor.WatchdogTransport(http.MockTransport(handler), policy=POLICY)
    with http.Client(transport=transport) as client:
        with client.stream("POST", "http://mock/v1/chat/completions", json=chat_body()) as r:
            next(r.iter_raw())
    after_done = body.pulled - len(body.parts[0])
    assert 0 < after_done <= DRAIN_BYTES + 8192


@pytest.mark.once  # no SDK: the same under every openai major
def test_the_watchdog_is_disarmed_at_done(flavor: Flavor, server: FaultServer) -> None:
    """After [DONE] a body may take longer than the stale budget to end: no stall is raised."""
    server.scenario = Scenario(linger_after_done=0.6)
    policy = StreamPolicy(stale_timeout=0.2, retries=0)
    transport = flavor.WatchdogTransport(policy=policy)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        body = client.post(server.base_url + "/chat/completions", json=chat_body()).content
    assert body.endswith(b"data: [DONE]\n\n")


# asyncio only: breaking out of httpx's aiter_raw() abandons httpx's own nested async
# generators, which trio reports as ResourceWarnings whether or not this library is used.
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.once  # no SDK: the same under every openai major
async def test_async_streams_closed_at_done_share_one_connection(
    flavor: Flavor, server: FaultServer
) -> None:
    """Async callers of either library that stop reading at [DONE] reuse their connection too."""
    transport = flavor.AsyncWatchdogTransport(policy=POLICY)
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        for _ in range(20):
            async with client.stream(
                "POST", server.base_url + "/chat/completions", json=chat_body()
            ) as response:
                async for chunk in response.aiter_raw():
                    if b"[DONE]" in chunk:
                        break
    assert server.connections_opened == 1


# asyncio only: openai's AsyncStream abandons its async generators at [DONE], which trio
# reports as ResourceWarnings whether or not this library is used.
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_async_sdk_streams_share_one_connection(
    sdk_flavor: Flavor, server: FaultServer
) -> None:
    """Sequential AsyncOpenAI streams through the async factory use one connection."""
    client: Any = async_openai_client_for(
        "cron", base_url=server.base_url, api_key="x", flavor=sdk_flavor.name
    )
    assert isinstance(client._client, sdk_flavor.http.AsyncClient)
    async with client:
        for _ in range(20):
            stream = await client.chat.completions.create(
                model="m", messages=MESSAGES, stream=True
            )
            async with stream:
                async for _chunk in stream:
                    pass
            await anyio.sleep(0)
    assert server.connections_opened == 1
