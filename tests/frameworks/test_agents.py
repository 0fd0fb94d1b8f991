"""The OpenAI Agents SDK recipe: ``Runner.run_streamed`` over a watchdog ``AsyncOpenAI``.

The recipe gives the agent's model (``OpenAIResponsesModel`` or
``OpenAIChatCompletionsModel``; or the SDK's default client, via
``set_default_openai_client``) an ``openai.AsyncOpenAI`` whose ``http_client`` is a
watchdog ``AsyncClient`` from ``async_http_client_for`` (httpx or httpx2). Against the
fault server, for both model kinds: a healthy turn streams its whole text; a stall after
the first text fails the turn with the SDK's ``APITimeoutError``, caused by our
``StreamStalled``; a stall before the first event is re-sent by the transport and the
turn completes; an ``Interrupt`` fired from another thread mid-stream or before the
headers ends the turn at once with ``StreamInterrupted`` raised as it is. The token
reaches the request when it is bound around the ``Runner.run_streamed`` call (the run's
task copies the context there) or given to the client (``reset()`` re-arms it per turn);
bound only around iterating ``stream_events()`` it is silently ignored (the trap of issue
#17, pinned here), and the SDK's own ``RunResultStreaming.cancel()`` stops a turn without
an error. The SDK runs on asyncio only, and its tracing is off, so nothing leaves loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import openai
import pytest

from _frameworks_support import framework

framework("agents")

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    set_default_openai_api,
    set_default_openai_client,
    set_tracing_disabled,
)
from agents.models import _openai_shared

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, FlavorName, load_flavor

pytestmark = pytest.mark.anyio

# Budgets far above a loopback event gap, far below the server's 30 s hold of a stall.
AGENTS_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.0, retries=1)
# For interrupts: no budget can end the turn first.
AGENTS_INTERRUPT_POLICY = StreamPolicy(stale_timeout=5.0, first_event_timeout=5.0, retries=0)
AGENTS_KINDS = ("responses", "chat")
# Events before the first text event ("hello"), per wire: Responses sends a preamble.
AGENTS_PREAMBLE = {"responses": 4, "chat": 0}
# A healthy stream of 20 text events, 40 ms apart: about 1 s in all.
AGENTS_SLOW = Scenario(content=("w",) * 20, event_interval=0.04)
AGENTS_REASON = "user pressed stop"
AGENTS_TEXT_DELTA = "response.output_text.delta"
# An interrupt is "prompt" within this, on two busy cores.
AGENTS_PROMPT = 1.0


@pytest.fixture
def anyio_backend() -> str:
    """The Agents SDK runs on asyncio only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _ag_no_tracing() -> None:
    """The Agents SDK's tracing stays off (it would export to the network)."""
    set_tracing_disabled(True)


@pytest.fixture(params=AGENTS_KINDS)
def agents_kind(request: pytest.FixtureRequest) -> str:
    """Each test runs on both model kinds: the Responses API and Chat Completions."""
    kind: str = request.param
    return kind


@pytest.fixture
async def agents_on(agents_kind: str) -> AsyncIterator[Callable[..., Agent[Any]]]:
    """Builds agents of the kind on the fault server over a watchdog client; closes them."""
    clients: list[openai.AsyncOpenAI] = []

    def build(
        server: FaultServer,
        policy: StreamPolicy = AGENTS_POLICY,
        flavor: Flavor | None = None,
        interrupt: Interrupt | None = None,
    ) -> Agent[Any]:
        http_client = (flavor or load_flavor("httpx2")).async_http_client_for(
            None, policy=policy, interrupt=interrupt
        )
        client = openai.AsyncOpenAI(
            base_url=server.base_url, api_key="x", max_retries=0, http_client=http_client
        )
        clients.append(client)
        model: Any
        if agents_kind == "responses":
            model = OpenAIResponsesModel("gpt-test", client)
        else:
            model = OpenAIChatCompletionsModel("gpt-test", client)
        return Agent(name="demo", instructions="Say hello.", model=model)

    yield build
    for client in clients:
        await client.close()


@dataclass
class _AgTurn:
    """What one streamed turn gave: its text deltas, its error, when it ended, its result."""

    deltas: list[str]
    error: Exception | None
    ended: float
    result: Any


def _ag_bound(token: Interrupt | None, here: bool) -> contextlib.AbstractContextManager[Any]:
    """``token.bind()`` where the turn binds it, else nothing."""
    return token.bind() if token is not None and here else contextlib.nullcontext()


async def _ag_turn(
    agent: Agent[Any],
    token: Interrupt | None = None,
    bind: str = "call",
    on_first_text: Callable[[Any], None] | None = None,
) -> _AgTurn:
    """One turn through ``Runner.run_streamed``, the token bound around the call or the loop."""
    deltas: list[str] = []
    error: Exception | None = None
    result: Any = None
    try:
        with _ag_bound(token, bind == "call"):
            result = Runner.run_streamed(agent, "hi")
        with _ag_bound(token, bind == "iteration"):
            async for event in result.stream_events():
                if event.type == "raw_response_event" and event.data.type == AGENTS_TEXT_DELTA:
                    deltas.append(event.data.delta)
                    if len(deltas) == 1 and on_first_text is not None:
                        on_first_text(result)
    except Exception as exc:
        error = exc
    return _AgTurn(deltas, error, time.monotonic(), result)


class _AgStopper:
    """Interrupts a token from another thread, once, and records when it did."""

    def __init__(self, token: Interrupt) -> None:
        self.token = token
        self.at = 0.0

    def start(self, server: FaultServer | None = None, delay: float = 0.05) -> None:
        def run() -> None:
            if server is not None:
                server.wait_for_requests(1)
            time.sleep(delay)
            self.at = time.monotonic()
            self.token.interrupt(AGENTS_REASON)

        threading.Thread(target=run, daemon=True).start()

    def on_first_text(self, _result: Any) -> None:
        self.start()


@pytest.mark.parametrize("flavor_name", ["httpx", "httpx2"])
async def test_a_healthy_agent_turn_streams_its_whole_text(
    agents_on: Callable[..., Agent[Any]], flavor_name: FlavorName
) -> None:
    """A healthy streamed turn yields "hello" and " world" and the final output, from one request."""
    with FaultServer(Scenario()) as server:
        turn = await _ag_turn(agents_on(server, flavor=load_flavor(flavor_name)))
        requests = len(server.requests)
    assert (turn.error, turn.deltas, requests) == (None, ["hello", " world"], 1)
    assert turn.result.final_output == "hello world"


async def test_an_agent_on_the_sdk_default_client_streams_over_the_watchdog(
    agents_kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent that names its model by string uses set_default_openai_client's watchdog client."""
    monkeypatch.setattr(_openai_shared, "_default_openai_client", None)
    monkeypatch.setattr(_openai_shared, "_use_responses_by_default", True)
    with FaultServer(Scenario()) as server:
        http_client = load_flavor("httpx2").async_http_client_for(None, policy=AGENTS_POLICY)
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x", http_client=http_client)
        set_default_openai_client(client, use_for_tracing=False)
        set_default_openai_api("responses" if agents_kind == "responses" else "chat_completions")
        turn = await _ag_turn(Agent(name="demo", instructions="Say hello.", model="gpt-test"))
        paths = [request.path for request in server.requests]
        await client.close()
    assert turn.error is None
    assert turn.result.final_output == "hello world"
    assert paths == ["/v1/responses" if agents_kind == "responses" else "/v1/chat/completions"]


@pytest.mark.parametrize("flavor_name", ["httpx", "httpx2"])
async def test_an_agent_turn_that_stalls_after_its_first_text_fails_with_stream_stalled_in_its_cause(
    agents_on: Callable[..., Agent[Any]], agents_kind: str, flavor_name: FlavorName
) -> None:
    """A stream silent after "hello" fails the turn, once its 0.5 s stale budget is spent, with openai.APITimeoutError caused by a mid-stream StreamStalled, and is not re-sent."""
    scenario = Scenario.silent_after(AGENTS_PREAMBLE[agents_kind] + 1)
    with FaultServer(scenario) as server:
        turn = await _ag_turn(agents_on(server, flavor=load_flavor(flavor_name)))
        requests = len(server.requests)
    assert turn.deltas == ["hello"]
    assert type(turn.error) is openai.APITimeoutError
    assert isinstance(turn.error.__cause__, StreamStalled)
    stall = stream_error(turn.error)
    assert isinstance(stall, StreamStalled)
    assert (stall.stage, stall.budget, requests) == ("mid_stream", 0.5, 1)


@pytest.mark.parametrize("where", ["before-headers", "after-headers"])
async def test_an_agent_turn_that_stalls_before_its_first_event_is_re_sent_and_completes(
    agents_on: Callable[..., Agent[Any]], agents_kind: str, where: str
) -> None:
    """A first attempt silent before its headers, or after them before any text, is re-sent by the transport: the turn gets "hello world" and the server saw two requests."""
    stall = Scenario.silent_before_headers()
    if where == "after-headers":
        stall = Scenario.silent_after(AGENTS_PREAMBLE[agents_kind])
    with FaultServer(Scenario.stall_first(1, stall=stall)) as server:
        turn = await _ag_turn(agents_on(server))
        attempts = [request.attempt for request in server.requests]
    assert turn.error is None
    assert (turn.deltas, turn.result.final_output) == (["hello", " world"], "hello world")
    assert attempts == [0, 1]


@pytest.mark.timing
@pytest.mark.parametrize("how", ["bound-around-run-streamed", "on-the-client"])
async def test_an_interrupt_from_another_thread_stops_an_agent_turn_mid_stream_at_once(
    agents_on: Callable[..., Agent[Any]], how: str
) -> None:
    """An Interrupt bound around Runner.run_streamed, or given to the client, fired from another thread after the first text ends the turn promptly with StreamInterrupted as it is."""
    stop = Interrupt()
    stopper = _AgStopper(stop)
    on_client = how == "on-the-client"
    with FaultServer(AGENTS_SLOW) as server:
        agent = agents_on(server, AGENTS_INTERRUPT_POLICY, interrupt=stop if on_client else None)
        turn = await _ag_turn(agent, stop, "none" if on_client else "call", stopper.on_first_text)
    assert type(turn.error) is StreamInterrupted
    assert (turn.error.reason, turn.error.stage) == (AGENTS_REASON, "mid_stream")
    assert stream_error(turn.error) is turn.error
    assert 1 <= len(turn.deltas) < 20
    assert turn.ended - stopper.at < AGENTS_PROMPT


@pytest.mark.timing
async def test_an_interrupt_before_the_headers_stops_an_agent_turn_at_once(
    agents_on: Callable[..., Agent[Any]],
) -> None:
    """An Interrupt fired while the server sends nothing ends the turn promptly with StreamInterrupted (also an openai.OpenAIError, which the SDK does not retry), after one request."""
    stop = Interrupt()
    stopper = _AgStopper(stop)
    with FaultServer(Scenario.silent_before_headers()) as server:
        agent = agents_on(server, AGENTS_INTERRUPT_POLICY)
        stopper.start(server)
        turn = await _ag_turn(agent, stop)
        requests = len(server.requests)
    assert isinstance(turn.error, StreamInterrupted)
    assert isinstance(turn.error, openai.OpenAIError)
    assert (turn.error.reason, turn.error.stage) == (AGENTS_REASON, "headers")
    assert stream_error(turn.error) is turn.error
    assert (turn.deltas, requests) == ([], 1)
    assert turn.ended - stopper.at < AGENTS_PROMPT


@pytest.mark.timing
async def test_an_interrupt_bound_only_around_the_agent_event_loop_is_ignored(
    agents_on: Callable[..., Agent[Any]],
) -> None:
    """The trap: bound around iterating stream_events() only, an Interrupt never reaches the request, which runs in a task run_streamed created earlier: the turn streams all its text."""
    stop = Interrupt()
    stopper = _AgStopper(stop)
    with FaultServer(AGENTS_SLOW) as server:
        agent = agents_on(server, AGENTS_INTERRUPT_POLICY)
        turn = await _ag_turn(agent, stop, "iteration", stopper.on_first_text)
    assert stop.interrupted
    assert turn.error is None
    assert len(turn.deltas) == 20
    assert turn.ended - stopper.at > 0.5  # the rest of the stream, about 1 s, ran on


@pytest.mark.timing
async def test_a_client_token_reset_between_agent_turns_stops_only_the_turn_it_was_fired_in(
    agents_on: Callable[..., Agent[Any]],
) -> None:
    """A token on the client, interrupted in one turn and reset, lets the next turn on the same agent stream its whole text."""
    stop = Interrupt()
    stopper = _AgStopper(stop)
    with FaultServer(AGENTS_SLOW) as server:
        agent = agents_on(server, AGENTS_INTERRUPT_POLICY, interrupt=stop)
        first = await _ag_turn(agent, on_first_text=stopper.on_first_text)
        stop.reset()
        server.scenario = Scenario()
        second = await _ag_turn(agent)
    assert isinstance(first.error, StreamInterrupted)
    assert second.error is None
    assert second.result.final_output == "hello world"


@pytest.mark.timing
async def test_the_sdk_cancel_of_an_agent_turn_ends_it_without_an_error(
    agents_on: Callable[..., Agent[Any]],
) -> None:
    """RunResultStreaming.cancel(), called on the loop from another thread, ends stream_events() promptly and silently (no exception, no final output) and closes the request's connection."""
    loop = asyncio.get_running_loop()
    at: list[float] = []

    def cancel_from_a_thread(result: Any) -> None:
        def run() -> None:
            at.append(time.monotonic())
            loop.call_soon_threadsafe(result.cancel)

        threading.Thread(target=run, daemon=True).start()

    with FaultServer(AGENTS_SLOW) as server:
        agent = agents_on(server, AGENTS_INTERRUPT_POLICY)
        turn = await _ag_turn(agent, on_first_text=cancel_from_a_thread)
        deadline = time.monotonic() + AGENTS_PROMPT
        while server.sent[-1].ended_at is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        ended_at = server.sent[-1].ended_at
    assert turn.error is None
    assert turn.result.final_output is None
    assert 1 <= len(turn.deltas) < 20
    assert turn.ended - at[0] < AGENTS_PROMPT
    assert ended_at is not None
    assert ended_at - at[0] < AGENTS_PROMPT
