"""The fault server's MCP wire (streamable HTTP), read through the real ``mcp`` SDK client.

The SDK's ``streamable_http_client`` on an httpx2 client, with a ``ClientSession`` on top;
plain httpx2 requests for what the SDK never sends (a wrong or missing session, a bare
GET). No watchdog transport here: this is the server's wire as the SDK sees it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx2
import pytest
from mcp import ClientSession, MCPError, types
from mcp.client.streamable_http import streamable_http_client

from hermes_transport.testing import MCP_TOOL_NAME, FaultServer, RecordedRequest, Scenario

from _support import run_bounded

# The fault server's wire under the mcp SDK, no openai SDK: the same under every openai
# major, so run with the newest only.
pytestmark = pytest.mark.once

BOUND = 20.0  # no test may hang: every asyncio.run is bounded by this
STALL = 0.5  # for calls that must time out
CRLF = [pytest.param(False, id="lf"), pytest.param(True, id="crlf")]
CONTENTS = [
    pytest.param(("hello", " world"), id="two"),
    pytest.param(("é", "\u2028", '😀 {"}'), id="unicode"),
    pytest.param((), id="empty"),
]
Progress = tuple[float, float | None, str | None]


def mcp_url(server: FaultServer, prefix: str = "") -> str:
    """The server's MCP endpoint (below a proxy's ``prefix``)."""
    return server.base_url.removesuffix("/v1") + prefix + "/mcp"


@contextlib.asynccontextmanager
async def session(
    server: FaultServer, prefix: str = "", **kwargs: Any
) -> AsyncIterator[ClientSession]:
    """An initialized SDK session on the server's MCP endpoint; closes all it opened."""
    url = mcp_url(server, prefix)
    async with (
        httpx2.AsyncClient() as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, **kwargs) as client,
    ):
        await client.initialize()
        yield client


async def call(
    server: FaultServer, into: list[Progress] | None = None, **kwargs: Any
) -> types.CallToolResult:
    """Call the tool once in a new session, keeping its progress in ``into`` if given."""

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        assert into is not None
        into.append((progress, total, message))

    callback = on_progress if into is not None else None
    failed: MCPError | None = None
    async with session(server) as client:
        try:  # raised out of the session, it would come wrapped in an exception group
            result = await client.call_tool(
                MCP_TOOL_NAME, {}, progress_callback=callback, **kwargs
            )
        except MCPError as error:
            failed = error
    if failed is not None:
        raise failed
    assert isinstance(result, types.CallToolResult)
    return result


def text(result: types.CallToolResult) -> str:
    """The text of a tool result's one content."""
    [content] = result.content
    assert isinstance(content, types.TextContent)
    return content.text


def calls(server: FaultServer) -> list[RecordedRequest]:
    """The tools/call requests the server received."""
    return [
        r
        for r in server.requests
        if isinstance(r.json, dict) and r.json.get("method") == "tools/call"
    ]


def call_writes(server: FaultServer, index: int = -1) -> list[tuple[float, bytes]]:
    """The body writes of a tools/call answer (the last one by default)."""
    request = calls(server)[index]
    [sent] = [s for s in server.sent if s.request is request]
    return list(sent.writes)


def events(body: bytes) -> list[dict[str, str]]:
    """The SSE events of a body, each as its fields (comments left out)."""
    found = []
    for block in re.split(rb"\r?\n\r?\n", body):
        lines = [line for line in re.split(rb"\r?\n", block) if line and not line.startswith(b":")]
        if lines:
            found.append(dict(line.decode().split(": ", 1) for line in lines))
    return found


def keepalive(crlf: bool) -> bytes:
    return b": keepalive\r\n\r\n" if crlf else b": keepalive\n\n"


def initialize(client: httpx2.Client, url: str) -> str:
    """Open a session with plain httpx2; its id."""
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    }
    message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}
    response = client.post(url, json=message)
    assert response.status_code == 200
    return response.headers["mcp-session-id"]


# --- sessions and the JSON methods --------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "/proxy/tools"])
def test_initialize_and_list_tools_keep_one_session(server: FaultServer, prefix: str) -> None:
    """initialize echoes the client's protocol version, list_tools lists the one tool, and every later request carries the session id the handshake gave."""

    async def main() -> tuple[types.InitializeResult, types.ListToolsResult]:
        async with session(server, prefix) as client:
            return client.initialize_result or await client.initialize(), await client.list_tools()

    init, tools = run_bounded(main)
    [first, *later] = [r for r in server.requests if r.method != "GET"]
    assert isinstance(first.json, dict)
    assert first.json["method"] == "initialize"
    assert init.protocol_version == first.json["params"]["protocolVersion"]
    assert init.server_info.name == "hermes-fault-server"
    assert init.capabilities.tools is not None
    assert [tool.name for tool in tools.tools] == [MCP_TOOL_NAME]
    assert tools.tools[0].input_schema == {"type": "object", "properties": {}}
    ids = {r.headers.get("mcp-session-id") for r in later}
    assert len(ids) == 1
    [session_id] = ids
    assert session_id is not None
    assert re.fullmatch(r"[0-9a-f]{32}", session_id)
    assert all(r.path == prefix + "/mcp" for r in server.requests)
    assert {r.attempt for r in server.requests} == {-1}
    assert [r.method for r in later][-1] == "DELETE"


def test_each_initialize_opens_a_new_session(server: FaultServer) -> None:
    """Two handshakes get two different session ids, and ping answers an empty result."""

    async def main() -> None:
        for _ in range(2):
            async with session(server) as client:
                await client.send_ping()

    run_bounded(main)
    ids = {r.headers["mcp-session-id"] for r in server.requests if r.method == "DELETE"}
    assert len(ids) == 2


@pytest.mark.parametrize(
    ("method", "headers", "status"),
    [
        ("POST", {}, 400),
        ("POST", {"mcp-session-id": "0" * 32}, 404),
        ("GET", {}, 400),
        ("GET", {"mcp-session-id": "0" * 32}, 404),
        ("DELETE", {}, 400),
        ("DELETE", {"mcp-session-id": "0" * 32}, 404),
    ],
)
def test_a_missing_session_is_400_and_an_unknown_one_404(
    server: FaultServer, method: str, headers: dict[str, str], status: int
) -> None:
    """A request without a session id answers 400, with an unknown one 404, each a JSON-RPC error with the request's id or null."""
    message = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "work"}}
    with httpx2.Client(timeout=BOUND) as client:
        initialize(client, mcp_url(server))
        body = json.dumps(message).encode() if method == "POST" else None
        response = client.request(method, mcp_url(server), content=body, headers=headers)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()
    assert error["id"] == (7 if method == "POST" else None)
    assert error["error"]["code"] == -32600
    assert all(r.attempt == -1 for r in server.requests)


def test_delete_ends_the_session(server: FaultServer) -> None:
    """DELETE answers 200 with an empty body, after which the session id is unknown: 404."""
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    with httpx2.Client(timeout=BOUND) as client:
        headers = {"mcp-session-id": initialize(client, mcp_url(server))}
        assert client.post(mcp_url(server), json=ping, headers=headers).json()["result"] == {}
        ended = client.delete(mcp_url(server), headers=headers)
        after = client.post(mcp_url(server), json=ping, headers=headers)
    assert (ended.status_code, ended.content) == (200, b"")
    assert after.status_code == 404


@pytest.mark.parametrize(
    "message",
    [
        pytest.param({"jsonrpc": "2.0", "method": "notifications/initialized"}, id="notification"),
        pytest.param({"jsonrpc": "2.0", "id": 9, "result": {}}, id="response"),
    ],
)
def test_a_notification_or_a_response_gets_202(
    server: FaultServer, message: dict[str, Any]
) -> None:
    """A notification or a client's response answers 202 Accepted with no body."""
    with httpx2.Client(timeout=BOUND) as client:
        headers = {"mcp-session-id": initialize(client, mcp_url(server))}
        response = client.post(mcp_url(server), json=message, headers=headers)
    assert (response.status_code, response.content) == (202, b"")


@pytest.mark.parametrize("method", ["resources/list", "server/discover", "prompts/get"])
def test_another_method_is_not_found(server: FaultServer, method: str) -> None:
    """A method other than ping, tools/list and tools/call answers JSON-RPC error -32601 with HTTP 200."""
    with httpx2.Client(timeout=BOUND) as client:
        headers = {"mcp-session-id": initialize(client, mcp_url(server))}
        message = {"jsonrpc": "2.0", "id": "x", "method": method}
        response = client.post(mcp_url(server), json=message, headers=headers)
    assert response.status_code == 200
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": "x",
        "error": {"code": -32601, "message": "Method not found"},
    }


def test_a_body_that_is_no_json_object_is_400(server: FaultServer) -> None:
    """A POST whose body is not one JSON-RPC object answers 400 with a parse error."""
    with httpx2.Client(timeout=BOUND) as client:
        response = client.post(mcp_url(server), content=b"[not json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


# --- tools/call ---------------------------------------------------------------------------


@pytest.mark.parametrize("content", CONTENTS)
@pytest.mark.parametrize("crlf", CRLF)
def test_call_tool_reports_each_piece_as_progress_then_the_joined_text(
    server: FaultServer, crlf: bool, content: tuple[str, ...]
) -> None:
    """With a progress callback, each content piece arrives as progress i + 1 of len(content), in order, and the result is the joined text."""
    server.scenario = Scenario(content=content, crlf=crlf)
    progress: list[Progress] = []
    result = run_bounded(lambda: call(server, progress))
    total = float(len(content))
    assert progress == [(i + 1.0, total, piece) for i, piece in enumerate(content)]
    assert text(result) == "".join(content)
    assert result.is_error is False
    request = calls(server)[-1]
    assert (request.attempt, request.stream) == (0, True)
    writes = [data for _, data in call_writes(server)]
    assert len(writes) == len(content) + 1
    newline = b"\r\n" if crlf else b"\n"
    assert all(w.startswith(b"event: message" + newline + b"data: ") for w in writes)
    assert all(w.endswith(newline * 2) and w.count(newline) == 3 for w in writes)


@pytest.mark.parametrize("crlf", CRLF)
def test_call_tool_without_progress_gets_the_pieces_as_log_messages(
    server: FaultServer, crlf: bool
) -> None:
    """Without a progress token, each piece arrives as an info notifications/message, in order, before the result."""
    server.scenario = Scenario(content=("a", "b", "c"), crlf=crlf)
    logs: list[types.LoggingMessageNotificationParams] = []

    async def log(params: types.LoggingMessageNotificationParams) -> None:
        logs.append(params)

    async def main() -> types.CallToolResult:
        async with session(server, logging_callback=log) as client:
            result = await client.call_tool(MCP_TOOL_NAME, {})
        assert isinstance(result, types.CallToolResult)
        return result

    assert text(run_bounded(main)) == "abc"
    assert [(p.level, p.logger, p.data) for p in logs] == [
        ("info", "hermes-fault-server", piece) for piece in "abc"
    ]


def test_mcp_json_answers_the_result_alone_as_json(server: FaultServer) -> None:
    """With mcp_json, tools/call answers the response alone, one JSON body, and no progress arrives."""
    server.scenario = Scenario(content=("x", "y"), mcp_json=True)
    progress: list[Progress] = []
    result = run_bounded(lambda: call(server, progress))
    assert text(result) == "xy"
    assert progress == []
    request = calls(server)[-1]
    assert (request.attempt, request.stream) == (0, False)
    [(_, body)] = call_writes(server)
    assert isinstance(request.json, dict)
    assert json.loads(body) == {
        "jsonrpc": "2.0",
        "id": request.json["id"],
        "result": {"content": [{"type": "text", "text": "xy"}], "isError": False},
    }


def test_mcp_event_ids_number_every_event_of_a_stream(server: FaultServer) -> None:
    """With mcp_event_ids each event has an id line, {stream}-{index}, the stream id new per answer."""
    server.scenario = Scenario(mcp_event_ids=True, crlf=True)
    for _ in range(2):
        assert text(run_bounded(lambda: call(server, []))) == "hello world"
    streams = set()
    for index in (0, 1):
        found = events(b"".join(data for _, data in call_writes(server, index)))
        assert [e["event"] for e in found] == ["message"] * 3
        stream = {e["id"].rsplit("-", 1)[0] for e in found}
        assert [e["id"].rsplit("-", 1)[1] for e in found] == ["0", "1", "2"]
        [stream_id] = stream
        assert re.fullmatch(r"[0-9a-f]{32}", stream_id)
        streams.add(stream_id)
    assert len(streams) == 2


@pytest.mark.parametrize("interval", [None, 0.1])
def test_think_delays_the_first_event(server: FaultServer, interval: float | None) -> None:
    """think keeps the stream silent (or sends only keepalive comments) before its first event."""
    server.scenario = Scenario(think=0.6, keepalive_interval=interval)
    arrived: list[float] = []
    started = time.monotonic()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        arrived.append(time.monotonic())

    async def main() -> types.CallToolResult:
        nonlocal started
        async with session(server) as client:
            started = time.monotonic()
            result = await client.call_tool(MCP_TOOL_NAME, {}, progress_callback=on_progress)
        assert isinstance(result, types.CallToolResult)
        return result

    assert text(run_bounded(main)) == "hello world"
    assert len(arrived) == 2
    assert 0.55 <= arrived[0] - started < 10
    request = calls(server)[-1]
    writes = call_writes(server)
    comments = [data for _, data in writes if data.startswith(b":")]
    first_event = next(at for at, data in writes if not data.startswith(b":"))
    assert first_event - request.time >= 0.55
    if interval is None:
        assert comments == []
    else:
        assert len(comments) >= 3
        assert set(comments) == {keepalive(False)}


def test_a_stall_after_the_first_progress_makes_the_call_time_out(server: FaultServer) -> None:
    """stall_after_events=1 sends the first progress, then nothing: the SDK's call times out after it arrived."""
    server.scenario = Scenario(stall_after_events=1, hold=5.0)
    progress: list[Progress] = []
    started = time.monotonic()
    with pytest.raises(MCPError, match="timed out"):
        run_bounded(lambda: call(server, progress, read_timeout_seconds=STALL))
    assert progress == [(1.0, 2.0, "hello")]
    assert time.monotonic() - started < 10
    assert len(call_writes(server)) == 1


@pytest.mark.parametrize("crlf", CRLF)
def test_keepalive_comments_during_a_hold_are_sent_byte_for_byte(
    server: FaultServer, crlf: bool
) -> None:
    """A stall with comment_interval sends the first event, then only : keepalive comments, until hold ends it and the call fails."""
    server.scenario = Scenario(stall_after_events=1, comment_interval=0.05, hold=0.5, crlf=crlf)
    progress: list[Progress] = []
    with pytest.raises(MCPError):
        run_bounded(lambda: call(server, progress))
    assert progress == [(1.0, 2.0, "hello")]
    first, *rest = [data for _, data in call_writes(server)]
    assert first.startswith(b"event: message")
    assert len(rest) >= 4
    assert set(rest) == {keepalive(crlf)}


@pytest.mark.parametrize("status", [503, 429, 400])
def test_an_error_status_is_reported_by_the_sdk(server: FaultServer, status: int) -> None:
    """A status other than 200 answers that HTTP status with a JSON-RPC error the SDK raises with the scenario's message."""
    server.scenario = Scenario.error(status, message="overloaded, try later")
    with pytest.raises(MCPError, match="overloaded, try later"):
        run_bounded(lambda: call(server, []))
    request = calls(server)[-1]
    [sent] = [s for s in server.sent if s.request is request]
    assert sent.status == status
    assert json.loads(sent.writes[0][1])["error"]["code"] == -32603


def test_stall_first_faults_only_the_first_tool_call(server: FaultServer) -> None:
    """tools/call requests are the attempts: stall_first(1) fails the first call, the second succeeds, and only they count."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.error(503))

    async def main() -> list[str]:
        outcomes = []
        async with session(server) as client:
            for _ in range(2):
                try:
                    result = await client.call_tool(MCP_TOOL_NAME, {})
                except MCPError:
                    outcomes.append("failed")
                else:
                    assert isinstance(result, types.CallToolResult)
                    outcomes.append(text(result))
        return outcomes

    assert run_bounded(main) == ["failed", "hello world"]
    assert [r.attempt for r in calls(server)] == [0, 1]
    assert all(r.attempt == -1 for r in server.requests if r not in calls(server))


def test_a_stall_before_headers_times_the_call_out(server: FaultServer) -> None:
    """stall_before_headers sends nothing at all, and the SDK's call times out."""
    server.scenario = Scenario(stall_before_headers=True, hold=5.0)
    with pytest.raises(MCPError, match="timed out"):
        run_bounded(lambda: call(server, [], read_timeout_seconds=STALL))
    request = calls(server)[-1]
    [sent] = [s for s in server.sent if s.request is request]
    assert sent.status is None


@pytest.mark.parametrize(
    "scenario",
    [
        pytest.param(Scenario.truncated(1), id="truncated"),
        pytest.param(Scenario.dropped_after(1), id="dropped"),
        pytest.param(Scenario.dropped_after(1, mid_event=True), id="dropped-mid-event"),
        pytest.param(Scenario.error_in_stream(after_events=1, message="boom"), id="error-event"),
    ],
)
def test_a_stream_cut_after_the_first_progress_fails_the_call(
    server: FaultServer, scenario: Scenario
) -> None:
    """Truncated, reset or failed after one event, the stream delivers the first progress and the SDK's call fails."""
    server.scenario = scenario
    progress: list[Progress] = []
    with pytest.raises(MCPError):
        run_bounded(lambda: call(server, progress))
    assert progress == [(1.0, 2.0, "hello")]


def test_a_cut_stream_with_event_ids_is_resumed_by_the_sdk_with_the_rest(
    server: FaultServer,
) -> None:
    """With event ids the SDK resumes a cut stream with a GET and Last-Event-ID, an attempt of its own, answered with the events after that one: the call completes, each progress once."""
    server.scenario = Scenario.stall_first(
        1,
        stall=dataclasses.replace(Scenario.truncated(1), mcp_event_ids=True),
        then=Scenario(mcp_event_ids=True),
    )
    progress: list[Progress] = []
    result = run_bounded(lambda: call(server, progress))
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == ["hello world"]
    assert progress == [(1.0, 2.0, "hello"), (2.0, 2.0, " world")]
    [resume] = [r for r in server.requests if "last-event-id" in r.headers]
    assert (resume.method, resume.attempt) == ("GET", 1)
    assert resume.headers["last-event-id"].endswith("-0")


@pytest.mark.parametrize(
    "last", ["0123456789abcdef-0", "no-dash", "x-y"], ids=["unknown-stream", "no-index", "bad"]
)
def test_a_resume_of_no_stream_the_server_kept_answers_404(server: FaultServer, last: str) -> None:
    """A GET whose Last-Event-ID names no stream the server kept is answered 404 with a JSON-RPC error."""
    url = server.base_url.removesuffix("/v1") + "/mcp"
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}},
    }
    with httpx2.Client(timeout=5.0) as http:
        opened = http.post(url, json=hello)
        headers = {"mcp-session-id": opened.headers["mcp-session-id"], "last-event-id": last}
        answer = http.get(url, headers=headers)
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == -32600
    assert (
        last in answer.json()["error"]["message"]
        or "no stream" in answer.json()["error"]["message"]
    )


@pytest.mark.parametrize(
    ("scenario", "writes"),
    [
        pytest.param(Scenario(content=("a",) * 5, write_size=10_000), 1, id="write-size"),
        pytest.param(Scenario(content=("a",) * 5), 6, id="one-write-per-event"),
    ],
)
def test_write_size_coalesces_the_events(
    server: FaultServer, scenario: Scenario, writes: int
) -> None:
    """write_size gathers the stream's events into fewer writes, which the SDK reads the same."""
    server.scenario = scenario
    progress: list[Progress] = []
    assert text(run_bounded(lambda: call(server, progress))) == "aaaaa"
    assert len(progress) == 5
    assert len(call_writes(server)) == writes


def test_event_interval_spaces_the_events(server: FaultServer) -> None:
    """event_interval pauses between the stream's events."""
    server.scenario = Scenario(content=("a", "b"), event_interval=0.2)
    assert text(run_bounded(lambda: call(server, []))) == "ab"
    times = [at for at, _ in call_writes(server)]
    assert all(b - a >= 0.18 for a, b in itertools.pairwise(times))


# --- the GET channel ----------------------------------------------------------------------


def test_the_get_channel_stays_silent(server: FaultServer) -> None:
    """The session's GET answers an SSE stream that sends no byte."""
    timeout = httpx2.Timeout(BOUND, read=0.3)
    with httpx2.Client(timeout=timeout) as client:
        headers = {"mcp-session-id": initialize(client, mcp_url(server))}
        with client.stream("GET", mcp_url(server), headers=headers) as response:
            assert response.status_code == 200
            assert response.headers["content-type"] == "text/event-stream"
            with pytest.raises(httpx2.ReadTimeout):
                next(response.iter_raw())
    [channel] = [s for s in server.sent if s.request.method == "GET"]
    assert channel.writes == ()


@pytest.mark.parametrize("crlf", CRLF)
def test_the_get_channel_sends_only_comments_until_hold_ends_it(
    server: FaultServer, crlf: bool
) -> None:
    """With comment_interval the GET channel sends only : keepalive comments, then hangs up after hold."""
    server.scenario = Scenario(stall_after_events=0, comment_interval=0.05, hold=0.4, crlf=crlf)
    received = b""
    with httpx2.Client(timeout=BOUND) as client:
        headers = {"mcp-session-id": initialize(client, mcp_url(server))}
        with client.stream("GET", mcp_url(server), headers=headers) as response:
            with contextlib.suppress(httpx2.RemoteProtocolError):
                for data in response.iter_raw():
                    received += data
    [channel] = [s for s in server.sent if s.request.method == "GET"]
    assert len(channel.writes) >= 3
    assert {data for _, data in channel.writes} == {keepalive(crlf)}
    assert received == b"".join(data for _, data in channel.writes)
    assert channel.request.attempt == -1


# --- the Scenario fields ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mcp_json", "mcp_event_ids", "mcp_elicit"])
@pytest.mark.parametrize("value", [1, "yes", None])
def test_the_mcp_fields_must_be_bools(name: str, value: object) -> None:
    """mcp_json, mcp_event_ids and mcp_elicit refuse anything but a bool."""
    with pytest.raises(ValueError, match=f"Scenario.{name} must be a bool"):
        Scenario(**{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("ids", [False, True], ids=["no-ids", "event-ids"])
def test_an_elicitation_opens_the_stream_and_the_rest_waits_for_the_answer(
    server: FaultServer, ids: bool
) -> None:
    """With mcp_elicit the tools/call stream opens with an elicitation/create request of the server's and sends the rest only once the client's answer came."""
    server.scenario = Scenario(mcp_elicit=True, mcp_event_ids=ids)
    asked: list[types.ElicitRequestParams] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        await anyio.sleep(0.5)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def main() -> types.CallToolResult:
        async with session(server, elicitation_callback=on_elicit) as client:
            return await client.call_tool(MCP_TOOL_NAME, {})

    result = run_bounded(main)
    assert [c.text for c in result.content if isinstance(c, types.TextContent)] == ["hello world"]
    assert [p.message for p in asked] == ["Which one?"]
    writes = call_writes(server)
    assert b"elicitation/create" in writes[0][1]
    assert writes[1][0] - writes[0][0] >= 0.45  # the answer took 0.5 s
    [answer] = [
        r
        for r in server.requests
        if isinstance(r.json, dict) and "result" in r.json and "method" not in r.json
    ]
    assert isinstance(answer.json, dict)
    assert answer.json["result"]["content"] == {"answer": "blue"}


def test_the_cancels_the_server_hears_are_kept_in_order(server: FaultServer) -> None:
    """Every notifications/cancelled the server hears is kept, in order, by the request id it names (the SDK sends one for a call whose task is cancelled)."""
    server.scenario = Scenario(think=30.0, content=("a",))

    async def main() -> None:
        async with session(server) as client:
            with anyio.move_on_after(0.3):
                await client.call_tool(MCP_TOOL_NAME, {})
            await client.list_tools()

    run_bounded(main)
    [tool_call] = calls(server)
    assert isinstance(tool_call.json, dict)
    assert server.mcp_cancelled == [tool_call.json["id"]]
