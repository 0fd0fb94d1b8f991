"""The type test of the public API: what a caller's type checker sees.

The check gate (``tools/check.py``) type-checks this file with mypy --strict; it is
never run (and pytest does not collect it). Each ``assert_type`` pins a type the public
API promises. Each ``# type: ignore[code]`` marks a misuse that must stay an error:
mypy's ``warn_unused_ignores`` (part of ``strict``) fails the check if it stops being one.
Everything sits in functions, so even importing the file does nothing.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import replace
from typing import Literal

import anthropic
import httpx
import httpx2
import openai
from anthropic.types import Message, RawMessageStreamEvent
from google import genai
from google.genai import types as genai_types
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from typing_extensions import assert_type

import hermes_transport
from hermes_transport import (
    AsyncWatchdogTransport,
    AsyncWatchedConnection,
    BudgetRules,
    CallBudgets,
    DefaultSeconds,
    Interrupt,
    McpStats,
    ModelBudget,
    ResumeCheckpoint,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    ToolBudget,
    WatchdogTransport,
    WatchedConnection,
    WatchedWebSocket,
    aresume_response,
    astream_chat_completion,
    astream_content,
    astream_message,
    astream_response,
    async_http_client_for,
    async_openai_client_for,
    awatch_connection,
    awatch_websocket,
    genai_client_for,
    http_client_for,
    mcp_http_client_for,
    openai_client_for,
    resume_response,
    should_stream_inline,
    stream_chat_completion,
    stream_content,
    stream_error,
    stream_message,
    stream_response,
    watch_connection,
)
from hermes_transport import httpx2 as ht2
from hermes_transport.testing import FaultServer, RecordedRequest, Scenario

Stage = Literal["first_event", "mid_stream"]


def version() -> None:
    assert_type(hermes_transport.__version__, str)


def transports(
    inner: httpx.BaseTransport, async_inner: httpx.AsyncBaseTransport, token: Interrupt
) -> None:
    policy = StreamPolicy(stale_timeout=60.0)
    transport = WatchdogTransport(inner=inner, policy=policy, interrupt=token)
    assert_type(transport, WatchdogTransport)
    assert_type(transport.inner, httpx.BaseTransport)
    assert_type(transport.policy, StreamPolicy)
    as_httpx: httpx.BaseTransport = transport
    httpx.Client(transport=as_httpx)
    WatchdogTransport()  # every argument is optional
    WatchdogTransport(inner, verify=False, retries=1)  # httpx.HTTPTransport's settings
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    assert_type(transport.handle_request(request), httpx.Response)

    async_transport = AsyncWatchdogTransport(async_inner, policy=None, interrupt=None)
    assert_type(async_transport.inner, httpx.AsyncBaseTransport)
    httpx.AsyncClient(transport=async_transport)

    WatchdogTransport(inner, policy)  # type: ignore[call-arg]
    WatchdogTransport(async_inner)  # type: ignore[arg-type]
    AsyncWatchdogTransport(inner)  # type: ignore[arg-type]
    WatchdogTransport(inner, policy=60.0)  # type: ignore[arg-type]
    httpx.Client(transport=async_transport)  # type: ignore[arg-type]


def policies(environ: dict[str, str]) -> None:
    policy = StreamPolicy()
    assert_type(policy.stale_timeout, float | None)
    assert_type(policy.retries, int)
    assert_type(policy.resumes, int)
    assert_type(policy.cancel_on_interrupt, bool)
    assert_type(policy.heartbeat_events, Collection[str])
    assert_type(policy.heartbeats_for("responses"), frozenset[str])
    policy.heartbeats_for("chat")  # type: ignore[arg-type]
    assert_type(policy.stale_budget, float | None)
    assert_type(policy.first_event_budget, float | None)
    StreamPolicy(stale_timeout=None, first_event_timeout=None, retries=0)
    StreamPolicy(resumes=0, cancel_on_interrupt=False)
    StreamPolicy(resumes="3")  # type: ignore[arg-type]
    StreamPolicy(stale_timeout=math.inf, first_event_timeout=2.5)
    StreamPolicy(heartbeat_events=frozenset({"ping", "tick"}))
    StreamPolicy(heartbeat_events={"responses": ["keepalive"], "messages": ()})
    assert_type(StreamPolicy.from_env(), StreamPolicy)
    assert_type(StreamPolicy.from_env(environ, retries=1), StreamPolicy)
    assert_type(replace(policy, retries=5), StreamPolicy)

    StreamPolicy(60.0)  # type: ignore[call-arg]
    StreamPolicy(stale_timeout="60")  # type: ignore[arg-type]
    StreamPolicy(retries=1.5)  # type: ignore[arg-type]
    StreamPolicy(stale=60.0)  # type: ignore[call-arg]
    policy.retries = 3  # type: ignore[misc]


def budgets_and_stats(exc: Exception) -> None:
    policy = StreamPolicy(stale_timeout=DefaultSeconds(60.0), budget_rules=BudgetRules())
    assert_type(policy.budgets_for("o3", 1000), CallBudgets)
    assert_type(policy.budgets_for(), CallBudgets)
    assert_type(policy.budgets_for("o3").first_event, float | None)
    assert_type(policy.budget_rules, BudgetRules | None)
    assert_type(policy.longest_budget, float)
    StreamPolicy(budget_rules=None)
    BudgetRules(models=[ModelBudget("o3*", first_event=600.0, stale=...)], prompt_floors=[])
    ModelBudget("o3*", first_event="600")  # type: ignore[arg-type]
    StreamPolicy(budget_rules=[ModelBudget("x")])  # type: ignore[arg-type]
    BudgetRules(tools=[ToolBudget("search_*", first_event=30.0, stale=None)])
    assert_type(policy.budgets_for(mcp=True, tool="search_web").stale, float | None)
    assert_type(stream_error(exc), StreamStalled | StreamInterrupted | None)

    def on_stats(stats: StreamStats) -> None:
        assert_type(
            stats.outcome, Literal["completed", "stalled", "interrupted", "error", "closed"]
        )
        assert_type(stats.first_output, float | None)
        assert_type(stats.budgets, CallBudgets)
        assert_type(stats.events, int | None)
        assert_type(stats.mcp, McpStats | None)
        if stats.mcp is not None:
            assert_type(stats.mcp.attributes, dict[str, str])
            assert_type(stats.mcp.progress, int)

    WatchdogTransport(on_stats=on_stats)
    AsyncWatchdogTransport(on_stats=on_stats)
    ht2.WatchdogTransport(on_stats=on_stats)
    http_client_for("cron", on_stats=on_stats)
    openai_client_for("cron", on_stats=print)
    WatchdogTransport(on_stats=7)  # type: ignore[arg-type]


def http_clients(token: Interrupt) -> None:
    assert_type(http_client_for("cron"), httpx.Client)
    assert_type(
        http_client_for(
            None,
            api_mode="chat_completions",
            provider="openrouter",
            policy=StreamPolicy(),
            interrupt=token,
            timeout=30.0,
            verify=False,
        ),
        httpx.Client,
    )
    assert_type(async_http_client_for("cli"), httpx.AsyncClient)

    http_client_for()  # type: ignore[call-arg]
    http_client_for("cron", "responses")  # type: ignore[call-arg]
    http_client_for(7)  # type: ignore[arg-type]


def sdk_clients(token: Interrupt) -> None:
    assert_type(openai_client_for("cron", api_key="x"), openai.OpenAI)
    assert_type(
        openai_client_for("cli", policy=StreamPolicy(), interrupt=token, flavor="httpx"),
        openai.OpenAI,
    )
    assert_type(openai_client_for(None, flavor="httpx2", max_retries=0), openai.OpenAI)
    assert_type(async_openai_client_for("cron", flavor=None), openai.AsyncOpenAI)
    assert_type(should_stream_inline("cron"), bool)
    assert_type(should_stream_inline("cli", "chat_completions", "moa"), bool)

    openai_client_for("cron", flavor="requests")  # type: ignore[arg-type]
    async_openai_client_for("cron", flavor="aiohttp")  # type: ignore[arg-type]

    assert_type(genai_client_for("cron", api_key="x"), genai.Client)
    assert_type(
        genai_client_for("cli", flavor="httpx", policy=StreamPolicy(), interrupt=token),
        genai.Client,
    )
    genai_client_for("cron", flavor="aiohttp")  # type: ignore[arg-type]
    assert_type(mcp_http_client_for("cron", policy=StreamPolicy()), httpx2.AsyncClient)


def chat(client: openai.OpenAI, async_client: openai.AsyncOpenAI, token: Interrupt) -> None:
    def on_delta(chunk: ChatCompletionChunk) -> None:
        pass

    completion = stream_chat_completion(
        client,
        inline=False,
        interrupt=token,
        on_delta=on_delta,
        model="m",
        messages=[{"role": "user", "content": "hi"}],
    )
    assert_type(completion, ChatCompletion)
    assert_type(stream_chat_completion(client, model="m", messages=[]), ChatCompletion)

    stream_chat_completion(async_client, model="m")  # type: ignore[arg-type]
    stream_chat_completion(client, on_delta=print, model="m")
    stream_chat_completion(client, on_delta=len, model="m")  # type: ignore[arg-type]


async def async_chat(client: openai.OpenAI, async_client: openai.AsyncOpenAI) -> None:
    async def on_delta(chunk: ChatCompletionChunk) -> None:
        pass

    def on_delta_sync(chunk: ChatCompletionChunk) -> None:
        pass

    completion = await astream_chat_completion(async_client, on_delta=on_delta, model="m")
    assert_type(completion, ChatCompletion)
    assert_type(
        await astream_chat_completion(async_client, on_delta=on_delta_sync, model="m"),
        ChatCompletion,
    )

    await astream_chat_completion(client, model="m")  # type: ignore[arg-type]


def responses(client: openai.OpenAI, async_client: openai.AsyncOpenAI, token: Interrupt) -> None:
    def on_event(event: ResponseStreamEvent) -> None:
        pass

    response = stream_response(
        client, inline=True, interrupt=token, on_event=on_event, model="m", input="hi"
    )
    assert_type(response, Response)
    assert_type(stream_response(client, model="m", input="hi"), Response)

    stream_response(async_client, model="m")  # type: ignore[arg-type]
    stream_response(client, on_event=len, model="m")  # type: ignore[arg-type]

    kept: list[ResumeCheckpoint] = []
    stream_response(client, on_checkpoint=kept.append, background=True, model="m")
    checkpoint = ResumeCheckpoint.from_json(kept[-1].to_json())
    assert_type(checkpoint.sequence_number, int)
    assert_type(checkpoint.created_at, float | None)
    assert_type(resume_response(client, checkpoint, on_event=on_event), Response)
    resume_response(client, checkpoint.to_json())  # type: ignore[arg-type]
    resume_response(async_client, checkpoint)  # type: ignore[arg-type]
    WatchdogTransport(on_checkpoint=kept.append)
    openai_client_for("cron", on_checkpoint=kept.append)
    StreamPolicy(checkpoint_interval=None)


async def async_responses(client: openai.OpenAI, async_client: openai.AsyncOpenAI) -> None:
    async def on_event(event: ResponseStreamEvent) -> None:
        pass

    assert_type(await astream_response(async_client, on_event=on_event, model="m"), Response)
    assert_type(await astream_response(async_client, on_event=print, model="m"), Response)

    await astream_response(client, model="m")  # type: ignore[arg-type]
    checkpoint = ResumeCheckpoint("resp_1", 7)
    assert_type(await aresume_response(async_client, checkpoint, on_event=on_event), Response)
    await aresume_response(client, checkpoint)  # type: ignore[arg-type]


def websocket(client: openai.OpenAI, token: Interrupt) -> None:
    stats: list[StreamStats] = []
    watched = watch_connection(
        client.responses.connect(), policy=StreamPolicy(), interrupt=token, on_stats=stats.append
    )
    assert_type(watched, WatchedConnection)
    with watched as conn:
        assert_type(conn, WatchedConnection)
        assert_type(conn.recv_bytes(), bytes)
        conn.close(code=1000, reason="done")
    watch_connection(client.responses.connect(), policy=60)  # type: ignore[arg-type]
    watch_connection(client.responses.connect(), on_stats=token)  # type: ignore[arg-type]


async def async_websocket(client: openai.AsyncOpenAI) -> None:
    async with awatch_connection(client.responses.connect()) as conn:
        assert_type(conn, AsyncWatchedConnection)
        assert_type(await conn.recv_bytes(), bytes)

    async def reopen() -> object:
        return object()

    def not_awaitable() -> object:
        return object()

    bare = awatch_websocket(object(), policy=StreamPolicy(), reopen=reopen)
    assert_type(bare, WatchedWebSocket)
    assert_type(await bare.recv(), str | bytes)
    awatch_websocket(object(), reopen=not_awaitable)  # type: ignore[arg-type]


def messages(
    client: anthropic.Anthropic, async_client: anthropic.AsyncAnthropic, token: Interrupt
) -> None:
    def on_event(event: RawMessageStreamEvent) -> None:
        pass

    message = stream_message(
        client,
        inline=False,
        interrupt=token,
        on_event=on_event,
        model="claude",
        max_tokens=64,
        messages=[{"role": "user", "content": "hi"}],
    )
    assert_type(message, Message)

    stream_message(async_client, model="claude")  # type: ignore[arg-type]
    stream_message(openai.OpenAI(), model="claude")  # type: ignore[arg-type]
    stream_message(client, on_event=len, model="claude")  # type: ignore[arg-type]


async def async_messages(
    client: anthropic.Anthropic, async_client: anthropic.AsyncAnthropic
) -> None:
    async def on_event(event: RawMessageStreamEvent) -> None:
        pass

    assert_type(await astream_message(async_client, on_event=on_event, model="c"), Message)
    assert_type(await astream_message(async_client, on_event=print, model="c"), Message)

    await astream_message(client, model="claude")  # type: ignore[arg-type]


def errors(stall: StreamStalled, stall2: ht2.StreamStalled, stop: StreamInterrupted) -> None:
    assert_type(stall.stage, Stage)
    assert_type(stall.budget, float)
    assert_type(stall.elapsed, float)
    assert_type(stall.attempts, int)
    as_read_timeout: httpx.ReadTimeout = stall
    as_protocol_error: httpx.RemoteProtocolError = stall
    # The httpx2 flavor's stall is both libraries' errors, and hermes' own.
    as_ours: StreamStalled = stall2
    as_read_timeout2: httpx2.ReadTimeout = stall2
    as_protocol_error2: httpx2.RemoteProtocolError = stall2
    assert_type(stop.reason, str)
    stage: str | None = stop.stage  # where the call was when it stopped
    as_interrupted: InterruptedError = stop
    StreamStalled(
        "stalled", request=None, stage="first_event", budget=1.0, elapsed=1.2, attempts=3
    )
    StreamInterrupted("user pressed stop")

    stall.stage = "later"  # type: ignore[assignment]
    StreamStalled("stalled", stage="first_event", budget=1.0, elapsed=1.2)  # type: ignore[call-arg]
    as_timeout: httpx.ReadTimeout = stop  # type: ignore[assignment]
    del as_read_timeout, as_protocol_error, as_ours, as_read_timeout2, as_protocol_error2
    del as_interrupted, as_timeout, stage


def interrupts() -> None:
    token = Interrupt()
    assert_type(token.interrupted, bool)
    assert_type(token.reason, str | None)
    token.interrupt()
    token.interrupt("user pressed stop")
    token.reset()
    assert_type(token.wait(), bool)
    assert_type(token.wait(0.5), bool)
    with token.bind() as bound:
        assert_type(bound, Interrupt)

    token.interrupt(reason=1)  # type: ignore[arg-type]
    token.interrupted = True  # type: ignore[misc]


def httpx2_flavor(inner: httpx2.BaseTransport, async_inner: httpx2.AsyncBaseTransport) -> None:
    transport = ht2.WatchdogTransport(inner, policy=StreamPolicy(), interrupt=Interrupt())
    assert_type(transport.inner, httpx2.BaseTransport)
    httpx2.Client(transport=transport)
    httpx2.AsyncClient(transport=ht2.AsyncWatchdogTransport(async_inner))
    client = ht2.http_client_for("cron", policy=StreamPolicy(stale_timeout=120.0))
    assert_type(client, httpx2.Client)
    assert_type(ht2.async_http_client_for("cli"), httpx2.AsyncClient)
    anthropic.Anthropic(http_client=client)
    anthropic.AsyncAnthropic(http_client=ht2.async_http_client_for("cli"))

    ht2.WatchdogTransport(httpx.HTTPTransport())  # type: ignore[arg-type]
    httpx.Client(transport=transport)  # type: ignore[arg-type]
    anthropic.Anthropic(http_client=http_client_for("cron"))  # type: ignore[arg-type]


def fault_server() -> None:
    with FaultServer(Scenario.stall_first(1)) as server:
        assert_type(server, FaultServer)
        assert_type(server.base_url, str)
        assert_type(server.port, int)
        assert_type(server.requests, list[RecordedRequest])
        assert_type(server.requests[0].attempt, int)
        assert_type(server.connections_opened, int)
        assert_type(server.wait_for_requests(2), bool)
        server.scenario = replace(Scenario.silent_after(2), crlf=True, hold=1.0)
        assert_type(server.scenario, Scenario)
    assert_type(Scenario.healthy(), Scenario)
    assert_type(Scenario.error(503), Scenario)
    assert_type(FaultServer().start(), FaultServer)
    assert_type(FaultServer(resume_window=1.0, cancel_delay=0.5).cancel_delay, float)
    assert_type(Scenario(end_after_events=3, keepalive_numbers=2, retry_after=1.5), Scenario)

    FaultServer("healthy")  # type: ignore[arg-type]
    FaultServer(cancel_delay="1")  # type: ignore[arg-type]
    server.requests.append("GET /")  # type: ignore[arg-type]


def gemini(client: genai.Client, token: Interrupt) -> None:
    def on_chunk(chunk: genai_types.GenerateContentResponse) -> None:
        pass

    assert_type(
        stream_content(client, interrupt=token, on_chunk=on_chunk, model="m", contents="hi"),
        genai_types.GenerateContentResponse,
    )
    stream_content(client, inline=True, model="m", contents="hi")
    stream_content(client, on_chunk=print, model="m", contents="hi")
    stream_content(client, inline="yes", model="m")  # type: ignore[arg-type]


async def agemini(client: genai.Client, token: Interrupt) -> None:
    async def on_chunk(chunk: genai_types.GenerateContentResponse) -> None:
        pass

    assert_type(
        await astream_content(client, interrupt=token, on_chunk=on_chunk, model="m", contents="x"),
        genai_types.GenerateContentResponse,
    )
    await astream_content(client.aio, model="m", contents="x")
