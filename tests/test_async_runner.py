"""astream_chat_completion and the async factories: the sync runner's promises on an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ssl
import threading
import time
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletionChunk
from test_factory import in_flavor

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    astream_chat_completion,
    async_openai_client_for,
    openai_client_for,
    stream_chat_completion,
)
from hermes_transport._io.loop_watchdog import loop_watchdog
from hermes_transport._transports.builder import SDK_MAX_CONNECTIONS, SDK_MAX_KEEPALIVE, profile_of
from hermes_transport.testing import TOOL_CALL_ARGUMENTS, TOOL_CALL_NAME, FaultServer, Scenario

from _support import (
    CONNECTION_SETTINGS,
    OPENAI_MAJOR,
    Flavor,
    chat_body,
    inner_transport_settings,
)

pytestmark = pytest.mark.anyio

MESSAGES = [{"role": "user", "content": "hi"}]
STALE = 0.3
# Interrupt or cancel to return: milliseconds are the target; machines are shared and noisy.
PROMPT = 5.0
# How long the call sits in a stage before it is interrupted or cancelled.
SETTLE = 0.05
REASON = "user pressed stop"


def _ignore_abandoned_async_generators() -> None:
    """Let trio's warnings about async generators collected unexhausted pass, for this test.

    The openai SDK's stream is a chain of async generators (the SDK's, httpx's, httpcore's
    and the transport's body) that it never closes itself: a chain left suspended at a
    yield is collected unexhausted, and trio warns about each generator in it (asyncio does
    not). openai 2.x and 3.x leave it so at every `data: [DONE]`, plain openai.AsyncOpenAI
    included; any SDK leaves it so when the consumer stops early (cancelled in on_delta).
    """
    warnings.filterwarnings(
        "ignore",
        message=r"Async generator '[\w.]+' was garbage collected",
        category=ResourceWarning,
    )


@pytest.fixture(autouse=True)
def _sdk_abandons_async_generators(anyio_backend: str) -> None:
    """On trio with openai 2.x and 3.x, every stream that ends leaves the chain behind."""
    if anyio_backend == "trio" and OPENAI_MAJOR >= 2:
        _ignore_abandoned_async_generators()


def _client(
    server: FaultServer, flavor: Flavor, platform: str = "cron", **kwargs: Any
) -> openai.AsyncOpenAI:
    """A factory client of `flavor` on the fault server."""
    kwargs.setdefault("policy", StreamPolicy(stale_timeout=STALE, retries=2))
    return async_openai_client_for(
        platform, base_url=server.base_url, api_key="x", flavor=flavor.name, **kwargs
    )


def _patient(server: FaultServer, flavor: Flavor, **kwargs: Any) -> openai.AsyncOpenAI:
    """A client whose watchdog never fires during a test: only interrupts and cancels end calls."""
    return _client(server, flavor, policy=StreamPolicy(stale_timeout=60.0, retries=2), **kwargs)


def _text(chunk: ChatCompletionChunk) -> str:
    return (chunk.choices[0].delta.content or "") if chunk.choices else ""


@pytest.fixture
def sdk_retries(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The async SDK's retries, recorded; their back-off sleeps are skipped (under the runner none may happen)."""
    import openai._base_client as base_client

    retries: list[int] = []

    async def sleep(self: object, *, retries_taken: int, **kwargs: object) -> None:
        retries.append(retries_taken)

    monkeypatch.setattr(base_client.AsyncAPIClient, "_sleep_for_retry", sleep)
    return retries


async def _until(ready: Callable[[], bool], timeout: float = 10.0) -> None:
    with anyio.fail_after(timeout):
        while not ready():
            await anyio.sleep(0.01)


def _fault_handlers() -> int:
    """Connections the fault server is serving now (one thread each)."""
    return sum(t.name.startswith("FaultServer-") for t in threading.enumerate())


def _assert_nothing_armed() -> None:
    watcher = loop_watchdog()
    assert watcher.live() == 0
    assert not watcher.alarm_set


# --- assembly ----------------------------------------------------------------------------


@pytest.mark.parametrize("platform", ["cron", "cli"])
async def test_content_tool_calls_finish_and_usage_are_assembled(
    server: FaultServer, sdk_flavor: Flavor, platform: str
) -> None:
    """The SDK's accumulator assembles content, tool calls, finish reason and usage into a ChatCompletion."""
    server.scenario = replace(Scenario.healthy(), tool_call=True)
    async with _client(server, sdk_flavor, platform) as client:
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    message = completion.choices[0].message
    assert message.content == "hello world"
    assert message.tool_calls is not None
    function = message.tool_calls[0].model_dump()["function"]
    assert function == {"name": TOOL_CALL_NAME, "arguments": TOOL_CALL_ARGUMENTS}
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.completion_tokens > 0
    assert type(completion) is openai.types.chat.ChatCompletion


@pytest.mark.parametrize("finish_reason", ["length", "content_filter"])
async def test_truncated_finishes_are_returned_not_raised(
    server: FaultServer, sdk_flavor: Flavor, finish_reason: str
) -> None:
    """A `length` or `content_filter` finish is a result, unlike in the SDK's parse helpers."""
    server.scenario = replace(Scenario.healthy(), finish_reason=finish_reason)
    async with _client(server, sdk_flavor) as client:
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert completion.choices[0].finish_reason == finish_reason
    assert completion.choices[0].message.content == "hello world"


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_on_delta_sees_every_chunk_in_order(
    server: FaultServer, sdk_flavor: Flavor, kind: str
) -> None:
    """on_delta (a function, or a coroutine function awaited before the next chunk) sees every chunk once, in order."""
    server.scenario = Scenario.healthy(content=("a", "b", "c"))
    log: list[str] = []

    def sync_delta(chunk: ChatCompletionChunk) -> None:
        log.append(_text(chunk))

    async def async_delta(chunk: ChatCompletionChunk) -> None:
        log.append("<")
        await anyio.sleep(0.01)  # the next chunk must wait for this one
        log.append(_text(chunk))

    on_delta = sync_delta if kind == "sync" else async_delta
    async with _client(server, sdk_flavor) as client:
        completion = await astream_chat_completion(
            client, model="m", messages=MESSAGES, on_delta=on_delta
        )
    seen = log if kind == "sync" else log[1::2]
    if kind == "async":
        assert log[0::2] == ["<"] * 4, "a chunk was delivered before the previous one was done"
    assert "".join(seen) == completion.choices[0].message.content == "abc"
    assert len(seen) == 4  # three pieces, then the finish chunk carrying usage


async def test_always_streams_on_the_wire(server: FaultServer, sdk_flavor: Flavor) -> None:
    """The request says stream=True; stream=False is refused before anything is sent."""
    async with _client(server, sdk_flavor) as client:
        await astream_chat_completion(client, model="m", messages=MESSAGES)
        with pytest.raises(ValueError, match="always streams"):
            await astream_chat_completion(client, model="m", messages=MESSAGES, stream=False)
    assert [r.stream for r in server.requests] == [True]


@pytest.mark.parametrize(
    "interrupt", [threading.Event(), "stop", object()], ids=["event", "str", "object"]
)
async def test_an_interrupt_that_is_not_an_interrupt_is_refused(
    server: FaultServer, sdk_flavor: Flavor, interrupt: object
) -> None:
    """interrupt= must be an Interrupt: anything else is a TypeError, and nothing is sent."""
    async with _client(server, sdk_flavor) as client:
        with pytest.raises(TypeError, match="Interrupt"):
            await astream_chat_completion(
                client,
                model="m",
                messages=MESSAGES,
                interrupt=interrupt,  # type: ignore[arg-type]
            )
    assert server.requests == []


async def test_a_plain_async_client_uses_its_transports_policy(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """A plain AsyncOpenAI over the flavor's AsyncWatchdogTransport works, with the transport's budgets."""
    policy = StreamPolicy(stale_timeout=STALE, retries=0)
    http_client = sdk_flavor.http.AsyncClient(
        transport=sdk_flavor.AsyncWatchdogTransport(policy=policy)
    )
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="x", http_client=http_client
    ) as client:
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
        assert completion.choices[0].message.content == "hello world"
        server.scenario = Scenario.comments_after(1)
        with pytest.raises(StreamStalled) as info:  # no re-send: the environment's has two
            await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert len(server.requests) == 2
    assert type(info.value) is sdk_flavor.StreamStalled


@pytest.mark.parametrize(
    ("status", "error"), [(400, openai.BadRequestError), (500, openai.InternalServerError)]
)
async def test_status_errors_pass_through(
    server: FaultServer, sdk_flavor: Flavor, status: int, error: type[openai.APIStatusError]
) -> None:
    """SDK errors that are not stalls or interrupts reach the caller as the SDK raised them."""
    server.scenario = Scenario.error(status)
    async with _client(server, sdk_flavor, max_retries=0) as client:
        with pytest.raises(error):
            await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert len(server.requests) == 1


# --- stalls: re-sends, one budget, one error -----------------------------------------------


async def test_a_stall_before_the_first_event_is_re_sent_by_the_transport(
    server: FaultServer, sdk_flavor: Flavor, sdk_retries: list[int]
) -> None:
    """A stream silent before its first event is sent again after the budget, unseen by the SDK."""
    server.scenario = Scenario.stall_first(1)
    started = time.monotonic()
    async with _client(server, sdk_flavor) as client:
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert time.monotonic() - started >= STALE
    assert completion.choices[0].message.content == "hello world"
    assert [r.attempt for r in server.requests] == [0, 1]
    assert sdk_retries == []


async def _bare_delta(chunk: ChatCompletionChunk) -> None:
    await anyio.sleep(0)


@pytest.mark.parametrize(
    ("on_delta", "first"),
    [(None, "hello"), (_bare_delta, "")],
    ids=["no-consumer", "consumer-saw-a-bare-role-delta"],
)
async def test_a_mid_stream_stall_nobody_saw_is_re_sent_without_duplicating_text(
    server: FaultServer,
    sdk_flavor: Flavor,
    on_delta: Callable[[ChatCompletionChunk], Any] | None,
    first: str,
) -> None:
    """A stall after a first event that showed no consumer any text is re-sent, and the reply is assembled once."""
    stall = replace(Scenario.comments_after(1), content=(first, "x"))
    server.scenario = Scenario.stall_first(1, stall=stall)
    async with _client(server, sdk_flavor) as client:
        completion = await astream_chat_completion(
            client, model="m", messages=MESSAGES, on_delta=on_delta
        )
    assert completion.choices[0].message.content == "hello world"
    assert len(server.requests) == 2


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_a_mid_stream_stall_after_text_was_delivered_raises(
    server: FaultServer, sdk_flavor: Flavor, kind: str
) -> None:
    """Text shown to the caller is never duplicated: the stall raises StreamStalled at once, not re-sent."""
    server.scenario = Scenario.comments_after(1)
    seen: list[str] = []

    async def async_delta(chunk: ChatCompletionChunk) -> None:
        seen.append(_text(chunk))

    def sync_delta(chunk: ChatCompletionChunk) -> None:
        seen.append(_text(chunk))

    async with _client(server, sdk_flavor) as client:
        with pytest.raises(StreamStalled) as info:
            await astream_chat_completion(
                client,
                model="m",
                messages=MESSAGES,
                on_delta=sync_delta if kind == "sync" else async_delta,
            )
    assert info.value.stage == "mid_stream"
    assert seen == ["hello"]
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("scenario", "retries", "stage"),
    [
        (Scenario.silent_before_headers(), 1, "first_event"),
        (Scenario.comments_after(1), 1, "mid_stream"),
        (Scenario.stall_first(1, then=Scenario.comments_after(1)), 2, "mid_stream"),
    ],
    ids=["early", "late", "early-then-late"],
)
async def test_attempts_never_exceed_the_budget_and_end_in_stream_stalled(
    server: FaultServer,
    sdk_flavor: Flavor,
    sdk_retries: list[int],
    scenario: Scenario,
    retries: int,
    stage: str,
) -> None:
    """Transport, runner and SDK re-sends share one budget of retries + 1 attempts, and the error is the flavor's own bare StreamStalled on every openai major."""
    server.scenario = scenario
    policy = StreamPolicy(stale_timeout=STALE, retries=retries)
    # The SDK's default max_retries=2.
    async with _client(server, sdk_flavor, policy=policy) as client:
        with pytest.raises(StreamStalled) as info:
            await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert len(server.requests) == retries + 1
    assert info.value.stage == stage
    assert info.value.attempts == retries + 1
    assert type(info.value) is sdk_flavor.StreamStalled
    assert not isinstance(info.value, openai.OpenAIError)
    assert sdk_retries == [], "the SDK retried a stall whose budget was spent"


async def test_a_new_call_gets_a_fresh_budget(server: FaultServer, sdk_flavor: Flavor) -> None:
    """The re-send budget belongs to one call: the next call on the client may re-send again."""
    server.scenario = Scenario.stall_first(1)
    async with _client(
        server, sdk_flavor, policy=StreamPolicy(stale_timeout=STALE, retries=1)
    ) as client:
        await astream_chat_completion(client, model="m", messages=MESSAGES)
        server.scenario = Scenario.stall_first(3)  # attempt 2 stalls, attempt 3 is healthy
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "hello world"
    assert len(server.requests) == 4


# --- interrupts: from another thread or from the loop ----------------------------------------


class _Call:
    """One call to interrupt: where it is, seen from the loop and from other threads."""

    def __init__(self, server: FaultServer) -> None:
        self.server = server
        self.sent_before = len(server.requests)
        self.chunks = 0

    def on_delta(self, chunk: ChatCompletionChunk) -> None:
        self.chunks += 1

    def reached(self, stage: str) -> Callable[[], bool]:
        if stage in ("headers", "first_event"):
            return lambda: len(self.server.requests) > self.sent_before
        return lambda: self.chunks > 0


async def _interrupted(
    call: Awaitable[object], token: Interrupt, ready: Callable[[], bool], source: str
) -> tuple[StreamInterrupted, float]:
    """Await `call`; once `ready()` held for SETTLE s, interrupt `token` from `source`.

    Returns the error raised and the seconds from the interrupt to the raise.
    """
    fired: list[float] = []

    def fire() -> None:
        fired.append(time.monotonic())
        token.interrupt(REASON)

    def from_thread() -> None:
        deadline = time.monotonic() + 10.0
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(SETTLE)
        fire()

    async def from_loop() -> None:
        await _until(ready)
        await anyio.sleep(SETTLE)
        fire()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            if source == "thread":
                threading.Thread(target=from_thread, daemon=True).start()
            else:
                tasks.start_soon(from_loop)
            with pytest.raises(StreamInterrupted) as info:
                await call
            raised = time.monotonic()
    return info.value, raised - fired[0]


@pytest.mark.parametrize(
    ("scenario", "stage", "source"),
    [
        (Scenario.silent_before_headers(), "headers", "thread"),
        (Scenario.silent_before_headers(), "headers", "loop"),
        (Scenario.comments_after(0), "first_event", "thread"),
        (Scenario.comments_after(1), "mid_stream", "thread"),
        (Scenario.comments_after(1), "mid_stream", "loop"),
        (Scenario.silent_after(1), "mid_stream", "thread"),
    ],
    ids=[
        "headers-thread",
        "headers-loop",
        "first-event-thread",
        "comments-thread",
        "comments-loop",
        "silent-thread",
    ],
)
async def test_an_interrupt_ends_the_call_promptly(
    server: FaultServer,
    sdk_flavor: Flavor,
    sdk_retries: list[int],
    scenario: Scenario,
    stage: str,
    source: str,
) -> None:
    """An interrupt from another thread or from a task on the loop raises StreamInterrupted at once, re-sent by nobody."""
    server.scenario = scenario
    token = Interrupt()
    call = _Call(server)
    async with _patient(server, sdk_flavor) as client:
        caught, latency = await _interrupted(
            astream_chat_completion(
                client, model="m", messages=MESSAGES, interrupt=token, on_delta=call.on_delta
            ),
            token,
            call.reached(stage),
            source,
        )
        _assert_nothing_armed()
    assert latency < PROMPT, f"the interrupt took {latency:.2f} s"
    assert caught.reason == REASON
    assert isinstance(caught, InterruptedError)
    assert caught.stage == stage
    assert len(server.requests) == 1
    assert sdk_retries == []


@pytest.mark.parametrize("given", ["factory", "runner", "bound"])
async def test_the_token_may_be_given_to_the_factory_the_runner_or_the_context(
    server: FaultServer, sdk_flavor: Flavor, given: str
) -> None:
    """A token given to async_openai_client_for, to astream_chat_completion or bound around the call stops it alike."""
    server.scenario = Scenario.comments_after(1)
    token = Interrupt()
    call = _Call(server)
    factory_token = token if given == "factory" else None
    runner_token = token if given == "runner" else None
    async with _patient(server, sdk_flavor, interrupt=factory_token) as client:
        with token.bind() if given == "bound" else contextlib.nullcontext():
            caught, latency = await _interrupted(
                astream_chat_completion(
                    client,
                    model="m",
                    messages=MESSAGES,
                    interrupt=runner_token,
                    on_delta=call.on_delta,
                ),
                token,
                call.reached("mid_stream"),
                "thread",
            )
    assert latency < PROMPT
    assert caught.reason == REASON
    assert caught.stage == "mid_stream"
    assert len(server.requests) == 1


@pytest.mark.parametrize("given", ["factory", "runner"])
async def test_an_interrupted_token_sends_nothing(
    server: FaultServer, sdk_flavor: Flavor, sdk_retries: list[int], given: str
) -> None:
    """A call made while its token is interrupted raises StreamInterrupted and never connects."""
    token = Interrupt()
    token.interrupt(REASON)
    factory_token = token if given == "factory" else None
    runner_token = token if given == "runner" else None
    async with _client(server, sdk_flavor, interrupt=factory_token) as client:
        with pytest.raises(StreamInterrupted) as info:
            await astream_chat_completion(
                client, model="m", messages=MESSAGES, interrupt=runner_token
            )
    assert info.value.reason == REASON
    assert info.value.stage == "before_sending"
    assert server.requests == []
    assert server.connections_opened == 0
    assert sdk_retries == []


async def test_on_delta_may_interrupt_its_own_call(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """A consumer that has seen enough fires the call's token from on_delta: the call stops there."""
    server.scenario = Scenario.comments_after(1)
    token = Interrupt()
    seen: list[str] = []

    def on_delta(chunk: ChatCompletionChunk) -> None:
        seen.append(_text(chunk))
        token.interrupt("enough")

    async with _patient(server, sdk_flavor) as client:
        with anyio.fail_after(PROMPT), pytest.raises(StreamInterrupted) as info:
            await astream_chat_completion(
                client, model="m", messages=MESSAGES, interrupt=token, on_delta=on_delta
            )
    assert seen == ["hello"]
    assert (info.value.reason, info.value.stage) == ("enough", "mid_stream")
    assert len(server.requests) == 1


async def test_an_error_in_on_delta_reaches_the_caller_unchanged(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Whatever on_delta raises ends the call as it is, with its connection closed and no re-send."""
    _ignore_abandoned_async_generators()  # the consumer stops the SDK's stream early

    class ConsumerError(Exception):
        pass

    async def on_delta(chunk: ChatCompletionChunk) -> None:
        raise ConsumerError("the UI went away")

    server.scenario = Scenario.comments_after(1)
    async with _patient(server, sdk_flavor) as client:
        with anyio.fail_after(PROMPT), pytest.raises(ConsumerError):
            await astream_chat_completion(client, model="m", messages=MESSAGES, on_delta=on_delta)
        await _until(lambda: _fault_handlers() == 0, timeout=PROMPT)
        _assert_nothing_armed()
    assert len(server.requests) == 1


async def test_a_token_stops_only_its_own_call(server: FaultServer, sdk_flavor: Flavor) -> None:
    """The runner binds its token to its own call: a concurrent call, and later calls, are untouched."""
    server.scenario = replace(Scenario.healthy(content=("x",) * 10), event_interval=0.05)
    token = Interrupt()
    results: dict[str, object] = {}
    bound = _Call(server)

    async def interrupted_call(client: openai.AsyncOpenAI) -> None:
        try:
            await astream_chat_completion(
                client, model="m", messages=MESSAGES, interrupt=token, on_delta=bound.on_delta
            )
        except StreamInterrupted as exc:
            results["bound"] = exc

    async def free_call(client: openai.AsyncOpenAI) -> None:
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
        results["free"] = completion.choices[0].message.content

    async with _patient(server, sdk_flavor) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(interrupted_call, client)
            tasks.start_soon(free_call, client)
            await _until(bound.reached("mid_stream"))
            await anyio.to_thread.run_sync(token.interrupt, REASON)
        assert isinstance(results["bound"], StreamInterrupted)
        assert results["free"] == "x" * 10
        server.scenario = Scenario.healthy()
        later = await astream_chat_completion(client, model="m", messages=MESSAGES)
        assert later.choices[0].message.content == "hello world"
        token.reset()
        again = await astream_chat_completion(
            client, model="m", messages=MESSAGES, interrupt=token
        )
        assert again.choices[0].message.content == "hello world"


# --- ordinary cancellation ------------------------------------------------------------------


def _cancel_scenario(stage: str) -> Scenario:
    return Scenario.silent_before_headers() if stage == "headers" else Scenario.comments_after(1)


class _Stuck:
    """A call that gets stuck at `stage`: waiting for headers, for the next chunk, or in on_delta."""

    def __init__(self, server: FaultServer, stage: str) -> None:
        self.stage = stage
        self.call = _Call(server)
        server.scenario = _cancel_scenario(stage)

    async def on_delta(self, chunk: ChatCompletionChunk) -> None:
        self.call.on_delta(chunk)
        if self.stage == "on_delta":
            await anyio.sleep_forever()

    def reached(self) -> Callable[[], bool]:
        return self.call.reached("headers" if self.stage == "headers" else "mid_stream")


async def _assert_hung_up_and_usable(
    server: FaultServer, client: openai.AsyncOpenAI, handlers: int
) -> None:
    """The server saw the cancelled call's connection close, and the client still works."""
    await _until(lambda: _fault_handlers() < handlers, timeout=PROMPT)
    _assert_nothing_armed()
    sent = len(server.requests)
    server.scenario = Scenario.healthy()
    completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "hello world"
    assert len(server.requests) == sent + 1


STAGES = ["headers", "mid_stream", "on_delta"]


@pytest.mark.parametrize(
    ("stage", "how"),
    [
        ("headers", "cancel"),
        ("mid_stream", "cancel"),
        ("on_delta", "cancel"),
        ("mid_stream", "deadline"),
    ],
)
async def test_a_cancel_scope_cancels_the_call_as_usual(
    server: FaultServer, sdk_flavor: Flavor, stage: str, how: str
) -> None:
    """A cancelled scope (cancel() from another task, or a move_on_after deadline) ends the call quietly and hangs up."""
    if stage == "on_delta":
        _ignore_abandoned_async_generators()
    stuck = _Stuck(server, stage)
    scope = anyio.CancelScope() if how == "cancel" else anyio.move_on_after(60.0)
    handlers: list[int] = []
    cancelled: list[float] = []

    async def cancel() -> None:
        await _until(stuck.reached())
        await anyio.sleep(SETTLE)
        handlers.append(_fault_handlers())
        cancelled.append(time.monotonic())
        if how == "cancel":
            scope.cancel()
        else:
            scope.deadline = anyio.current_time()  # the deadline passes now

    async with _patient(server, sdk_flavor) as client:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(cancel)
            with scope:
                await astream_chat_completion(
                    client, model="m", messages=MESSAGES, on_delta=stuck.on_delta
                )
            returned = time.monotonic()
        assert scope.cancelled_caught
        assert returned - cancelled[0] < PROMPT
        assert len(server.requests) == 1
        await _assert_hung_up_and_usable(server, client, handlers[0])


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("stage", STAGES)
async def test_task_cancel_raises_cancelled_error(
    server: FaultServer, sdk_flavor: Flavor, stage: str
) -> None:
    """task.cancel() ends the call with CancelledError, not one of ours, and hangs up on the server."""
    stuck = _Stuck(server, stage)
    async with _patient(server, sdk_flavor) as client:
        task = asyncio.ensure_future(
            astream_chat_completion(client, model="m", messages=MESSAGES, on_delta=stuck.on_delta)
        )
        await _until(stuck.reached())
        await asyncio.sleep(SETTLE)
        handlers = _fault_handlers()
        started = time.monotonic()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert time.monotonic() - started < PROMPT
        assert len(server.requests) == 1
        await _assert_hung_up_and_usable(server, client, handlers)


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_timeout_raises_timeout_error(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """asyncio.wait_for around a call stuck mid-stream raises the usual TimeoutError."""
    server.scenario = Scenario.comments_after(1)
    async with _patient(server, sdk_flavor) as client:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(
                astream_chat_completion(client, model="m", messages=MESSAGES), 0.5
            )
        _assert_nothing_armed()


# --- the factories ---------------------------------------------------------------------------


def _watchdog(client: Any, flavor: Flavor) -> Any:
    """The flavor's AsyncWatchdogTransport under `client`."""
    transport = client._transport
    assert isinstance(transport, flavor.AsyncWatchdogTransport)
    return transport


async def test_the_factories_return_async_clients_over_the_watchdog(sdk_flavor: Flavor) -> None:
    """async_http_client_for gives an AsyncClient of its library, async_openai_client_for an openai.AsyncOpenAI over one, both watched."""
    async with sdk_flavor.async_http_client_for("cron") as http_client:
        assert type(http_client) is sdk_flavor.http.AsyncClient
        _watchdog(http_client, sdk_flavor)
    async with async_openai_client_for("subagent", api_key="x", flavor=sdk_flavor.name) as sdk:
        assert isinstance(sdk, openai.AsyncOpenAI)
        assert isinstance(sdk._client, sdk_flavor.http.AsyncClient)
        _watchdog(sdk._client, sdk_flavor)


async def test_an_explicit_flavor_builds_on_that_library_and_streams(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """async_openai_client_for(flavor=...) puts the SDK on that library's AsyncClient (httpx on openai 3.x: the legacy path), and it streams."""
    async with _client(server, sdk_flavor, "subagent") as client:
        assert type(client._client) is sdk_flavor.http.AsyncClient
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "hello world"
    assert [r.stream for r in server.requests] == [True]


@pytest.mark.parametrize("platform", ["cron", "cli"])
async def test_the_async_clients_carry_the_policy_and_the_token(
    sdk_flavor: Flavor, platform: str
) -> None:
    """The policy and interrupt given to a factory are recorded on the client and applied by its transport."""
    policy = StreamPolicy(stale_timeout=42.0, first_event_timeout=7.0, retries=5)
    token = Interrupt()
    async with sdk_flavor.async_http_client_for(
        platform, policy=policy, interrupt=token
    ) as http_client:
        profile = profile_of(http_client)
        assert profile is not None
        assert (profile.policy, profile.interrupt) == (policy, token)
        assert _watchdog(http_client, sdk_flavor).policy == policy
    async with async_openai_client_for(
        platform, api_key="x", policy=policy, interrupt=token, flavor=sdk_flavor.name
    ) as sdk:
        profile = profile_of(sdk)
        assert profile is not None
        assert (profile.policy, profile.interrupt) == (policy, token)
        assert _watchdog(sdk._client, sdk_flavor).policy == policy


async def test_the_policy_defaults_to_the_environment(
    sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without policy=, the async factories read HERMES_STREAM_* like StreamPolicy.from_env()."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "12")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "4")
    expected = StreamPolicy(stale_timeout=12.0, retries=4)
    async with sdk_flavor.async_http_client_for("cron") as http_client:
        assert _watchdog(http_client, sdk_flavor).policy == expected
    async with async_openai_client_for("cron", api_key="x", flavor=sdk_flavor.name) as sdk:
        profile = profile_of(sdk)
        assert profile is not None
        assert profile.policy == expected
        assert _watchdog(sdk._client, sdk_flavor).policy == expected


@pytest.mark.parametrize("factory", ["http", "openai"])
async def test_tls_settings_reach_the_transport(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], sdk_flavor: Flavor, factory: str
) -> None:
    """A CA bundle given to an async factory is the one the watchdog transport verifies with."""
    with FaultServer(Scenario.healthy(), ssl_context=tls[0]) as server:
        if factory == "http":
            async with sdk_flavor.async_http_client_for("cron", verify=tls[1]) as trusted:
                response = await trusted.post(
                    server.base_url + "/chat/completions", json=chat_body()
                )
                assert b"[DONE]" in response.content
            async with sdk_flavor.async_http_client_for("cron") as untrusted:
                with pytest.raises(sdk_flavor.http.ConnectError) as info:
                    await untrusted.post(server.base_url + "/chat/completions", json=chat_body())
            causes: list[BaseException] = [info.value]
            while (cause := causes[-1].__cause__ or causes[-1].__context__) is not None:
                causes.append(cause)
            assert any(isinstance(cause, ssl.SSLCertVerificationError) for cause in causes)
        else:
            async with async_openai_client_for(
                "cron",
                base_url=server.base_url,
                api_key="x",
                verify=tls[1],
                flavor=sdk_flavor.name,
            ) as sdk:
                completion = await astream_chat_completion(sdk, model="m", messages=MESSAGES)
            assert completion.choices[0].message.content == "hello world"


@pytest.mark.parametrize(
    "settings",
    CONNECTION_SETTINGS,
    ids=lambda settings: next(iter(settings)),
)
async def test_connection_settings_configure_the_inner_transport(
    monkeypatch: pytest.MonkeyPatch, sdk_flavor: Flavor, settings: dict[str, Any]
) -> None:
    """Every connection setting given to the async factories is handed to the inner AsyncHTTPTransport of their library."""
    settings = in_flavor(settings, sdk_flavor)
    seen = inner_transport_settings(monkeypatch, sdk_flavor.http.AsyncHTTPTransport)
    await sdk_flavor.async_http_client_for("cron", **settings).aclose()
    await async_openai_client_for("cli", api_key="x", flavor=sdk_flavor.name, **settings).close()
    assert len(seen) == 2
    for kwargs in seen:
        for name, value in settings.items():
            assert kwargs[name] == value


@pytest.mark.parametrize("factory", ["http", "openai"])
async def test_http2_is_refused_by_the_async_factories(sdk_flavor: Flavor, factory: str) -> None:
    """Asking an async factory for HTTP/2 fails loudly instead of being dropped."""
    build: Callable[..., object] = (
        sdk_flavor.async_http_client_for
        if factory == "http"
        else functools.partial(async_openai_client_for, flavor=sdk_flavor.name)
    )
    with pytest.raises(ValueError, match="HTTP/2"):
        build("cron", api_key="x", http2=True)


@pytest.mark.parametrize("name", ["transport", "mounts"])
async def test_a_transport_of_ones_own_is_refused(flavor: Flavor, name: str) -> None:
    """async_http_client_for builds the transport; passing one would bypass the watchdog."""
    inner = flavor.http.AsyncHTTPTransport()
    given: dict[str, Any] = {name: inner if name == "transport" else {"all://": inner}}
    with pytest.raises(TypeError, match=name):
        flavor.async_http_client_for("cron", **given)
    await inner.aclose()


async def test_an_explicit_proxy_is_used(server: FaultServer, flavor: Flavor) -> None:
    """Requests go through the proxy given to the async factory."""
    proxy = server.base_url.removesuffix("/v1")
    async with flavor.async_http_client_for("cron", proxy=proxy) as client:
        await client.post("http://api.example.invalid/v1/chat/completions", json=chat_body())
    assert server.requests[0].path == "http://api.example.invalid/v1/chat/completions"


async def test_environment_proxies_are_honoured_like_httpx_does(
    server: FaultServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY reaches async factory clients (httpx drops it once a transport is given), and NO_PROXY exempts."""
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "direct.invalid")
    url = "http://{}/v1/chat/completions"
    async with flavor.async_http_client_for("cron") as client:
        await client.post(url.format("api.example.invalid"), json=chat_body(stream=False))
        with pytest.raises(flavor.http.ConnectError):
            await client.post(url.format("direct.invalid"), json=chat_body(stream=False))
    assert [r.path for r in server.requests] == [url.format("api.example.invalid")]
    async with flavor.async_http_client_for("cron", trust_env=False) as client:
        with pytest.raises(flavor.http.ConnectError):
            await client.post(url.format("api.example.invalid"), json=chat_body(stream=False))


async def test_proxied_streams_are_watched(
    server: FaultServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream that goes through an environment proxy still has the watchdog."""
    server.scenario = Scenario.comments_after(1)
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    policy = StreamPolicy(stale_timeout=STALE, retries=0)
    async with flavor.async_http_client_for("cron", policy=policy) as client:
        async with client.stream(
            "POST", "http://api.example.invalid/v1/chat/completions", json=chat_body()
        ) as response:
            with pytest.raises(StreamStalled) as info:
                await response.aread()
    assert len(server.requests) == 1
    assert type(info.value) is flavor.StreamStalled


@pytest.mark.parametrize(
    ("stale", "first", "read"),
    [
        (180.0, None, 600.0),
        (900.0, None, 905.0),
        (60.0, 1200.0, 1205.0),
        (None, None, 600.0),
        (30.0, float("inf"), 600.0),
    ],
)
async def test_default_timeouts_never_undercut_the_watchdog(
    sdk_flavor: Flavor, stale: float | None, first: float | None, read: float
) -> None:
    """Socket timeouts default to the SDK's, raised above the watchdog's budgets so it fires first."""
    policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first)
    expected = sdk_flavor.http.Timeout(read, connect=5.0)
    async with sdk_flavor.async_http_client_for("cron", policy=policy) as client:
        assert client.timeout == expected
    async with async_openai_client_for(
        "cli", api_key="x", policy=policy, flavor=sdk_flavor.name
    ) as sdk:
        assert sdk.timeout == expected


async def test_given_timeouts_and_limits_win(sdk_flavor: Flavor) -> None:
    """Caller-given httpx and openai settings win over the async factories' defaults."""
    limits = sdk_flavor.http.Limits(max_connections=2)
    async with sdk_flavor.async_http_client_for("cron", timeout=3.0, limits=limits) as client:
        assert client.timeout == sdk_flavor.http.Timeout(3.0)
        inner = _watchdog(client, sdk_flavor).inner
        assert inner._pool._max_connections == 2
    async with async_openai_client_for(
        "cron", api_key="x", timeout=7.0, max_retries=5, flavor=sdk_flavor.name
    ) as sdk:
        assert sdk.timeout == 7.0
        assert sdk.max_retries == 5


async def test_sdk_defaults_where_nothing_is_given(flavor: Flavor) -> None:
    """Without settings, the async factory client has the SDK's limits and follows redirects."""
    async with flavor.async_http_client_for("cli") as client:
        pool = _watchdog(client, flavor).inner._pool
        assert pool._max_connections == SDK_MAX_CONNECTIONS
        assert pool._max_keepalive_connections == SDK_MAX_KEEPALIVE
        assert client.follow_redirects is True


async def test_client_kwargs_reach_httpx_async_client(server: FaultServer, flavor: Flavor) -> None:
    """Event hooks and headers are AsyncClient settings and reach it."""
    seen: list[str] = []

    async def hook(request: Any) -> None:
        seen.append(request.headers["x-agent"])

    async with flavor.async_http_client_for(
        "cron", headers={"x-agent": "hermes"}, event_hooks={"request": [hook]}
    ) as client:
        await client.post(server.base_url + "/chat/completions", json=chat_body(stream=False))
    assert seen == ["hermes"]
    assert server.requests[0].headers["x-agent"] == "hermes"


async def test_a_given_http_client_is_used_as_given(sdk_flavor: Flavor) -> None:
    """async_openai_client_for uses a given http_client untouched, and remembers its policy and token."""
    policy = StreamPolicy(stale_timeout=42.0)
    token = Interrupt()
    http_client = sdk_flavor.async_http_client_for("cron", policy=policy, interrupt=token)
    async with async_openai_client_for("cron", api_key="x", http_client=http_client) as sdk:
        assert sdk._client is http_client
        profile = profile_of(sdk)
        assert profile is not None
        assert (profile.policy, profile.interrupt, profile.inline) == (policy, token, True)


async def test_connection_settings_next_to_a_given_http_client_are_refused(
    sdk_flavor: Flavor,
) -> None:
    """Settings that would be silently ignored next to a given http_client are an error."""
    async with sdk_flavor.http.AsyncClient() as given:
        with pytest.raises(TypeError, match="verify"):
            async_openai_client_for("cron", api_key="x", http_client=given, verify=False)


@pytest.mark.parametrize("runner", ["sync", "async"])
async def test_a_client_of_the_other_kind_is_refused_before_sending(
    server: FaultServer, sdk_flavor: Flavor, runner: str
) -> None:
    """Each runner refuses the other kind of client with a TypeError naming the right runner."""
    if runner == "sync":
        client: Any = async_openai_client_for(
            "cron", base_url=server.base_url, api_key="x", flavor=sdk_flavor.name
        )
        with pytest.raises(TypeError, match="astream_chat_completion"):
            stream_chat_completion(client, model="m", messages=MESSAGES)
        await client.close()
    else:
        client = openai_client_for(
            "cron", base_url=server.base_url, api_key="x", flavor=sdk_flavor.name
        )
        with pytest.raises(TypeError, match=r"openai\.AsyncOpenAI.*stream_chat_completion"):
            await astream_chat_completion(client, model="m", messages=MESSAGES)
        client.close()
    assert server.requests == []
