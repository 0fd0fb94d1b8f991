"""The chain behind every error raised: only meaningful causes, never a private type of ours.

When the guard fires and no I/O error says so (an inner transport with no socket to shut
down, or bytes that were already on their way when the socket was), the attempt raises a
private ``GuardFired``; the public error raised for it must not be chained to it, by
``__cause__`` or by ``__context__``. The inner transports here are mocks (no socket at all),
so that every kill ends that way, whatever the machine's load.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import openai
import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    astream_chat_completion,
    stream_chat_completion,
)
from hermes_transport._core.attempt import GuardFired
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, chat_body

SSE = {"content-type": "text/event-stream"}
DATA = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'
KEEPALIVE = b": keepalive\n\n"
#: Between keepalives of the mock bodies; they stop after KEEPALIVES (a bound, never reached).
TICK = 0.01
KEEPALIVES = 3000
STALE = 0.1
MESSAGES: list[Any] = [{"role": "user", "content": "hi"}]

#: What each kind of kill raises, and where: at the request, or while the body is read.
KINDS: dict[str, tuple[str, bool]] = {
    "first_event": ("stalled", False),
    "first_event_resent": ("stalled", False),
    "mid_stream": ("stalled", True),
    "interrupted_before_response": ("interrupted", False),
    "interrupted_mid_stream": ("interrupted", True),
    "closed_mid_stream": ("closed", True),
}


def chain(error: BaseException) -> Iterator[BaseException]:
    """``error`` and everything reachable from it by ``__cause__`` and ``__context__``."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [error]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__]


def private_types(error: BaseException) -> list[str]:
    """The types in ``error``'s chain that are defined in a private module of ours."""
    return [
        f"{type(e).__module__}.{type(e).__qualname__}"
        for e in chain(error)
        if type(e).__module__.startswith("hermes_transport._")
    ]


def assert_clean(error: BaseException) -> None:
    """Nothing private in the chain, and no cause at all where GuardFired would have been it."""
    assert private_types(error) == [], [repr(e) for e in chain(error)]
    assert not any(isinstance(e, GuardFired) for e in chain(error))


def _expected(flavor: Flavor, kind: str) -> type[BaseException]:
    what = KINDS[kind][0]
    if what == "stalled":
        return flavor.StreamStalled
    if what == "interrupted":
        return StreamInterrupted
    closed: type[BaseException] = flavor.http.StreamClosed
    return closed


class _Mock:
    """A mock inner transport whose one response body does what ``kind`` needs."""

    def __init__(self, flavor: Flavor, kind: str, token: Interrupt) -> None:
        self.flavor = flavor
        self.kind = kind
        self.token = token
        self.response: Any = None
        self.sent = 0

    def _before_response(self) -> None:
        self.sent += 1
        if self.kind == "interrupted_before_response":
            self.token.interrupt("user pressed stop")

    def _data_first(self) -> bool:
        return self.kind in ("mid_stream", "interrupted_mid_stream", "closed_mid_stream")

    def sync(self) -> Any:
        mock = self

        class Body:
            def __iter__(self) -> Iterator[bytes]:
                if mock._data_first():
                    yield DATA
                    if mock.kind == "interrupted_mid_stream":
                        mock.token.interrupt("user pressed stop")
                    elif mock.kind == "closed_mid_stream":
                        mock.response.close()  # as another thread would, mid-read
                for _ in range(KEEPALIVES):
                    time.sleep(TICK)
                    yield KEEPALIVE

            def close(self) -> None:
                pass

        body_class = type("Body", (Body, self.flavor.http.SyncByteStream), {})

        def handler(request: Any) -> Any:
            self._before_response()
            self.response = self.flavor.http.Response(200, headers=SSE, stream=body_class())
            return self.response

        return self.flavor.http.MockTransport(handler)

    def asynchronous(self) -> Any:
        mock = self

        class Body:
            async def __aiter__(self) -> AsyncIterator[bytes]:
                if mock._data_first():
                    yield DATA
                    if mock.kind == "interrupted_mid_stream":
                        mock.token.interrupt("user pressed stop")
                    elif mock.kind == "closed_mid_stream":
                        await mock.response.aclose()  # as another task would, mid-read
                for _ in range(KEEPALIVES):
                    await anyio.sleep(TICK)
                    yield KEEPALIVE

            async def aclose(self) -> None:
                pass

        body_class = type("Body", (Body, self.flavor.http.AsyncByteStream), {})

        async def handler(request: Any) -> Any:
            self._before_response()
            self.response = self.flavor.http.Response(200, headers=SSE, stream=body_class())
            return self.response

        return self.flavor.http.MockTransport(handler)


def _policy(kind: str) -> StreamPolicy:
    retries = 1 if kind == "first_event_resent" else 0
    stale = STALE if KINDS[kind][0] == "stalled" else 30.0
    return StreamPolicy(stale_timeout=stale, retries=retries)


# --- the transport alone ---------------------------------------------------------------------


def _fetch(client: Any, answered: list[bool]) -> None:
    """Send a streaming request and read its body to the end (``answered``: it got a response)."""
    request = client.build_request("POST", "http://mock/v1/chat/completions", json=chat_body())
    response = client.send(request, stream=True)
    answered.append(True)
    try:
        for _ in response.iter_raw():
            pass
    finally:
        response.close()


async def _afetch(client: Any, answered: list[bool]) -> None:
    """As ``_fetch``, on an async client."""
    request = client.build_request("POST", "http://mock/v1/chat/completions", json=chat_body())
    response = await client.send(request, stream=True)
    answered.append(True)
    try:
        async for _ in response.aiter_raw():
            pass
    finally:
        await response.aclose()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_kill_no_io_error_told_raises_a_clean_error(flavor: Flavor, kind: str) -> None:
    """A stall, interrupt or close seen only by the guard raises its public error with no
    cause and no private context."""
    token = Interrupt()
    mock = _Mock(flavor, kind, token)
    transport = flavor.WatchdogTransport(mock.sync(), policy=_policy(kind), interrupt=token)
    answered: list[bool] = []
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        with pytest.raises(_expected(flavor, kind)) as info:
            _fetch(client, answered)
    assert answered == ([True] if KINDS[kind][1] else [])
    assert_clean(info.value)
    assert info.value.__cause__ is None
    assert mock.sent == (2 if kind == "first_event_resent" else 1)


@pytest.mark.anyio
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.once  # no SDK: the same under every openai major
async def test_an_async_kill_no_io_error_told_raises_a_clean_error(
    flavor: Flavor, kind: str
) -> None:
    """As on a sync transport, on asyncio and trio: no cause, no private context."""
    token = Interrupt()
    mock = _Mock(flavor, kind, token)
    transport = flavor.AsyncWatchdogTransport(
        mock.asynchronous(), policy=_policy(kind), interrupt=token
    )
    answered: list[bool] = []
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        with anyio.fail_after(30), pytest.raises(_expected(flavor, kind)) as info:
            await _afetch(client, answered)
    assert answered == ([True] if KINDS[kind][1] else [])
    assert_clean(info.value)
    assert info.value.__cause__ is None
    assert mock.sent == (2 if kind == "first_event_resent" else 1)


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_kill_an_io_error_told_keeps_that_error_as_its_cause(
    flavor: Flavor, server: FaultServer
) -> None:
    """Where the kill shut a real socket down, the stall is chained to the library's own error."""
    server.scenario = Scenario.silent_after(1)
    policy = StreamPolicy(stale_timeout=STALE, retries=0)
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=policy)) as client:
        with pytest.raises(flavor.StreamStalled) as info:
            with client.stream(
                "POST", server.base_url + "/chat/completions", json=chat_body()
            ) as r:
                r.read()
    assert_clean(info.value)
    assert isinstance(info.value.__cause__, flavor.http.TransportError)


# --- many real stalls, keepalives on the wire ------------------------------------------------

ROUNDS = 40
FAST = Scenario.comments_after(1, interval=0.002)
FAST_POLICY = StreamPolicy(stale_timeout=0.03, retries=0)


def _stalled(client: Any, url: str) -> StreamStalled:
    """The stall that reading ``url``'s stream to its end raises."""
    try:
        with client.stream("POST", url, json=chat_body()) as response:
            for _ in response.iter_raw():
                pass
    except StreamStalled as stall:
        return stall
    raise AssertionError("the stream did not stall")


async def _astalled(client: Any, url: str) -> StreamStalled:
    """As ``_stalled``, on an async client."""
    try:
        async with client.stream("POST", url, json=chat_body()) as response:
            async for _ in response.aiter_raw():
                pass
    except StreamStalled as stall:
        return stall
    raise AssertionError("the stream did not stall")


@pytest.mark.timing
def test_stalls_among_fast_keepalives_raise_clean_errors(
    flavor: Flavor, server: FaultServer
) -> None:
    """Stalls cut while keepalives arrive every 2 ms (some bytes already on their way) are
    clean, every one."""
    server.scenario = FAST
    url = server.base_url + "/chat/completions"
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=FAST_POLICY)) as client:
        stalls = [_stalled(client, url) for _ in range(ROUNDS)]
    assert all(type(stall) is flavor.StreamStalled for stall in stalls)
    assert [private_types(stall) for stall in stalls if private_types(stall)] == []


@pytest.mark.timing
@pytest.mark.anyio
async def test_async_stalls_among_fast_keepalives_raise_clean_errors(
    flavor: Flavor, server: FaultServer
) -> None:
    """As on a sync transport, on asyncio and trio."""
    server.scenario = FAST
    url = server.base_url + "/chat/completions"
    transport = flavor.AsyncWatchdogTransport(policy=FAST_POLICY)
    async with flavor.http.AsyncClient(transport=transport) as client:
        with anyio.fail_after(120):
            stalls = [await _astalled(client, url) for _ in range(ROUNDS)]
    assert all(type(stall) is flavor.StreamStalled for stall in stalls)
    assert [private_types(stall) for stall in stalls if private_types(stall)] == []


# --- under the openai SDK, and under the streaming runners -----------------------------------


def _sync_sdk(sdk_flavor: Flavor, kind: str) -> openai.OpenAI:
    mock = _Mock(sdk_flavor, kind, Interrupt())
    transport = sdk_flavor.WatchdogTransport(mock.sync(), policy=_policy(kind))
    http_client = sdk_flavor.http.Client(transport=transport, timeout=30.0)
    return openai.OpenAI(
        base_url="http://mock/v1", api_key="x", http_client=http_client, max_retries=0
    )


def _async_sdk(sdk_flavor: Flavor, kind: str) -> openai.AsyncOpenAI:
    mock = _Mock(sdk_flavor, kind, Interrupt())
    transport = sdk_flavor.AsyncWatchdogTransport(mock.asynchronous(), policy=_policy(kind))
    http_client = sdk_flavor.http.AsyncClient(transport=transport, timeout=30.0)
    return openai.AsyncOpenAI(
        base_url="http://mock/v1", api_key="x", http_client=http_client, max_retries=0
    )


STALLS = ["first_event", "mid_stream"]


def _complete(client: openai.OpenAI) -> None:
    """Stream a chat completion through the SDK alone, to its end."""
    for _ in client.chat.completions.create(model="m", messages=MESSAGES, stream=True):
        pass


@pytest.mark.parametrize("kind", STALLS)
def test_a_stall_through_the_openai_sdk_has_a_clean_chain(sdk_flavor: Flavor, kind: str) -> None:
    """Whatever the SDK wraps a stall in, nothing private is chained behind it."""
    with (
        _sync_sdk(sdk_flavor, kind) as client,
        pytest.raises((StreamStalled, openai.APIConnectionError)) as info,
    ):
        _complete(client)
    assert any(isinstance(e, StreamStalled) for e in chain(info.value))
    assert_clean(info.value)


Runner = Callable[[Flavor, str], BaseException]


def _sync_runner(sdk_flavor: Flavor, kind: str) -> BaseException:
    with _sync_sdk(sdk_flavor, kind) as client, pytest.raises(StreamStalled) as info:
        stream_chat_completion(client, inline=True, model="m", messages=MESSAGES)
    return info.value


def _async_runner(sdk_flavor: Flavor, kind: str) -> BaseException:
    async def run() -> BaseException:
        async with _async_sdk(sdk_flavor, kind) as client:
            with anyio.fail_after(30), pytest.raises(StreamStalled) as info:
                await astream_chat_completion(client, model="m", messages=MESSAGES)
        return info.value

    return anyio.run(run)


RUNNERS: dict[str, Runner] = {"sync": _sync_runner, "async": _async_runner}


@pytest.mark.parametrize("kind", STALLS)
@pytest.mark.parametrize("runner", RUNNERS.values(), ids=RUNNERS.keys())
def test_a_stall_under_a_runner_is_not_chained_to_guard_fired(
    sdk_flavor: Flavor, kind: str, runner: Runner
) -> None:
    """A streaming runner's final stall has no GuardFired for cause or context."""
    stall = runner(sdk_flavor, kind)
    assert not any(isinstance(e, GuardFired) for e in chain(stall))
    assert stall.__cause__ is None


@pytest.mark.parametrize("runner", RUNNERS.values(), ids=RUNNERS.keys())
def test_a_stall_under_a_runner_has_nothing_private_in_its_chain(
    sdk_flavor: Flavor, runner: Runner
) -> None:
    """A streaming runner's stall before the first event shows no type of ours but itself."""
    stall = runner(sdk_flavor, "first_event")
    assert private_types(stall) == []
