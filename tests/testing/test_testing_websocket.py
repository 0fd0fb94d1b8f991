"""The fault server's WebSocket endpoint for the Responses API, read through the real SDK.

``client.responses.connect()`` of the openai SDK, sync and async, unwatched, against
``FaultServer.websocket_base_url``; the raw ``websockets`` connection under it
(``conn._connection``) where a read must time out; a bare ``websockets`` client for a
handshake the SDK never makes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import openai
import pytest
import websockets.sync.client
from websockets.exceptions import ConnectionClosed, ConnectionClosedError, InvalidStatus

from hermes_transport.testing import FaultServer, RecordedRequest, Scenario

from _support import run_bounded

if TYPE_CHECKING:  # openai 3.x only; the module is collected under every major
    from openai.resources.responses.responses import ResponsesConnection

# The fault server's wire under the openai 3.x SDK's WebSocket client (the newest major):
# run with the newest only.
pytestmark = pytest.mark.once

# websockets reads the *_proxy variables by default: a loopback server needs none.
OPTIONS: Any = {"proxy": None}
QUIET = 0.3  # a read that must time out waits this long
TERMINAL = {"response.completed", "response.failed", "response.incomplete", "error"}


@pytest.fixture
def sdk(server: FaultServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(
        base_url=server.base_url,
        websocket_base_url=server.websocket_base_url,
        api_key="x",
        max_retries=0,
        timeout=10.0,
    ) as client:
        yield client


def connect(sdk: openai.OpenAI) -> Any:
    """The SDK's connection manager on the server's endpoint, without any proxy."""
    return sdk.responses.connect(websocket_connection_options=OPTIONS)


def frame(conn: ResponsesConnection, timeout: float = 5.0) -> dict[str, Any]:
    """The next raw frame, parsed; TimeoutError if none comes within ``timeout``."""
    data = conn._connection.recv(timeout=timeout, decode=False)
    parsed: dict[str, Any] = json.loads(data)
    return parsed


def turn(conn: ResponsesConnection) -> list[dict[str, Any]]:
    """Send a ``response.create`` and read the raw frames up to its terminal one."""
    conn.response.create(model="m", input="hi")
    frames = [frame(conn)]
    while frames[-1]["type"] not in TERMINAL:
        frames.append(frame(conn))
    return frames


def creates(server: FaultServer) -> list[RecordedRequest]:
    return [r for r in server.requests if r.method == "WEBSOCKET"]


def test_a_healthy_turn_sends_the_sse_wire_events_as_frames(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """A healthy turn's events, parsed by the SDK, are the SSE wire's, in order, ending completed."""
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        events = [conn.recv()]
        while events[-1].type != "response.completed":
            events.append(conn.recv())
    with sdk.responses.create(model="m", input="hi", stream=True) as stream:
        sse = [event.type for event in stream]
    assert [event.type for event in events] == sse
    assert [getattr(event, "sequence_number", None) for event in events] == list(range(len(sse)))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "hello world"


def test_the_frames_are_exactly_the_sse_data_payloads(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """Each frame is the JSON the SSE wire puts in ``data:`` (its id, time and usage aside)."""
    with connect(sdk) as conn:
        frames = turn(conn)
    with sdk.responses.create(model="m", input="hi", stream=True) as stream:
        for _ in stream:
            pass
    body = b"".join(data for _, data in server.sent[-1].writes).decode()
    sse = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: ")]

    def scrub(event: dict[str, Any]) -> str:
        if "response" in event:  # the body differs (usage), and maybe the second
            event = {**event, "response": {**event["response"], "created_at": 0, "usage": 0}}
        return json.dumps(event).replace("hermes1", "hermes0")

    assert [scrub(f) for f in frames] == [scrub(e) for e in sse]
    assert len(frames) == 10


def test_two_turns_share_one_connection_and_are_recorded_as_attempts(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """Two turns on one connection both complete and are recorded with attempts 0 and 1."""
    with connect(sdk) as conn:
        first, second = turn(conn), turn(conn)
    assert first[-1]["type"] == second[-1]["type"] == "response.completed"
    assert first[-1]["response"]["id"] != second[-1]["response"]["id"]
    recorded = creates(server)
    assert [r.attempt for r in recorded] == [0, 1]
    assert recorded[0].path == "/v1/responses"
    assert recorded[0].stream is True
    assert recorded[0].json == {"type": "response.create", "model": "m", "input": "hi"}
    assert recorded[0].headers["authorization"] == "Bearer x"
    assert server.connections_opened == 0  # the WebSocket has a port of its own


def test_a_turn_is_kept_for_retrieval_over_http(server: FaultServer, sdk: openai.OpenAI) -> None:
    """The response a turn created is retrieved over HTTP as completed."""
    with connect(sdk) as conn:
        response_id = turn(conn)[-1]["response"]["id"]
    retrieved = sdk.responses.retrieve(response_id)
    assert retrieved.status == "completed"
    assert retrieved.output_text == "hello world"


def test_the_async_sdk_runs_two_turns_on_one_connection(server: FaultServer) -> None:
    """The async SDK's connection gets two complete turns, each with its own response."""

    async def main() -> list[str]:
        async with openai.AsyncOpenAI(
            base_url=server.base_url,
            websocket_base_url=server.websocket_base_url,
            api_key="x",
            max_retries=0,
        ) as client:
            async with client.responses.connect(websocket_connection_options=OPTIONS) as conn:
                kinds: list[str] = []
                for _ in range(2):
                    await conn.response.create(model="m", input="hi")
                    event = await conn.recv()
                    kinds.append(event.type)
                    while event.type != "response.completed":
                        event = await conn.recv()
                        kinds.append(event.type)
                return kinds

    kinds = run_bounded(main)
    assert kinds.count("response.created") == kinds.count("response.completed") == 2
    assert [r.attempt for r in creates(server)] == [0, 1]


@pytest.mark.parametrize("interval", [None, 0.1])
def test_thinking_delays_the_first_output(
    server: FaultServer, sdk: openai.OpenAI, interval: float | None
) -> None:
    """think keeps the turn silent (or sends only keepalive frames) before its first output."""
    server.scenario = Scenario.thinking(0.5, keepalive_interval=interval)
    with connect(sdk) as conn:
        started = time.monotonic()
        conn.response.create(model="m", input="hi")
        arrivals: list[tuple[float, str]] = []
        while not arrivals or arrivals[-1][1] != "response.completed":
            kind = frame(conn)["type"]
            arrivals.append((time.monotonic(), kind))
    first = next(at for at, kind in arrivals if kind == "response.output_text.delta")
    assert first - started >= 0.45
    keepalives = [kind for _, kind in arrivals if kind == "keepalive"]
    assert (len(keepalives) >= 3) if interval else (keepalives == [])


def test_a_stall_after_output_sends_nothing_more(server: FaultServer, sdk: openai.OpenAI) -> None:
    """After the stall's events, a read with a timeout times out."""
    server.scenario = Scenario.silent_after(4)
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        kinds = [frame(conn)["type"] for _ in range(4)]
        with pytest.raises(TimeoutError):
            frame(conn, QUIET)
    assert kinds[-1] == "response.content_part.added"


def test_keepalive_only_sends_numbered_keepalive_frames(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """After the stall's events, only keepalive frames arrive, numbered on."""
    server.scenario = Scenario.comments_after(2, interval=0.05)
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        frames = [frame(conn) for _ in range(6)]
    assert [f["type"] for f in frames[2:]] == ["keepalive"] * 4
    assert [f["sequence_number"] for f in frames] == list(range(6))


def test_a_stall_ends_with_an_abrupt_close_after_hold(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """When the hold is over, the server closes the connection without a close frame."""
    server.scenario = Scenario(stall_after_events=1, hold=0.2)
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        assert frame(conn)["type"] == "response.created"
        with pytest.raises(ConnectionClosedError) as raised:
            frame(conn)
    assert raised.value.rcvd is None


def test_an_error_event_fails_the_turn_and_keeps_the_connection(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """error_event sends the wire's error frame in place of the rest; the next turn works."""
    server.scenario = Scenario.error_in_stream("server_error", after_events=2)
    with connect(sdk) as conn:
        failed = turn(conn)
        server.scenario = Scenario()
        healthy = turn(conn)
    assert [f["type"] for f in failed] == ["response.created", "response.in_progress", "error"]
    assert failed[-1]["error"]["code"] == "server_error"
    assert healthy[-1]["type"] == "response.completed"


def test_an_error_status_is_an_error_frame_read_by_the_sdk(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """A status other than 200 is one ``error`` frame with that status; the connection stays."""
    server.scenario = Scenario(status=429, message="slow down", retry_after=2)
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        event = conn.recv()
        server.scenario = Scenario()
        assert turn(conn)[-1]["type"] == "response.completed"
    assert event.type == "error"
    assert event.status == 429
    assert event.error.message == "slow down"
    assert event.error.headers == {"retry-after": "2"}
    assert server.sent[0].status == 429


def test_end_after_events_ends_the_turn_and_keeps_the_connection(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """end_after_events stops the turn's frames there; the next turn is answered in full."""
    server.scenario = Scenario(end_after_events=3)
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        kinds = [frame(conn)["type"] for _ in range(3)]
        with pytest.raises(TimeoutError):
            frame(conn, QUIET)
        server.scenario = Scenario()
        assert turn(conn)[-1]["type"] == "response.completed"
    assert kinds[-1] == "response.output_item.added"


def test_a_dropped_connection_raises_connection_closed_error(
    server: FaultServer, sdk: openai.OpenAI
) -> None:
    """drop_after_events sends that many frames, then the SDK's recv raises ConnectionClosedError."""
    server.scenario = Scenario.dropped_after(2)
    with connect(sdk) as conn:
        conn.response.create(model="m", input="hi")
        kinds = [conn.recv().type for _ in range(2)]
        with pytest.raises(ConnectionClosedError):
            conn.recv()
    assert kinds == ["response.created", "response.in_progress"]


def test_another_path_is_refused_with_404(server: FaultServer) -> None:
    """A handshake on any path not ending in /responses is answered 404."""
    with pytest.raises(InvalidStatus) as refused:
        websockets.sync.client.connect(server.websocket_base_url + "/chat", proxy=None)
    assert refused.value.response.status_code == 404


def test_a_frame_that_is_no_create_gets_an_error_frame(server: FaultServer) -> None:
    """A frame that is not a response.create is no attempt and gets a 400 error frame."""
    url = server.websocket_base_url + "/responses"
    with websockets.sync.client.connect(url, proxy=None) as ws:
        ws.send("not json")
        answer = json.loads(ws.recv(timeout=5.0))
    assert answer["type"] == "error"
    assert answer["status"] == 400
    assert [r.attempt for r in creates(server)] == [-1]


def test_stopping_with_connections_open_returns_promptly() -> None:
    """stop() ends a stalled turn and an idle connection at once, closing both."""
    server = FaultServer(Scenario.silent_after(1)).start()
    try:
        with (
            openai.OpenAI(
                base_url=server.base_url,
                websocket_base_url=server.websocket_base_url,
                api_key="x",
            ) as client,
            connect(client) as stalled,
            connect(client) as idle,
        ):
            stalled.response.create(model="m", input="hi")
            assert frame(stalled)["type"] == "response.created"
            started = time.monotonic()
            server.stop()
            took = time.monotonic() - started
            for conn in (stalled, idle):
                with pytest.raises(ConnectionClosed):
                    frame(conn)
    finally:
        server.stop()
    assert took < 2.0


def test_the_endpoint_needs_a_started_server() -> None:
    """Before start() there is no endpoint to give."""
    with pytest.raises(RuntimeError, match="not started"):
        _ = FaultServer().websocket_base_url


def test_the_package_imports_without_websockets_and_names_the_extra() -> None:
    """Without websockets the package imports; the endpoint raises ImportError naming the extra."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["websockets"] = None
        import hermes_transport.testing
        with hermes_transport.testing.FaultServer() as server:
            try:
                _ = server.websocket_base_url
            except ImportError as error:
                print(error)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "pip install 'hermes-transport[websocket]'" in done.stdout
