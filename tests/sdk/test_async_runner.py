"""astream_chat_completion: the sync runner's promises on an event loop."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

import anyio
import openai
import pytest
from openai.types.chat import ChatCompletionChunk

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    astream_chat_completion,
)
from hermes_transport._io.loop_watchdog import loop_watchdog
from hermes_transport.testing import TOOL_CALL_ARGUMENTS, TOOL_CALL_NAME, FaultServer, Scenario

from _support import Flavor, ignore_abandoned_async_generators
from _support import async_sdk_client as _client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("sdk_abandons_async_generators")]

MESSAGES = [{"role": "user", "content": "hi"}]
STALE = 0.3
# Interrupt or cancel to return: milliseconds are the target; machines are shared and noisy.
PROMPT = 5.0
# How long the call sits in a stage before it is interrupted or cancelled.
SETTLE = 0.05
REASON = "user pressed stop"


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
    # Only the stale budget is under test: a busy machine may take longer than it to connect.
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=10.0, retries=0)
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
    ignore_abandoned_async_generators()  # the consumer stops the SDK's stream early

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
        ignore_abandoned_async_generators()
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
