"""LangChain on the watchdog: ChatOpenAI's recipe (sync and async) and ChatAnthropic's.

ChatOpenAI takes the factories' clients as ``http_client=`` (``.stream()``) and
``http_async_client=`` (``.astream()``): one left out is LangChain's own, unwatched. On
openai 3.x both flavors work; the recipe uses ``hermes_transport.httpx2``'s, openai 3.x's
own stack. A stall reaches the caller as ``OpenAITimeoutError`` (a ``ModelTimeoutError``)
with our ``StreamStalled`` two ``__cause__`` links down; an interrupt as our
``StreamInterrupted`` itself. The async trap: ChatOpenAI wraps each ``__anext__`` of the
SDK's stream in ``asyncio.wait_for(stream_chunk_timeout)`` (120 s by default, or
``LANGCHAIN_OPENAI_STREAM_CHUNK_TIMEOUT_S``), shorter than the default stale budget, so a
mid-stream stall comes out as ``StreamChunkTimeoutError`` with nothing of ours in its
chain; the recipe passes ``stream_chunk_timeout=None``. The timer never covers the wait for
the first event (the transport returns the response only once that event is in), so the
re-send before it survives the timer either way. ChatAnthropic has no client parameter:
the recipe overrides its two client properties. Its mid-stream stall is our
``StreamStalled`` itself on anthropic releases before 2.17; from 2.17, which wraps it in
``anthropic.APITimeoutError``, it is langchain_anthropic's ``AnthropicTimeoutError`` (a
``ModelTimeoutError``) with ours two ``__cause__`` links down.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from functools import cached_property
from typing import Any

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    stream_error,
)
from hermes_transport import http_client_for as httpx_client_for
from hermes_transport import httpx2 as ht2
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import (
    ASYNC_INTERRUPTS,
    framework,
    interrupt_at,
    interrupting,
)
from _support import PROMPT, anthropic_wraps_body_errors, assert_prompt

langchain_openai = framework("langchain_openai")
langchain_anthropic = framework("langchain_anthropic")

import anthropic
import openai
from langchain_anthropic import ChatAnthropic
from langchain_core.exceptions import ModelTimeoutError
from langchain_openai import ChatOpenAI, StreamChunkTimeoutError
from langchain_openai.chat_models.base import OpenAITimeoutError

_LC_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=0.5, retries=1)
#: Budgets three times LangChain's scaled-down chunk timer, as 180 s is to its 120 s.
_LC_SLOW = StreamPolicy(stale_timeout=1.5, first_event_timeout=1.5, retries=1)
_LC_CHUNK_TIMER = 0.5


@pytest.fixture(autouse=True)
def _lc_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing: nothing leaves loopback."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.setenv(name, "false")
    monkeypatch.delenv("LANGCHAIN_OPENAI_STREAM_CHUNK_TIMEOUT_S", raising=False)


@contextlib.contextmanager
def _lc_chat(
    server: FaultServer, policy: StreamPolicy = _LC_POLICY, **kwargs: Any
) -> Iterator[Any]:
    """The sync recipe: a ChatOpenAI on the fault server over an httpx2 factory client."""
    with ht2.http_client_for("cli", policy=policy) as http_client:
        yield ChatOpenAI(
            model="m", api_key="x", base_url=server.base_url, http_client=http_client, **kwargs
        )


@contextlib.asynccontextmanager
async def _lc_achat(
    server: FaultServer, policy: StreamPolicy = _LC_POLICY, **kwargs: Any
) -> AsyncIterator[Any]:
    """The async recipe: both factory clients, and LangChain's chunk timer off unless given."""
    kwargs.setdefault("stream_chunk_timeout", None)
    with ht2.http_client_for("cli", policy=policy) as http_client:
        async with ht2.async_http_client_for("cli", policy=policy) as http_async_client:
            yield ChatOpenAI(
                model="m",
                api_key="x",
                base_url=server.base_url,
                http_client=http_client,
                http_async_client=http_async_client,
                **kwargs,
            )


def _lc_drain(stream: Iterator[Any], seen: list[tuple[float, str]]) -> None:
    """Read a LangChain stream to its end, noting when each chunk's text arrived."""
    for chunk in stream:
        seen.append((time.monotonic(), chunk.text))


async def _lc_adrain(stream: AsyncIterator[Any], seen: list[tuple[float, str]]) -> None:
    """Read a LangChain async stream to its end, noting when each chunk's text arrived."""
    async for chunk in stream:
        seen.append((time.monotonic(), chunk.text))


def _lc_ours_two_deep(exc: BaseException) -> StreamStalled:
    """The stall in a LangChain timeout error: its cause's cause (openai's timeout between)."""
    assert isinstance(exc, ModelTimeoutError)
    assert isinstance(exc.__cause__, openai.APITimeoutError)
    stall = exc.__cause__.__cause__
    assert isinstance(stall, StreamStalled)
    assert stream_error(exc) is stall
    return stall


@pytest.mark.parametrize(
    "factory", [ht2.http_client_for, httpx_client_for], ids=["httpx2", "httpx"]
)
def test_lc_a_healthy_stream_arrives_whole(server: FaultServer, factory: Any) -> None:
    """ChatOpenAI.stream() over either flavor's factory client streams the whole answer through it."""
    with factory("cli", policy=_LC_POLICY) as http_client:
        llm = ChatOpenAI(model="m", api_key="x", base_url=server.base_url, http_client=http_client)
        assert llm.root_client._client is http_client
        assert "".join(chunk.text for chunk in llm.stream("hi")) == "hello world"
    assert [r.stream for r in server.requests] == [True]


def test_lc_an_http_client_alone_leaves_the_async_path_unwatched(server: FaultServer) -> None:
    """Given only http_client=, ChatOpenAI builds its own async client, without the watchdog."""
    with _lc_chat(server) as llm:
        assert not isinstance(llm.root_async_client._client._transport, ht2.AsyncWatchdogTransport)


def test_lc_a_stall_after_the_first_event_is_ours_two_deep(server: FaultServer) -> None:
    """A sync stream silent after its first event raises OpenAITimeoutError, our mid-stream stall two causes down."""
    server.scenario = Scenario.silent_after(1)
    seen: list[tuple[float, str]] = []
    with _lc_chat(server) as llm, pytest.raises(OpenAITimeoutError) as caught:
        _lc_drain(llm.stream("hi"), seen)
    assert "hello" in [text for _, text in seen]
    assert _lc_ours_two_deep(caught.value).stage == "mid_stream"
    assert len(server.requests) == 1


def test_lc_a_stall_before_the_first_event_is_resent(server: FaultServer) -> None:
    """A sync stream silent before its headers is re-sent by the transport: the whole answer, two requests."""
    server.scenario = Scenario.stall_first(1)
    with _lc_chat(server) as llm:
        assert "".join(chunk.text for chunk in llm.stream("hi")) == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.parametrize(
    ("scenario", "stage"),
    [(Scenario.silent_before_headers(), "headers"), (Scenario.silent_after(1), "mid_stream")],
    ids=["headers", "mid_stream"],
)
def test_lc_an_interrupt_from_another_thread_is_prompt(
    server: FaultServer, scenario: Scenario, stage: str
) -> None:
    """An Interrupt bound around .stream() stops it promptly; StreamInterrupted comes out unwrapped."""
    server.scenario = scenario
    stop = Interrupt()
    seen: list[tuple[float, str]] = []
    when = interrupt_at(stop, stage, server, seen)
    with _lc_chat(server) as llm, pytest.raises(StreamInterrupted) as caught, stop.bind():
        _lc_drain(llm.stream("hi"), seen)
    assert_prompt(when, caught.value, stage)
    assert stream_error(caught.value) is caught.value


@pytest.mark.timing
def test_lc_the_sdk_retries_add_neither_back_off_nor_resends(server: FaultServer) -> None:
    """ChatOpenAI's default max_retries (the SDK's 2) costs an always-silent stream no request and no back-off more than max_retries=0 (the transport ends the call with the SDK's own APITimeoutError, which it does not retry)."""
    server.scenario = Scenario.silent_before_headers()
    took: dict[str, float] = {}
    settings: dict[str, dict[str, Any]] = {"default": {}, "none": {"max_retries": 0}}
    for label, kwargs in settings.items():
        sent = len(server.requests)
        start = time.monotonic()
        with _lc_chat(server, **kwargs) as llm, pytest.raises(OpenAITimeoutError) as caught:
            _lc_drain(llm.stream("hi"), [])
        took[label] = time.monotonic() - start
        assert len(server.requests) - sent == 2  # the first attempt and our one re-send
        stall = _lc_ours_two_deep(caught.value)
        assert (stall.stage, stall.attempts) == ("first_event", 2)
    assert took["none"] < 2 * 0.5 + PROMPT
    assert took["default"] < 2 * 0.5 + PROMPT  # not the SDK's two back-offs, 1.125 to 1.5 s


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_lc_async_a_healthy_stream_arrives_whole(server: FaultServer) -> None:
    """ChatOpenAI.astream() over the async factory client streams the whole answer through it."""
    async with _lc_achat(server) as llm:
        assert isinstance(llm.root_async_client._client._transport, ht2.AsyncWatchdogTransport)
        assert "".join([chunk.text async for chunk in llm.astream("hi")]) == "hello world"
    assert len(server.requests) == 1


@pytest.mark.timing
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("timer", [_LC_CHUNK_TIMER, None], ids=["lc_timer", "timer_off"])
async def test_lc_async_a_mid_stream_stall_is_ours_only_with_the_timer_off(
    server: FaultServer, timer: float | None
) -> None:
    """With LangChain's chunk timer under our stale budget, a mid-stream stall is its StreamChunkTimeoutError, nothing of ours; with it off, our StreamStalled on our budget."""
    server.scenario = Scenario.silent_after(1)
    seen: list[tuple[float, str]] = []
    async with _lc_achat(server, _LC_SLOW, stream_chunk_timeout=timer) as llm:
        with pytest.raises((StreamChunkTimeoutError, OpenAITimeoutError)) as caught:
            await _lc_adrain(llm.astream("hi"), seen)
    took = time.monotonic() - seen[-1][0]  # since the last chunk: the stall
    if timer is not None:
        assert isinstance(caught.value, StreamChunkTimeoutError)
        assert caught.value.chunks_received == 1
        assert stream_error(caught.value) is None  # the trap: the stall is LangChain's
        assert timer <= took < timer + PROMPT
    else:
        stall = _lc_ours_two_deep(caught.value)
        assert (stall.stage, stall.budget) == ("mid_stream", 1.5)
        assert stall.elapsed >= 1.5  # our budget, not LangChain's
        assert took < 1.5 + PROMPT
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("timer", "policy"), [(None, _LC_POLICY), (_LC_CHUNK_TIMER, _LC_SLOW)], ids=["off", "lc_timer"]
)
@pytest.mark.parametrize("headers", [False, True], ids=["after_headers", "before_headers"])
async def test_lc_async_a_stall_before_the_first_event_is_resent(
    server: FaultServer, timer: float | None, policy: StreamPolicy, headers: bool
) -> None:
    """A first event later than LangChain's chunk timer is still re-sent by the transport: the timer starts only once it is in."""
    silent = Scenario.silent_after(0) if headers else Scenario.silent_before_headers()
    server.scenario = Scenario.stall_first(1, stall=silent)
    async with _lc_achat(server, policy, stream_chunk_timeout=timer) as llm:
        assert "".join([chunk.text async for chunk in llm.astream("hi")]) == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@ASYNC_INTERRUPTS
async def test_lc_async_an_interrupt_is_prompt(
    server: FaultServer, scenario: Scenario, stage: str, from_task: bool
) -> None:
    """An Interrupt bound around .astream(), fired from a thread or a task, stops it promptly with StreamInterrupted itself."""
    server.scenario = scenario
    stop = Interrupt()
    seen: list[tuple[float, str]] = []
    async with (
        interrupting(stop, stage, server, seen, from_task) as when,
        _lc_achat(server) as llm,
    ):
        with pytest.raises(StreamInterrupted) as caught, stop.bind():
            await _lc_adrain(llm.astream("hi"), seen)
    assert_prompt(when, caught.value, stage)


class _LcWatchedChatAnthropic(ChatAnthropic):  # type: ignore[misc]
    """The ChatAnthropic recipe: its own client parameters, on the httpx2 factory clients."""

    @cached_property
    def _client(self) -> anthropic.Anthropic:
        http_client = ht2.http_client_for("cli", policy=_LC_POLICY)
        return anthropic.Anthropic(**self._client_params, http_client=http_client)

    @cached_property
    def _async_client(self) -> anthropic.AsyncAnthropic:
        http_client = ht2.async_http_client_for("cli", policy=_LC_POLICY)
        return anthropic.AsyncAnthropic(**self._client_params, http_client=http_client)


@contextlib.contextmanager
def _lc_claude(server: FaultServer) -> Iterator[Any]:
    """The recipe's ChatAnthropic on the fault server's Messages wire; its sync client closed after."""
    llm = _LcWatchedChatAnthropic(
        model="claude-m", api_key="x", base_url=server.base_url.removesuffix("/v1")
    )
    try:
        yield llm
    finally:
        llm._client.close()


def _lc_claude_stall(exc: BaseException) -> StreamStalled:
    """The stall ChatAnthropic raised mid-stream: itself before anthropic 2.17; from 2.17 its
    AnthropicTimeoutError's cause's cause (anthropic's APITimeoutError between)."""
    if not anthropic_wraps_body_errors():
        assert isinstance(exc, StreamStalled), repr(exc)
        return exc
    assert isinstance(exc, langchain_anthropic.chat_models.AnthropicTimeoutError), repr(exc)
    assert isinstance(exc, ModelTimeoutError)
    assert type(exc.__cause__) is anthropic.APITimeoutError, repr(exc.__cause__)
    stall = exc.__cause__.__cause__
    assert isinstance(stall, StreamStalled), repr(stall)
    assert stream_error(exc) is stall
    return stall


def test_lc_anthropic_streams_and_a_mid_stream_stall_is_ours_or_two_deep(
    server: FaultServer,
) -> None:
    """ChatAnthropic.stream() on the watchdog streams whole; silent after its first text, it raises our StreamStalled (anthropic 2.17+: an AnthropicTimeoutError with ours two deep)."""
    with _lc_claude(server) as llm:
        assert "".join(chunk.text for chunk in llm.stream("hi")) == "hello world"
        server.scenario = Scenario.silent_after(4)  # message_start, block start, ping, "hello"
        with pytest.raises((StreamStalled, anthropic.APITimeoutError)) as caught:
            _lc_drain(llm.stream("hi"), [])
    assert _lc_claude_stall(caught.value).stage == "mid_stream"
    assert [r.path for r in server.requests] == ["/v1/messages"] * 2


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_lc_anthropic_async_a_stall_before_the_first_event_is_resent(
    server: FaultServer,
) -> None:
    """ChatAnthropic.astream() silent before its first event is re-sent: the whole answer, two requests."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.silent_after(3))
    with _lc_claude(server) as llm:
        try:
            assert "".join([chunk.text async for chunk in llm.astream("hi")]) == "hello world"
        finally:
            await llm._async_client.close()
    assert len(server.requests) == 2
