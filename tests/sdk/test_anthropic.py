"""The Anthropic SDK over the httpx2 flavor: messages stream through the watchdog, pings are no progress.

An error of ours raised while iterating a stream's body reaches a bare client as it is on
anthropic releases before 2.17, and from 2.17 wrapped: a stall in ``APITimeoutError``, an
interrupt in ``APIConnectionError``, ours as ``__cause__`` (``anthropic_body_error``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import anyio
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport.testing import MESSAGES_PATH, FaultServer, Scenario

from _support import PROMPT, Flavor, anthropic_body_error, assert_prompt, interrupt_when

# anthropic 2.x and httpx2 need Python 3.11+.
anthropic = pytest.importorskip("anthropic")
httpx2 = pytest.importorskip("httpx2")
ht2 = pytest.importorskip("hermes_transport.httpx2")

MESSAGE = {
    "model": "claude-test",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}
BUDGET = 0.5
# Anthropic pings every few seconds; the fault server pings much faster, so a
# budget several pings long proves that pings do not keep a stream alive.
PING_EVERY = 0.05


def _pings_after(events: int) -> Scenario:
    """`events` Anthropic events (message_start, content_block_start, ...), then only pings."""
    return replace(Scenario.comments_after(events, interval=PING_EVERY), hold=10.0)


@pytest.fixture
def sdk(server: FaultServer) -> Iterator[Any]:
    """Builds Anthropic clients on the fault server over ht2.http_client_for; closes them."""
    clients: list[Any] = []

    def build(policy: StreamPolicy, *, is_async: bool = False) -> Any:
        factory = ht2.async_http_client_for if is_async else ht2.http_client_for
        sdk_class = anthropic.AsyncAnthropic if is_async else anthropic.Anthropic
        client = sdk_class(
            base_url=server.base_url.removesuffix("/v1"),
            api_key="test-key",
            http_client=factory("cron", policy=policy),
            max_retries=0,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        if isinstance(client, anthropic.Anthropic):
            client.close()


def test_a_message_streams_through_the_watchdog(server: FaultServer, sdk: Any) -> None:
    """anthropic.Anthropic over ht2.http_client_for streams a whole message, ping included."""
    client = sdk(StreamPolicy(stale_timeout=5.0))
    assert isinstance(client._client._transport, ht2.WatchdogTransport)
    with client.messages.stream(**MESSAGE) as stream:
        kinds = [event.type for event in stream]
        text = stream.get_final_message().content[0].text
    assert text == "hello world"
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert [r.path for r in server.requests] == [MESSAGES_PATH]


def test_a_message_that_only_pings_after_its_first_events_stalls(
    server: FaultServer, sdk: Any
) -> None:
    """Pings after the first content are keepalives: the stream is cut one budget after it, our mid_stream StreamStalled (anthropic 2.17+: as the cause of its APITimeoutError)."""
    server.scenario = _pings_after(4)
    client = sdk(StreamPolicy(stale_timeout=BUDGET, first_event_timeout=5.0))
    seen: list[str] = []
    started = time.monotonic()
    with (
        pytest.raises((StreamStalled, anthropic.APIConnectionError)) as info,
        client.messages.stream(**MESSAGE) as stream,
    ):
        seen.extend(event.type for event in stream)
    took = time.monotonic() - started
    stall = anthropic_body_error(info.value, ht2.StreamStalled)
    assert type(stall) is ht2.StreamStalled
    assert stall.stage == "mid_stream"
    # Neither the pings nor message_start and the empty block's start were progress.
    assert "after 1 event(s)" in str(stall)
    assert seen[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert BUDGET <= took < BUDGET + PROMPT


@pytest.mark.parametrize("events", [0, 3], ids=["nothing", "message_start-and-empty-block"])
def test_a_message_that_only_pings_is_re_sent_then_stalls(
    server: FaultServer, sdk: Any, events: int
) -> None:
    """A stream whose first content never comes, only its opening and pings, is re-sent and then reported as such."""
    server.scenario = _pings_after(events)
    client = sdk(StreamPolicy(stale_timeout=5.0, first_event_timeout=BUDGET, retries=1))
    started = time.monotonic()
    with pytest.raises(anthropic.APIConnectionError) as info:
        client.messages.create(**MESSAGE, stream=True)
    took = time.monotonic() - started
    stall = info.value.__cause__
    assert isinstance(stall, ht2.StreamStalled)
    assert (stall.stage, stall.attempts) == ("first_event", 2)
    assert len(server.requests) == 2
    assert 2 * BUDGET <= took < 2 * BUDGET + PROMPT


def test_pings_are_progress_when_no_heartbeat_events_are_configured(
    server: FaultServer, sdk: Any
) -> None:
    """With heartbeat_events empty a pinging stream counts as alive until the server hangs up: a plain protocol error (anthropic 2.17+: in its APIConnectionError), no stall."""
    server.scenario = replace(_pings_after(2), hold=3 * BUDGET)
    client = sdk(StreamPolicy(stale_timeout=BUDGET, heartbeat_events=frozenset()))
    started = time.monotonic()
    # The server hangs up after `hold`: a plain protocol error, not a stall.
    with (
        pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as info,
        client.messages.stream(**MESSAGE) as stream,
    ):
        for _ in stream:
            pass
    hang_up = anthropic_body_error(info.value, httpx2.RemoteProtocolError)
    assert not isinstance(hang_up, StreamStalled)
    assert time.monotonic() - started >= 3 * BUDGET


@pytest.mark.parametrize(
    ("heartbeats", "stalls"),
    [(frozenset({"tick"}), True), (frozenset(), False)],
    ids=["tick", "none"],
)
def test_a_custom_heartbeat_type_is_no_progress(
    flavor: Flavor, heartbeats: frozenset[str], stalls: bool
) -> None:
    """A provider's own keepalive event type, named in the policy, does not keep a stream alive."""

    def ticks() -> Iterator[bytes]:
        yield b"event: message\ndata: 1\n\n"
        for _ in range(12):
            time.sleep(0.05)
            yield b"event: tick\ndata: {}\n\n"

    def handler(request: Any) -> Any:
        return flavor.http.Response(
            200, headers={"content-type": "text/event-stream"}, content=ticks()
        )

    policy = StreamPolicy(stale_timeout=0.2, heartbeat_events=heartbeats)
    transport = flavor.WatchdogTransport(flavor.http.MockTransport(handler), policy=policy)
    with flavor.http.Client(transport=transport) as client:
        request = client.build_request("GET", "http://provider.test/stream")
        response = client.send(request, stream=True)
        try:
            if stalls:
                with pytest.raises(flavor.StreamStalled):
                    response.read()
            else:
                assert response.read().count(b"event: tick") == 12
        finally:
            response.close()


async def _read_all(client: Any) -> None:
    async with client.messages.stream(**MESSAGE) as stream:
        async for _ in stream:
            pass


@pytest.mark.anyio
async def test_an_async_message_streams_and_a_pinging_one_stalls(
    server: FaultServer, sdk: Any
) -> None:
    """anthropic.AsyncAnthropic over ht2.async_http_client_for streams, and pings do not keep it alive: our mid_stream StreamStalled (2.17+: as its APITimeoutError's cause)."""
    client = sdk(StreamPolicy(stale_timeout=BUDGET, first_event_timeout=5.0), is_async=True)
    try:
        assert isinstance(client._client._transport, ht2.AsyncWatchdogTransport)
        async with client.messages.stream(**MESSAGE) as stream:
            assert await stream.get_final_text() == "hello world"
        server.scenario = _pings_after(4)
        started = time.monotonic()
        with pytest.raises((StreamStalled, anthropic.APIConnectionError)) as info:
            await _read_all(client)
        took = time.monotonic() - started
        stall = anthropic_body_error(info.value, ht2.StreamStalled)
        assert type(stall) is ht2.StreamStalled
        assert stall.stage == "mid_stream"
        assert BUDGET <= took < BUDGET + PROMPT
    finally:
        await client.close()


#: Where a plain client is interrupted: the scenario, and the stage the interrupt names.
INTERRUPT_POINTS = {
    "before the headers": (Scenario.silent_before_headers(), "headers"),
    "mid-stream": (Scenario(stall_after_events=4), "mid_stream"),
}


@pytest.mark.parametrize("point", sorted(INTERRUPT_POINTS))
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_an_interrupt_bound_around_a_plain_clients_call_ends_it_at_once(
    server: FaultServer, point: str, is_async: bool
) -> None:
    """A plain anthropic client with its default max_retries, interrupted under bind() before its headers or mid-stream, ends at once after one request: StreamInterrupted (mid-stream on 2.17+: as its APIConnectionError's cause)."""
    scenario, stage = INTERRUPT_POINTS[point]
    server.scenario = scenario
    token = Interrupt()
    sdk: dict[str, Any] = {"base_url": server.base_url.removesuffix("/v1"), "api_key": "k"}
    when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.3)
    with token.bind(), pytest.raises((StreamInterrupted, anthropic.APIConnectionError)) as info:
        _call_a_plain_client(sdk, is_async=is_async)
    if stage == "headers":  # raised by the request: an AnthropicError, let through as it is
        assert isinstance(info.value, StreamInterrupted), repr(info.value)
        interrupt = info.value
    else:
        interrupt = anthropic_body_error(info.value, StreamInterrupted)
    assert_prompt(when, interrupt, stage)
    assert len(server.requests) == 1


def _call_a_plain_client(sdk: dict[str, Any], *, is_async: bool) -> None:
    """One streamed message on a plain (default max_retries) anthropic client."""
    if not is_async:
        with anthropic.Anthropic(http_client=ht2.http_client_for("cron"), **sdk) as client:
            with client.messages.stream(**MESSAGE) as stream:
                stream.until_done()
        return

    async def call() -> None:
        http_client = ht2.async_http_client_for("cron")
        async with anthropic.AsyncAnthropic(http_client=http_client, **sdk) as client:
            async with client.messages.stream(**MESSAGE) as stream:
                await stream.until_done()

    anyio.run(call)
