"""Watched Responses WebSocket turns that died: re-sent, resumed over HTTP, or raised.

Through the real SDK's ``responses.connect()`` (sync and async) against the fault server:
a turn cut before its output is sent again on a fresh connection, opened as the SDK opens
them (not a create chained with ``store=false``, and not where no connection can be
opened); a background turn cut after output goes on over HTTP from its last event; a
bare ``websockets`` connection (``awatch_websocket``) re-sends with the ``reopen`` given.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from typing import Any

import openai
import pytest
import websockets.asyncio.client
from websockets.exceptions import ConnectionClosedError

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    awatch_websocket,
)
from hermes_transport.testing import FaultServer, Scenario

from _support import PROMPT, answered_in_turn
from _ws_support import BUDGET, POLICY, Driver, Drivers, creates, has_connect, types

if not has_connect():
    pytest.skip("this openai has no Responses WebSocket", allow_module_level=True)

SLOW = BUDGET + 2.0
# A background turn: its events numbered 0 created, 1 queued, 2 in_progress, 3 and 4 the
# openings, then one delta per piece.
PIECES = ("a", "b", "c", "d")


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(Scenario.silent_before_headers(), id="silent"),
        pytest.param(Scenario.thinking(30, keepalive_interval=0.1), id="keepalives-only"),
        pytest.param(Scenario.dropped_after(2), id="dropped"),
    ],
)
def test_a_turn_cut_before_output_is_sent_again_on_a_fresh_connection(
    server: FaultServer, ws_drivers: Drivers, first: Scenario
) -> None:
    """A turn that stalls (or whose connection drops) before any output is sent again on
    a fresh connection; the caller reads one whole answer, and the connection goes on."""
    server.scenario = answered_in_turn(first)
    driver = ws_drivers.open(server)
    events = driver.turn()
    assert types(events)[0] == "response.created"
    assert types(events)[-1] == "response.completed"
    assert types(events).count("response.created") == 1
    assert len(creates(server)) == 2
    stats = driver.stats[-1]
    assert (stats.outcome, stats.attempts, stats.resends) == ("completed", 2, 1)
    assert types(driver.turn())[-1] == "response.completed"


def test_a_create_chained_to_a_response_kept_by_the_connection_is_not_re_sent(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A create with previous_response_id and store=false names a response only the dead
    connection knew: its stall is raised, saying so, with nothing sent again."""
    server.scenario = Scenario.silent_before_headers()
    driver = ws_drivers.open(server)
    driver.create(previous_response_id="resp_earlier", store=False)
    with pytest.raises(StreamStalled, match="chained") as caught:
        driver.rest()
    assert caught.value.attempts == 1
    assert len(creates(server)) == 1


@pytest.mark.parametrize(
    ("connect", "sent"),
    [
        pytest.param({}, 1, id="plain"),
        pytest.param({"on_reconnecting": lambda event: None}, 2, id="on-reconnecting"),
    ],
)
def test_an_entered_connection_re_sends_only_if_it_can_reconnect(
    server: FaultServer, ws_drivers: Drivers, connect: dict[str, Any], sent: int
) -> None:
    """Given the connection rather than the manager, the watch opens a fresh one only
    through the SDK's own reconnect (set up by on_reconnecting); else it says why not."""
    server.scenario = answered_in_turn(Scenario.silent_before_headers())
    driver = ws_drivers.open(server, entered=True, connect=connect)
    driver.create()
    if sent == 1:
        with pytest.raises(StreamStalled, match="no way to open another"):
            driver.rest()
    else:
        assert types(driver.rest())[-1] == "response.completed"
    assert len(creates(server)) == sent


def test_a_background_turn_cut_after_output_is_resumed_over_http(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A background turn that stalls after output goes on over HTTP from the last event
    the caller got: every event once, in order, then the connection serves the next turn."""
    stall = Scenario(content=PIECES, stall_after_events=7)
    server.scenario = answered_in_turn(stall)
    driver = ws_drivers.open(server)
    events = driver.turn(background=True)
    numbers = [event.sequence_number for event in events]
    assert numbers == list(range(len(numbers)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "abcd"
    resume = [r for r in server.requests if r.method == "GET"]
    assert len(resume) == 1
    assert resume[0].path.endswith("?stream=true&starting_after=6")
    assert resume[0].headers["authorization"] == "Bearer x"
    stats = driver.stats[-1]
    assert (stats.outcome, stats.attempts, stats.resumes) == ("completed", 2, 1)
    server.scenario = Scenario()
    assert types(driver.turn())[-1] == "response.completed"
    assert len(creates(server)) == 2


def test_a_refused_resume_raises_the_stall_saying_why(ws_drivers: Drivers) -> None:
    """A resume the server refuses (the response is too old to stream) fails the turn
    with its stall, which names the refusal."""
    with FaultServer(resume_window=0.2) as server:
        server.scenario = answered_in_turn(Scenario(content=PIECES, stall_after_events=7))
        driver = ws_drivers.open(server)
        driver.create(background=True)
        with pytest.raises(StreamStalled, match="not resumed: HTTP 400") as caught:
            driver.rest()
        assert caught.value.stage == "mid_stream"
        assert driver.stats[-1].outcome == "stalled"


def test_a_connection_dropped_after_output_raises_as_the_sdk_would(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A turn (not in the background) whose connection drops after output is not sent
    again: its reader gets websockets' own error, and the turn ends as an error."""
    server.scenario = Scenario.dropped_after(6)
    driver = ws_drivers.open(server)
    driver.create()
    with pytest.raises(ConnectionClosedError):
        driver.rest()
    assert len(creates(server)) == 1
    assert driver.stats[-1].outcome == "error"
    assert "ConnectionClosedError" in (driver.stats[-1].error or "")


@pytest.mark.timing
def test_an_interrupted_background_turn_is_left_resumable(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """An interrupt of a background turn cuts its connection but cancels nothing: its
    response streams on over HTTP from where the caller stopped, to its end."""
    server.scenario = answered_in_turn(Scenario(content=PIECES, stall_after_events=7))
    token = Interrupt()
    policy = StreamPolicy(stale_timeout=60, first_event_timeout=60, budget_rules=None)
    driver = ws_drivers.open(server, interrupt=token, policy=policy)
    driver.create(background=True)
    events = [driver.recv() for _ in range(7)]
    threading.Timer(0.2, token.interrupt, args=("user pressed stop",)).start()
    started = time.monotonic()
    with pytest.raises(StreamInterrupted):
        driver.recv()
    assert time.monotonic() - started < 0.2 + PROMPT
    assert not [r for r in server.requests if r.path.endswith("/cancel")]
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        rest = list(
            client.responses.retrieve(events[0].response.id, stream=True, starting_after=6)
        )
    shown = [*events, *rest]
    assert [e.sequence_number for e in shown] == list(range(len(shown)))
    assert "".join(e.delta for e in shown if e.type == "response.output_text.delta") == "abcd"
    assert rest[-1].type == "response.completed"


def test_a_create_after_a_cut_no_one_read_opens_a_fresh_connection(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A connection cut by an interrupt while nobody read is not written to again: the
    next create (the token reset) goes on a fresh connection, and the cut turn ends
    interrupted."""
    server.scenario = Scenario.thinking(30)
    token = Interrupt()
    driver = ws_drivers.open(server, interrupt=token)
    driver.create()
    deadline = time.monotonic() + 10
    while not creates(server) and time.monotonic() < deadline:
        time.sleep(0.01)
    token.interrupt("user pressed stop")
    token.reset()
    server.scenario = Scenario()
    assert types(driver.turn())[-1] == "response.completed"
    assert [s.outcome for s in driver.stats] == ["interrupted", "completed"]


def test_a_create_under_an_interrupted_token_sends_nothing(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A create sent while a bound token is interrupted fails at once, unsent."""
    driver = ws_drivers.open(server)
    token = Interrupt()
    token.interrupt("stopped before")
    with pytest.raises(StreamInterrupted) as caught, token.bind():
        driver.create()
    assert caught.value.stage == "before_sending"
    assert creates(server) == []
    assert types(driver.turn())[-1] == "response.completed"


def test_creates_sent_behind_a_cut_turn_are_sent_again_with_it(
    server: FaultServer, ws_drivers: Drivers, caplog: pytest.LogCaptureFixture
) -> None:
    """Two creates sent at once, the first cut before its output: on the fresh connection
    both are sent again, in order (one re-send, not a second stall for the other), and
    each answer reaches its own turn."""
    caplog.set_level(logging.WARNING, logger="hermes_transport")
    server.scenario = answered_in_turn(Scenario.silent_before_headers())
    driver = ws_drivers.open(server)
    driver.create(input="one")
    driver.create(input="two")
    first, second = driver.rest(), driver.rest()
    assert types(first)[-1] == types(second)[-1] == "response.completed"
    assert first[0].response.id != second[0].response.id
    assert [s.outcome for s in driver.stats] == ["completed", "completed"]
    # The server reads a connection's frames one turn at a time: "two" had not been read
    # when the first connection was cut.
    assert [json_input(r.body) for r in creates(server)] == ["one", "one", "two"]
    assert sum("sending it again" in r.getMessage() for r in caplog.records) == 1


def json_input(body: bytes) -> object:
    return json.loads(body).get("input")


def test_close_from_another_thread_ends_a_waiting_read_and_opens_nothing(
    server: FaultServer,
) -> None:
    """Closing the connection while another thread waits in recv() ends that read (the
    iteration stops) and opens no fresh connection."""
    server.scenario = Scenario.thinking(30)
    driver = Driver("sync", server)
    driver.create()
    seen: list[object] = []
    reader = threading.Thread(target=lambda: seen.extend(driver.conn))
    reader.start()
    time.sleep(0.3)
    driver.close()
    reader.join(10)
    assert not reader.is_alive()
    assert len(creates(server)) == 1
    assert driver.stats[-1].outcome == "closed"


def test_a_fresh_connection_that_fails_ends_the_turn_saying_so(server: FaultServer) -> None:
    """When the fresh connection for a re-send cannot be opened, the turn's stall says
    so, with the failure as its cause, and no turn is left behind."""
    url = server.websocket_base_url + "/responses"
    stats: list[StreamStats] = []

    async def refused() -> Any:
        raise ConnectionRefusedError("no more connections")

    async def run() -> None:
        bare = await websockets.asyncio.client.connect(url, proxy=None)
        ws = awatch_websocket(bare, policy=POLICY, on_stats=stats.append, reopen=refused)
        server.scenario = Scenario.silent_before_headers()
        await ws.send(json.dumps({"type": "response.create", "model": "m", "input": "hi"}))
        with pytest.raises(StreamStalled, match="a fresh connection failed") as caught:
            await ws.recv()
        assert isinstance(caught.value.__cause__, ConnectionRefusedError)
        await ws.close()

    asyncio.run(run())
    assert [s.outcome for s in stats] == ["stalled"]


async def drain(ws: Any) -> None:
    """Read until the read fails."""
    while True:
        await ws.recv()


def test_awatch_websocket_watches_a_bare_connection_and_re_sends_with_reopen(
    server: FaultServer,
) -> None:
    """A bare websockets connection keeps its face (text in, text out) under the watch;
    a stall before output is sent again on the connection ``reopen`` opens, and a stall
    after output is raised."""
    url = server.websocket_base_url + "/responses"
    stats: list[StreamStats] = []

    async def opened() -> Any:
        return await websockets.asyncio.client.connect(url, proxy=None)

    async def run() -> None:
        ws = awatch_websocket(await opened(), policy=POLICY, on_stats=stats.append, reopen=opened)
        create = json.dumps({"type": "response.create", "model": "m", "input": "hi"})
        server.scenario = answered_in_turn(Scenario.silent_before_headers())
        await ws.send(create)
        frames = [json.loads(await ws.recv())]
        while frames[-1]["type"] != "response.completed":
            frames.append(json.loads(await ws.recv()))
        assert ws.state.name == "OPEN"
        server.scenario = Scenario.silent_after(6)
        await ws.send(create)
        with pytest.raises(StreamStalled):
            await drain(ws)
        await ws.close()

    asyncio.run(run())
    assert [(s.outcome, s.resends) for s in stats] == [("completed", 1), ("stalled", 0)]
    assert len(creates(server)) == 3


def test_awatch_websocket_refuses_what_is_not_a_connection() -> None:
    """Anything but a websockets client connection is a TypeError naming it."""
    with pytest.raises(TypeError, match="got str"):
        awatch_websocket("ws://example")
