"""pydantic-ai on the watchdog: an Agent's recipe, streamed with run_stream_sync and run_stream.

The recipe gives ``OpenAIChatModel`` an ``OpenAIProvider(openai_client=...)`` holding
``async_openai_client_for``'s ``AsyncOpenAI`` (on openai 3.x: over httpx2): pydantic-ai
is async inside, and ``run_stream_sync`` runs that client on the calling thread's event
loop. A stall reaches the caller as pydantic-ai's ``ModelTimeoutError`` with our
``StreamStalled`` two ``__cause__`` links down; an interrupt as our ``StreamInterrupted``
itself. The traps: an ``AsyncOpenAI`` (plain httpx or httpx2 too) keeps its pooled
connections on the event loop that opened them, and ``run_stream_sync`` runs each thread
on a loop of its own, so an agent shared across threads fails on the next thread with
``RuntimeError: ... is bound to a different event loop``: a worker thread builds its own
client and agent (or passes ``model=`` per run). And the request is sent by the
``run_stream_sync(...)`` call (``async with run_stream(...)``), so an ``Interrupt`` is bound
around that call: bound only around iterating the text it is never seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    async_openai_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import framework, pai_stream
from _support import assert_prompt, interrupt_when

pydantic_ai = framework("pydantic_ai")

import openai
from pydantic_ai import Agent
from pydantic_ai.exceptions import ModelAPIError, ModelTimeoutError
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

Agent.instrument_all(False)  # no OpenTelemetry spans, wherever an exporter may be installed

_PAI_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.0, retries=1)
_PAI_RUNS = pytest.mark.parametrize("run", ["run_stream_sync", "run_stream"])
#: A stream that sends its first event, then holds the connection open in silence.
_PAI_HELD = replace(Scenario.silent_after(2), hold=5.0)


def _pai_client(
    server: FaultServer, interrupt: Interrupt | None = None, policy: StreamPolicy = _PAI_POLICY
) -> openai.AsyncOpenAI:
    """The recipe's client: async_openai_client_for's AsyncOpenAI on the fault server."""
    return async_openai_client_for(
        "cli", base_url=server.base_url, api_key="x", policy=policy, interrupt=interrupt
    )


def _pai_agent(client: openai.AsyncOpenAI) -> Any:
    """The recipe's agent: OpenAIChatModel with the client given to its OpenAIProvider."""
    return Agent(OpenAIChatModel("m", provider=OpenAIProvider(openai_client=client)))


@contextlib.contextmanager
def _pai_thread_agent(
    server: FaultServer, interrupt: Interrupt | None = None, policy: StreamPolicy = _PAI_POLICY
) -> Iterator[tuple[Any, asyncio.AbstractEventLoop]]:
    """An agent of this thread's own: its event loop (the one run_stream_sync runs on) and client, both closed after."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    client = _pai_client(server, interrupt, policy)
    try:
        yield _pai_agent(client), loop
    finally:
        loop.run_until_complete(client.close())
        asyncio.set_event_loop(None)
        loop.close()


@_PAI_RUNS
def test_pydantic_ai_streams_a_healthy_answer_whole(server: FaultServer, run: str) -> None:
    """A healthy stream reaches the caller's text deltas whole, in one request."""
    deltas: list[str] = []
    with _pai_thread_agent(server) as (agent, loop):
        pai_stream(agent, run, loop, deltas)
    assert "".join(deltas) == "hello world"
    assert len(server.requests) == 1


@_PAI_RUNS
def test_pydantic_ai_a_stall_after_the_first_event_raises_model_timeout_error_over_ours(
    server: FaultServer, run: str
) -> None:
    """A stream silent after its first event raises pydantic-ai's ModelTimeoutError, our StreamStalled in its cause chain, and is not re-sent."""
    server.scenario = Scenario.silent_after(2)
    deltas: list[str] = []
    with _pai_thread_agent(server) as (agent, loop), pytest.raises(ModelTimeoutError) as info:
        pai_stream(agent, run, loop, deltas)
    assert isinstance(info.value.__cause__, openai.APITimeoutError)
    stalled = stream_error(info.value)
    assert isinstance(stalled, StreamStalled)
    assert stalled.stage == "mid_stream"
    assert info.value.__cause__.__cause__ is stalled
    assert "".join(deltas) == "hello world"  # the event before the stall reached the caller
    assert len(server.requests) == 1


@_PAI_RUNS
def test_pydantic_ai_a_stall_before_the_first_event_is_re_sent_and_answers_whole(
    server: FaultServer, run: str
) -> None:
    """A first attempt silent before its headers is re-sent by the transport: the caller gets the whole answer, the server saw two requests."""
    server.scenario = Scenario.stall_first(1)
    deltas: list[str] = []
    with _pai_thread_agent(server) as (agent, loop):
        pai_stream(agent, run, loop, deltas)
    assert "".join(deltas) == "hello world"
    assert [request.attempt for request in server.requests] == [0, 1]


@pytest.mark.timing
@_PAI_RUNS
@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
def test_pydantic_ai_an_interrupt_from_another_thread_raises_stream_interrupted_promptly(
    server: FaultServer, run: str, stage: str
) -> None:
    """An Interrupt fired from another thread, before the headers or mid-stream, ends the run within a second as our StreamInterrupted itself."""
    server.scenario = _PAI_HELD if stage == "mid_stream" else Scenario.silent_before_headers()
    stop = Interrupt()
    deltas: list[str] = []
    when = interrupt_when(
        stop, lambda: bool(deltas) or (stage == "headers" and bool(server.requests))
    )
    with _pai_thread_agent(server) as (agent, loop), stop.bind():
        with pytest.raises(StreamInterrupted) as info:
            pai_stream(agent, run, loop, deltas)
    assert_prompt(when, info.value, stage)
    assert stream_error(info.value) is info.value
    assert bool(deltas) == (stage == "mid_stream")
    assert len(server.requests) == 1


@pytest.mark.timing
def test_pydantic_ai_an_interrupt_from_the_loop_stops_run_stream_promptly(
    server: FaultServer,
) -> None:
    """An Interrupt fired by a task on run_stream's own event loop, once text has arrived, stops the stream within a second."""
    server.scenario = _PAI_HELD
    stop = Interrupt()
    deltas: list[str] = []
    when: list[float] = []

    async def stream_then_stop(agent: Any) -> None:
        first = asyncio.Event()

        async def stopper() -> None:
            await first.wait()
            await asyncio.sleep(0.1)
            when.append(time.monotonic())
            stop.interrupt("user pressed stop")

        task = asyncio.create_task(stopper())
        try:
            async with agent.run_stream("hi") as result:
                async for text in result.stream_text(delta=True):
                    deltas.append(text)
                    first.set()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    with _pai_thread_agent(server, interrupt=stop) as (agent, loop):
        with pytest.raises(StreamInterrupted) as info:
            loop.run_until_complete(stream_then_stop(agent))
    assert_prompt(when, info.value, "mid_stream")
    assert "".join(deltas) == "hello world"


@pytest.mark.timing
def test_pydantic_ai_an_interrupt_stops_run_stream_sync_on_a_worker_thread_with_its_own_agent(
    server: FaultServer,
) -> None:
    """The worker-thread pattern: each turn's thread builds its own client and agent, and the caller's Interrupt stops its run_stream_sync within a second; the next turn, on a new thread, streams whole."""
    stop = Interrupt()
    outcomes: list[BaseException | str] = []
    deltas: list[str] = []

    def turn() -> None:
        try:
            with _pai_thread_agent(server) as (agent, _), stop.bind():
                with agent.run_stream_sync("hi") as result:
                    for text in result.stream_text(delta=True):
                        deltas.append(text)
            outcomes.append("".join(deltas))
        except BaseException as exc:
            outcomes.append(exc)

    server.scenario = _PAI_HELD
    when = interrupt_when(stop, lambda: bool(deltas), delay=0.1)
    worker = threading.Thread(target=turn)
    worker.start()
    worker.join(5.0)
    assert not worker.is_alive()
    caught = outcomes.pop()
    assert isinstance(caught, StreamInterrupted)
    assert_prompt(when, caught, "mid_stream")

    stop.reset()
    deltas.clear()
    server.scenario = Scenario.healthy()
    worker = threading.Thread(target=turn)
    worker.start()
    worker.join(5.0)
    assert outcomes == ["hello world"]


def test_pydantic_ai_one_agent_shared_across_threads_fails_on_the_next_thread(
    server: FaultServer,
) -> None:
    """The trap: one agent run with run_stream_sync on two threads in turn fails on the second, its pooled connection bound to the first thread's event loop."""
    client = _pai_client(server)
    agent = _pai_agent(client)
    outcomes: list[BaseException | str] = []
    loops: list[asyncio.AbstractEventLoop] = []

    def turn() -> None:
        try:
            with agent.run_stream_sync("hi") as result:
                outcomes.append(result.get_output())
        except BaseException as exc:
            outcomes.append(exc)
        loops.append(asyncio.get_event_loop())  # the loop pydantic-ai made for this thread

    try:
        for _ in range(2):
            worker = threading.Thread(target=turn)
            worker.start()
            worker.join(5.0)
    finally:
        loops[0].run_until_complete(client.close())
        for loop in loops:
            loop.close()
    assert outcomes[0] == "hello world"
    assert isinstance(outcomes[1], RuntimeError)
    assert "bound to a different event loop" in str(outcomes[1])
    assert stream_error(outcomes[1]) is None


@pytest.mark.timing
def test_pydantic_ai_an_interrupt_bound_only_around_the_iteration_is_not_seen(
    server: FaultServer,
) -> None:
    """The binding trap: run_stream_sync(...) sends the request, so an Interrupt bound only around iterating its text never reaches it; the stream runs on until the server hangs up."""
    hold = 1.0
    server.scenario = replace(_PAI_HELD, hold=hold)
    stop = Interrupt()
    deltas: list[str] = []
    started = time.monotonic()
    interrupt_when(stop, lambda: bool(deltas), delay=0.1)
    patient = StreamPolicy(stale_timeout=5.0, first_event_timeout=5.0, retries=0)

    def bound_late(agent: Any) -> None:
        with agent.run_stream_sync("hi") as result, stop.bind():
            for text in result.stream_text(delta=True):
                deltas.append(text)

    with _pai_thread_agent(server, policy=patient) as (agent, _):
        with pytest.raises(ModelAPIError) as info:
            bound_late(agent)
    assert time.monotonic() - started >= hold
    assert stop.interrupted
    assert stream_error(info.value) is None
