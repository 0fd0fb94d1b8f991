"""LangChain on the watchdog with Gemini: ChatGoogleGenerativeAI on ``genai_client_for``'s client.

``ChatGoogleGenerativeAI`` has a ``client`` field, but its validator always builds a
``google.genai.Client`` of its own and puts it there: a client given as ``client=`` is
dropped unused. Its ``client_args`` go to both of the SDK's http clients alike, so they
cannot carry the two transports (a sync and an async one) either. The recipe therefore
assigns ``genai_client_for``'s client to ``llm.client`` after construction (the model is
built with an API key, which its own discarded client needs): ``.stream()`` then runs on
its sync methods and ``.astream()`` on its async ones (``client.aio``), both watched. A
stall reaches the caller as our ``StreamStalled`` itself (google-genai does not wrap the
HTTP library's errors, and LangChain does not map them); an interrupt as our
``StreamInterrupted`` itself. LangChain does not close an assigned client: the caller does
(``client.close()``, ``await client.aio.aclose()``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    genai_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import framework, interrupt_at
from _support import assert_prompt

langchain_google_genai = framework("langchain_google_genai")

from langchain_google_genai import ChatGoogleGenerativeAI

MODEL = "gemini-3.5-flash-lite"
_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.0, retries=1)
_MODES = pytest.mark.parametrize("mode", ["stream", "astream"])
#: A stream that sends its first event, then holds the connection open in silence.
_HELD = replace(Scenario.silent_after(1), hold=5.0)


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No LangSmith tracing: nothing leaves loopback."""
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.setenv(name, "false")


def _client(
    server: FaultServer, interrupt: Interrupt | None = None, stats: list[StreamStats] | None = None
) -> Any:
    """genai_client_for's client on the fault server."""
    return genai_client_for(
        "cli",
        api_key="test-key",
        http_options={"base_url": server.base_url.removesuffix("/v1")},
        policy=_POLICY,
        interrupt=interrupt,
        on_stats=None if stats is None else stats.append,
    )


@contextlib.contextmanager
def _chat(
    server: FaultServer, interrupt: Interrupt | None = None, stats: list[StreamStats] | None = None
) -> Iterator[Any]:
    """The recipe: a ChatGoogleGenerativeAI whose client is replaced by genai_client_for's; that client closed after."""
    client = _client(server, interrupt, stats)
    llm = ChatGoogleGenerativeAI(
        model=MODEL, api_key="test-key", base_url=server.base_url.removesuffix("/v1")
    )
    llm.client = client
    try:
        yield llm
    finally:
        client.close()


def _text(llm: Any, mode: str, into: list[str]) -> str:
    """Stream the answer's chunks into `into` with .stream(), or .astream() on a new event loop; the text."""
    if mode == "stream":
        for chunk in llm.stream("hi"):
            into.append(chunk.text)
        return "".join(into)

    async def astream() -> None:
        try:
            async for chunk in llm.astream("hi"):
                into.append(chunk.text)
        finally:
            await llm.client.aio.aclose()

    asyncio.run(astream())
    return "".join(into)


@_MODES
def test_lc_gemini_streams_a_healthy_answer_whole_on_the_watchdog(
    server: FaultServer, mode: str
) -> None:
    """A healthy Gemini stream reaches .stream() and .astream() whole, in one request, and the watchdog's statistics report it on the gemini wire."""
    stats: list[StreamStats] = []
    with _chat(server, stats=stats) as llm:
        assert _text(llm, mode, []) == "hello world"
    assert len(server.requests) == 1
    assert [(s.wire, s.model, s.outcome) for s in stats] == [("gemini", MODEL, "completed")]


def test_lc_gemini_a_client_given_to_the_constructor_is_dropped_unwatched(
    server: FaultServer,
) -> None:
    """A client passed as client= is replaced by the model's own, so the call goes unwatched: no statistics reach the factory's callback."""
    stats: list[StreamStats] = []
    client = _client(server, stats=stats)
    try:
        llm = ChatGoogleGenerativeAI(
            model=MODEL,
            api_key="test-key",
            base_url=server.base_url.removesuffix("/v1"),
            client=client,
        )
        assert llm.client is not client
        assert "".join(chunk.text for chunk in llm.stream("hi")) == "hello world"
    finally:
        client.close()
    assert stats == []


@_MODES
def test_lc_gemini_a_silent_first_attempt_is_re_sent_and_answers_whole(
    server: FaultServer, mode: str
) -> None:
    """A first attempt that sends nothing is re-sent by the watch: the caller gets the whole answer, the server saw two requests."""
    server.scenario = Scenario.stall_first(1)
    with _chat(server) as llm:
        assert _text(llm, mode, []) == "hello world"
    assert [request.attempt for request in server.requests] == [0, 1]


@_MODES
def test_lc_gemini_a_stall_after_output_raises_our_stream_stalled_itself(
    server: FaultServer, mode: str
) -> None:
    """A Gemini stream silent after its first text raises our StreamStalled itself through LangChain, after the text before it, and is not re-sent."""
    server.scenario = Scenario.silent_after(1)
    chunks: list[str] = []
    with _chat(server) as llm, pytest.raises(StreamStalled) as info:
        _text(llm, mode, chunks)
    assert stream_error(info.value) is info.value
    assert info.value.stage == "mid_stream"
    assert "".join(chunks) == "hello"
    assert len(server.requests) == 1


@pytest.mark.timing
@_MODES
@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
def test_lc_gemini_an_interrupt_from_another_thread_raises_stream_interrupted(
    server: FaultServer, mode: str, stage: str
) -> None:
    """An Interrupt fired from another thread, before the headers or mid-stream, ends .stream() and .astream() within a second as our StreamInterrupted itself."""
    server.scenario = _HELD if stage == "mid_stream" else Scenario.silent_before_headers()
    stop = Interrupt()
    chunks: list[str] = []
    when = interrupt_at(stop, stage, server, chunks)
    with _chat(server, interrupt=stop) as llm, pytest.raises(StreamInterrupted) as info:
        _text(llm, mode, chunks)
    assert_prompt(when, info.value, stage)
    assert stream_error(info.value) is info.value
    assert ("hello" in "".join(chunks)) == (stage == "mid_stream")
    assert len(server.requests) == 1
