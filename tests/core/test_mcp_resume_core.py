"""The core of MCP's resumes and cancels: the ids a tracked stream gives, the server's asks
and their answers, the requests that resume or cancel a stream, and which requests have one."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from hermes_transport import StreamPolicy
from hermes_transport._core.asked import asked, resumable_of
from hermes_transport._core.mcp import (
    SAFE_METHODS,
    SERVER_REQUESTS,
    McpCall,
    answer_id,
    mcp_class,
    server_request_id,
)
from hermes_transport._core.mcp_asks import WaitingAsks
from hermes_transport._core.mcp_resume import McpResumable
from hermes_transport._core.progress import ProgressMeter
from hermes_transport._core.resume import CANCEL_TIMEOUT, Resumable, resumable_for
from hermes_transport._core.sse import SSEScanner
from hermes_transport._core.sse_lines import ID_LIMIT
from hermes_transport._core.wire_paths import Wire

from _support import MIDDLES, events_read_one_by_one_up_to, rpc

# Pure: the same under every openai major.
pytestmark = pytest.mark.once


def data(message: dict[str, Any]) -> str:
    """``message`` as one SSE data line."""
    return "data: " + json.dumps(message)


PROGRESS = data(rpc("notifications/progress", None, params={"progressToken": 1, "progress": 1}))
PING = data(rpc("ping", 99))
RESULT = data(rpc(None, 7, result={"content": [{"type": "text", "text": "done"}]}))
FAILED = data(rpc(None, 7, error={"code": -32000, "message": "boom"}))
ELICIT = data(rpc("elicitation/create", 98, params={"message": "sure?"}))
SAMPLE = data(rpc("sampling/createMessage", "s-1", params={}))
ROOTS = data(rpc("roots/list", 0))
LONG_ID = "id: " + "x" * 2000

ENDINGS = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}


def body(*events: tuple[str, ...], ending: str = "\n", bom: bool = False) -> bytes:
    """``events`` (each its lines) as an SSE body with ``ending`` after every line and a
    blank line after every event."""
    text = "".join(ending.join(lines) + ending + ending for lines in events)
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode()


# Per stream: its events, then what a tracked mcp scanner says of them: (last_id, asks,
# finished, events, heartbeats).
Tracked = tuple[bytes | None, list[str | int | None], bool, int, int]
STREAMS: list[tuple[tuple[tuple[str, ...], ...], Tracked]] = [
    (
        (("id: 1", "event: message", PROGRESS), ("id: 2", "event: message", RESULT)),
        (b"2", [], True, 2, 0),
    ),
    (((PROGRESS,), (RESULT,)), (None, [], True, 2, 0)),
    ((("id: 3", PROGRESS), ("id", PROGRESS)), (b"", [], False, 2, 0)),
    ((("id: 3", PROGRESS), ("id:", PROGRESS)), (b"", [], False, 2, 0)),
    ((("id:7", PROGRESS),), (b"7", [], False, 1, 0)),
    ((("id:  7", PROGRESS),), (b" 7", [], False, 1, 0)),
    ((("id: a:b: c", PROGRESS),), (b"a:b: c", [], False, 1, 0)),
    ((("id: 1", PROGRESS), ("id: a\0b", PROGRESS)), (b"1", [], False, 2, 0)),
    ((("id: 1", PROGRESS), (LONG_ID, PROGRESS)), (None, [], False, 2, 0)),
    (((LONG_ID, PROGRESS), ("id: 9", PROGRESS)), (b"9", [], False, 2, 0)),
    ((("id: 1", "id: 2", PROGRESS),), (b"2", [], False, 1, 0)),
    ((("id: 4",),), (b"4", [], False, 0, 0)),
    ((("id: 0", "data:"),), (b"0", [], False, 0, 1)),
    ((("id: 0", "data"),), (b"0", [], False, 0, 1)),
    ((("id: 0", "data:"), ("id: 1", PROGRESS)), (b"1", [], False, 1, 1)),
    ((("idx: 5", PROGRESS), ("ID: 6", PROGRESS), (": id: 8", PROGRESS)), (None, [], False, 3, 0)),
    (
        (
            ("id: 1", PROGRESS),
            ("id: 2", "event: message", ELICIT),
            ("id: 3", SAMPLE),
            ("id: 4", ROOTS),
            ("id: 5", PING),
        ),
        (b"5", [98, "s-1", 0], False, 1, 1),
    ),
    (((data({**rpc("elicitation/create"), "id": None}),),), (None, [None], False, 0, 0)),
    (((data(rpc("elicitation/create", True)),),), (None, [None], False, 0, 0)),
    (((data(rpc("elicitation/create", None, params={})),),), (None, [], False, 1, 0)),
    (((ELICIT,), ("id: 9", RESULT)), (b"9", [98], True, 1, 0)),
    ((("id: 1", FAILED),), (b"1", [], True, 1, 0)),
    (((RESULT,), ("id: 8", PROGRESS)), (b"8", [], True, 2, 0)),
    ((("id: 1", data(rpc(None, 7))),), (b"1", [], False, 1, 0)),
    (
        (("id: 1", 'data: {"jsonrpc": "2.0", "method": "roots/list",', 'data: "id": 5}'),),
        (b"1", [5], False, 0, 0),
    ),
    (
        (("id: 2", 'data: {"jsonrpc": "2.0", "id": 7,', 'data: "result": {}}'),),
        (b"2", [], True, 1, 0),
    ),
]
STREAM_IDS = [
    "ids",
    "no-ids",
    "id-without-colon",
    "id-with-empty-value",
    "no-space",
    "two-spaces",
    "colons-in-value",
    "nul-ignored",
    "too-long",
    "too-long-then-short",
    "last-field-wins",
    "id-without-data",
    "priming",
    "priming-without-colon",
    "priming-then-progress",
    "lookalikes",
    "asks",
    "ask-with-null-id",
    "ask-with-bool-id",
    "ask-method-as-notification",
    "ask-then-result",
    "error-response",
    "result-then-more",
    "id-alone-is-no-response",
    "ask-over-two-data-lines",
    "response-over-two-data-lines",
]


def tracked(scanner: SSEScanner) -> Tracked:
    """What a tracked mcp scanner says of what it read."""
    assert scanner.asks is not None
    return (
        scanner.last_id,
        list(scanner.asks),
        scanner.finished,
        scanner.events,
        scanner.heartbeats,
    )


def scanned(chunks: list[bytes], wire: Wire = "mcp", track: bool = True) -> SSEScanner:
    """A scanner of ``wire`` fed ``chunks``, one read each."""
    scanner = SSEScanner((), wire, track=track)
    for chunk in chunks:
        scanner.feed(chunk)
    return scanner


@pytest.mark.parametrize("bom", [False, True], ids=["no-bom", "bom"])
@pytest.mark.parametrize("ending", list(ENDINGS.values()), ids=list(ENDINGS))
@pytest.mark.parametrize(("events", "expected"), STREAMS, ids=STREAM_IDS)
def test_a_tracked_mcp_stream_knows_its_last_id_asks_and_end(
    events: tuple[tuple[str, ...], ...], expected: Tracked, ending: str, bom: bool
) -> None:
    """On the mcp wire with track, the scanner keeps the last id field (WHATWG's rules), the ids of the server's asks in order, and whether a response came, whatever the line endings."""
    scanner = scanned([body(*events, ending=ending, bom=bom)])
    assert tracked(scanner) == expected
    assert scanner.counted


@pytest.mark.parametrize("middle", MIDDLES, ids=["small-middle", "no-middle"])
@pytest.mark.parametrize("ending", list(ENDINGS.values()), ids=list(ENDINGS))
@pytest.mark.parametrize(("events", "expected"), STREAMS, ids=STREAM_IDS)
def test_a_tracked_mcp_stream_reads_the_same_however_it_is_split(
    events: tuple[tuple[str, ...], ...], expected: Tracked, ending: str, middle: int
) -> None:
    """The last id, the asks, the end and the counts are the same whether the body comes whole, in two reads split at any byte, or byte by byte."""
    raw = body(*events, ending=ending)
    with events_read_one_by_one_up_to(middle):
        for split in range(len(raw) + 1):
            scanner = scanned([raw[:split], raw[split:]])
            assert tracked(scanner) == expected, f"split at {split}"
        assert tracked(scanned([raw[i : i + 1] for i in range(len(raw))])) == expected


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_an_id_is_kept_up_to_the_limit_and_none_past_it(ending: str) -> None:
    """An id of ``ID_LIMIT`` bytes is kept and one a byte longer is none, whatever the line ending."""
    within = "x" * ID_LIMIT
    over = within + "x"
    assert scanned([body((f"id: {within}", PROGRESS), ending=ending)]).last_id == within.encode()
    assert scanned([body((f"id: {over}", PROGRESS), ending=ending)]).last_id is None


@pytest.mark.parametrize("length", [ID_LIMIT, ID_LIMIT + 1], ids=["at-the-limit", "past-it"])
def test_the_id_limit_does_not_depend_on_where_a_crlf_is_split(length: int) -> None:
    """An id line ending in CRLF is kept or not the same whether or not a read ends between its CR and its LF."""
    raw = body(("id: " + "x" * length, PROGRESS), ending="\r\n")
    cr = raw.index(b"\r") + 1
    assert scanned([raw]).last_id == scanned([raw[:cr], raw[cr:]]).last_id
    assert (scanned([raw]).last_id is None) is (length > ID_LIMIT)


@pytest.mark.parametrize(
    ("wire", "track", "last_id", "asks"),
    [
        ("mcp", True, b"2", [98]),
        ("mcp", False, None, None),
        ("responses", True, b"2", None),
        ("responses", False, None, None),
        ("generic", True, None, None),
        ("chat_completions", True, None, None),
    ],
    ids=["mcp", "mcp-untracked", "responses", "responses-untracked", "generic", "chat"],
)
def test_only_tracked_mcp_and_responses_streams_keep_ids_and_only_mcp_asks(
    wire: Wire, track: bool, last_id: bytes | None, asks: list[object] | None
) -> None:
    """Ids are kept only on a tracked mcp or Responses stream, and asks listed only on a tracked mcp one."""
    raw = body(("id: 1", PROGRESS), ("id: 2", ELICIT))
    scanner = scanned([raw], wire, track)
    assert (scanner.last_id, scanner.asks) == (last_id, asks)


@pytest.mark.parametrize("heartbeat", [False, True], ids=["untyped", "ping-typed"])
def test_a_priming_event_is_a_heartbeat_and_no_progress(heartbeat: bool) -> None:
    """A server's priming event (an id and empty data) counts as a heartbeat, not as progress, nor as an end, and gives an id to resume from."""
    scanner = SSEScanner(("ping",) if heartbeat else (), "mcp", track=True)
    completed = scanner.feed(b"id: 1\ndata:\n\n")
    assert (completed, scanner.events, scanner.heartbeats, scanner.others) == (0, 0, 1, 0)
    assert (scanner.done, scanner.finished, scanner.last_id) == (False, False, b"1")


@pytest.mark.parametrize(
    ("chunks", "done", "finished"),
    [
        ([body((RESULT,))], True, True),
        ([body((RESULT,), (PROGRESS,))], True, True),
        ([body((RESULT,)), body((PROGRESS,))], True, True),
        ([body((PROGRESS,))], False, False),
    ],
    ids=["result-last", "result-then-progress", "result-then-a-read", "no-result"],
)
def test_finished_and_done_hold_once_a_response_came(
    chunks: list[bytes], done: bool, finished: bool
) -> None:
    """``finished`` and ``done`` hold once a response completed, even followed by events in its read: on MCP nothing more is waited for after the response."""
    scanner = scanned(chunks)
    assert (scanner.done, scanner.finished) == (done, finished)


# --------------------------------------------------------------------------- mcp


@pytest.mark.parametrize(
    ("http_method", "payload", "expected"),
    [
        ("POST", rpc(None, 4, result={}), 4),
        ("POST", rpc(None, 0, result={"action": "accept"}), 0),
        ("POST", rpc(None, "s-1", result={}), "s-1"),
        ("POST", rpc(None, 4, error={"code": -1, "message": "no"}), 4),
        ("POST", rpc("tools/call", 4), None),
        ("POST", rpc("tools/call", 4, result={}), None),
        ("POST", rpc("notifications/cancelled", None), None),
        ("POST", rpc(None, 4), None),
        ("POST", rpc(None, True, result={}), None),
        ("POST", rpc(None, False, result={}), None),
        ("POST", rpc(None, 1.5, result={}), None),
        ("POST", rpc(None, None, error={"code": -32700, "message": "parse"}), None),
        ("POST", {**rpc(None, 4, result={}), "id": None}, None),
        ("POST", {**rpc(None, 4, result={}), "jsonrpc": "1.0"}, None),
        ("POST", {"id": 4, "result": {}}, None),
        ("POST", None, None),
        ("GET", rpc(None, 4, result={}), None),
        ("PUT", rpc(None, 4, result={}), None),
    ],
    ids=[
        "result",
        "zero-id",
        "string-id",
        "error",
        "request",
        "request-with-result",
        "notification",
        "neither-result-nor-error",
        "true-id",
        "false-id",
        "float-id",
        "no-id",
        "null-id",
        "other-jsonrpc-version",
        "no-jsonrpc",
        "no-body",
        "get",
        "put",
    ],
)
def test_a_post_answers_the_servers_request_only_as_a_json_rpc_response(
    http_method: str, payload: dict[str, Any] | None, expected: str | int | None
) -> None:
    """A client's POST answers the server's request whose id it carries only when its body is a JSON-RPC 2.0 response with a string or integer id."""
    found = answer_id(http_method, payload)
    assert found == expected
    assert type(found) is type(expected)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (json.dumps(rpc("elicitation/create", 98)).encode(), 98),
        (json.dumps(rpc("roots/list", 0)).encode(), 0),
        (json.dumps(rpc("sampling/createMessage", "s-1")).encode(), "s-1"),
        (json.dumps(rpc("elicitation/create", True)).encode(), None),
        (json.dumps(rpc("elicitation/create", 2.5)).encode(), None),
        (json.dumps({**rpc("elicitation/create"), "id": None}).encode(), None),
        (json.dumps(rpc("elicitation/create", {"a": 1})).encode(), None),
        (json.dumps([rpc("elicitation/create", 98)]).encode(), None),
        (b'{"jsonrpc": "2.0", "id": 98', None),
        (b"", None),
        (b"\xff", None),
    ],
    ids=[
        "int",
        "zero",
        "string",
        "bool",
        "float",
        "null",
        "object",
        "batch",
        "cut-short",
        "empty",
        "not-utf8",
    ],
)
def test_the_id_of_a_servers_request_is_a_string_or_an_integer(
    raw: bytes, expected: str | int | None
) -> None:
    """The id of the server's request an event carries is its JSON-RPC id if a string or an integer, else none, and data that is not one JSON object has none."""
    found = server_request_id(raw)
    assert found == expected
    assert type(found) is type(expected)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [(b"", "heartbeat"), (b" ", "output"), (b"\n", "output")],
    ids=["empty", "space", "empty-lines"],
)
def test_only_empty_data_is_a_priming_heartbeat(raw: bytes, expected: str) -> None:
    """An event of empty data is a server's priming event, a heartbeat; data of blanks is not JSON, so output."""
    assert mcp_class(raw) == expected


@pytest.mark.parametrize("method", sorted(SERVER_REQUESTS))
def test_every_server_request_with_an_id_is_an_ask(method: str) -> None:
    """Each of the server's requests to its client, carrying an id, is listed as an ask by a tracked scanner."""
    scanner = scanned([body((data(rpc(method, "q")),))])
    assert (scanner.asks, scanner.events, scanner.others) == (["q"], 0, 1)


# --------------------------------------------------------------------------- WaitingAsks


class Calls:
    """A callback that records the asks it is called with."""

    def __init__(self) -> None:
        self.asks: list[str | int] = []

    def __call__(self, ask: str | int) -> None:
        self.asks.append(ask)


@pytest.mark.parametrize("ask", [1, 0, "1", "elicit-7"], ids=["int", "zero", "digit-str", "str"])
def test_an_answer_calls_the_waiting_callback_once_with_its_ask(ask: str | int) -> None:
    """The answer to an ask calls its callback once with the ask's id, and a second answer calls nothing."""
    asks, calls = WaitingAsks(), Calls()
    asks.wait("s", ask, calls)
    assert len(asks) == 1
    asks.answered("s", ask)
    asks.answered("s", ask)
    assert calls.asks == [ask]
    assert type(calls.asks[0]) is type(ask)
    assert len(asks) == 0


@pytest.mark.parametrize(
    ("waited", "answered"),
    [
        (("s", 1), ("s", "1")),
        (("s", "1"), ("s", 1)),
        (("s", 1), ("t", 1)),
        (("", 1), ("s", 1)),
        (("s", 1), ("", 1)),
        (("s", 1), ("s", 2)),
    ],
    ids=[
        "int-vs-str",
        "str-vs-int",
        "other-session",
        "no-session-vs-session",
        "session-vs-no-session",
        "other-id",
    ],
)
def test_an_answer_to_another_ask_restarts_nothing(
    waited: tuple[str, str | int], answered: tuple[str, str | int]
) -> None:
    """Asks are keyed by session and id: 1 and "1" are different asks, and another session's answer restarts nothing."""
    asks, calls = WaitingAsks(), Calls()
    asks.wait(*waited, calls)
    asks.answered(*answered)
    assert (calls.asks, len(asks)) == ([], 1)
    asks.answered(*waited)
    assert calls.asks == [waited[1]]


def test_a_forgotten_ask_is_answered_to_nobody() -> None:
    """An ask forgotten (its stream is over) calls nothing when answered, and forgetting one not waiting is harmless."""
    asks, calls = WaitingAsks(), Calls()
    asks.wait("s", 1, calls)
    asks.wait("s", 2, calls)
    asks.forget("s", 1)
    asks.forget("s", 1)
    asks.forget("t", 2)
    assert len(asks) == 1
    asks.answered("s", 1)
    asks.answered("s", 2)
    assert (calls.asks, len(asks)) == ([2], 0)


def test_an_answer_without_a_wait_calls_nothing() -> None:
    """An answer no stream waits for is ignored."""
    asks = WaitingAsks()
    asks.answered("s", 1)
    assert len(asks) == 0


def test_a_second_wait_for_the_same_ask_replaces_the_first() -> None:
    """Waiting again for the same ask of the same session keeps the latest callback only."""
    asks, first, second = WaitingAsks(), Calls(), Calls()
    asks.wait("s", 1, first)
    asks.wait("s", 1, second)
    asks.answered("s", 1)
    assert (first.asks, second.asks, len(asks)) == ([], [1], 0)


def test_asks_of_several_sessions_wait_apart() -> None:
    """Each session's asks are answered on their own, and counted together."""
    asks, calls = WaitingAsks(), Calls()
    for session in ("a", "b"):
        for ask in (1, "1"):
            asks.wait(session, ask, calls)
    assert len(asks) == 4
    asks.answered("b", "1")
    asks.answered("a", 1)
    assert (calls.asks, len(asks)) == (["1", 1], 2)


@pytest.mark.parametrize(
    "reentry",
    [
        lambda asks, ask: asks.wait("s", ask, lambda _: None),
        lambda asks, ask: asks.forget("s", ask),
        lambda asks, ask: asks.answered("s", ask),
        lambda asks, ask: len(asks),
    ],
    ids=["wait", "forget", "answered", "len"],
)
def test_a_callback_may_use_the_asks_without_deadlock(
    reentry: Callable[[WaitingAsks, str | int], object],
) -> None:
    """The callback runs outside the lock: one that waits, forgets or answers on the same asks does not deadlock."""
    asks = WaitingAsks()
    called: list[str | int] = []

    def on_answer(ask: str | int) -> None:
        called.append(ask)
        reentry(asks, ask)

    asks.wait("s", 5, on_answer)
    thread = threading.Thread(target=asks.answered, args=("s", 5), daemon=True)
    thread.start()
    thread.join(5.0)
    assert not thread.is_alive(), "answered() deadlocked on its own lock"
    assert called == [5]


# --------------------------------------------------------------------------- McpResumable

URL = "https://mcp.example.test/mcp?tenant=t1"
CALL = rpc("tools/call", 7, params={"name": "search_web", "arguments": {"q": "x"}})
ORIGINAL = [
    ("Mcp-Session-Id", "0123abcd"),
    ("MCP-Protocol-Version", "2025-06-18"),
    ("Authorization", "Bearer tok"),
    ("Accept", "application/json, text/event-stream"),
    ("Content-Type", "application/json"),
    ("Transfer-Encoding", "chunked"),
    ("Last-Event-ID", "stale"),
    ("X-Dup", "1"),
    ("x-dup", "2"),
]
# What a resume or a cancel keeps of ORIGINAL, in order, with httpx's Host first.
KEPT = [
    (b"Host", b"mcp.example.test"),
    (b"Mcp-Session-Id", b"0123abcd"),
    (b"MCP-Protocol-Version", b"2025-06-18"),
    (b"Authorization", b"Bearer tok"),
    (b"X-Dup", b"1"),
    (b"x-dup", b"2"),
]
TIMEOUT = {"connect": 5.0, "read": 300.0, "write": 5.0, "pool": 5.0}


def mcp_request(payload: dict[str, Any] | None = CALL, method: str = "POST") -> httpx.Request:
    """An MCP client's request: session headers, a JSON body (if any), a timeout extension."""
    content = None if payload is None else json.dumps(payload).encode()
    extensions = {"timeout": dict(TIMEOUT), "sni_hostname": "mcp.example.test"}
    return httpx.Request(method, URL, headers=ORIGINAL, content=content, extensions=extensions)


def mcp_meter(*events: tuple[str, ...]) -> ProgressMeter:
    """A tracked mcp meter that read ``events``."""
    meter = ProgressMeter("", (), "mcp", track=True)
    meter.feed(body(*events))
    return meter


def mcp_resumable(call: McpCall, request: httpx.Request | None = None) -> McpResumable:
    """The MCP stream of ``call``, sent as ``request`` (an MCP client's tool call if none)."""
    return McpResumable(mcp_request() if request is None else request, call, httpx)


TOOL_CALL = McpCall("tools/call", 7, "search_web")


@pytest.mark.parametrize(
    ("events", "last_id", "where"),
    [
        ((("id: 5", PROGRESS),), b"5", "request 7 after event '5'"),
        ((("id: 0", "data:"),), b"0", "request 7 after event '0'"),
        ((("id: s1/e-9", PROGRESS), (PROGRESS,)), b"s1/e-9", "request 7 after event 's1/e-9'"),
        ((("id: \u00e9", PROGRESS),), "\u00e9".encode(), "request 7 after event '\u00e9'"),
        ((("id: 1", ELICIT),), b"1", "request 7 after event '1'"),
    ],
    ids=["progress", "priming", "id-kept-across-events", "non-ascii", "after-an-ask"],
)
def test_a_resume_is_a_get_after_the_last_id_with_every_header_but_the_bodys(
    events: tuple[tuple[str, ...], ...], last_id: bytes, where: str
) -> None:
    """The resume of an MCP request's stream is a GET to its URL with Last-Event-ID the last id, its session, version and credentials kept, its body's headers not, asking for an event stream, with no body and its extensions."""
    original = mcp_request()
    found = mcp_resumable(TOOL_CALL, original).resume_from(mcp_meter(*events))
    assert not isinstance(found, str)
    resume, said = found
    assert (resume.method, resume.url, said) == ("GET", original.url, where)
    assert resume.headers.raw == [
        *KEPT,
        (b"accept", b"text/event-stream"),
        (b"last-event-id", last_id),
    ]
    assert resume.read() == b""
    assert resume.extensions == original.extensions
    assert resume.extensions is not original.extensions


@pytest.mark.parametrize(
    "events",
    [
        (),
        ((PROGRESS,), (RESULT,)),
        (("id: 1", PROGRESS), ("id", PROGRESS)),
        (("id: 1", PROGRESS), ("id:", PROGRESS)),
        (("id: 1", PROGRESS), (LONG_ID, PROGRESS)),
        (("id: a\0b", PROGRESS),),
    ],
    ids=["nothing", "no-ids", "id-cleared", "id-emptied", "id-too-long", "nul-id-only"],
)
def test_a_stream_without_a_usable_id_is_not_resumed(events: tuple[tuple[str, ...], ...]) -> None:
    """A stream whose last id is missing, empty or too long is not resumed, and the note says why."""
    found = mcp_resumable(TOOL_CALL).resume_from(mcp_meter(*events))
    assert found == "; not resumed: the server gave its events no ids"


def test_an_mcp_stream_has_no_response_id() -> None:
    """An MCP request's stream is its own: no response id is known up front."""
    assert McpResumable.response_id is None
    assert mcp_resumable(TOOL_CALL).response_id is None


@pytest.mark.parametrize(
    ("call", "reason"),
    [
        (TOOL_CALL, "stream stalled"),
        (McpCall("tools/call", "a-1"), "interrupted"),
        (McpCall("tools/call", 0), ""),
        (McpCall("tools/list", 3), "stream stalled"),
        (McpCall("resources/subscribe", 4), "caf\u00e9 \u2603"),
    ],
    ids=["tool-call", "string-id", "zero-id", "safe-method", "unicode-reason"],
)
@pytest.mark.parametrize("with_meter", [True, False], ids=["meter", "no-meter"])
def test_a_cancel_is_one_notifications_cancelled_post_with_the_session(
    call: McpCall, reason: str, with_meter: bool
) -> None:
    """The cancel of an MCP request is a POST to its URL of notifications/cancelled naming its id and the reason, with its session headers, JSON, and a timeout of CANCEL_TIMEOUT throughout."""
    original = mcp_request()
    meter = mcp_meter(("id: 5", PROGRESS)) if with_meter else None
    cancel = mcp_resumable(call, original).cancel_from(meter, reason)
    assert cancel is not None
    assert (cancel.method, cancel.url) == ("POST", original.url)
    content = cancel.read()
    assert json.loads(content) == {
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": call.id, "reason": reason},
    }
    assert type(json.loads(content)["params"]["requestId"]) is type(call.id)
    assert cancel.headers.raw == [
        *KEPT,
        (b"accept", b"application/json, text/event-stream"),
        (b"content-type", b"application/json"),
        (b"Content-Length", str(len(content)).encode()),
    ]
    assert cancel.extensions == {
        "timeout": dict.fromkeys(("connect", "read", "write", "pool"), CANCEL_TIMEOUT),
        "sni_hostname": "mcp.example.test",
    }
    assert original.extensions["timeout"] == TIMEOUT  # the original's own left alone


def test_a_request_is_cancelled_once() -> None:
    """A second cancel of the same request is none, and a resume between them does not give one back."""
    stream = mcp_resumable(TOOL_CALL)
    meter = mcp_meter(("id: 5", PROGRESS))
    assert stream.cancel_from(meter, "first") is not None
    assert not isinstance(stream.resume_from(meter), str)
    assert stream.cancel_from(meter, "second") is None
    assert stream.cancel_from(None, "third") is None


def test_a_resume_does_not_spend_the_cancel() -> None:
    """Resuming a stream, however often, leaves its one cancel."""
    stream = mcp_resumable(TOOL_CALL)
    meter = mcp_meter(("id: 5", PROGRESS))
    for _ in range(3):
        assert not isinstance(stream.resume_from(meter), str)
    assert stream.cancel_from(meter, "stall") is not None


@pytest.mark.parametrize(
    "call",
    [McpCall("initialize", 0), McpCall("initialize", "i"), McpCall(None)],
    ids=["initialize", "initialize-string-id", "channel"],
)
def test_initialize_and_the_channel_are_never_cancelled(call: McpCall) -> None:
    """An initialize request, which the protocol forbids cancelling, and the server's channel get no cancel, however often asked."""
    stream = mcp_resumable(call)
    assert stream.cancel_from(mcp_meter(("id: 5", PROGRESS)), "stall") is None
    assert stream.cancel_from(None, "stall") is None


@pytest.mark.parametrize("handed", [False, True], ids=["not-handed", "handed"])
@pytest.mark.parametrize(
    ("method", "cancels"),
    [
        *((method, False) for method in sorted(SAFE_METHODS)),
        ("tools/call", True),
        ("resources/subscribe", True),
        ("x/y", True),
    ],
)
def test_a_stall_given_up_cancels_only_requests_with_effects(
    method: str, cancels: bool, handed: bool
) -> None:
    """A stall given up cancels an MCP request with effects (a tool call) handed or not, never one that changes nothing."""
    assert mcp_resumable(McpCall(method, 1)).cancels_given_up(handed) is cancels


# --------------------------------------------------------------------------- Resumable

RESPONSES = "https://api.example.test/v1/responses"
BACKGROUND = {"model": "m", "input": "hi", "stream": True, "background": True}
CREATED = data({"type": "response.created", "sequence_number": 0, "response": {"id": "resp_1"}})


def responses_request(method: str = "POST", url: str = RESPONSES) -> httpx.Request:
    """A Responses request: a background stream's creation (POST), or a resume (GET)."""
    payload = BACKGROUND if method == "POST" else None
    return httpx.Request(method, url, json=payload, headers={"Authorization": "Bearer sk"})


def background(method: str = "POST", url: str = RESPONSES) -> Resumable:
    """The resumable stream a Responses request makes."""
    request = responses_request(method, url)
    payload = BACKGROUND if method == "POST" else None
    stream = resumable_for(request, "responses", payload, httpx)
    assert stream is not None
    return stream


def responses_meter(*events: tuple[str, ...]) -> ProgressMeter:
    """A tracked Responses meter that read ``events``."""
    meter = ProgressMeter("", (), "responses", track=True)
    meter.feed(body(*events))
    return meter


@pytest.mark.parametrize(
    "events",
    [(), (("id: 1", PROGRESS),), (("event: response.in_progress", "data: {}"),)],
    ids=["nothing", "ids-but-no-response", "unnamed-lifecycle"],
)
def test_a_background_stream_that_named_no_response_is_not_resumed(
    events: tuple[tuple[str, ...], ...],
) -> None:
    """A background Responses stream is not resumed before its events named its response, ids or not, and the note says so."""
    found = background().resume_from(responses_meter(*events))
    assert found == "; not resumed: the stream had not yet named its response"


def test_a_background_stream_that_named_its_response_resumes_after_its_event() -> None:
    """A background Responses stream that named its response resumes with a GET of it after the last event's number."""
    found = background().resume_from(responses_meter(("event: response.created", CREATED)))
    assert not isinstance(found, str)
    resume, said = found
    assert resume.method == "GET"
    assert str(resume.url) == RESPONSES + "/resp_1?stream=true&starting_after=0"
    assert said == "response resp_1 after event 0"


@pytest.mark.parametrize(
    ("handed", "expected"), [(False, True), (True, False)], ids=["not-handed", "handed"]
)
def test_a_creation_cancels_a_given_up_stall_only_if_the_caller_had_none_of_it(
    handed: bool, expected: bool
) -> None:
    """A background creation given up cancels its response only if the caller never had the stream, for nobody else knows its id."""
    assert background().cancels_given_up(handed) is expected


@pytest.mark.parametrize("handed", [False, True], ids=["not-handed", "handed"])
def test_the_callers_own_resume_is_never_cancelled_on_a_stall(handed: bool) -> None:
    """A resume GET the caller sent (its response id known to it) is never cancelled when a stall is given up."""
    stream = background("GET", RESPONSES + "/resp_9?stream=true&starting_after=3")
    assert (stream.response_id, stream.after) == ("resp_9", 3)
    assert stream.cancels_given_up(handed) is False


@pytest.mark.parametrize(
    ("method", "url", "events", "cancel_url"),
    [
        ("POST", RESPONSES, None, None),
        ("POST", RESPONSES, (), None),
        ("POST", RESPONSES, (("event: response.created", CREATED),), RESPONSES + "/resp_1/cancel"),
        ("GET", RESPONSES + "/resp_9?stream=true", None, RESPONSES + "/resp_9/cancel"),
        ("GET", RESPONSES + "/resp_9?stream=true", (), RESPONSES + "/resp_9/cancel"),
    ],
    ids=["creation-no-meter", "creation-unnamed", "creation-named", "resume-no-meter", "resume"],
)
def test_a_background_cancel_is_for_the_response_known(
    method: str, url: str, events: tuple[tuple[str, ...], ...] | None, cancel_url: str | None
) -> None:
    """A background stream's cancel is a POST to its response's cancel once its id is known (from its events or its own path), bounded by CANCEL_TIMEOUT; none before."""
    meter = None if events is None else responses_meter(*events)
    cancel = background(method, url).cancel_from(meter, "ignored")
    if cancel_url is None:
        assert cancel is None
        return
    assert cancel is not None
    assert (cancel.method, str(cancel.url)) == ("POST", cancel_url)
    timeouts = dict.fromkeys(("connect", "read", "write", "pool"), CANCEL_TIMEOUT)
    assert cancel.extensions["timeout"] == timeouts


# --------------------------------------------------------------------------- resumable_of


def resumable_asked(request: httpx.Request) -> Resumable | McpResumable | None:
    """``resumable_of`` for ``request``, with what ``asked`` reads of it."""
    wire, _streaming, payload, _budgets, mcp = asked(request, request.read(), StreamPolicy())
    return resumable_of(request, wire, payload, mcp, httpx)


@pytest.mark.parametrize(
    ("payload", "call"),
    [
        (CALL, TOOL_CALL),
        (rpc("tools/list", "l-1"), McpCall("tools/list", "l-1")),
        (rpc("initialize", 0), McpCall("initialize", 0)),
    ],
    ids=["tool-call", "tools-list", "initialize"],
)
def test_an_mcp_requests_stream_is_resumable_as_mcp(
    payload: dict[str, Any], call: McpCall
) -> None:
    """An MCP request's stream is resumed and cancelled as MCP's: the request, its call, and the flavor's httpx."""
    request = mcp_request(payload)
    found = resumable_asked(request)
    assert isinstance(found, McpResumable)
    assert (found.request, found.call, found.http) == (request, call, httpx)


def test_the_servers_channel_has_no_resumable() -> None:
    """The server's GET channel (a GET carrying Mcp-Session-Id) is not resumed here: the SDK reconnects it."""
    request = mcp_request(None, "GET")
    assert resumable_of(request, "mcp", None, McpCall(None), httpx) is None
    assert resumable_asked(request) is None


@pytest.mark.parametrize(
    ("method", "url", "payload", "resumable"),
    [
        ("POST", RESPONSES, BACKGROUND, True),
        ("POST", RESPONSES, {**BACKGROUND, "background": False}, False),
        ("GET", RESPONSES + "/resp_9?stream=true", None, True),
        ("GET", RESPONSES + "/resp_9", None, False),
        ("POST", "https://api.example.test/v1/chat/completions", BACKGROUND, False),
        ("POST", "https://mcp.example.test/mcp", BACKGROUND, False),
    ],
    ids=[
        "background",
        "foreground",
        "resume",
        "retrieve-not-streaming",
        "chat",
        "json-not-json-rpc",
    ],
)
def test_any_other_request_is_resumable_as_resumable_for_says(
    method: str, url: str, payload: dict[str, Any] | None, resumable: bool
) -> None:
    """A request that is no MCP call is resumable exactly as ``resumable_for`` says."""
    request = httpx.Request(method, url, json=payload, headers={"accept": "text/event-stream"})
    wire, _streaming, parsed, _budgets, mcp = asked(request, request.read(), StreamPolicy())
    assert mcp is None
    found = resumable_of(request, wire, parsed, None, httpx)
    assert found == resumable_for(request, wire, parsed, httpx)
    assert (found is not None) is resumable
    assert not isinstance(found, McpResumable)


@pytest.mark.parametrize("ending", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_a_tracked_stream_is_done_once_its_response_came_whatever_follows(ending: str) -> None:
    """An MCP response followed in the same read by a server's priming event (a replay that stays open) ends the stream: nothing more is waited for."""
    response = json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}})
    raw = body((f"data: {response}",), ("id: 9", "data:"), ending=ending)
    scanner = SSEScanner((), "mcp", track=True)
    scanner.feed(raw)
    assert (scanner.finished, scanner.done, scanner.heartbeats) == (True, True, 1)
    untracked = SSEScanner((), "mcp")
    untracked.feed(raw)
    assert not untracked.done  # the end rule as before: an event after the end
