"""The OpenAI Agents SDK on the watchdog: a background Responses turn that stalls is resumed.

An agent whose model is the Agents SDK's ``OpenAIResponsesModel``, on an
``openai.AsyncOpenAI`` over a watchdog ``AsyncClient`` (httpx or httpx2: openai
3.x takes either), streams one turn with ``Runner.run_streamed`` against the
fault server. With ``background=True`` in the request (``ModelSettings.extra_args``
or ``extra_body``), a connection that stalls or dies after the first output is
resumed with one ``GET /v1/responses/{id}?stream=true&starting_after=N`` and the
agent gets its whole answer, each event once; without it the turn fails with the
``StreamStalled`` in its cause chain. The Agents SDK needs openai 3.x: it is installed in
the frameworks' environment (``requirements-frameworks.txt``), where it is required;
elsewhere the module skips. It runs on asyncio only, and its tracing is off, so nothing leaves loopback.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from _frameworks_support import framework

framework("agents")

from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, set_tracing_disabled

from hermes_transport import StreamPolicy, StreamStalled
from hermes_transport.testing import RESPONSES_PATH, FaultServer, Scenario

from _support import Flavor

pytestmark = pytest.mark.anyio

# Budgets far above a loopback event gap, far below the server's 30 s hold of a stall.
POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=5.0, retries=0)
# For a stall before the first output: the first-event budget is the one that fires.
FIRST_EVENT_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.5, retries=0)
# The 11 events of a healthy background stream, numbered 0 to 10 (5 and 6 are the text).
ALL_EVENTS = list(range(11))
# The Responses API's keepalive event (not in the SDK's event types): it repeats a number.
KEEPALIVE = {"keepalive"}
RESUMED = "resuming response"
NOT_BACKGROUND = "only a Responses stream created with background=True can be resumed"

# Faults of the creating connection after its 7th event (number 6, " world"), resumed healthy.
AFTER_OUTPUT = [
    pytest.param(Scenario.silent_after(7), id="silent"),
    pytest.param(Scenario.comments_after(7, interval=0.05), id="keepalives"),
    pytest.param(Scenario.dropped_after(7, mid_event=True), id="reset-mid-event"),
    pytest.param(Scenario.truncated(7), id="truncated"),
]


@pytest.fixture
def anyio_backend() -> str:
    """The Agents SDK runs on asyncio only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_tracing() -> None:
    """The Agents SDK's tracing stays off (it would export to the network)."""
    set_tracing_disabled(True)


def _settings(how: str, background: bool) -> ModelSettings:
    """Model settings that put ``"background": background`` in the request, one of two ways."""
    if not background:
        return ModelSettings()
    if how == "extra_args":
        return ModelSettings(extra_args={"background": True})
    return ModelSettings(extra_body={"background": True})


@pytest.fixture
async def agent_on(sdk_flavor: Flavor) -> AsyncIterator[Any]:
    """Builds agents on the fault server over a watchdog client of the flavor; closes them."""
    clients: list[openai.AsyncOpenAI] = []

    def build(
        server: FaultServer, settings: ModelSettings, policy: StreamPolicy = POLICY
    ) -> Agent[Any]:
        client = openai.AsyncOpenAI(
            base_url=server.base_url,
            api_key="x",
            max_retries=0,
            http_client=sdk_flavor.async_http_client_for(None, policy=policy),
        )
        clients.append(client)
        model = OpenAIResponsesModel("gpt-test", client)
        return Agent(name="demo", instructions="Say hello.", model=model, model_settings=settings)

    yield build
    for client in clients:
        await client.close()


async def _turn(agent: Agent[Any]) -> tuple[Any, list[int], str]:
    """Stream one turn: (final output, the sequence numbers of its raw events, their text).

    Keepalive events (they repeat the number before them) are left out.
    """
    numbers: list[int] = []
    text: list[str] = []
    result = Runner.run_streamed(agent, "hi")
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type not in KEEPALIVE:
            numbers.append(event.data.sequence_number)
            if event.data.type == "response.output_text.delta":
                text.append(event.data.delta)
    return result.final_output, numbers, "".join(text)


def _requests(server: FaultServer) -> list[tuple[str, str]]:
    return [(request.method, request.path) for request in server.requests]


def _background(server: FaultServer) -> object:
    """The "background" field of the first request's JSON body (None where absent)."""
    body = server.requests[0].json
    assert isinstance(body, dict)
    return body.get("background")


def _causes(exc: BaseException) -> list[BaseException]:
    chain = [exc]
    while (cause := chain[-1].__cause__) is not None:
        chain.append(cause)
    return chain


@pytest.mark.parametrize("how", ["extra_args", "extra_body"])
async def test_a_healthy_background_agent_turn_streams_once(
    agent_on: Any, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A healthy background turn gets "hello world" from one POST /v1/responses, every event once, and logs no resume."""
    caplog.set_level(logging.WARNING, logger="hermes_transport")
    with FaultServer(Scenario()) as server:
        output, numbers, text = await _turn(agent_on(server, _settings(how, background=True)))
        assert _requests(server) == [("POST", RESPONSES_PATH)]
        assert _background(server) is True
    assert (output, text, numbers) == ("hello world", "hello world", ALL_EVENTS)
    assert RESUMED not in caplog.text


@pytest.mark.parametrize("how", ["extra_args", "extra_body"])
async def test_a_background_agent_turn_that_stalls_after_its_first_output_is_resumed(
    agent_on: Any, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A background turn whose stream goes silent after " world" completes with "hello world": one POST, then one GET ...?stream=true&starting_after=6, each event once."""
    caplog.set_level(logging.WARNING, logger="hermes_transport")
    scenario = Scenario.stall_first(1, stall=Scenario.silent_after(7), then=Scenario())
    with FaultServer(scenario) as server:
        output, numbers, text = await _turn(agent_on(server, _settings(how, background=True)))
        requests = _requests(server)
    assert (output, text, numbers) == ("hello world", "hello world", ALL_EVENTS)
    assert len(requests) == 2
    assert requests[0] == ("POST", RESPONSES_PATH)
    method, path = requests[1]
    assert method == "GET"
    assert path.startswith(f"{RESPONSES_PATH}/resp_")
    assert path.endswith("?stream=true&starting_after=6")
    assert "after event 6" in caplog.text
    assert caplog.text.count(RESUMED) == 1


@pytest.mark.parametrize("fault", AFTER_OUTPUT)
async def test_every_kind_of_dead_connection_after_output_is_resumed_under_an_agent(
    agent_on: Any, fault: Scenario
) -> None:
    """Silence, keepalives only, a reset mid-event or a truncated body after " world": the agent's turn still completes once, from one resume after event 6."""
    scenario = Scenario.stall_first(1, stall=fault, then=Scenario())
    with FaultServer(scenario) as server:
        output, numbers, text = await _turn(agent_on(server, _settings("extra_args", True)))
        requests = _requests(server)
    assert (output, text, numbers) == ("hello world", "hello world", ALL_EVENTS)
    assert [method for method, _ in requests] == ["POST", "GET"]
    assert requests[1][1].endswith("?stream=true&starting_after=6")


async def test_a_background_agent_turn_that_stalls_before_its_first_output_is_resumed(
    agent_on: Any,
) -> None:
    """A background turn that goes silent after its preamble (events 0-4) is resumed after event 4 and completes with "hello world"."""
    scenario = Scenario.stall_first(1, stall=Scenario.silent_after(5), then=Scenario())
    with FaultServer(scenario) as server:
        agent = agent_on(server, _settings("extra_args", True), FIRST_EVENT_POLICY)
        output, numbers, text = await _turn(agent)
        requests = _requests(server)
    assert (output, text, numbers) == ("hello world", "hello world", ALL_EVENTS)
    assert [method for method, _ in requests] == ["POST", "GET"]
    assert requests[1][1].endswith("?stream=true&starting_after=4")


async def test_a_non_background_agent_turn_that_stalls_fails_with_stream_stalled_in_its_causes(
    agent_on: Any,
) -> None:
    """Without background=True a turn that stalls after its first output is not resumed: the agent raises the SDK's APITimeoutError, caused by a mid-stream StreamStalled that says why."""
    with FaultServer(Scenario.silent_after(7)) as server:
        agent = agent_on(server, _settings("extra_args", background=False))
        with pytest.raises(openai.APITimeoutError) as info:
            await _turn(agent)
        requests = _requests(server)
        assert _background(server) is None
    assert requests == [("POST", RESPONSES_PATH)]
    stalls = [cause for cause in _causes(info.value) if isinstance(cause, StreamStalled)]
    assert len(stalls) == 1
    assert stalls[0].stage == "mid_stream"
    assert NOT_BACKGROUND in str(stalls[0])
