"""The fault server's gemini wire, read through the real google-genai SDK.

Gemini API and Vertex AI paths, sync and async, on each HTTP library the SDK runs on:
httpx (given as ``httpx_client``), httpx2 (the SDK's default sync library; given as
``httpx_async_client`` for async) and aiohttp (the SDK's default async library when it is
installed). No watchdog transport here: this is the server's wire as the SDK sees it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib.util
import itertools
import json
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import google.auth.credentials
import httpx
import httpx2
import pytest
from google import genai
from google.genai import errors, types
from google.genai.client import AsyncClient

from hermes_transport.testing import (
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    FaultServer,
    Scenario,
    SentResponse,
    gemini_model,
)

# The fault server's wire under the SDK's own HTTP libraries, no openai SDK: the same under
# every openai major, so run with the newest only.
pytestmark = pytest.mark.once

MODEL = "gemini-2.5-pro"
TIMEOUT_MS = 10_000  # for answers that must arrive: generous, for a busy machine
STALL_MS = 500  # for reads that must time out
APIS = ["gemini", "vertex"]
SYNC_LIBRARIES = ["httpx", "httpx2"]
NO_AIOHTTP = pytest.mark.skipif(not importlib.util.find_spec("aiohttp"), reason="no aiohttp")
ASYNC_LIBRARIES: list[Any] = ["httpx", "httpx2", pytest.param("aiohttp", marks=NO_AIOHTTP)]
# (sync or async, HTTP library): every way the SDK reads a stream.
EVERY_WAY: list[Any] = [
    pytest.param(("sync", "httpx"), id="sync-httpx"),
    pytest.param(("sync", "httpx2"), id="sync-httpx2"),
    pytest.param(("async", "httpx"), id="async-httpx"),
    pytest.param(("async", "httpx2"), id="async-httpx2"),
    pytest.param(("async", "aiohttp"), id="async-aiohttp", marks=NO_AIOHTTP),
]
# The SDK's default ways: httpx2 for sync, aiohttp for async.
MODES: list[Any] = [
    pytest.param(("sync", "httpx2"), id="sync"),
    pytest.param(("async", "aiohttp"), id="async", marks=NO_AIOHTTP),
]
# What a read timeout raises on each library (aiohttp: its total timeout).
READ_TIMEOUTS: dict[str, type[BaseException]] = {
    "httpx": httpx.ReadTimeout,
    "httpx2": httpx2.ReadTimeout,
    "aiohttp": TimeoutError,
}
CALL = ("call", (TOOL_CALL_NAME, json.loads(TOOL_CALL_ARGUMENTS)))
HEALTHY = [
    pytest.param(Scenario(), id="text"),
    pytest.param(Scenario(thoughts=("Weighing", " the sky."), tool_call=True), id="thoughts-call"),
    pytest.param(Scenario(content=(), tool_call=True), id="call-only"),
    pytest.param(Scenario(content=("é", "\u2028", '😀 {"}')), id="unicode"),
]
Part = tuple[str, object]


class _Token(google.auth.credentials.Credentials):
    """Vertex AI credentials with a fixed token, never refreshed (no network)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.token = "test-token"

    def refresh(self, request: object) -> None:
        """Nothing to refresh: the token is fixed."""


def http_options(
    server: FaultServer, *, timeout_ms: int, prefix: str = "", **kwargs: Any
) -> types.HttpOptions:
    """The SDK's options for the server's root (plus a proxy's ``prefix``)."""
    root = server.base_url.removesuffix("/v1") + prefix
    return types.HttpOptions(base_url=root, timeout=timeout_ms, **kwargs)


def make_client(api: str, options: types.HttpOptions) -> genai.Client:
    if api == "vertex":
        return genai.Client(
            vertexai=True,
            project="p",
            location="us-central1",
            credentials=_Token(),
            http_options=options,
        )
    return genai.Client(api_key="test-key", http_options=options)


@contextlib.contextmanager
def sync_client(
    server: FaultServer, api: str, library: str, *, timeout_ms: int = TIMEOUT_MS, **kwargs: Any
) -> Iterator[genai.Client]:
    """A sync client on ``library`` (httpx2: the SDK's default); closes all it opened."""
    with contextlib.ExitStack() as stack:
        if library == "httpx":
            kwargs["httpx_client"] = stack.enter_context(httpx.Client())
        options = http_options(server, timeout_ms=timeout_ms, **kwargs)
        client = stack.enter_context(make_client(api, options))
        yield client


@contextlib.asynccontextmanager
async def async_client(
    server: FaultServer, api: str, library: str, *, timeout_ms: int = TIMEOUT_MS, **kwargs: Any
) -> AsyncIterator[AsyncClient]:
    """An async client on ``library`` (aiohttp: the SDK's default); closes all it opened."""
    async with contextlib.AsyncExitStack() as stack:
        if library == "httpx":
            kwargs["httpx_async_client"] = await stack.enter_async_context(httpx.AsyncClient())
        elif library == "httpx2":
            kwargs["httpx_async_client"] = await stack.enter_async_context(httpx2.AsyncClient())
        options = http_options(server, timeout_ms=timeout_ms, **kwargs)
        client = make_client(api, options).aio
        yield await stack.enter_async_context(client)


@pytest.fixture(autouse=True)
def _sdk_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK picks its libraries and API versions itself, whatever the environment says."""
    for name in ("GOOGLE_GENAI_HTTP_CLIENT", "GOOGLE_GENAI_API_VERSION"):
        monkeypatch.delenv(name, raising=False)


def parts(chunk: types.GenerateContentResponse) -> list[Part]:
    """A chunk's parts: ("thought", text), ("text", text) or ("call", (name, args))."""
    found: list[Part] = []
    content = chunk.candidates[0].content if chunk.candidates else None
    for part in (content.parts if content else None) or []:
        if part.function_call is not None:
            found.append(("call", (part.function_call.name, part.function_call.args)))
        else:
            found.append(("thought" if part.thought else "text", part.text))
    return found


def expected(scenario: Scenario) -> list[list[Part]]:
    """The parts of each chunk of the scenario's stream: one part per chunk."""
    pieces: list[Part] = [("thought", text) for text in scenario.thoughts]
    pieces += [("text", text) for text in scenario.content]
    pieces += [CALL] if scenario.tool_call else []
    return [[piece] for piece in pieces or [("text", "")]]


def read(client: genai.Client, into: list[list[Part]], model: str = MODEL) -> None:
    """Stream one answer, keeping each chunk's parts in ``into`` as it arrives."""
    for chunk in client.models.generate_content_stream(model=model, contents="hi"):
        into.append(parts(chunk))


async def aread(client: AsyncClient, into: list[list[Part]]) -> None:
    """Stream one answer asynchronously, keeping each chunk's parts in ``into``."""
    async for chunk in await client.models.generate_content_stream(model=MODEL, contents="hi"):
        into.append(parts(chunk))


def run(
    mode: str, server: FaultServer, library: str, into: list[list[Part]], **kwargs: Any
) -> None:
    """Stream one answer on the Gemini API, sync or async, on ``library``."""
    if mode == "sync":
        with sync_client(server, "gemini", library, **kwargs) as client:
            read(client, into)
        return

    async def main() -> None:
        async with async_client(server, "gemini", library, **kwargs) as client:
            await aread(client, into)

    asyncio.run(main())


def writes(sent: SentResponse) -> list[bytes]:
    return [data for _, data in sent.writes]


# --- healthy streams ----------------------------------------------------------------------


@pytest.mark.parametrize("scenario", HEALTHY)
@pytest.mark.parametrize("library", SYNC_LIBRARIES)
@pytest.mark.parametrize("api", APIS)
def test_a_sync_stream_reads_back_its_text_thoughts_and_function_call(
    server: FaultServer, api: str, library: str, scenario: Scenario
) -> None:
    """generate_content_stream yields one chunk per thought, text piece and function call, in order, on both APIs."""
    server.scenario = scenario
    chunks: list[list[Part]] = []
    with sync_client(server, api, library) as client:
        read(client, chunks)
    assert chunks == expected(scenario)
    request = server.requests[-1]
    assert gemini_model(request.path) == MODEL
    assert (request.attempt, request.stream) == (0, None)
    vertex = "/v1beta1/projects/p/locations/us-central1/publishers/google/models/"
    assert request.path.startswith(vertex if api == "vertex" else "/v1/models/")
    assert request.path.endswith(f"{MODEL}:streamGenerateContent?alt=sse")


@pytest.mark.parametrize("scenario", HEALTHY)
@pytest.mark.parametrize("library", ASYNC_LIBRARIES)
@pytest.mark.parametrize("api", APIS)
def test_an_async_stream_reads_back_its_text_thoughts_and_function_call(
    server: FaultServer, api: str, library: str, scenario: Scenario
) -> None:
    """aio generate_content_stream yields one chunk per thought, text piece and function call, in order, on both APIs."""
    server.scenario = scenario
    chunks: list[list[Part]] = []

    async def main() -> None:
        async with async_client(server, api, library) as client:
            await aread(client, chunks)

    asyncio.run(main())
    assert chunks == expected(scenario)
    assert gemini_model(server.requests[-1].path) == MODEL


@pytest.mark.parametrize(
    ("prefix", "model", "path"),
    [
        ("", MODEL, f"/v1/models/{MODEL}:streamGenerateContent?alt=sse"),
        ("", f"models/{MODEL}", f"/v1/models/{MODEL}:streamGenerateContent?alt=sse"),
        ("", "tunedModels/t-1", "/v1/tunedModels/t-1:streamGenerateContent?alt=sse"),
        ("/proxy/gemini", MODEL, f"/proxy/gemini/v1/models/{MODEL}:streamGenerateContent?alt=sse"),
    ],
)
def test_the_sdks_model_names_and_a_proxy_prefix_reach_the_wire(
    server: FaultServer, prefix: str, model: str, path: str
) -> None:
    """Plain, models/ and tunedModels/ names and a proxy's path prefix all stream, and gemini_model reads the model back."""
    chunks: list[list[Part]] = []
    with sync_client(server, "gemini", "httpx2", prefix=prefix) as client:
        read(client, chunks, model)
    assert chunks == expected(Scenario())
    assert server.requests[-1].path == path
    assert gemini_model(path) == model.rpartition("/")[2]


@pytest.mark.parametrize(
    ("finish_reason", "reason"),
    [
        (None, types.FinishReason.STOP),
        ("stop", types.FinishReason.STOP),
        ("tool_calls", types.FinishReason.STOP),
        ("length", types.FinishReason.MAX_TOKENS),
        ("content_filter", types.FinishReason.SAFETY),
        ("MALFORMED_FUNCTION_CALL", types.FinishReason.MALFORMED_FUNCTION_CALL),
    ],
)
@pytest.mark.parametrize("usage", [True, False])
@pytest.mark.parametrize("thoughts", [(), ("hm",)])
def test_only_the_last_chunk_carries_the_finish_reason_and_usage(
    server: FaultServer,
    finish_reason: str | None,
    reason: types.FinishReason,
    usage: bool,
    thoughts: tuple[str, ...],
) -> None:
    """The last chunk alone has the finish reason and, with usage, token counts that add up; all name the model."""
    server.scenario = Scenario(finish_reason=finish_reason, usage=usage, thoughts=thoughts)
    with sync_client(server, "gemini", "httpx2") as client:
        chunks = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
    *first, last = chunks
    assert all(c.candidates and c.candidates[0].finish_reason is None for c in first)
    assert all(c.usage_metadata is None for c in first)
    assert last.candidates
    assert last.candidates[0].finish_reason == reason
    assert {c.model_version for c in chunks} == {MODEL}
    assert len({c.response_id for c in chunks}) == 1
    meta = last.usage_metadata
    if not usage:
        assert meta is None
        return
    assert meta is not None
    assert meta.prompt_token_count is not None
    assert meta.prompt_token_count >= 1
    assert meta.candidates_token_count == 2
    assert meta.thoughts_token_count == (len(thoughts) or None)
    total = meta.prompt_token_count + 2 + len(thoughts)
    assert meta.total_token_count == total


@pytest.mark.parametrize("library", SYNC_LIBRARIES)
@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_generate_content_answers_one_whole_response(
    server: FaultServer, mode: str, api: str, library: str
) -> None:
    """generate_content gets the thoughts, the text and the function call in one response, from :generateContent."""
    server.scenario = Scenario(thoughts=("a", "b"), tool_call=True)

    async def agenerate() -> types.GenerateContentResponse:
        async with async_client(server, api, library) as client:
            return await client.models.generate_content(model=MODEL, contents="hi")

    if mode == "sync":
        with sync_client(server, api, library) as client:
            response = client.models.generate_content(model=MODEL, contents="hi")
    else:
        response = asyncio.run(agenerate())
    assert parts(response) == [("thought", "ab"), ("text", "hello world"), CALL]
    assert response.candidates
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.model_version == MODEL
    assert server.requests[-1].path.endswith(f"/models/{MODEL}:generateContent")
    assert server.sent[-1].status == 200


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "INVALID_ARGUMENT"),
        (404, "NOT_FOUND"),
        (429, "RESOURCE_EXHAUSTED"),
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
    ],
)
@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "generate"])
@pytest.mark.parametrize("mode", MODES)
def test_an_error_status_raises_api_error_with_its_code_and_status(
    server: FaultServer, mode: tuple[str, str], streaming: bool, status: int, name: str
) -> None:
    """An HTTP error status raises the SDK's ClientError (4xx) or ServerError (5xx) with Google's code, status and message, once."""
    server.scenario = Scenario.error(status, message="no luck")

    async def acall() -> None:
        async with async_client(server, "gemini", mode[1]) as client:
            if streaming:
                await aread(client, [])
            else:
                await client.models.generate_content(model=MODEL, contents="hi")

    def call() -> None:
        if mode[0] == "async":
            asyncio.run(acall())
            return
        with sync_client(server, "gemini", mode[1]) as client:
            if streaming:
                read(client, [])
            else:
                client.models.generate_content(model=MODEL, contents="hi")

    kind = errors.ClientError if status < 500 else errors.ServerError
    with pytest.raises(kind) as raised:
        call()
    error = raised.value
    assert (error.code, error.status, error.message) == (status, name, "no luck")
    assert len(server.requests) == 1  # the SDK does not retry unless told to


@pytest.mark.parametrize("retry_after", [None, 2.5])
@pytest.mark.parametrize("status", [429, 502])
def test_an_error_status_is_googles_error_json(
    server: FaultServer, status: int, retry_after: float | None
) -> None:
    """An error status answers Google's error JSON, a status name for any code, and Retry-After if set."""
    server.scenario = dataclasses.replace(Scenario.error(status), retry_after=retry_after)
    url = server.base_url.removesuffix("/v1") + f"/v1beta/models/{MODEL}:streamGenerateContent"
    response = httpx.post(url, json={"contents": []}, timeout=10.0)
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    assert response.headers.get("retry-after") == (None if retry_after is None else "2.5")
    name = "RESOURCE_EXHAUSTED" if status == 429 else "INTERNAL"
    message = Scenario().message
    assert response.json() == {"error": {"code": status, "message": message, "status": name}}


@pytest.mark.parametrize(
    ("kind", "code", "name"),
    [
        ("UNAVAILABLE", 503, "UNAVAILABLE"),
        ("RESOURCE_EXHAUSTED", 429, "RESOURCE_EXHAUSTED"),
        ("INTERNAL", 500, "INTERNAL"),
        ("DEADLINE_EXCEEDED", 504, "DEADLINE_EXCEEDED"),
        ("PERMISSION_DENIED", 403, "PERMISSION_DENIED"),
        ("503", 503, "UNAVAILABLE"),
        ("418", 418, "INVALID_ARGUMENT"),
        ("599", 599, "INTERNAL"),
        ("server_error", 500, "INTERNAL"),
        ("overloaded_error", 503, "UNAVAILABLE"),
        ("rate_limit_error", 429, "RESOURCE_EXHAUSTED"),
        ("no_such_kind", 400, "INVALID_ARGUMENT"),
    ],
)
@pytest.mark.parametrize("after", [0, 1, 9])
@pytest.mark.parametrize("mode", MODES)
def test_an_in_stream_error_event_raises_api_error_after_the_chunks_before_it(
    server: FaultServer, mode: tuple[str, str], after: int, kind: str, code: int, name: str
) -> None:
    """An error data event in a 200 stream raises the SDK's APIError with its code and status, after the chunks before it (at most all but the last)."""
    server.scenario = Scenario.error_in_stream(kind, after_events=after, message="mid-way")
    chunks: list[list[Part]] = []
    with pytest.raises(errors.APIError) as raised:
        run(mode[0], server, mode[1], chunks)
    kept = min(after, len(expected(Scenario())) - 1)
    assert chunks == expected(Scenario())[:kept]
    error = raised.value
    assert (error.code, error.status, error.message) == (code, name, "mid-way")
    assert isinstance(error, errors.ServerError if code >= 500 else errors.ClientError)
    sent = server.sent[-1]
    error_json = {"error": {"code": code, "message": "mid-way", "status": name}}
    assert sent.status == 200
    assert writes(sent)[-1] == b"data: " + json.dumps(error_json).encode() + b"\n\n"
    assert len(sent.writes) == kept + 1


# --- delivery -----------------------------------------------------------------------------


@pytest.mark.parametrize("way", EVERY_WAY)
def test_crlf_line_ends_read_back_the_same(server: FaultServer, way: tuple[str, str]) -> None:
    """A stream whose lines end in CRLF reads back the same chunks, and every event ends in CRLF CRLF."""
    mode, library = way
    scenario = Scenario(crlf=True, thoughts=("hm",), tool_call=True)
    server.scenario = scenario
    chunks: list[list[Part]] = []
    run(mode, server, library, chunks)
    assert chunks == expected(scenario)
    for data in writes(server.sent[-1]):
        assert data.startswith(b"data: {")
        assert data.endswith(b"}\r\n\r\n")
        assert b"\n" not in data.replace(b"\r\n", b"")


def test_a_stream_is_data_only_events_byte_for_byte(server: FaultServer) -> None:
    """A stream is data-only SSE events of GenerateContentResponse JSON, one write each, with no [DONE]."""
    server.scenario = Scenario(content=("a",), usage=False)
    url = server.base_url.removesuffix("/v1") + "/v1beta/models/m-1:streamGenerateContent?alt=sse"
    with httpx.stream("POST", url, json={"contents": []}, timeout=10.0) as response:
        body = response.read()
        assert response.headers["content-type"] == "text/event-stream"
    event = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"text": "a"}]},
                "index": 0,
                "finishReason": "STOP",
            }
        ],
        "modelVersion": "m-1",
        "responseId": "hermes0",
    }
    assert writes(server.sent[-1]) == [b"data: " + json.dumps(event).encode() + b"\n\n"]
    assert body == writes(server.sent[-1])[0]


@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
@pytest.mark.parametrize(
    ("scenario", "before"),
    [
        pytest.param(
            Scenario(stall_after_events=1, comment_interval=0.05, hold=5.0), 1, id="stall"
        ),
        pytest.param(Scenario.thinking(5.0, keepalive_interval=0.05), 0, id="think"),
    ],
)
@pytest.mark.parametrize("way", EVERY_WAY)
def test_keepalive_comments_go_out_byte_for_byte_and_the_sdk_raises_on_them(
    server: FaultServer, way: tuple[str, str], scenario: Scenario, before: int, crlf: bool
) -> None:
    """A ': keepalive' comment goes out byte for byte, and google-genai, which does not skip comments, raises UnknownApiResponseError on it."""
    mode, library = way
    server.scenario = dataclasses.replace(scenario, crlf=crlf)
    chunks: list[list[Part]] = []
    with pytest.raises(errors.UnknownApiResponseError, match=": keepalive"):
        run(mode, server, library, chunks)
    assert chunks == expected(Scenario())[:before]
    comment = b": keepalive\r\n\r\n" if crlf else b": keepalive\n\n"
    sent = writes(server.sent[-1])
    assert len(sent) > before
    assert all(data.startswith(b"data: ") for data in sent[:before])
    assert set(sent[before:]) == {comment}


@pytest.mark.parametrize("events", [0, 1])
@pytest.mark.parametrize("way", EVERY_WAY)
def test_a_stall_after_events_times_the_sdks_read_out_after_those_events(
    server: FaultServer, way: tuple[str, str], events: int
) -> None:
    """A stream silent after N events delivers those N chunks, then the SDK's read times out (its own library's timeout error)."""
    mode, library = way
    server.scenario = Scenario(stall_after_events=events, hold=10.0)
    chunks: list[list[Part]] = []
    with pytest.raises(READ_TIMEOUTS[library]):
        run(mode, server, library, chunks, timeout_ms=STALL_MS)
    assert chunks == expected(Scenario())[:events]
    assert len(server.sent[-1].writes) == events


@pytest.mark.parametrize("library", SYNC_LIBRARIES)
@pytest.mark.parametrize(
    ("scenario", "error", "kept"),
    [
        pytest.param(Scenario.truncated(1), "RemoteProtocolError", 1, id="truncated"),
        pytest.param(Scenario.dropped_after(1), "ReadError", 1, id="dropped"),
        pytest.param(Scenario.dropped_after(0, mid_event=True), "ReadError", 0, id="dropped-mid"),
        pytest.param(Scenario(end_after_events=1), None, 1, id="ended"),
    ],
)
def test_a_cut_stream_ends_the_sdks_iteration_after_the_events_sent(
    server: FaultServer, library: str, scenario: Scenario, error: str | None, kept: int
) -> None:
    """A truncated or reset stream raises the library's error after the chunks sent; a stream ended early just ends, with no finish reason."""
    server.scenario = scenario
    chunks: list[list[Part]] = []
    module: Any = httpx if library == "httpx" else httpx2
    with sync_client(server, "gemini", library) as client:
        if error is None:
            stream = list(client.models.generate_content_stream(model=MODEL, contents="hi"))
            assert stream[-1].candidates
            assert stream[-1].candidates[0].finish_reason is None
            chunks = [parts(chunk) for chunk in stream]
        else:
            with pytest.raises(getattr(module, error)):
                read(client, chunks)
    assert chunks == expected(Scenario())[:kept]


def _gzip(sent: SentResponse) -> None:
    body = zlib.decompress(b"".join(writes(sent)), wbits=31)
    assert body.count(b"data: ") == 4
    assert body.endswith(b"}\n\n")


def _trickle(sent: SentResponse) -> None:
    assert {len(data) for data in writes(sent)} == {1}


def _coalesced(sent: SentResponse) -> None:
    assert len(sent.writes) == 1
    assert writes(sent)[0].count(b"data: ") == 4


def _spaced(sent: SentResponse) -> None:
    times = [at for at, _ in sent.writes]
    assert all(later - earlier >= 0.04 for earlier, later in itertools.pairwise(times))


def _thought(sent: SentResponse) -> None:
    assert sent.headers_at is not None
    assert sent.writes[0][0] - sent.headers_at >= 0.15


@pytest.mark.parametrize("library", SYNC_LIBRARIES)
@pytest.mark.parametrize(
    ("fields", "check"),
    [
        pytest.param({"gzip": True}, _gzip, id="gzip"),
        pytest.param({"byte_by_byte": True}, _trickle, id="byte_by_byte"),
        pytest.param({"write_size": 1 << 16}, _coalesced, id="write_size"),
        pytest.param({"event_interval": 0.05}, _spaced, id="event_interval"),
        pytest.param({"think": 0.2}, _thought, id="think"),
    ],
)
def test_delivery_fields_shape_the_writes_and_the_sdk_reads_the_same_chunks(
    server: FaultServer,
    library: str,
    fields: dict[str, Any],
    check: Callable[[SentResponse], None],
) -> None:
    """gzip, byte_by_byte, write_size, event_interval and think change how the events go out, not what the SDK reads."""
    scenario = Scenario(thoughts=("hm",), tool_call=True, **fields)
    server.scenario = scenario
    chunks: list[list[Part]] = []
    with sync_client(server, "gemini", library) as client:
        read(client, chunks)
    assert chunks == expected(scenario)
    check(server.sent[-1])


@pytest.mark.parametrize(
    ("stall", "status"),
    [
        pytest.param(Scenario.error(503), 503, id="error-503"),
        pytest.param(Scenario.silent_before_headers(), None, id="silent"),
    ],
)
def test_stall_attempts_count_gemini_requests_so_the_sdks_retry_gets_the_healthy_answer(
    server: FaultServer, stall: Scenario, status: int | None
) -> None:
    """The first stall_attempts Gemini requests get stall_scenario; the SDK's own retry is the next attempt and streams."""
    server.scenario = Scenario.stall_first(1, stall=dataclasses.replace(stall, hold=5.0))
    retry = types.HttpRetryOptions(attempts=2, initial_delay=0.0, max_delay=0.0, jitter=0.0)
    chunks: list[list[Part]] = []
    with sync_client(
        server, "gemini", "httpx2", timeout_ms=STALL_MS, retry_options=retry
    ) as client:
        read(client, chunks)
    assert chunks == expected(Scenario())
    assert [r.attempt for r in server.requests] == [0, 1]
    assert [s.status for s in server.sent] == [status, 200]


# --- routes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "model"),
    [
        (f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", MODEL),
        (f"/v1/models/{MODEL}:streamGenerateContent", MODEL),
        (f"/v1alpha/models/{MODEL}:generateContent", MODEL),
        ("/v1beta/tunedModels/my-tune:streamGenerateContent?alt=sse", "my-tune"),
        (
            f"/v1beta1/projects/p/locations/l/publishers/google/models/{MODEL}:generateContent",
            MODEL,
        ),
        (
            f"/v1/projects/p-1/locations/global/publishers/google/models/{MODEL}"
            ":streamGenerateContent?alt=sse",
            MODEL,
        ),
        (f"/v1beta1/publishers/google/models/{MODEL}:streamGenerateContent", MODEL),
        (f"/gateway/ai/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", MODEL),
        (f"/models/{MODEL}:streamGenerateContent", None),  # no version
        (f"/v1beta/models/{MODEL}:countTokens", None),
        (f"/v1beta/models/{MODEL}", None),
        ("/v1/chat/completions", None),
        ("/v1beta/models/a/b:generateContent", None),
    ],
)
def test_gemini_model_reads_the_model_of_a_generate_content_path(
    path: str, model: str | None
) -> None:
    """gemini_model names the model of a Gemini API or Vertex AI generateContent path under any prefix and version, and None for any other path."""
    assert gemini_model(path) == model


@pytest.mark.parametrize(
    ("path", "streams"),
    [
        (f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse", True),
        (f"/v1/projects/p/locations/l/publishers/google/models/{MODEL}:generateContent", False),
        (f"/proxy/v1beta/tunedModels/{MODEL}:streamGenerateContent", True),
    ],
)
def test_a_gemini_post_is_an_attempt_answered_by_its_path(
    server: FaultServer, path: str, streams: bool
) -> None:
    """A POST to a Gemini path counts as an attempt and is answered as a stream or as JSON as the path says, not the body."""
    url = server.base_url.removesuffix("/v1") + path
    response = httpx.post(url, json={"contents": [], "stream": not streams}, timeout=10.0)
    assert response.status_code == 200
    kind = "text/event-stream" if streams else "application/json"
    assert response.headers["content-type"] == kind
    assert server.requests[-1].attempt == 0


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse"),
        ("POST", f"/models/{MODEL}:streamGenerateContent"),
        ("POST", f"/v1beta/models/{MODEL}:countTokens"),
    ],
)
def test_any_other_request_is_not_found_and_no_attempt(
    server: FaultServer, method: str, path: str
) -> None:
    """A GET, a path without a version or another Gemini method gets a 404 and does not count as an attempt."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.error(500))  # were it an attempt
    url = server.base_url.removesuffix("/v1") + path
    response = httpx.request(method, url, json={"contents": []}, timeout=10.0)
    assert response.status_code == 404
    assert server.requests[-1].attempt == -1


@pytest.mark.parametrize("thoughts", ["one", b"one", ("one", 2), 3])
def test_thoughts_must_be_a_sequence_of_str(thoughts: Any) -> None:
    """Scenario.thoughts refuses a bare string, bytes, a non-str piece or a non-sequence, as content does."""
    with pytest.raises(ValueError, match=r"Scenario\.thoughts must"):
        Scenario(thoughts=thoughts)


def test_thoughts_accept_a_list_and_stay_hashable() -> None:
    """Scenario.thoughts given as a list is kept as a tuple, so the Scenario stays hashable."""
    scenario = Scenario(thoughts=["a", "b"])  # type: ignore[arg-type]
    assert scenario.thoughts == ("a", "b")
    assert hash(scenario) == hash(Scenario(thoughts=("a", "b")))
