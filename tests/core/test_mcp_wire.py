"""The mcp wire in the core: which requests are MCP calls, what their events mean, their budgets."""

from __future__ import annotations

import json
from typing import Any, Literal

import httpx
import pytest

from hermes_transport import (
    BudgetRules,
    ModelBudget,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    ToolBudget,
    stream_error,
)
from hermes_transport._core.asked import CHANNEL_BUDGETS, asked
from hermes_transport._core.errors import in_band_answer
from hermes_transport._core.mcp import (
    IN_BAND_CODE,
    IN_BAND_KEY,
    SAFE_METHODS,
    McpCall,
    answered_for,
    error_event,
    keep_answered,
    mcp_call,
    mcp_class,
)
from hermes_transport._core.sse import SSEScanner

from _support import events_read_one_by_one_up_to, rpc

# Pure: the same under every openai major.
pytestmark = pytest.mark.once

SESSION = {"mcp-session-id": "0123abcd"}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


CALL = rpc("tools/call", 7, params={"name": "search_web", "arguments": {"q": "x"}})


@pytest.mark.parametrize(
    ("http_method", "headers", "payload", "expected"),
    [
        ("POST", {}, CALL, McpCall("tools/call", 7, "search_web")),
        ("POST", {}, rpc("tools/list", "a-1"), McpCall("tools/list", "a-1")),
        ("POST", {}, rpc("initialize", 0), McpCall("initialize", 0)),
        ("POST", {}, rpc("tools/call", 3, params={"arguments": {}}), McpCall("tools/call", 3)),
        ("POST", {}, rpc("tools/call", 3, params={"name": ""}), McpCall("tools/call", 3)),
        ("POST", {}, rpc("notifications/initialized", None), None),
        ("POST", {}, rpc(None, 4, result={}), None),  # the client's answer to the server
        ("POST", {}, {**rpc("ping"), "jsonrpc": "1.0"}, None),
        ("POST", {}, {"method": "ping", "id": 1}, None),
        ("POST", {}, rpc("ping", True), None),
        ("POST", {}, rpc("ping", 1.5), None),
        ("POST", {}, rpc("ping", None), None),
        ("POST", {}, rpc("", 1), None),
        ("POST", {}, {**rpc("ping"), "method": 5}, None),
        ("POST", {}, None, None),
        ("PUT", {}, CALL, None),
        ("GET", SESSION, None, McpCall(None)),
        ("GET", {}, None, None),
        ("GET", {"mcp-session-id": ""}, None, None),
        ("DELETE", SESSION, None, None),
    ],
    ids=[
        "tool-call",
        "string-id",
        "initialize",
        "tool-call-without-name",
        "tool-call-empty-name",
        "notification",
        "client-answer",
        "other-jsonrpc-version",
        "no-jsonrpc",
        "boolean-id",
        "float-id",
        "null-id",
        "empty-method",
        "method-not-text",
        "no-body",
        "put",
        "channel",
        "get-without-session",
        "get-with-empty-session",
        "delete",
    ],
)
def test_a_request_is_an_mcp_call_only_as_json_rpc_or_the_channel(
    http_method: str, headers: dict[str, str], payload: dict[str, Any] | None, expected: object
) -> None:
    """A POST of a JSON-RPC 2.0 request (a method and a string or integer id) is an MCP call, and so is a GET carrying Mcp-Session-Id; nothing else is."""
    assert mcp_call(http_method, headers, payload) == expected


@pytest.mark.parametrize("method", sorted(SAFE_METHODS))
def test_methods_that_change_nothing_may_be_sent_again(method: str) -> None:
    """Only the methods that change nothing on the server may be re-sent after a stall."""
    assert McpCall(method, 1).resendable
    assert not McpCall(method, 1).channel


@pytest.mark.parametrize(
    "method", ["tools/call", "resources/subscribe", "logging/setLevel", "tasks/cancel", "x/y"]
)
def test_methods_with_effects_are_never_sent_again(method: str) -> None:
    """A tool call, and any method not known to change nothing, is never re-sent."""
    assert not McpCall(method, 1).resendable


def test_the_channel_is_never_sent_again() -> None:
    """The server's GET channel is the channel, and not a request to re-send."""
    assert McpCall(None).channel
    assert not McpCall(None).resendable


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (rpc(None, 7, result={"content": []}), "end"),
        (rpc(None, 7, error={"code": -32000, "message": "boom"}), "end"),
        (
            rpc("notifications/progress", None, params={"progressToken": 1, "progress": 1}),
            "output",
        ),
        (rpc("notifications/message", None, params={"level": "info", "data": "x"}), "output"),
        (rpc("notifications/resources/updated", None, params={"uri": "u"}), "output"),
        (rpc("ping", 9), "heartbeat"),
        (rpc("elicitation/create", 9, params={"message": "sure?"}), "preamble"),
        (rpc("sampling/createMessage", 9, params={}), "preamble"),
        (rpc("roots/list", 9), "preamble"),
        (rpc(None, 7), "output"),  # neither a result nor an error: no response
        ([rpc(None, 7, result={})], "output"),
        ("not json", "output"),
    ],
    ids=[
        "result",
        "error",
        "progress",
        "logging",
        "other-notification",
        "ping",
        "elicitation",
        "sampling",
        "roots",
        "id-alone",
        "batch",
        "not-json",
    ],
)
def test_each_mcp_message_has_its_class(message: object, expected: str) -> None:
    """The response ends a request's stream, notifications are progress, the server's ping is a heartbeat, a request to the client is none, and unreadable data is output."""
    data = message.encode() if isinstance(message, str) else json.dumps(message).encode()
    assert mcp_class(data) == expected


def sse(*messages: dict[str, Any], crlf: bool = False) -> bytes:
    """``messages`` as MCP's SSE events (``event: message``, one data line each)."""
    end = "\r\n" if crlf else "\n"
    return "".join(
        f"event: message{end}data: {json.dumps(m)}{end}{end}" for m in messages
    ).encode()


PROGRESS = rpc("notifications/progress", None, params={"progressToken": 1, "progress": 1})
PING = rpc("ping", 99)
ASK = rpc("elicitation/create", 98, params={"message": "sure?"})
RESULT = rpc(None, 7, result={"content": [{"type": "text", "text": "done"}], "isError": False})


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize("middle", [0, 10**9], ids=["skimmed", "read-one-by-one"])
@pytest.mark.parametrize(
    ("messages", "events", "done"),
    [
        ((PROGRESS, PING, PROGRESS, RESULT), 3, True),
        ((PING, PING), 0, False),
        ((ASK,), 0, False),
        ((PROGRESS, ASK), 1, False),
        ((RESULT, PROGRESS), 2, False),  # an end followed by an event is no end
        ((PROGRESS,) * 40 + (RESULT,), 41, True),
    ],
    ids=[
        "progress-then-result",
        "pings",
        "elicitation",
        "progress-then-ask",
        "result-then-more",
        "long",
    ],
)
def test_an_mcp_stream_counts_progress_and_ends_at_its_response(
    messages: tuple[dict[str, Any], ...], events: int, done: bool, middle: int, crlf: bool
) -> None:
    """On the mcp wire, notifications count as progress, pings and requests to the client do not, and the response as the read's last event ends the stream."""
    body = sse(*messages, crlf=crlf)
    with events_read_one_by_one_up_to(middle):
        scanner = SSEScanner((), "mcp")
        completed = scanner.feed(body)
    assert (completed > 0, scanner.done) == (events > 0, done)
    if scanner.counted:
        assert scanner.events == events


def test_mcp_budgets_are_mcps_defaults_where_no_one_set_them() -> None:
    """An MCP request gets 300 s to its first event and 120 s between events by default, and the model rules and prompt floors do not apply."""
    budgets = StreamPolicy().budgets_for(mcp=True, tool="o3-deep-research")
    assert (budgets.first_event, budgets.stale, budgets.source) == (300.0, 120.0, "")


@pytest.mark.parametrize(
    ("tool", "expected", "source"),
    [
        ("search_web", (30.0, 10.0), "tool 'search_web' matched rule 'search_*'"),
        ("SEARCH_news", (30.0, 10.0), "tool 'SEARCH_news' matched rule 'search_*'"),
        ("deep_research", (900.0, 120.0), "tool 'deep_research' matched rule 'deep*'"),
        ("calculator", (300.0, 120.0), ""),
        (None, (300.0, 120.0), ""),
    ],
)
def test_the_first_tool_rule_that_matches_sets_the_budgets_it_names(
    tool: str | None, expected: tuple[float, float], source: str
) -> None:
    """Tool rules are case-insensitive globs on the tool's name, tried in order; a budget a rule leaves out keeps MCP's default."""
    rules = BudgetRules(
        tools=(
            ToolBudget("search_*", first_event=30.0, stale=10.0),
            ToolBudget("deep*", first_event=900.0),
            ToolBudget("*", first_event=1.0, stale=1.0),
        )[: 2 if tool in (None, "calculator") else 3]
    )
    budgets = StreamPolicy(budget_rules=rules).budgets_for(mcp=True, tool=tool)
    assert (budgets.first_event, budgets.stale) == expected
    assert budgets.source == source


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"stale_timeout": 45.0}, (45.0, 45.0)),  # the first event follows the stale budget set
        ({"first_event_timeout": 20.0}, (20.0, 10.0)),
        ({"stale_timeout": None}, (None, None)),
        ({"first_event_timeout": 20.0, "stale_timeout": 50.0}, (20.0, 50.0)),
    ],
)
def test_what_the_user_sets_wins_over_tool_rules_and_mcp_defaults(
    settings: dict[str, Any], expected: tuple[float | None, float | None]
) -> None:
    """A budget the user set applies to MCP requests as it is, over the tool rules and MCP's defaults."""
    rules = BudgetRules(tools=(ToolBudget("*", first_event=5.0, stale=10.0),))
    budgets = StreamPolicy(budget_rules=rules, **settings).budgets_for(mcp=True, tool="any")
    assert (budgets.first_event, budgets.stale) == expected


def test_tool_rules_never_apply_to_models_nor_model_rules_to_tools() -> None:
    """A model's call is not matched against tool rules, and an MCP call not against model rules."""
    rules = BudgetRules(models=(ModelBudget("x*", 1.0, 1.0),), tools=(ToolBudget("x*", 2.0, 2.0),))
    policy = StreamPolicy(budget_rules=rules)
    assert policy.budgets_for("xylo").first_event == 1.0
    assert policy.budgets_for(mcp=True, tool="xylo").first_event == 2.0


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"tools": (ModelBudget("x"),)}, "BudgetRules.tools must hold ToolBudget rules"),
        ({"models": (ToolBudget("x"),)}, "BudgetRules.models must hold ModelBudget rules"),
        ({"tools": ("search_*",)}, "BudgetRules.tools must hold ToolBudget rules"),
    ],
)
def test_rules_of_the_wrong_kind_raise_naming_the_field(
    rules: dict[str, Any], message: str
) -> None:
    """A model rule among the tool rules, or the reverse, raises a ValueError naming the field."""
    with pytest.raises(ValueError, match=message):
        BudgetRules(**rules)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"pattern": ""}, "ToolBudget pattern must be a non-empty str"),
        ({"pattern": "x", "stale": -1.0}, "ToolBudget.stale"),
        ({"pattern": "x", "first_event": "soon"}, "ToolBudget.first_event"),
    ],
)
def test_a_bad_tool_rule_raises_naming_the_field(fields: dict[str, Any], message: str) -> None:
    """A tool rule with no pattern or a bad budget raises a ValueError naming the field."""
    with pytest.raises(ValueError, match=message):
        ToolBudget(**fields)


def test_tool_rules_show_in_the_repr_and_in_the_longest_budget() -> None:
    """Rules with tool rules say so in their repr, and their longest budget counts the tool rules."""
    rules = BudgetRules(tools=(ToolBudget("deep*", first_event=5000.0),))
    assert "tools=(ToolBudget(pattern='deep*'" in repr(rules)
    assert repr(BudgetRules()) == "BudgetRules()"
    assert rules.longest(first_event=True, stale=False) == 5000.0


def request(method: str, url: str, body: object = None, **headers: str) -> httpx.Request:
    """An httpx request with a JSON body (if any) and ``headers`` (underscores as dashes)."""
    named = {name.replace("_", "-"): value for name, value in headers.items()}
    return httpx.Request(method, url, json=body, headers=named)


@pytest.mark.parametrize("path", ["/mcp", "/v1/mcp/", "/proxy/servers/github"])
def test_a_tool_call_on_any_path_is_the_mcp_wire_with_its_budgets(path: str) -> None:
    """A JSON-RPC tool call is the mcp wire whatever its path, streaming, with MCP's budgets."""
    req = request("POST", f"http://h{path}", CALL, **ACCEPT)
    wire, streaming, payload, budgets, call = asked(req, req.read(), StreamPolicy())
    assert (wire, streaming, payload, call) == (
        "mcp",
        True,
        CALL,
        McpCall("tools/call", 7, "search_web"),
    )
    assert (budgets.first_event, budgets.stale) == (300.0, 120.0)


def test_the_servers_channel_is_never_cut_for_silence() -> None:
    """The GET channel carrying Mcp-Session-Id is the mcp wire with no budget at all."""
    req = request("GET", "http://h/mcp", accept="text/event-stream", mcp_session_id="s1")
    assert asked(req, b"", StreamPolicy()) == ("mcp", True, None, CHANNEL_BUDGETS, McpCall(None))
    assert (CHANNEL_BUDGETS.first_event, CHANNEL_BUDGETS.stale) == (None, None)


def test_a_json_rpc_body_to_a_model_path_keeps_the_models_wire() -> None:
    """A model wire's path decides its wire even if its body looks like JSON-RPC."""
    req = request("POST", "http://h/v1/chat/completions", {**CALL, "stream": True}, **ACCEPT)
    wire, streaming, _payload, _budgets, call = asked(req, req.read(), StreamPolicy())
    assert (wire, streaming, call) == ("chat_completions", True, None)


def stalled(stage: Literal["first_event", "mid_stream"] = "first_event") -> StreamStalled:
    """A stall the watch might answer in band."""
    return StreamStalled("stream stalled: test", stage=stage, budget=1.0, elapsed=1.0, attempts=1)


def test_the_error_event_is_a_json_rpc_error_for_the_request_that_ends_its_stream() -> None:
    """What the watch writes in the server's place is one message event: a JSON-RPC error for the request's id, our data under our key, which ends the request's stream."""
    event = error_event(7, "stream stalled: no event", {"stage": "mid_stream"})
    assert event.startswith(b"event: message\ndata: ")
    assert event.endswith(b"\n\n")
    assert json.loads(event.split(b"data: ", 1)[1]) == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": IN_BAND_CODE,
            "message": "stream stalled: no event",
            "data": {IN_BAND_KEY: {"stage": "mid_stream"}},
        },
    }
    scanner = SSEScanner((), "mcp")
    scanner.feed(sse(PROGRESS) + event)
    assert scanner.done


class ClientError(Exception):
    """An MCP client's error for a request: its JSON-RPC error's data on ``error.data``."""

    def __init__(self, data: object) -> None:
        super().__init__("failed")
        self.error = type("ErrorData", (), {"data": data})()


def test_an_answered_error_is_found_again_from_the_clients_error_while_kept() -> None:
    """The error the watch answered in band is found from the client's error by the key written with it; the latest ones are kept, the oldest forgotten."""
    error = stalled()
    answer = in_band_answer(McpCall("tools/call", 1), error)
    assert answer is not None
    data = json.loads(answer.split(b"data: ", 1)[1])["error"]["data"][IN_BAND_KEY]
    assert (data["error"], data["stage"]) == ("StreamStalled", "first_event")
    assert answered_for(ClientError({IN_BAND_KEY: data})) is error
    assert stream_error(ClientError({IN_BAND_KEY: data})) is error
    for _ in range(2000):
        keep_answered(stalled())
    assert answered_for(ClientError({IN_BAND_KEY: data})) is None


@pytest.mark.parametrize(
    "data",
    [None, "x", {}, {IN_BAND_KEY: "k"}, {IN_BAND_KEY: {"key": 5}}, {IN_BAND_KEY: {"key": "no"}}],
)
def test_a_client_error_without_our_key_is_not_ours(data: object) -> None:
    """A client error whose data does not name one of our answers is none of ours."""
    assert answered_for(ClientError(data)) is None
    assert answered_for(ValueError("plain")) is None


def test_only_our_errors_on_calls_answered_in_band_are_answered() -> None:
    """A stall or interrupt of a call answered in band is answered; any other error, or a call not answered in band, is raised."""
    call = McpCall("tools/call", 3, "x")
    answer = in_band_answer(call, stalled("mid_stream"))
    assert answer is not None
    assert answer.startswith(b"event: message\ndata: ")
    assert in_band_answer(call, StreamInterrupted("stop")) is not None
    assert in_band_answer(call, ValueError("boom")) is None
    assert in_band_answer(None, stalled()) is None
