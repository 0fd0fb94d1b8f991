"""litellm on the watchdog with Gemini: the ``gemini/`` provider on the factories' http clients.

litellm's ``gemini/`` provider does not run on google-genai: it posts to
``streamGenerateContent`` itself, through its own ``HTTPHandler`` (sync) and
``AsyncHTTPHandler`` (async) over httpx, and takes one of them per call as ``client=``.
The recipe wraps the httpx flavor's factory clients: ``HTTPHandler(client=http_client_for(...))``
for ``completion``, and ``AsyncHTTPHandler(transport=AsyncWatchdogTransport(...))`` for
``acompletion`` (``AsyncHTTPHandler`` takes no client,
only a transport, and builds its httpx client around it). ``api_base`` is the Gemini
API's root with its version (``.../v1beta``). litellm maps every error and raises its own
without ``from``: ours is only in the ``__context__`` chain, where ``stream_error`` finds
it. A stall after output is ``MidStreamFallbackError`` (a ``ServiceUnavailableError``, its
message naming ``litellm.Timeout``), as on the openai wire; an interrupt, before the
headers or mid-stream, is ``MidStreamFallbackError`` too (litellm opens the gemini stream
inside its iterator, so even a stop before the headers comes out as a mid-stream error:
check ``stream_error`` before falling back on a user's stop). Nothing leaves loopback: the
cost map is the bundled one, offline mode is on and every name resolved must be loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest

from hermes_transport import (
    AsyncWatchdogTransport,
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    http_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import LOOPBACK, framework, interrupt_at, litellm_offline
from _support import assert_prompt

# Read at import: else litellm fetches its model cost map from GitHub as it loads.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
litellm: Any = framework("litellm")

from litellm.exceptions import MidStreamFallbackError
from litellm.llms.custom_httpx.http_handler import AsyncHTTPHandler, HTTPHandler

litellm.suppress_debug_info = True  # no "Give Feedback" banner printed per error
litellm.telemetry = False

# litellm's TypedDicts make pydantic warn as their schemas are built, on first use.
pytestmark = pytest.mark.filterwarnings("ignore:Items? .*ReadOnly. qualifier:UserWarning")

MODEL = "gemini-3.5-flash-lite"
_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.0, retries=1)
_MESSAGES = [{"role": "user", "content": "hi"}]
_MODES = pytest.mark.parametrize("mode", ["completion", "acompletion"])
#: A stream that sends its first event, then holds the connection open in silence.
_HELD = replace(Scenario.silent_after(1), hold=5.0)


@pytest.fixture(scope="module", autouse=True)
def _offline() -> Iterator[None]:
    """litellm offline for this module (``litellm_offline``), warmed up on one stream."""

    def warm_up() -> None:
        with FaultServer() as server:
            assert _text(server, "completion", [], StreamPolicy()) == "hello world"

    with litellm_offline(litellm, warm_up) as resolved:
        yield
    assert set(resolved) <= LOOPBACK


def _api_base(server: FaultServer) -> str:
    """The Gemini API's root on the fault server, with its version."""
    return server.base_url.removesuffix("/v1") + "/v1beta"


@contextlib.contextmanager
def _handler(policy: StreamPolicy, stats: list[StreamStats] | None) -> Iterator[Any]:
    """The sync recipe's client: litellm's HTTPHandler around the factory's httpx client."""
    on_stats = None if stats is None else stats.append
    with http_client_for("cli", policy=policy, on_stats=on_stats) as client:
        yield HTTPHandler(client=client)


@contextlib.asynccontextmanager
async def _ahandler(policy: StreamPolicy, stats: list[StreamStats] | None) -> AsyncIterator[Any]:
    """The async recipe's client: litellm's AsyncHTTPHandler on an AsyncWatchdogTransport."""
    on_stats = None if stats is None else stats.append
    handler = AsyncHTTPHandler(transport=AsyncWatchdogTransport(policy=policy, on_stats=on_stats))
    try:
        yield handler
    finally:
        await handler.close()


def _text(
    server: FaultServer,
    mode: str,
    into: list[str],
    policy: StreamPolicy = _POLICY,
    stats: list[StreamStats] | None = None,
) -> str:
    """Stream the answer's chunks into `into` with completion(stream=True), or acompletion on a new event loop; the text."""
    call = {"model": f"gemini/{MODEL}", "messages": _MESSAGES, "stream": True}
    call.update(api_key="test-key", api_base=_api_base(server), max_retries=0)
    if mode == "completion":
        with _handler(policy, stats) as handler:
            for chunk in litellm.completion(client=handler, **call):
                into.append(chunk.choices[0].delta.content or "")
        return "".join(into)

    async def astream() -> None:
        async with _ahandler(policy, stats) as handler:
            response = await litellm.acompletion(client=handler, **call)
            async for chunk in response:
                into.append(chunk.choices[0].delta.content or "")

    asyncio.run(astream())
    return "".join(into)


@_MODES
def test_ll_gemini_streams_a_healthy_answer_whole_on_the_watchdog(
    server: FaultServer, mode: str
) -> None:
    """A healthy gemini/ stream reaches completion and acompletion whole, in one request, and the watchdog's statistics report it on the gemini wire."""
    stats: list[StreamStats] = []
    assert _text(server, mode, [], stats=stats) == "hello world"
    assert len(server.requests) == 1
    assert [(s.wire, s.model, s.outcome) for s in stats] == [("gemini", MODEL, "completed")]


@_MODES
def test_ll_gemini_a_silent_first_attempt_is_re_sent_and_answers_whole(
    server: FaultServer, mode: str
) -> None:
    """A first attempt that sends nothing is re-sent by the watch: the caller gets the whole answer, the server saw two requests."""
    server.scenario = Scenario.stall_first(1)
    assert _text(server, mode, []) == "hello world"
    assert [request.attempt for request in server.requests] == [0, 1]


@_MODES
def test_ll_gemini_a_stall_after_output_raises_mid_stream_fallback_error_over_ours(
    server: FaultServer, mode: str
) -> None:
    """A gemini/ stream silent after its first text raises litellm's MidStreamFallbackError, our StreamStalled only in its context chain, and is not re-sent."""
    server.scenario = Scenario.silent_after(1)
    chunks: list[str] = []
    with pytest.raises(MidStreamFallbackError) as info:
        _text(server, mode, chunks)
    assert info.value.__cause__ is None
    stalled = stream_error(info.value)
    assert isinstance(stalled, StreamStalled)
    assert stalled.stage == "mid_stream"
    assert "".join(chunks) == "hello"
    assert len(server.requests) == 1


@pytest.mark.timing
@_MODES
@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
def test_ll_gemini_an_interrupt_raises_mid_stream_fallback_error_over_ours(
    server: FaultServer, mode: str, stage: str
) -> None:
    """An Interrupt fired from another thread, before the headers or mid-stream, ends the call within a second as litellm's MidStreamFallbackError, our StreamInterrupted in its context chain."""
    server.scenario = _HELD if stage == "mid_stream" else Scenario.silent_before_headers()
    stop = Interrupt()
    chunks: list[str] = []
    when = interrupt_at(stop, stage, server, chunks)
    with stop.bind(), pytest.raises(MidStreamFallbackError) as info:
        _text(server, mode, chunks)
    assert info.value.__cause__ is None
    interrupted = stream_error(info.value)
    assert isinstance(interrupted, StreamInterrupted)
    assert_prompt(when, interrupted, stage)
    assert len(server.requests) == 1
