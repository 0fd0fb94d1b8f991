"""LlamaIndex on the watchdog: ``llama_index.llms.openai.OpenAI``, streamed sync and async.

The recipe hands the factories' clients to LlamaIndex, which builds its own SDK clients on
them: ``http_client=`` for ``stream_chat`` / ``stream_complete``, ``async_http_client=``
for ``astream_chat``; one left out is the SDK's own, unwatched. On openai 2.x a stall
after the first event, and an interrupt anywhere, reach the caller as our
``StreamStalled`` / ``StreamInterrupted`` themselves; a stall before it, once the re-sends
are spent, as ``openai.APITimeoutError`` with the stall as ``__cause__``.

The traps. LlamaIndex's ``max_retries=3`` is the SDK's: it would retry a stall whose
re-sends are spent after three back-off sleeps (0.5, 1 and 2 s, less up to a quarter);
the transport ends such a call with the SDK's own ``APITimeoutError``, which it does not
retry, so the stall costs no sleep. Its own tenacity ``llm_retry_decorator`` wraps
methods that return a lazy generator, so it never retries a stream. LlamaIndex's ``timeout=60`` is each
request's socket timeout, under the watchdog's default budgets: pure silence then ends on
httpx's ``ReadTimeout`` (itself mid-stream, in an ``openai.APITimeoutError`` before the first
event), nothing of ours, never re-sent; the recipe passes a timeout above the budgets.
Nothing leaves loopback: every name resolved must be loopback.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest

from hermes_transport import (
    AsyncWatchdogTransport,
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    async_http_client_for,
    http_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import (
    ASYNC_INTERRUPTS,
    LOOPBACK,
    framework,
    interrupt_at,
    interrupting,
    loopback_only,
)
from _support import PROMPT, assert_prompt, record_sdk_sleeps

llama_index_openai = framework("llama_index.llms.openai")

import openai
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai import OpenAI
from openai import _base_client

# LlamaIndex's first stream imports the SDK's resources (a second): not inside a timed test.
importlib.import_module("openai.resources")

_LI_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=0.5, retries=1)
_LI_MESSAGES = [ChatMessage(role="user", content="hi")]


@pytest.fixture(scope="module", autouse=True)
def _li_loopback_only() -> Iterator[None]:
    """Every host name resolved in this module is loopback: nothing leaves the machine."""
    with loopback_only() as resolved:
        yield
    assert set(resolved) <= LOOPBACK


def _li_openai(
    server: FaultServer, http_client: httpx.Client, policy: StreamPolicy, **kwargs: Any
) -> Any:
    """The recipe: LlamaIndex's OpenAI over both factory clients, its timeout above the budgets."""
    kwargs.setdefault("timeout", 600.0)
    return OpenAI(
        model="gpt-4o-mini",
        api_key="x",
        api_base=server.base_url,
        http_client=http_client,
        async_http_client=async_http_client_for("cli", policy=policy),
        **kwargs,
    )


@contextlib.contextmanager
def _li_llm(
    server: FaultServer, policy: StreamPolicy = _LI_POLICY, **kwargs: Any
) -> Iterator[Any]:
    """The recipe's LLM for sync calls; its sync client closed after (the async one unused)."""
    with http_client_for("cli", policy=policy) as http_client:
        yield _li_openai(server, http_client, policy, **kwargs)


@contextlib.asynccontextmanager
async def _li_allm(
    server: FaultServer, policy: StreamPolicy = _LI_POLICY, **kwargs: Any
) -> AsyncIterator[Any]:
    """The recipe's LLM for async calls; both its clients closed after, the async one on the loop."""
    with http_client_for("cli", policy=policy) as http_client:
        llm = _li_openai(server, http_client, policy, **kwargs)
        try:
            yield llm
        finally:
            await llm._async_http_client.aclose()


def _li_drain(llm: Any, seen: list[str]) -> None:
    """Read ``stream_chat`` to its end, noting each delta as it arrives."""
    for response in llm.stream_chat(_LI_MESSAGES):
        seen.append(response.delta)


async def _li_adrain(llm: Any, seen: list[str]) -> None:
    """Read ``astream_chat`` to its end, noting each delta as it arrives."""
    async for response in await llm.astream_chat(_LI_MESSAGES):
        seen.append(response.delta)


@pytest.mark.parametrize("method", ["stream_chat", "stream_complete"])
def test_li_a_healthy_stream_arrives_whole(server: FaultServer, method: str) -> None:
    """stream_chat() and stream_complete() over the factory client stream the whole answer through it."""
    with _li_llm(server) as llm:
        stream = getattr(llm, method)(_LI_MESSAGES if method == "stream_chat" else "hi")
        assert "".join(r.delta for r in stream) == "hello world"
        assert llm._get_client()._client is llm._http_client
    assert [r.stream for r in server.requests] == [True]


def test_li_an_http_client_alone_leaves_the_async_path_unwatched(server: FaultServer) -> None:
    """Given only http_client=, LlamaIndex's async SDK client is the SDK's own, without the watchdog."""
    with http_client_for("cli", policy=_LI_POLICY) as http_client:
        llm = OpenAI(
            model="gpt-4o-mini", api_key="x", api_base=server.base_url, http_client=http_client
        )
        transport = llm._get_aclient()._client._transport
        assert not isinstance(transport, AsyncWatchdogTransport)


def test_li_a_stall_after_the_first_event_is_ours_unwrapped(server: FaultServer) -> None:
    """Silent after its first event, stream_chat() raises our mid-stream StreamStalled itself."""
    server.scenario = Scenario.silent_after(1)
    seen: list[str] = []
    with _li_llm(server) as llm, pytest.raises(StreamStalled) as caught:
        _li_drain(llm, seen)
    assert seen == ["hello"]
    assert caught.value.stage == "mid_stream"
    assert len(server.requests) == 1


def test_li_a_stall_before_the_first_event_is_resent(server: FaultServer) -> None:
    """A stream silent before its headers is re-sent by the transport: the whole answer, two requests."""
    server.scenario = Scenario.stall_first(1)
    seen: list[str] = []
    with _li_llm(server) as llm:
        _li_drain(llm, seen)
    assert "".join(seen) == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.parametrize(
    ("scenario", "stage"),
    [(Scenario.silent_before_headers(), "headers"), (Scenario.silent_after(1), "mid_stream")],
    ids=["headers", "mid_stream"],
)
def test_li_an_interrupt_from_another_thread_is_prompt(
    server: FaultServer, scenario: Scenario, stage: str
) -> None:
    """An Interrupt bound around stream_chat() stops it promptly with StreamInterrupted itself."""
    server.scenario = scenario
    stop = Interrupt()
    seen: list[str] = []
    when = interrupt_at(stop, stage, server, seen)
    with _li_llm(server) as llm, pytest.raises(StreamInterrupted) as caught, stop.bind():
        _li_drain(llm, seen)
    assert_prompt(when, caught.value, stage)
    assert len(server.requests) == 1


@pytest.mark.parametrize("max_retries", [3, 0])
def test_li_max_retries_add_neither_back_offs_nor_resends(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch, max_retries: int
) -> None:
    """An always-silent stream costs LlamaIndex's default max_retries=3 no SDK back-off and no request more: the transport ends the call with the SDK's own APITimeoutError, which it does not retry, and LlamaIndex's retry decorator never retries a stream."""
    sleeps = record_sdk_sleeps(monkeypatch, _base_client)
    assert hasattr(OpenAI._stream_chat, "__wrapped__")  # under llm_retry_decorator
    server.scenario = Scenario.silent_before_headers()
    with _li_llm(server, max_retries=max_retries) as llm:
        with pytest.raises(openai.APITimeoutError) as caught:
            _li_drain(llm, [])
    assert sleeps == []
    stall = caught.value.__cause__
    assert isinstance(stall, StreamStalled)
    assert (stall.stage, stall.attempts) == ("first_event", 2)
    assert len(server.requests) == 2  # the first attempt and our one re-send


@pytest.mark.timing
def test_li_the_default_max_retries_do_not_delay_the_error(server: FaultServer) -> None:
    """With max_retries=3 an always-silent stream's error comes as soon as with max_retries=0 (it took 2.6 to 3.5 s more, the SDK's three back-offs, before the transport ended the call as the SDK does)."""
    server.scenario = Scenario.silent_before_headers()
    took: dict[int, float] = {}
    for max_retries in (0, 3):
        start = time.monotonic()
        with _li_llm(server, max_retries=max_retries) as llm:
            with pytest.raises(openai.APITimeoutError):
                _li_drain(llm, [])
        took[max_retries] = time.monotonic() - start
    assert took[0] < 2 * 0.5 + PROMPT
    assert took[3] < 2 * 0.5 + PROMPT


@pytest.mark.parametrize(
    ("scenario", "raised"),
    [
        (Scenario.silent_after(1), httpx.ReadTimeout),
        (Scenario.silent_before_headers(), openai.APITimeoutError),
    ],
    ids=["mid_stream", "first_event"],
)
def test_li_its_default_timeout_under_the_budgets_hides_the_stall(
    server: FaultServer, scenario: Scenario, raised: type[Exception]
) -> None:
    """A LlamaIndex timeout under the stale budget (as its 60 s is under the default 180 s) ends a silent stream with httpx's timeout: nothing of ours, no re-send."""
    server.scenario = scenario
    policy = StreamPolicy(stale_timeout=1.5, first_event_timeout=1.5, retries=1)
    with _li_llm(server, policy, timeout=0.5, max_retries=0) as llm:
        with pytest.raises(raised) as caught:
            _li_drain(llm, [])
    assert stream_error(caught.value) is None
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_li_async_a_healthy_stream_arrives_whole(server: FaultServer) -> None:
    """astream_chat() over the async factory client streams the whole answer through it."""
    seen: list[str] = []
    async with _li_allm(server) as llm:
        assert llm._get_aclient()._client is llm._async_http_client
        await _li_adrain(llm, seen)
    assert "".join(seen) == "hello world"
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_li_async_a_stall_after_the_first_event_is_ours_unwrapped(
    server: FaultServer,
) -> None:
    """Silent after its first event, astream_chat() raises our mid-stream StreamStalled itself."""
    server.scenario = Scenario.silent_after(1)
    seen: list[str] = []
    async with _li_allm(server) as llm:
        with pytest.raises(StreamStalled) as caught:
            await _li_adrain(llm, seen)
    assert seen == ["hello"]
    assert caught.value.stage == "mid_stream"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_li_async_a_stall_before_the_first_event_is_resent(server: FaultServer) -> None:
    """An async stream silent before its headers is re-sent by the transport: the whole answer, two requests."""
    server.scenario = Scenario.stall_first(1)
    seen: list[str] = []
    async with _li_allm(server) as llm:
        await _li_adrain(llm, seen)
    assert "".join(seen) == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@ASYNC_INTERRUPTS
async def test_li_async_an_interrupt_is_prompt(
    server: FaultServer, scenario: Scenario, stage: str, from_task: bool
) -> None:
    """An Interrupt bound around astream_chat(), fired from a thread or a task, stops it promptly with StreamInterrupted itself."""
    server.scenario = scenario
    stop = Interrupt()
    seen: list[str] = []
    async with interrupting(stop, stage, server, seen, from_task) as when, _li_allm(server) as llm:
        with pytest.raises(StreamInterrupted) as caught, stop.bind():
            await _li_adrain(llm, seen)
    assert_prompt(when, caught.value, stage)
