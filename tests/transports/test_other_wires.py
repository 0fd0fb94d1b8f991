"""The Responses and Anthropic Messages wires through the real SDKs: preamble, keepalives, error events.

Each test runs a real SDK over a watchdog transport on loopback against the
fault server. On every wire, events before the first output (lifecycle,
empty openings) and keepalives neither end the first-event wait nor count as
progress; a transient error event before any output is re-sent within the
re-send budget, then passed through as the SDK raises it today.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._core import calls
from hermes_transport.testing import (
    CHAT_COMPLETIONS_PATH,
    MESSAGES_PATH,
    RESPONSES_PATH,
    FaultServer,
    Scenario,
)

from _support import (
    OPENAI_MAJOR,
    Flavor,
    assert_prompt,
    ignore_abandoned_async_generators,
    interrupt_when,
)

RESPONSE: dict[str, Any] = {"model": "gpt-test", "input": "hi"}
MESSAGE: dict[str, Any] = {
    "model": "claude-test",
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "hi"}],
}
CHAT: dict[str, Any] = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}
KEEPALIVE_EVERY = 0.05
# Thinking behind keepalives for THINK seconds: longer than STALE, well within FIRST.
STALE, THINK, FIRST = 0.3, 0.9, 10.0


def _thinking(seconds: float) -> Scenario:
    return replace(Scenario.thinking(seconds, keepalive_interval=KEEPALIVE_EVERY), hold=10.0)


@pytest.fixture
def openai_client(server: FaultServer, sdk_flavor: Flavor) -> Iterator[Any]:
    """Builds sync openai clients of the SDK's flavor on the fault server; closes them."""
    clients: list[Any] = []

    def build(policy: StreamPolicy, **kwargs: Any) -> openai.OpenAI:
        kwargs.setdefault("max_retries", 0)
        client = openai.OpenAI(
            base_url=server.base_url,
            api_key="x",
            http_client=sdk_flavor.http_client_for("cron", policy=policy),
            **kwargs,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def anthropic_client(server: FaultServer) -> Iterator[Any]:
    """Builds sync anthropic clients (httpx2 flavor) on the fault server; closes them."""
    anthropic = pytest.importorskip("anthropic")
    ht2 = pytest.importorskip("hermes_transport.httpx2")
    clients: list[Any] = []

    def build(policy: StreamPolicy, **kwargs: Any) -> Any:
        kwargs.setdefault("max_retries", 0)
        client = anthropic.Anthropic(
            base_url=server.base_url.removesuffix("/v1"),
            api_key="x",
            http_client=ht2.http_client_for("cron", policy=policy),
            **kwargs,
        )
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def _response_text(client: openai.OpenAI, helper: bool) -> str:
    if helper:
        with client.responses.stream(**RESPONSE) as stream:
            for _ in stream:
                pass
            return str(stream.get_final_response().output_text)
    pieces = []
    for event in client.responses.create(stream=True, **RESPONSE):
        if event.type == "response.output_text.delta":
            pieces.append(event.delta)
    return "".join(pieces)


def _message_text(client: Any) -> str:
    with client.messages.stream(**MESSAGE) as stream:
        for _ in stream:
            pass
        return str(stream.get_final_message().content[0].text)


@pytest.mark.timing
@pytest.mark.parametrize("helper", [False, True], ids=["create", "stream"])
def test_a_response_that_thinks_behind_keepalives_within_the_first_event_budget_succeeds(
    server: FaultServer, openai_client: Any, helper: bool
) -> None:
    """Keepalives for longer than the stale budget, within the first-event one, then the answer: it succeeds."""
    client = openai_client(StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST))
    _response_text(client, helper)  # the SDK builds its event models once, slowly: not timed
    server.scenario = _thinking(THINK)
    assert _response_text(client, helper) == "hello world"
    assert [r.path for r in server.requests] == [RESPONSES_PATH] * 2


@pytest.mark.timing
def test_a_message_that_thinks_behind_pings_within_the_first_event_budget_succeeds(
    server: FaultServer, anthropic_client: Any
) -> None:
    """Pings after message_start for longer than the stale budget, then content: the message succeeds."""
    client = anthropic_client(StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST))
    _message_text(client)  # the SDK builds its event models once, slowly: not timed
    server.scenario = _thinking(THINK)
    assert _message_text(client) == "hello world"
    assert [r.path for r in server.requests] == [MESSAGES_PATH] * 2


@pytest.mark.timing
def test_a_response_that_only_keeps_alive_past_the_first_event_budget_is_re_sent_then_stalls(
    server: FaultServer, openai_client: Any
) -> None:
    """Only preamble and keepalives past the first-event budget: re-sent once, then StreamStalled(first_event)."""
    server.scenario = _thinking(30.0)
    client = openai_client(StreamPolicy(stale_timeout=0.2, first_event_timeout=0.6, retries=1))
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError) as info:
        _response_text(client, helper=False)
    stall = _stall_in(info.value)
    assert (stall.stage, stall.attempts) == ("first_event", 2)
    _says_what_came_before_output(
        stall, preamble=4
    )  # created, in progress, an empty item and part
    assert [r.path for r in server.requests] == [RESPONSES_PATH] * 2
    assert time.monotonic() - started < 10.0


@pytest.mark.timing
def test_a_message_that_only_pings_past_the_first_event_budget_stalls_at_the_first_event(
    server: FaultServer, anthropic_client: Any
) -> None:
    """message_start, an empty block and pings past the first-event budget: a first_event stall."""
    server.scenario = _thinking(30.0)
    import anthropic

    client = anthropic_client(StreamPolicy(stale_timeout=0.2, first_event_timeout=0.6, retries=0))
    with pytest.raises(anthropic.APITimeoutError) as info:
        _message_text(client)
    assert _stall_in(info.value).stage == "first_event"
    _says_what_came_before_output(_stall_in(info.value), preamble=2)  # message_start, empty block


def _says_what_came_before_output(stall: StreamStalled, *, preamble: int) -> None:
    """The stall's message says the model was heard from (preamble, keepalives), not silent."""
    said = re.search(
        r"; (\d+) preamble event\(s\) and (\d+) heartbeat\(s\) arrived, none", str(stall)
    )
    assert said is not None, str(stall)
    assert int(said.group(1)) == preamble
    assert int(said.group(2)) >= 2, str(stall)  # one every 50 ms for 0.6 s


def _stall_in(error: BaseException) -> StreamStalled:
    """The stall a bare SDK wrapped in its timeout error (its cause)."""
    cause = error.__cause__
    assert isinstance(cause, StreamStalled), repr(error)
    return cause


def _overloaded_first(wire: str) -> Scenario:
    kind = "overloaded_error" if wire == "messages" else "server_error"
    return Scenario.stall_first(1, stall=Scenario.error_in_stream(kind))


def _run(wire: str, openai_client: Any, anthropic_client: Any, policy: StreamPolicy) -> str:
    if wire == "messages":
        return _message_text(anthropic_client(policy))
    client = openai_client(policy)
    if wire == "responses":
        return _response_text(client, helper=True)
    pieces: list[str] = []
    for chunk in client.chat.completions.create(stream=True, **CHAT):
        pieces.extend(choice.delta.content or "" for choice in chunk.choices)
    return "".join(pieces)


PATHS = {
    "chat_completions": CHAT_COMPLETIONS_PATH,
    "responses": RESPONSES_PATH,
    "messages": MESSAGES_PATH,
}
WIRES = sorted(PATHS)


@pytest.mark.parametrize("wire", WIRES)
def test_an_overloaded_error_before_any_output_is_re_sent(
    server: FaultServer, openai_client: Any, anthropic_client: Any, wire: str
) -> None:
    """A transient error event before any output, then a healthy attempt: one call, two requests, the text."""
    server.scenario = _overloaded_first(wire)
    assert _run(wire, openai_client, anthropic_client, StreamPolicy(retries=1)) == "hello world"
    assert [r.path for r in server.requests] == [PATHS[wire]] * 2


def _sdk_error(wire: str) -> tuple[type[BaseException], ...]:
    if wire == "messages":
        import anthropic

        return (anthropic.APIError,)
    return (openai.APIError,)


@pytest.mark.parametrize("wire", WIRES)
@pytest.mark.parametrize("retries", [0, 2])
def test_once_the_re_sends_are_spent_the_error_event_passes_through(
    server: FaultServer, openai_client: Any, anthropic_client: Any, wire: str, retries: int
) -> None:
    """An error event on every attempt: re-sent ``retries`` times, then the SDK raises its own error for it."""
    kind = "overloaded_error" if wire == "messages" else "server_error"
    server.scenario = Scenario.error_in_stream(kind, message="try later")
    with pytest.raises(_sdk_error(wire)) as info:
        _run(wire, openai_client, anthropic_client, StreamPolicy(retries=retries))
    assert not isinstance(info.value, StreamStalled)
    assert "try later" in str(info.value)
    assert len(server.requests) == retries + 1


@pytest.mark.parametrize("wire", WIRES)
def test_an_error_that_is_not_transient_is_never_re_sent(
    server: FaultServer, openai_client: Any, anthropic_client: Any, wire: str
) -> None:
    """A request error event before any output passes through at once: one request, the SDK's error."""
    server.scenario = Scenario.error_in_stream("invalid_request_error", message="bad input")
    with pytest.raises(_sdk_error(wire)):
        _run(wire, openai_client, anthropic_client, StreamPolicy(retries=2))
    assert len(server.requests) == 1


@pytest.mark.parametrize("wire", WIRES)
def test_an_error_event_after_output_surfaces_without_a_re_send(
    server: FaultServer, openai_client: Any, anthropic_client: Any, wire: str
) -> None:
    """An overloaded error after content reached the caller: the SDK raises it, nothing is re-sent."""
    kind = "overloaded_error" if wire == "messages" else "server_error"
    server.scenario = Scenario.error_in_stream(kind, after_events=6, message="mid-answer")
    with pytest.raises(_sdk_error(wire)):
        _run(wire, openai_client, anthropic_client, StreamPolicy(retries=2))
    assert len(server.requests) == 1


def test_a_failed_response_before_any_output_is_re_sent(
    server: FaultServer, openai_client: Any
) -> None:
    """response.failed with a server_error before any output is re-sent like an error event."""
    failed = replace(
        Scenario.error_in_stream("server_error", after_events=2), error_as_response_failed=True
    )
    server.scenario = Scenario.stall_first(1, stall=failed)
    assert _response_text(openai_client(StreamPolicy(retries=1)), helper=True) == "hello world"
    assert len(server.requests) == 2


#: How the fault server keeps each wire's thinking alive.
KEEPALIVES = {
    "chat_completions": b": keepalive",
    "responses": b"event: keepalive",
    "messages": b"event: ping",
}
BODIES: dict[str, dict[str, Any]] = {
    "chat_completions": CHAT,
    "responses": RESPONSE,
    "messages": MESSAGE,
}


@pytest.mark.once  # no SDK: the same under every openai major
@pytest.mark.parametrize("wire", WIRES)
def test_every_event_reaches_the_caller_byte_for_byte(
    server: FaultServer, flavor: Flavor, wire: str
) -> None:
    """Preamble, keepalives and content arrive through the watchdog exactly as the server wrote them, in order."""
    server.scenario = replace(Scenario.thinking(0.3, keepalive_interval=0.05), hold=5.0)
    body = {**BODIES[wire], "stream": True}
    with flavor.http_client_for("cron", policy=StreamPolicy(stale_timeout=5.0)) as client:
        got = client.post(server.base_url + PATHS[wire].removeprefix("/v1"), json=body).content
    (sent,) = server.sent
    assert b"".join(data for _, data in sent.writes) == got
    assert len(got) == sent.body_bytes
    heartbeat = KEEPALIVES[wire]
    assert got.count(heartbeat) >= 2  # the keepalives of the thinking are there, not dropped


@pytest.mark.timing
def test_an_interrupt_during_the_back_off_ends_the_call_at_once(
    server: FaultServer, openai_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupted while waiting to re-send after an overloaded error: StreamInterrupted at once, nothing more sent."""
    monkeypatch.setattr(calls, "BACKOFF_FIRST", 5.0)
    monkeypatch.setattr(calls, "BACKOFF_LIMIT", 5.0)
    server.scenario = Scenario.error_in_stream("server_error")
    token = Interrupt()
    client = openai_client(StreamPolicy(retries=2))
    when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.2)
    with token.bind(), pytest.raises((StreamInterrupted, openai.APIConnectionError)) as info:
        _response_text(client, helper=False)
    assert_prompt(when, _interrupt_in(info.value), "before_sending")
    assert len(server.requests) == 1


def _interrupt_in(error: BaseException) -> StreamInterrupted:
    """The interrupt itself; openai 1.x wraps every error raised before the response."""
    if isinstance(error, StreamInterrupted):
        return error
    assert OPENAI_MAJOR == 1, repr(error)
    assert isinstance(error.__cause__, StreamInterrupted), repr(error)
    return error.__cause__


def test_the_resume_request_is_watched_as_a_stream(
    server: FaultServer, openai_client: Any
) -> None:
    """GET /responses/{id}?stream=true (no body, no Accept) is a stream: a silent one stalls at its first event."""
    client = openai_client(StreamPolicy(stale_timeout=5.0, retries=0))
    with client.responses.stream(**RESPONSE, background=True) as stream:  # only these resume
        for _ in stream:
            pass
        response_id = stream.get_final_response().id
    client = openai_client(StreamPolicy(stale_timeout=0.3, retries=1))
    resumed = client.responses.retrieve(response_id, stream=True)
    assert [e.type for e in resumed][-1] == "response.completed"
    server.scenario = Scenario.silent_before_headers()
    with pytest.raises(openai.APITimeoutError) as info:
        for _ in client.responses.retrieve(response_id, stream=True, starting_after=2):
            pass
    stall = _stall_in(info.value)
    assert (stall.stage, stall.attempts) == ("first_event", 2)
    resumes = [r for r in server.requests if r.method == "GET"]
    assert len(resumes) == 3


# --------------------------------------------------------------------------- async


@pytest.mark.anyio
async def test_async_an_overloaded_response_is_re_sent_then_streams(
    server: FaultServer, sdk_flavor: Flavor, sdk_abandons_async_generators: None
) -> None:
    """On an event loop too, a transient error before any output is re-sent after a back-off."""
    server.scenario = _overloaded_first("responses")
    http_client = sdk_flavor.async_http_client_for("cron", policy=StreamPolicy(retries=1))
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
    ) as client:
        async with client.responses.stream(**RESPONSE) as stream:
            async for _ in stream:
                pass
            final = await stream.get_final_response()
    assert final.output_text == "hello world"
    assert len(server.requests) == 2


@pytest.mark.anyio
async def test_async_an_overloaded_message_is_re_sent_then_streams(server: FaultServer) -> None:
    """anthropic.AsyncAnthropic: an overloaded_error before any output is re-sent; the text arrives."""
    anthropic = pytest.importorskip("anthropic")
    ht2 = pytest.importorskip("hermes_transport.httpx2")
    server.scenario = _overloaded_first("messages")
    client = anthropic.AsyncAnthropic(
        base_url=server.base_url.removesuffix("/v1"),
        api_key="x",
        http_client=ht2.async_http_client_for("cron", policy=StreamPolicy(retries=1)),
        max_retries=0,
    )
    async with client, client.messages.stream(**MESSAGE) as stream:
        assert await stream.get_final_text() == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.anyio
async def test_async_a_response_thinking_behind_keepalives_succeeds_and_past_its_budget_stalls(
    server: FaultServer, sdk_flavor: Flavor, sdk_abandons_async_generators: None
) -> None:
    """Keepalives past the stale budget, within the first-event one, succeed; past it, a first_event stall."""
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=1.5, retries=0)
    http_client = sdk_flavor.async_http_client_for("cron", policy=policy)
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
    ) as client:

        async def text() -> str:
            pieces = []
            async for event in await client.responses.create(stream=True, **RESPONSE):
                if event.type == "response.output_text.delta":
                    pieces.append(event.delta)
            return "".join(pieces)

        await text()  # the SDK builds its event models once, slowly: not timed
        server.scenario = _thinking(THINK)
        assert await text() == "hello world"
        server.scenario = _thinking(30.0)
        with pytest.raises(openai.APITimeoutError) as info:
            await text()
    assert _stall_in(info.value).stage == "first_event"


@pytest.mark.timing
@pytest.mark.anyio
async def test_async_an_interrupt_during_the_back_off_ends_the_call_at_once(
    server: FaultServer,
    sdk_flavor: Flavor,
    monkeypatch: pytest.MonkeyPatch,
    sdk_abandons_async_generators: None,
) -> None:
    """From another thread, an interrupt wakes the loop's back-off at once; nothing more is sent."""
    monkeypatch.setattr(calls, "BACKOFF_FIRST", 5.0)
    monkeypatch.setattr(calls, "BACKOFF_LIMIT", 5.0)
    server.scenario = Scenario.error_in_stream("server_error")
    token = Interrupt()
    http_client = sdk_flavor.async_http_client_for("cron", policy=StreamPolicy(retries=2))
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
    ) as client:
        when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.2)
        with token.bind(), pytest.raises((StreamInterrupted, openai.APIConnectionError)) as info:
            await client.responses.create(stream=True, **RESPONSE)
    assert_prompt(when, _interrupt_in(info.value), "before_sending")
    assert len(server.requests) == 1


async def _arun(wire: str, server: FaultServer, sdk_flavor: Flavor, policy: StreamPolicy) -> str:
    """One streaming call of ``wire`` on its async SDK client, its text."""
    if wire == "messages":
        anthropic = pytest.importorskip("anthropic")
        ht2 = pytest.importorskip("hermes_transport.httpx2")
        async with (
            anthropic.AsyncAnthropic(
                base_url=server.base_url.removesuffix("/v1"),
                api_key="x",
                http_client=ht2.async_http_client_for("cron", policy=policy),
                max_retries=0,
            ) as client,
            client.messages.stream(**MESSAGE) as stream,
        ):
            return str(await stream.get_final_text())
    http_client = sdk_flavor.async_http_client_for("cron", policy=policy)
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
    ) as client:
        pieces: list[str] = []
        if wire == "responses":
            async with client.responses.stream(**RESPONSE) as stream:
                async for event in stream:
                    if event.type == "response.output_text.delta":
                        pieces.append(event.delta)
        else:
            async for chunk in await client.chat.completions.create(stream=True, **CHAT):
                pieces.extend(choice.delta.content or "" for choice in chunk.choices)
        return "".join(pieces)


#: Each error event case: the scenario, the re-send budget, the requests the server sees,
#: whether the call succeeds.
def _transient_then_healthy(kind: str) -> Scenario:
    return Scenario.stall_first(1, stall=Scenario.error_in_stream(kind))


def _not_transient(_: str) -> Scenario:
    return Scenario.error_in_stream("invalid_request_error")


def _after_output(kind: str) -> Scenario:
    return Scenario.error_in_stream(kind, after_events=6)


ERROR_CASES: dict[str, tuple[Callable[[str], Scenario], int, int, bool]] = {
    "transient, then healthy": (_transient_then_healthy, 1, 2, True),
    "transient on every attempt": (Scenario.error_in_stream, 1, 2, False),
    "not transient": (_not_transient, 2, 1, False),
    "after output": (_after_output, 2, 1, False),
}


@pytest.mark.anyio
@pytest.mark.parametrize("case", sorted(ERROR_CASES))
@pytest.mark.parametrize("wire", WIRES)
async def test_async_error_events_are_re_sent_or_passed_through_as_on_a_thread(
    server: FaultServer,
    sdk_flavor: Flavor,
    sdk_abandons_async_generators: None,
    wire: str,
    case: str,
) -> None:
    """On an event loop, a transient error before output is re-sent within the budget; every other one passes through as the SDK's error."""
    if wire == "messages" and sdk_flavor.name != "httpx2":
        pytest.skip("the anthropic SDK runs on httpx2 whatever the openai flavor")
    scenario, retries, requests, succeeds = ERROR_CASES[case]
    server.scenario = scenario("overloaded_error" if wire == "messages" else "server_error")
    policy = StreamPolicy(retries=retries)
    if succeeds:
        assert await _arun(wire, server, sdk_flavor, policy) == "hello world"
    else:
        ignore_abandoned_async_generators()  # an SDK raising mid-stream leaves its chain
        with pytest.raises(_sdk_error(wire)) as info:
            await _arun(wire, server, sdk_flavor, policy)
        assert not isinstance(info.value, StreamStalled)
    assert [r.path for r in server.requests] == [PATHS[wire]] * requests


@pytest.mark.timing
@pytest.mark.anyio
async def test_async_a_message_thinking_behind_pings_succeeds_and_past_its_budget_stalls(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """AsyncAnthropic: pings past the stale budget within the first-event one succeed; past it, re-sent once, then a first_event stall."""
    anthropic = pytest.importorskip("anthropic")
    if sdk_flavor.name != "httpx2":
        pytest.skip("the anthropic SDK runs on httpx2 whatever the openai flavor")
    await _arun("messages", server, sdk_flavor, StreamPolicy())  # the SDK's models: not timed
    policy = StreamPolicy(stale_timeout=STALE, first_event_timeout=1.5, retries=1)
    server.scenario = _thinking(THINK)
    assert await _arun("messages", server, sdk_flavor, policy) == "hello world"
    server.scenario = _thinking(30.0)
    with pytest.raises(anthropic.APITimeoutError) as info:
        await _arun("messages", server, sdk_flavor, policy)
    stall = _stall_in(info.value)
    assert (stall.stage, stall.attempts) == ("first_event", 2)
    _says_what_came_before_output(stall, preamble=2)
