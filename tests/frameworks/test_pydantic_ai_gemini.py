"""pydantic-ai on the watchdog with Gemini: GoogleModel on ``genai_client_for``'s client.

The recipe gives ``GoogleModel`` a ``GoogleProvider(client=...)`` holding
``genai_client_for``'s ``google.genai.Client``: the provider keeps that client as it is
and pydantic-ai calls only its async methods (``client.aio``), on the async watchdog
transport; ``run_stream_sync`` runs them on the calling thread's event loop, so the
pydantic-ai trap of the openai recipe holds here too (a client's pooled connections stay
on the loop that opened them: a worker thread builds its own client and agent). Its
``http_client=`` takes an ``httpx2.AsyncClient`` and builds the ``genai.Client`` itself;
the recipe does not use it (the factory's client also carries the profile and its
timeout). A stall reaches the caller as pydantic-ai's ``ModelTimeoutError`` with our
``StreamStalled`` as its ``__cause__``; an interrupt as our ``StreamInterrupted`` itself.
pydantic-ai's ``google`` extra declares google-genai below 3, which the factory needs: the
frameworks environment installs pydantic-ai without that extra, beside google-genai 3.x,
and these tests prove the two work together.
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

from _frameworks_support import framework, interrupt_at, pai_stream
from _support import assert_prompt

pydantic_ai = framework("pydantic_ai")
framework("google.genai")

from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelTimeoutError
from pydantic_ai.models.google import GoogleModel
from pydantic_ai.providers.google import GoogleProvider

Agent.instrument_all(False)  # no OpenTelemetry spans, wherever an exporter may be installed

MODEL = "gemini-3.5-flash-lite"
_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.0, retries=1)
_RUNS = pytest.mark.parametrize("run", ["run_stream_sync", "run_stream"])
#: A stream that sends its first event, then holds the connection open in silence.
_HELD = replace(Scenario.silent_after(1), hold=5.0)


@contextlib.contextmanager
def _agent(
    server: FaultServer,
    interrupt: Interrupt | None = None,
    stats: list[StreamStats] | None = None,
) -> Iterator[tuple[Any, asyncio.AbstractEventLoop]]:
    """The recipe's agent on this thread's own event loop: GoogleModel with genai_client_for's client given to its GoogleProvider; both closed after."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    client = genai_client_for(
        "cli",
        api_key="test-key",
        http_options={"base_url": server.base_url.removesuffix("/v1")},
        policy=_POLICY,
        interrupt=interrupt,
        on_stats=None if stats is None else stats.append,
    )
    try:
        yield Agent(GoogleModel(MODEL, provider=GoogleProvider(client=client))), loop
    finally:
        loop.run_until_complete(client.aio.aclose())
        client.close()
        asyncio.set_event_loop(None)
        loop.close()


@_RUNS
def test_pydantic_ai_gemini_streams_a_healthy_answer_whole_on_the_watchdog(
    server: FaultServer, run: str
) -> None:
    """A healthy Gemini stream reaches the caller's text deltas whole, in one request, and the watchdog's statistics report it on the gemini wire."""
    stats: list[StreamStats] = []
    deltas: list[str] = []
    with _agent(server, stats=stats) as (agent, loop):
        pai_stream(agent, run, loop, deltas)
    assert "".join(deltas) == "hello world"
    assert len(server.requests) == 1
    assert [(s.wire, s.model, s.outcome) for s in stats] == [("gemini", MODEL, "completed")]


@_RUNS
def test_pydantic_ai_gemini_a_silent_first_attempt_is_re_sent_and_answers_whole(
    server: FaultServer, run: str
) -> None:
    """A first attempt that sends nothing is re-sent by the watch: the caller gets the whole answer, the server saw two requests."""
    server.scenario = Scenario.stall_first(1)
    deltas: list[str] = []
    with _agent(server) as (agent, loop):
        pai_stream(agent, run, loop, deltas)
    assert "".join(deltas) == "hello world"
    assert [request.attempt for request in server.requests] == [0, 1]


@_RUNS
def test_pydantic_ai_gemini_a_stall_after_output_raises_model_timeout_error_over_ours(
    server: FaultServer, run: str
) -> None:
    """A Gemini stream silent after its first text raises pydantic-ai's ModelTimeoutError with our StreamStalled as its cause, and is not re-sent."""
    server.scenario = Scenario.silent_after(1)
    deltas: list[str] = []
    with _agent(server) as (agent, loop), pytest.raises(ModelTimeoutError) as info:
        pai_stream(agent, run, loop, deltas)
    stalled = stream_error(info.value)
    assert isinstance(stalled, StreamStalled)
    assert info.value.__cause__ is stalled
    assert stalled.stage == "mid_stream"
    assert "".join(deltas) == "hello"  # the text before the stall reached the caller
    assert len(server.requests) == 1


@pytest.mark.timing
@_RUNS
@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
def test_pydantic_ai_gemini_an_interrupt_from_another_thread_raises_stream_interrupted(
    server: FaultServer, run: str, stage: str
) -> None:
    """An Interrupt fired from another thread, before the headers or mid-stream, ends the run within a second as our StreamInterrupted itself."""
    server.scenario = _HELD if stage == "mid_stream" else Scenario.silent_before_headers()
    stop = Interrupt()
    deltas: list[str] = []
    when = interrupt_at(stop, stage, server, deltas)
    with _agent(server) as (agent, loop), stop.bind():
        with pytest.raises(StreamInterrupted) as info:
            pai_stream(agent, run, loop, deltas)
    assert_prompt(when, info.value, stage)
    assert stream_error(info.value) is info.value
    assert bool(deltas) == (stage == "mid_stream")
    assert len(server.requests) == 1
