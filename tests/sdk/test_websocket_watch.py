"""Responses over a WebSocket, watched per turn: budgets, stalls, interrupts, statistics.

Through the real SDK's ``responses.connect()`` (sync and async) against the fault
server's WebSocket endpoint, on every openai major that has it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    awatch_connection,
    watch_connection,
)
from hermes_transport.testing import FaultServer, Scenario

from _support import PROMPT
from _ws_support import BUDGET, POLICY, Driver, Drivers, creates, has_connect, types

if not has_connect():
    pytest.skip("this openai has no Responses WebSocket", allow_module_level=True)

SLOW = BUDGET + 2.0  # a stall is seen within its budget and this much more, on a busy machine


def test_healthy_turns_pass_through_whole_with_one_statistics_each(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """Two turns on one connection reach the caller event for event, each with its
    statistics: the Responses wire, over a WebSocket, completed."""
    driver = ws_drivers.open(server)
    for word in ("one", "two"):
        events = driver.turn(input=word)
        assert types(events)[0] == "response.created"
        assert types(events)[-1] == "response.completed"
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == (
            "hello world"
        )
    assert [s.outcome for s in driver.stats] == ["completed", "completed"]
    first = driver.stats[0]
    assert (first.wire, first.transport, first.method) == ("responses", "websocket", "WEBSOCKET")
    assert first.url == server.websocket_base_url + "/responses"
    assert first.model == "m"
    assert (first.attempts, first.resends, first.resumes) == (1, 0, 0)
    assert first.events == 6  # 2 deltas, 3 closing events, the completion
    assert first.first_output is not None
    assert first.first_event is not None
    assert first.first_event <= first.first_output <= first.duration
    assert (first.status, first.headers) == (None, None)
    assert len(creates(server)) == 2


def test_an_idle_connection_is_never_a_stall(server: FaultServer, ws_drivers: Drivers) -> None:
    """Between turns the connection has no deadline: an idle spell of three budgets
    neither cuts it nor counts against the next turn."""
    driver = ws_drivers.open(server)
    driver.turn()
    driver.idle(3 * BUDGET)
    assert types(driver.turn())[-1] == "response.completed"
    assert [s.outcome for s in driver.stats] == ["completed", "completed"]


def test_a_recv_waiting_between_turns_is_left_alone_until_interrupted(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A read with no turn under way waits past every budget; an interrupt then stops it
    at once, at stage between_turns, and reports no turn."""
    token = Interrupt()
    driver = ws_drivers.open(server, interrupt=token)
    driver.turn()
    timer = threading.Timer(3 * BUDGET, token.interrupt, args=("user pressed stop",))
    started = time.monotonic()
    timer.start()
    with pytest.raises(StreamInterrupted) as caught:
        driver.recv()
    assert time.monotonic() - started >= 3 * BUDGET
    assert caught.value.stage == "between_turns"
    assert caught.value.reason == "user pressed stop"
    assert [s.outcome for s in driver.stats] == ["completed"]


@pytest.mark.timing
@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(Scenario.thinking(3 * BUDGET, keepalive_interval=0.1), id="keepalives"),
        pytest.param(Scenario.thinking(3 * BUDGET), id="silence"),
    ],
)
def test_a_turn_without_output_in_its_budget_stalls_at_first_event(
    server: FaultServer, ws_drivers: Drivers, scenario: Scenario
) -> None:
    """Lifecycle events and keepalives are no output: a turn thinking past its first-event
    budget is re-sent (retries=1), then fails with StreamStalled saying what came."""
    server.scenario = scenario
    watch_policy = StreamPolicy(
        stale_timeout=BUDGET, first_event_timeout=BUDGET, retries=1, budget_rules=None
    )
    driver = ws_drivers.open(server, policy=watch_policy)
    driver.create()
    started = time.monotonic()
    with pytest.raises(StreamStalled) as caught:
        driver.rest()
    assert time.monotonic() - started < 2 * SLOW
    error = caught.value
    assert (error.stage, error.budget, error.attempts) == ("first_event", BUDGET, 2)
    assert "no output within 0.5 s of its response.create" in str(error)
    assert "preamble event(s)" in str(error)
    if scenario.keepalive_interval:
        assert "0 heartbeat(s)" not in str(error)
    assert len(creates(server)) == 2
    stats = driver.stats[-1]
    assert (stats.outcome, stats.stage, stats.resends, stats.attempts) == (
        "stalled",
        "first_event",
        1,
        2,
    )


@pytest.mark.timing
@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(POLICY, id="within-budget"),
        pytest.param(
            StreamPolicy(stale_timeout=BUDGET, first_event_timeout=None, budget_rules=None),
            id="first-event-unbounded",
        ),
    ],
)
def test_a_model_thinking_within_its_budget_is_not_cut(
    server: FaultServer, ws_drivers: Drivers, policy: StreamPolicy
) -> None:
    """A turn silent after its preamble for less than its first-event budget (or for long,
    with that budget off) completes, sent once."""
    think = BUDGET / 2 if policy is POLICY else 3 * BUDGET
    server.scenario = Scenario.thinking(think)
    driver = ws_drivers.open(server, policy=policy)
    assert types(driver.turn())[-1] == "response.completed"
    assert len(creates(server)) == 1
    assert driver.stats[-1].outcome == "completed"


@pytest.mark.timing
def test_a_turn_silent_after_output_stalls_mid_stream_and_is_not_re_sent(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """After its first output a turn has the stale budget; past it the connection is cut
    and the reader gets StreamStalled at mid_stream, with nothing sent again."""
    server.scenario = Scenario.silent_after(6)
    driver = ws_drivers.open(server)
    driver.create()
    started = time.monotonic()
    with pytest.raises(StreamStalled) as caught:
        driver.rest()
    assert BUDGET <= time.monotonic() - started < SLOW
    assert (caught.value.stage, caught.value.budget) == ("mid_stream", BUDGET)
    assert "after 2 output event(s)" in str(caught.value)
    assert len(creates(server)) == 1
    stats = driver.stats[-1]
    assert (stats.outcome, stats.stage, stats.events) == ("stalled", "mid_stream", 2)


def test_a_stall_wakes_a_recv_blocked_on_another_thread(server: FaultServer) -> None:
    """The cut comes from the watchdog thread: a reader blocked in recv() on its own thread
    wakes with StreamStalled, though no call of the owner's thread is under way."""
    server.scenario = Scenario.silent_after(6)
    driver = Driver("sync", server)
    try:
        driver.create()
        caught: list[BaseException] = []

        def read() -> None:
            try:
                driver.rest()
            except BaseException as exc:
                caught.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        reader.join(SLOW + 5)
        assert not reader.is_alive()
        assert isinstance(caught[0], StreamStalled)
    finally:
        driver.close()


def test_a_turn_sent_while_another_thread_waits_is_watched_for_that_reader(
    server: FaultServer,
) -> None:
    """A reader already waiting between turns when another thread sends a create gets the
    turn's events, and its stall as StreamStalled (not as a dropped connection)."""
    server.scenario = Scenario.silent_after(6)
    driver = Driver("sync", server)
    try:
        caught: list[BaseException] = []
        seen: list[str] = []

        def read() -> None:
            try:
                while True:
                    seen.append(driver.recv().type)
            except BaseException as exc:
                caught.append(exc)

        reader = threading.Thread(target=read)
        reader.start()
        time.sleep(0.2)  # the reader waits, with no turn under way
        driver.create()
        reader.join(SLOW + 5)
        assert not reader.is_alive()
        assert isinstance(caught[0], StreamStalled)
        assert caught[0].stage == "mid_stream"
        assert seen[0] == "response.created"
        assert driver.stats[-1].outcome == "stalled"
    finally:
        driver.close()


@pytest.mark.timing
@pytest.mark.parametrize("how", ["given", "bound"])
@pytest.mark.parametrize(
    ("scenario", "stage"),
    [
        pytest.param(Scenario.thinking(30), "first_event", id="thinking"),
        pytest.param(Scenario.silent_after(6), "mid_stream", id="after-output"),
    ],
)
def test_an_interrupt_stops_a_waiting_recv_at_once(
    server: FaultServer,
    ws_drivers: Drivers,
    how: str,
    scenario: Scenario,
    stage: str,
) -> None:
    """An Interrupt given to the connection, or bound around the read, stops it promptly
    with StreamInterrupted at the turn's stage; the next create opens a fresh connection."""
    server.scenario = scenario
    token = Interrupt()
    policy = StreamPolicy(stale_timeout=60, first_event_timeout=60, budget_rules=None)
    given = {"interrupt": token} if how == "given" else {}
    driver = ws_drivers.open(server, policy=policy, **given)
    driver.create()
    if stage == "mid_stream":
        while driver.recv().type != "response.output_text.delta":
            pass
    when: list[float] = []

    def stop() -> None:
        when.append(time.monotonic())
        token.interrupt("user pressed stop")

    threading.Timer(0.2, stop).start()
    with pytest.raises(StreamInterrupted) as caught, token.bind():
        driver.rest()
    assert time.monotonic() - when[0] < PROMPT
    assert (caught.value.stage, caught.value.reason) == (stage, "user pressed stop")
    assert (driver.stats[-1].outcome, driver.stats[-1].stage) == ("interrupted", stage)
    token.reset()
    server.scenario = Scenario()
    assert types(driver.turn())[-1] == "response.completed"


@pytest.mark.timing
def test_a_read_under_an_interrupted_token_fails_at_once(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """A read bound to a token that is already interrupted raises at once."""
    server.scenario = Scenario.thinking(30)
    driver = ws_drivers.open(server)
    driver.create()
    token = Interrupt()
    token.interrupt("stopped before")
    started = time.monotonic()
    with pytest.raises(StreamInterrupted) as caught, token.bind():
        driver.recv()
    assert time.monotonic() - started < PROMPT
    assert caught.value.reason == "stopped before"


def test_a_transient_error_before_output_is_re_sent_on_the_same_connection(
    server: FaultServer, ws_drivers: Drivers
) -> None:
    """An error event of a transient kind before any output is not handed up: the create
    is sent again, and the caller reads the healthy answer."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.error_in_stream("server_error"))
    driver = ws_drivers.open(server)
    events = driver.turn()
    assert "error" not in types(events)
    assert types(events)[-1] == "response.completed"
    assert len(creates(server)) == 2
    assert (driver.stats[-1].resends, driver.stats[-1].outcome) == (1, "completed")


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(Scenario.error_in_stream("invalid_prompt"), id="not-transient"),
        pytest.param(Scenario.error_in_stream("server_error", after_events=6), id="after-output"),
    ],
)
def test_other_error_events_end_the_turn_and_reach_the_caller(
    server: FaultServer, ws_drivers: Drivers, scenario: Scenario
) -> None:
    """An error event that is not transient, or comes after output, is handed up as it
    is; its turn ends with outcome error, and the connection serves the next turn."""
    server.scenario = scenario
    driver = ws_drivers.open(server)
    assert types(driver.turn())[-1] == "error"
    assert len(creates(server)) == 1
    assert driver.stats[-1].outcome == "error"
    assert "error event" in (driver.stats[-1].error or "")
    server.scenario = Scenario()
    assert types(driver.turn())[-1] == "response.completed"


def test_what_is_not_a_connection_is_refused_by_name() -> None:
    """Anything but what connect() returns (or its connection) is a TypeError naming it."""
    with pytest.raises(TypeError, match="got str"):
        watch_connection("ws://example")
    with pytest.raises(TypeError, match="got int"):
        awatch_connection(3)


def test_the_package_imports_without_websockets() -> None:
    """websockets is optional: the package imports without it, and a watched connection
    says which extra to install."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["websockets"] = None
        import hermes_transport
        from hermes_transport._sdk.websocket_link import closed_errors
        try:
            closed_errors()
        except ImportError as error:
            print(error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "hermes-transport[websocket]" in done.stdout
