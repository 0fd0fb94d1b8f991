"""``stream_content`` and ``astream_content``: one Gemini answer streamed to its end and merged.

Through the real google-genai SDK on ``genai_client_for`` clients, against the fault server's
gemini wire, on both HTTP libraries.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    astream_content,
    genai_client_for,
    stream_content,
)
from hermes_transport.testing import TOOL_CALL_NAME, FaultServer, Scenario

from _support import FLAVOR_NAMES, FlavorName, interrupt_when

pytest.importorskip("google.genai")
from google.genai import errors as genai_errors
from google.genai import types

# google-genai on its own HTTP libraries: the same under every openai major.
pytestmark = pytest.mark.once

MODEL = "gemini-2.5-flash"
BUDGET = 0.5
ARGS: dict[str, Any] = {"model": MODEL, "contents": "hi"}
RICH = Scenario(content=("hel", "lo"), thoughts=("plan", "ning"), tool_call=True)


@pytest.fixture
def build(server: FaultServer) -> Iterator[Any]:
    """Builds genai clients on the fault server with ``genai_client_for``; closes them."""
    clients: list[Any] = []

    def build(flavor: FlavorName, context: str = "cron", **kwargs: Any) -> Any:
        kwargs.setdefault("policy", StreamPolicy(stale_timeout=BUDGET, retries=2))
        kwargs.setdefault("http_options", {"base_url": server.base_url.removesuffix("/v1")})
        client = genai_client_for(context, flavor=flavor, api_key="k", **kwargs)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def _stream(client: Any, mode: str, **kwargs: Any) -> types.GenerateContentResponse:
    if mode == "sync":
        return stream_content(client, **ARGS, **kwargs)

    async def run() -> types.GenerateContentResponse:
        try:
            return await astream_content(client, **ARGS, **kwargs)
        finally:
            await client.aio.aclose()  # its connections belong to this loop

    return asyncio.run(run())


def _parts(response: types.GenerateContentResponse) -> list[tuple[str, object]]:
    assert response.candidates is not None
    content = response.candidates[0].content
    assert content is not None
    assert content.parts is not None
    return [
        ("call", part.function_call.name)
        if part.function_call is not None
        else ("thought" if part.thought else "text", part.text)
        for part in content.parts
    ]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavor", FLAVOR_NAMES)
def test_an_answer_is_merged_thoughts_apart_text_joined_calls_whole(
    server: FaultServer, build: Any, flavor: FlavorName, mode: str
) -> None:
    """The chunks' parts are merged in order (thought summary apart from the answer, adjacent text joined, the function call whole), with the finish reason and the usage of the last chunk."""
    server.scenario = RICH
    response = _stream(build(flavor), mode)
    assert _parts(response) == [
        ("thought", "planning"),
        ("text", "hello"),
        ("call", TOOL_CALL_NAME),
    ]
    assert response.candidates is not None
    assert response.candidates[0].finish_reason == types.FinishReason.STOP
    assert response.usage_metadata is not None
    assert response.usage_metadata.total_token_count


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stall_after_output_nobody_saw_is_re_sent(
    server: FaultServer, build: Any, mode: str
) -> None:
    """A stall after the first chunk, with no on_chunk to have shown it, is sent again, and the answer comes whole, once."""
    server.scenario = Scenario.stall_first(1, stall=replace(RICH, stall_after_events=2), then=RICH)
    response = _stream(build("httpx2"), mode)
    assert _parts(response)[1] == ("text", "hello")
    assert len(server.requests) == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_stall_after_output_the_caller_saw_raises(
    server: FaultServer, build: Any, mode: str
) -> None:
    """A stall after on_chunk saw content raises StreamStalled, never re-sent: nothing is shown twice."""
    server.scenario = Scenario.stall_first(1, stall=replace(RICH, stall_after_events=2), then=RICH)
    seen: list[types.GenerateContentResponse] = []
    with pytest.raises(StreamStalled) as raised:
        _stream(build("httpx2"), mode, on_chunk=seen.append)
    assert raised.value.stage == "mid_stream"
    assert len(seen) == 2
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("kind", "resent"),
    [("UNAVAILABLE", True), ("RESOURCE_EXHAUSTED", True), ("INVALID_ARGUMENT", False)],
)
def test_an_error_event_before_output_is_re_sent_only_when_transient(
    server: FaultServer, build: Any, kind: str, resent: bool
) -> None:
    """A transient error event before any output is sent again; a request's own error reaches the caller as the SDK raises it."""
    server.scenario = Scenario.stall_first(1, stall=Scenario.error_in_stream(kind), then=RICH)
    if resent:
        assert _parts(_stream(build("httpx"), "sync"))[1] == ("text", "hello")
        assert len(server.requests) == 2
        return
    with pytest.raises(genai_errors.ClientError) as raised:
        _stream(build("httpx"), "sync")
    assert raised.value.code == 400
    assert len(server.requests) == 1


@pytest.mark.parametrize("flavor", FLAVOR_NAMES)
def test_a_stream_that_ends_without_a_finish_reason_is_a_protocol_error(
    server: FaultServer, build: Any, flavor: FlavorName
) -> None:
    """A body that ends cleanly before the chunk with a finish reason raises the HTTP library's RemoteProtocolError, which says so."""
    server.scenario = replace(RICH, end_after_events=2)
    http = pytest.importorskip(flavor)
    with pytest.raises(http.RemoteProtocolError, match="without a finish_reason"):
        _stream(build(flavor), "sync")


def test_an_interrupt_ends_the_wait_of_an_interactive_caller_at_once(
    server: FaultServer, build: Any
) -> None:
    """An interactive ("cli") caller streams on a worker: an interrupt from another thread ends its wait at once."""
    server.scenario = Scenario.silent_after(1)
    token = Interrupt()
    client = build("httpx2", "cli", policy=StreamPolicy(stale_timeout=60.0))
    when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.2)
    with pytest.raises(StreamInterrupted):
        stream_content(client, interrupt=token, **ARGS)
    assert time.monotonic() - when[0] < 2.0


@pytest.mark.parametrize(
    ("context", "inline"), [("cron", True), ("subagent", True), ("cli", False)]
)
def test_the_context_decides_whether_the_caller_streams_on_its_own_thread(
    server: FaultServer, build: Any, context: str, inline: bool
) -> None:
    """Background contexts stream on the caller's own thread, interactive ones on a worker, as for Chat Completions."""
    server.scenario = RICH
    threads: set[int] = set()
    stream_content(
        build("httpx2", context), on_chunk=lambda _: threads.add(threading.get_ident()), **ARGS
    )
    assert (threads == {threading.get_ident()}) is inline


def test_a_client_of_the_wrong_kind_is_named_with_its_runner(build: Any) -> None:
    """An async client given to the sync runner raises a TypeError that names the runner to use."""
    client = build("httpx2")
    with pytest.raises(TypeError, match=r"google\.genai\.client\.Client.*astream_content"):
        stream_content(client.aio, **ARGS)
    with pytest.raises(TypeError, match="client must be"):
        stream_content(object(), **ARGS)  # type: ignore[arg-type]


def test_the_sdk_retries_no_stall_whose_re_sends_are_spent(
    server: FaultServer, build: Any
) -> None:
    """With the SDK's own retries on, a stall whose re-sends are spent ends the call at once: the SDK neither sends it again nor sleeps a back-off for it."""
    server.scenario = Scenario.silent_before_headers()
    retry = types.HttpRetryOptions(attempts=4, initial_delay=2.0, max_delay=2.0)
    root = server.base_url.removesuffix("/v1")
    client = build(
        "httpx2",
        policy=StreamPolicy(stale_timeout=BUDGET, retries=1),
        http_options={"base_url": root, "retry_options": retry},
    )
    started = time.monotonic()
    with pytest.raises(StreamStalled):
        stream_content(client, **ARGS)
    assert len(server.requests) == 2  # the attempt and the transport's one re-send
    assert time.monotonic() - started < 2.0 + 4 * BUDGET  # no back-off of 2 s slept
