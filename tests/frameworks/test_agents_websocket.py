"""The OpenAI Agents SDK's Responses WebSocket mode on a watched connection.

The SDK (``OpenAIResponsesWSModel``, ``OpenAIProvider(use_responses_websocket=True)``)
opens its own ``websockets.asyncio`` connection in ``_open_websocket_connection`` (no
factory hook, not ``client.responses.connect()``) and drives it with ``send``, ``recv``,
``close``, ``state`` and ``transport``. The recipe overrides that method to return
``awatch_websocket(connection, reopen=...)``, the SDK's own opening as ``reopen``. Against
the fault server's WebSocket endpoint: a healthy run; a turn silent after output fails
within its stale budget with our ``StreamStalled`` (the SDK's own wait is its client's
read timeout per frame, 600 s by default); a turn silent before output is sent again on a
fresh connection and the run succeeds; an ``Interrupt`` ends a thinking run at once, and
the next run opens a fresh connection. Pinned trap: the SDK's per-frame read timeout
(its client's) wraps the watched ``recv`` and cannot tell a model thinking from a stall,
so the recipe's client has none.
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

import openai
import pytest

from _frameworks_support import framework

framework("agents")

from agents import Agent, Runner, set_tracing_disabled
from agents.models.openai_responses import OpenAIResponsesWSModel

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    awatch_websocket,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _support import answered_in_turn
from _ws_support import creates

pytestmark = pytest.mark.anyio

# A turn may think 5 s behind keepalives; after output, 0.5 s of silence is a stall.
AGENTS_WS_POLICY = StreamPolicy(first_event_timeout=5.0, stale_timeout=0.5, retries=1)
AGENTS_WS_PROMPT = 1.0  # an interrupt is prompt within this, on two busy cores
AGENTS_WS_REASON = "user pressed stop"


@pytest.fixture
def anyio_backend() -> str:
    """The Agents SDK's WebSocket model is asyncio only."""
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """websockets reads the *_proxy variables: the loopback server needs none."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    set_tracing_disabled(True)


class WatchedWSModel(OpenAIResponsesWSModel):  # type: ignore[misc]
    """The recipe: the SDK's own connection, watched, and its own opening as ``reopen``."""

    policy = AGENTS_WS_POLICY
    interrupt: Interrupt | None = None
    stats: list[StreamStats]

    async def _open_websocket_connection(
        self, ws_url: str, headers: Any, *, connect_timeout: float | None
    ) -> Any:
        opened = functools.partial(
            super()._open_websocket_connection, ws_url, headers, connect_timeout=connect_timeout
        )
        return awatch_websocket(
            await opened(),
            policy=self.policy,
            interrupt=self.interrupt,
            on_stats=self.stats.append,
            reopen=opened,
        )


def watched_model(
    server: FaultServer, *, interrupt: Interrupt | None = None, **client: Any
) -> WatchedWSModel:
    client.setdefault("timeout", None)  # the SDK's per-frame read timeout: off (see the trap)
    aclient = openai.AsyncOpenAI(
        base_url=server.base_url,
        websocket_base_url=server.websocket_base_url,
        api_key="x",
        max_retries=0,
        **client,
    )
    model = WatchedWSModel("gpt-4o", aclient)
    model.interrupt = interrupt
    model.stats = []
    return model


def agent(model: Any) -> Agent[Any]:
    return Agent(name="helper", instructions="be brief", model=model)


async def test_a_healthy_run_goes_through_the_watched_connection(server: FaultServer) -> None:
    """Two runs on one model share its watched connection; each turn has its statistics."""
    model = watched_model(server)
    try:
        for _ in range(2):
            result = await Runner.run(agent(model), "hi")
            assert result.final_output == "hello world"
    finally:
        await model.close()
    assert [(s.outcome, s.transport, s.wire) for s in model.stats] == [
        ("completed", "websocket", "responses")
    ] * 2
    assert len(creates(server)) == 2


@pytest.mark.timing
async def test_a_turn_silent_after_output_fails_within_its_budget(server: FaultServer) -> None:
    """A turn silent after its first output is cut after the stale budget; the run fails
    with our StreamStalled, sent once."""
    server.scenario = Scenario.silent_after(6)
    model = watched_model(server)
    started = time.monotonic()
    try:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - the SDK may wrap it
            await Runner.run(agent(model), "hi")
    finally:
        await model.close()
    assert time.monotonic() - started < AGENTS_WS_POLICY.stale_budget + 3  # type: ignore[operator]
    stalled = stream_error(caught.value)
    assert isinstance(stalled, StreamStalled)
    assert stalled.stage == "mid_stream"
    assert len(creates(server)) == 1
    assert model.stats[-1].outcome == "stalled"


async def test_a_turn_silent_before_output_is_sent_again_on_a_fresh_connection(
    server: FaultServer,
) -> None:
    """A turn that stalls before any output (its connection cut) is sent again on a
    connection the SDK's own opening makes, and the run succeeds."""
    server.scenario = answered_in_turn(Scenario.silent_before_headers())
    model = watched_model(server)
    model.policy = StreamPolicy(first_event_timeout=0.5, stale_timeout=0.5, retries=1)
    try:
        result = await Runner.run(agent(model), "hi")
    finally:
        await model.close()
    assert result.final_output == "hello world"
    assert len(creates(server)) == 2
    assert (model.stats[-1].outcome, model.stats[-1].resends) == ("completed", 1)


@pytest.mark.timing
async def test_a_model_thinking_within_its_budget_is_not_cut(server: FaultServer) -> None:
    """A turn thinking silently within its first-event budget goes on; the trap: the
    SDK's own per-frame read timeout, shorter than the thinking, ends it (pinned with a
    1 s client timeout), and any frame, a keepalive too, would restart it."""
    server.scenario = Scenario.thinking(1.5)
    model = watched_model(server)
    try:
        assert (await Runner.run(agent(model), "hi")).final_output == "hello world"
    finally:
        await model.close()
    bare = OpenAIResponsesWSModel(
        "gpt-4o",
        openai.AsyncOpenAI(
            base_url=server.base_url,
            websocket_base_url=server.websocket_base_url,
            api_key="x",
            max_retries=0,
            timeout=1.0,
        ),
    )
    try:
        with pytest.raises(TimeoutError, match="receive timed out"):
            await Runner.run(agent(bare), "hi")
    finally:
        await bare.close()


@pytest.mark.timing
async def test_an_interrupt_ends_a_thinking_run_at_once(server: FaultServer) -> None:
    """An Interrupt given to the watched connection ends a run waiting for its model at
    once with StreamInterrupted; after a reset, the next run opens a fresh connection."""
    server.scenario = Scenario.thinking(30)
    token = Interrupt()
    model = watched_model(server, interrupt=token)
    when: list[float] = []

    def stop() -> None:
        while not creates(server):
            time.sleep(0.01)
        time.sleep(0.2)
        when.append(time.monotonic())
        token.interrupt(AGENTS_WS_REASON)

    threading.Thread(target=stop, daemon=True).start()
    try:
        with pytest.raises(Exception) as caught:  # noqa: PT011 - the SDK may wrap it
            await Runner.run(agent(model), "hi")
        assert time.monotonic() - when[0] < AGENTS_WS_PROMPT
        interrupted = stream_error(caught.value)
        assert isinstance(interrupted, StreamInterrupted)
        assert interrupted.reason == AGENTS_WS_REASON
        token.reset()
        server.scenario = Scenario()
        assert (await Runner.run(agent(model), "again")).final_output == "hello world"
    finally:
        await model.close()
