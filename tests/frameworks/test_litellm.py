"""litellm on the watchdog: ``litellm.completion(stream=True)`` and ``litellm.acompletion``.

The recipe passes the factories' SDK client per call: ``client=openai_client_for(...)``
(``async_openai_client_for(...)`` for ``acompletion``); litellm then sends through it
as it is (its ``base_url`` wins over an ``api_base``) but sets its ``max_retries`` to the
call's (``max_retries=``, default 2). The global ``litellm.client_session`` works too,
but litellm keeps the SDK client it builds on it, so it must be set once, before the first
call. litellm maps every error and raises its own without ``from``: ours is only in the
``__context__`` chain, where ``except StreamStalled`` never matches and ``stream_error``
finds it. A stall (after the first event, or before it with the re-sends spent) is
``litellm.Timeout`` (an ``openai.APITimeoutError``, 408); an interrupt mid-stream is
``MidStreamFallbackError`` (a ``ServiceUnavailableError``, with the 500 of the
``APIConnectionError`` it mapped ours to: the Router's cue to fall back), before the
response ``InternalServerError`` (500). litellm's own ``num_retries`` sends the whole call
again, each time with a fresh re-send budget. Nothing leaves loopback: the cost map is
the bundled one, offline mode is on and every name resolved must be loopback.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any, TypeVar

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    async_openai_client_for,
    http_client_for,
    openai_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import LOOPBACK, framework, interrupt_at, interrupting, litellm_offline
from _support import assert_prompt, record_sdk_sleeps

# Read at import: else litellm fetches its model cost map from GitHub as it loads.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
litellm: Any = framework("litellm")

import openai
from litellm.exceptions import (
    InternalServerError,
    MidStreamFallbackError,
    ServiceUnavailableError,
    Timeout,
)
from openai import _base_client

litellm.suppress_debug_info = True  # no "Give Feedback" banner printed per error
litellm.telemetry = False  # older releases' usage reports (this one has none outside its proxy)

# litellm's TypedDicts make pydantic warn as their schemas are built, on first use.
pytestmark = pytest.mark.filterwarnings("ignore:Items? .*ReadOnly. qualifier:UserWarning")

_LL_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=0.5, retries=1)
_LL_MESSAGES = [{"role": "user", "content": "hi"}]
_LlOurs = TypeVar("_LlOurs", StreamStalled, StreamInterrupted)


@pytest.fixture(scope="module", autouse=True)
def _ll_offline() -> Iterator[None]:
    """litellm offline for this module (``litellm_offline``), warmed up on one stream."""

    def warm_up() -> None:
        with FaultServer() as server, _ll_client(server, policy=StreamPolicy()) as client:
            assert "".join(_ll_stream(client)) == "hello world"

    with litellm_offline(litellm, warm_up) as resolved:
        yield
    assert set(resolved) <= LOOPBACK


@contextlib.contextmanager
def _ll_client(server: FaultServer, **kwargs: Any) -> Iterator[openai.OpenAI]:
    """The sync recipe's client: the factory's ``OpenAI`` on the fault server."""
    kwargs.setdefault("policy", _LL_POLICY)
    with openai_client_for("cli", base_url=server.base_url, api_key="x", **kwargs) as client:
        yield client


def _ll_drain(client: openai.OpenAI, seen: list[str]) -> None:
    """Read the recipe's stream to its end, noting each chunk's text as it arrives."""
    for text in _ll_stream(client):
        seen.append(text)


def _ll_stream(client: openai.OpenAI | None, **kwargs: Any) -> Iterator[str]:
    """The recipe's call: the text of each chunk of ``litellm.completion(stream=True)``."""
    for chunk in litellm.completion(
        model="openai/m", messages=_LL_MESSAGES, stream=True, client=client, **kwargs
    ):
        yield chunk.choices[0].delta.content or ""


def _ll_ours_as_context(exc: BaseException, ours: type[_LlOurs]) -> _LlOurs:
    """Our error in a litellm error: never its ``__cause__``, only found through ``__context__``."""
    assert exc.__cause__ is None
    found = stream_error(exc)
    assert isinstance(found, ours)
    return found


@pytest.mark.parametrize("flavor", [None, "httpx"], ids=["native", "httpx"])
def test_ll_a_healthy_stream_arrives_whole(server: FaultServer, flavor: Any) -> None:
    """litellm.completion(stream=True, client=...) streams the whole answer through the factory's client, of either flavor."""
    with _ll_client(server, flavor=flavor) as client:
        assert "".join(_ll_stream(client)) == "hello world"
    assert [r.stream for r in server.requests] == [True]


def test_ll_the_global_client_session_is_kept_from_the_first_call(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """litellm.client_session also streams through the watchdog, but litellm keeps the SDK client it built on the first one: a client set later is ignored."""
    used: list[str] = []
    with contextlib.ExitStack() as stack:
        for name in ("first", "later"):
            client = stack.enter_context(
                http_client_for(
                    "cli",
                    policy=_LL_POLICY,
                    event_hooks={"request": [lambda _, name=name: used.append(name)]},
                )
            )
            monkeypatch.setattr(litellm, "client_session", client)
            text = "".join(_ll_stream(None, api_base=server.base_url, api_key="x"))
            assert text == "hello world"
    assert used == ["first", "first"]


def test_ll_a_stall_after_the_first_event_is_a_litellm_timeout(server: FaultServer) -> None:
    """Silent after its first event, the stream raises litellm.Timeout, our mid-stream stall only in its context chain."""
    server.scenario = Scenario.silent_after(1)
    seen: list[str] = []
    with _ll_client(server) as client, pytest.raises(Timeout) as caught:
        _ll_drain(client, seen)
    assert seen == ["hello"]
    assert isinstance(caught.value, openai.APITimeoutError)
    assert isinstance(caught.value.__context__, openai.APITimeoutError)
    stall = _ll_ours_as_context(caught.value, StreamStalled)
    assert caught.value.__context__.__cause__ is stall
    assert stall.stage == "mid_stream"
    assert len(server.requests) == 1


def test_ll_a_stall_before_the_first_event_is_resent(server: FaultServer) -> None:
    """A stream silent before its headers is re-sent by the transport: the whole answer, two requests."""
    server.scenario = Scenario.stall_first(1)
    with _ll_client(server) as client:
        assert "".join(_ll_stream(client)) == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.parametrize(
    ("scenario", "stage", "raised"),
    [
        (Scenario.silent_before_headers(), "headers", InternalServerError),
        (Scenario.silent_after(1), "mid_stream", MidStreamFallbackError),
    ],
    ids=["headers", "mid_stream"],
)
def test_ll_an_interrupt_from_another_thread_is_prompt(
    server: FaultServer, scenario: Scenario, stage: str, raised: type[Exception]
) -> None:
    """An Interrupt bound around the call stops it promptly, as a litellm 500 error with our StreamInterrupted in its context chain."""
    server.scenario = scenario
    stop = Interrupt()
    seen: list[str] = []
    when = interrupt_at(stop, stage, server, seen)
    with _ll_client(server) as client, pytest.raises(raised) as caught, stop.bind():
        _ll_drain(client, seen)
    assert_prompt(when, _ll_ours_as_context(caught.value, StreamInterrupted), stage)
    assert getattr(caught.value, "status_code", None) == 500
    if raised is MidStreamFallbackError:
        assert isinstance(caught.value, ServiceUnavailableError)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "call_kwargs",
    [{}, {"max_retries": 0}],
    ids=["default", "zero"],
)
def test_ll_litellm_sets_the_clients_max_retries(
    server: FaultServer,
    monkeypatch: pytest.MonkeyPatch,
    call_kwargs: dict[str, Any],
) -> None:
    """A client's max_retries=0 is overwritten by the call's (2 by default), which costs an always-silent stream neither a request nor an SDK back-off more: the transport ends the call with the SDK's own APITimeoutError, which it does not retry."""
    sleeps = record_sdk_sleeps(monkeypatch, _base_client)
    server.scenario = Scenario.silent_before_headers()
    with _ll_client(server, max_retries=0) as client, pytest.raises(Timeout) as caught:
        list(_ll_stream(client, **call_kwargs))
    assert client.max_retries == call_kwargs.get("max_retries", 2)
    assert sleeps == []
    stall = _ll_ours_as_context(caught.value, StreamStalled)
    assert (stall.stage, stall.attempts) == ("first_event", 2)
    assert len(server.requests) == 2  # the first attempt and our one re-send


def test_ll_num_retries_multiply_the_resends(server: FaultServer) -> None:
    """litellm's own num_retries=2 sends the whole call three times, each with a fresh re-send budget: six requests."""
    server.scenario = Scenario.silent_before_headers()
    policy = StreamPolicy(stale_timeout=0.2, first_event_timeout=0.2, retries=1)
    with _ll_client(server, policy=policy) as client, pytest.raises(Timeout) as caught:
        list(_ll_stream(client, num_retries=2, max_retries=0))
    assert isinstance(stream_error(caught.value), StreamStalled)
    assert len(server.requests) == 6


@contextlib.asynccontextmanager
async def _ll_aclient(
    server: FaultServer, policy: StreamPolicy = _LL_POLICY
) -> AsyncIterator[openai.AsyncOpenAI]:
    """The async recipe's client: the factory's ``AsyncOpenAI`` on the fault server."""
    client = async_openai_client_for("cli", base_url=server.base_url, api_key="x", policy=policy)
    try:
        yield client
    finally:
        await client.close()


async def _ll_adrain(client: openai.AsyncOpenAI, seen: list[str]) -> None:
    """The async recipe's call: ``await litellm.acompletion(stream=True)``, read to its end."""
    stream = await litellm.acompletion(
        model="openai/m", messages=_LL_MESSAGES, stream=True, client=client
    )
    async for chunk in stream:
        seen.append(chunk.choices[0].delta.content or "")


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_ll_async_a_healthy_stream_arrives_whole(server: FaultServer) -> None:
    """litellm.acompletion(stream=True, client=...) streams the whole answer through the async factory client."""
    seen: list[str] = []
    async with _ll_aclient(server) as client:
        await _ll_adrain(client, seen)
    assert "".join(seen) == "hello world"
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_ll_async_a_stall_after_the_first_event_is_a_litellm_timeout(
    server: FaultServer,
) -> None:
    """Silent after its first event, the async stream raises litellm.Timeout, our mid-stream stall in its context chain."""
    server.scenario = Scenario.silent_after(1)
    seen: list[str] = []
    async with _ll_aclient(server) as client:
        with pytest.raises(Timeout) as caught:
            await _ll_adrain(client, seen)
    assert seen == ["hello"]
    assert _ll_ours_as_context(caught.value, StreamStalled).stage == "mid_stream"
    assert len(server.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_ll_async_a_stall_before_the_first_event_is_resent(server: FaultServer) -> None:
    """An async stream silent before its headers is re-sent by the transport: the whole answer, two requests."""
    server.scenario = Scenario.stall_first(1)
    seen: list[str] = []
    async with _ll_aclient(server) as client:
        await _ll_adrain(client, seen)
    assert "".join(seen) == "hello world"
    assert len(server.requests) == 2


@pytest.mark.timing
@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize(
    ("scenario", "stage", "from_task", "raised"),
    [
        (Scenario.silent_before_headers(), "headers", False, InternalServerError),
        (Scenario.silent_after(1), "mid_stream", False, MidStreamFallbackError),
        (Scenario.silent_after(1), "mid_stream", True, MidStreamFallbackError),
    ],
    ids=["headers-thread", "mid_stream-thread", "mid_stream-task"],
)
async def test_ll_async_an_interrupt_is_prompt(
    server: FaultServer, scenario: Scenario, stage: str, from_task: bool, raised: type[Exception]
) -> None:
    """An Interrupt bound around acompletion, fired from a thread or a task, stops it promptly, ours in the litellm error's context chain."""
    server.scenario = scenario
    stop = Interrupt()
    seen: list[str] = []
    async with interrupting(stop, stage, server, seen, from_task) as when:
        async with _ll_aclient(server) as client:
            with pytest.raises(raised) as caught, stop.bind():
                await _ll_adrain(client, seen)
    assert_prompt(when, _ll_ours_as_context(caught.value, StreamInterrupted), stage)
