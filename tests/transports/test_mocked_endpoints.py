"""A mocked OpenAI endpoint under the watchdog: respx (httpx) and pytest-httpx2 (httpx2).

Through the real openai SDK, sync and async, with the mock in either place: ``patched``, as
users test their code, by respx's ``respx_mock`` or pytest-httpx2's ``httpx2_mock`` fixture
(its side effects take and return *httpx* objects) under the factories' clients; ``inner``,
a ``MockTransport`` as the watchdog's ``inner=`` (over a respx router on httpx; on httpx2
over a plain handler, as httpx2 refuses respx's httpx responses). Progress passes whole; a
stall after the first event and an interrupt are raised when the mock's next bytes come
(no socket to shut down). Keepalives before the first event stall and are re-sent in either
place (patched, the first-event budget starts with the mock's headers: there is no
connection to start it).
Also: the plugins patch nothing unless asked; placements that skip or miss the watchdog.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import time
import unittest.mock
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import httpx
import openai
import pytest
import respx
from respx.mocks import Mocker

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    WatchdogTransport,
    async_openai_client_for,
    openai_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer

from _support import (
    PROMPT,
    Flavor,
    assert_prompt,
    chat_body,
    ignore_abandoned_async_generators,
    interrupt_when,
)

#: Loopback only: a request no mock caught is refused here, never sent out.
_MOCK_BASE = "http://127.0.0.1:9/v1"
_MOCK_URL = _MOCK_BASE + "/chat/completions"
_MOCK_POLICY = StreamPolicy(stale_timeout=0.2, first_event_timeout=0.3, retries=1)
_MOCK_PATIENT = StreamPolicy(stale_timeout=10.0, first_event_timeout=10.0, retries=0)
_MOCK_SILENCE = 0.5  # a mock body's pause: longer than both budgets of _MOCK_POLICY
_MOCK_SSE = {"content-type": "text/event-stream"}
_MOCK_CALL: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
#: How the SDK is driven: sync, or async on a backend (trio only where it differs in kind).
_MOCK_MODES = pytest.mark.parametrize("mode", ["sync", "asyncio"])
_MOCK_ALL_MODES = pytest.mark.parametrize("mode", ["sync", "asyncio", "trio"])

#: A mock body: bytes and pauses (float seconds), in order.
_MockBody = list[bytes | float]


def _mock_event(text: str) -> bytes:
    delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return f"data: {json.dumps({**chunk, 'choices': [delta]})}\n\n".encode()


_MOCK_HEALTHY: _MockBody = [_mock_event("hello"), _mock_event(" world"), b"data: [DONE]\n\n"]
_MOCK_STALLING: _MockBody = [_MOCK_HEALTHY[0], _MOCK_SILENCE, *_MOCK_HEALTHY[1:]]
_MOCK_KEEPALIVES: _MockBody = [b": keepalive\n\n", 0.02] * 25
_MOCK_FLOWING: _MockBody = [_MOCK_HEALTHY[0], *_MOCK_KEEPALIVES * 4]


def _mock_response(module: Any, parts: _MockBody, is_async: bool) -> Any:
    """A ``module.Response`` streaming ``parts``: whole bytes when there is no pause."""
    if all(isinstance(part, bytes) for part in parts):
        return module.Response(200, headers=_MOCK_SSE, content=b"".join(parts))  # type: ignore[arg-type]

    def body() -> Iterator[bytes]:
        for part in parts:
            if isinstance(part, float):
                time.sleep(part)
            else:
                yield part

    async def abody() -> AsyncIterator[bytes]:
        for part in parts:
            if isinstance(part, float):
                await anyio.sleep(part)
            else:
                yield part

    return module.Response(200, headers=_MOCK_SSE, content=abody() if is_async else body())


class _MockEndpoint:
    """The chat-completions endpoint mocked in one placement; answers ``bodies`` in turn."""

    def __init__(self, flavor: Flavor, placement: str, request: pytest.FixtureRequest) -> None:
        self.flavor, self.placement = flavor, placement
        self.bodies: list[_MockBody] = [_MOCK_HEALTHY]
        self.headers_delay = 0.0
        self.calls = 0
        self.is_async = False
        self._router: Any = None
        if placement == "patched":  # what users write: the plugins' fixtures
            name = "respx_mock" if flavor.name == "httpx" else "httpx2_mock"
            self._router = request.getfixturevalue(name)
        elif flavor.name == "httpx":
            self._router = respx.Router(assert_all_called=False)
        if self._router is not None:
            self._router.post(_MOCK_URL).mock(side_effect=self._answer)

    def _answer(self, request: Any) -> Any:
        self.calls += 1
        parts = self.bodies[min(self.calls, len(self.bodies)) - 1]
        module = self.flavor.http if self._router is None else httpx
        response = _mock_response(module, parts, self.is_async)
        if not self.is_async:
            time.sleep(self.headers_delay)
            return response

        async def later() -> Any:
            await anyio.sleep(self.headers_delay)
            return response

        return later()

    def forget_routes(self) -> None:
        """Drop the routes: ``httpx2_mock`` asserts each was called, and a call cancelled in
        its side effect is not recorded (pytest-httpx2 1.0.0 does not register its marker)."""
        if self._router is not None:
            self._router.clear()

    def _sdk(self, policy: StreamPolicy, is_async: bool) -> Any:
        """The SDK client of this placement's recipe: the factories' under the plugins'
        fixtures, else one over the watchdog with the mock as ``inner``."""
        kwargs: dict[str, Any] = {"base_url": _MOCK_BASE, "api_key": "x", "max_retries": 0}
        if self.placement == "patched":
            factory = async_openai_client_for if is_async else openai_client_for
            return factory("cron", policy=policy, flavor=self.flavor.name, **kwargs)
        http, ours, router = self.flavor.http, self.flavor, self._router
        handler = self._answer  # httpx2: a plain handler (respx answers in httpx objects)
        if router is not None:
            handler = router.async_handler if is_async else router.handler
        watchdog = ours.AsyncWatchdogTransport if is_async else ours.WatchdogTransport
        transport = watchdog(http.MockTransport(handler), policy=policy)
        client = (http.AsyncClient if is_async else http.Client)(transport=transport)
        return (openai.AsyncOpenAI if is_async else openai.OpenAI)(http_client=client, **kwargs)

    def stream(
        self, mode: str, got: list[str], token: Interrupt | None = None, policy: Any = None
    ) -> None:
        """Stream a chat completion through the SDK into ``got``, ``mode`` "sync" or the
        async backend to run it on; bound to ``token``, if given."""
        bound = token.bind() if token is not None else contextlib.nullcontext()
        policy = policy or _MOCK_POLICY
        if mode == "sync":
            with bound, self._sdk(policy, False) as client:
                with client.chat.completions.create(stream=True, **_MOCK_CALL) as chunks:
                    for chunk in chunks:
                        got.append(chunk.choices[0].delta.content or "")
            return
        self.is_async = True
        if mode == "trio":  # every major's stream chain, once interrupted; 2.x+ at [DONE]
            ignore_abandoned_async_generators()

        async def run() -> None:
            async with self._sdk(policy, True) as client:
                chunks = await client.chat.completions.create(stream=True, **_MOCK_CALL)
                async with chunks:
                    async for chunk in chunks:
                        got.append(chunk.choices[0].delta.content or "")

        with bound:
            anyio.run(run, backend=mode)


@pytest.fixture(name="mocked", params=["patched", "inner"])
def _mock_endpoint(sdk_flavor: Flavor, request: pytest.FixtureRequest) -> _MockEndpoint:
    """The endpoint mocked in each placement, on each flavor the SDK accepts."""
    return _MockEndpoint(sdk_flavor, request.param, request)


def _mock_stalled(error: BaseException, flavor: Flavor) -> StreamStalled:
    """The flavor's ``StreamStalled`` in ``error``'s chain (asserted there)."""
    found = stream_error(error)
    assert isinstance(found, flavor.StreamStalled), repr(error)
    return found


#: A stall as the SDK raises it: ours, or ``APITimeoutError`` with ours as its cause (before
#: the first event on every major, after it on openai 3.x).
_MOCK_STALL_ERRORS = (StreamStalled, openai.APIConnectionError)


@_MOCK_ALL_MODES
def test_a_mocked_stream_reaches_the_sdk_whole(mocked: _MockEndpoint, mode: str) -> None:
    """A mocked SSE body, whole bytes or streamed, passes the watchdog into the SDK unchanged."""
    mocked.bodies = [
        _MOCK_HEALTHY if mode == "sync" else [_MOCK_HEALTHY[0], 0.01, *_MOCK_HEALTHY[1:]]
    ]
    got: list[str] = []
    mocked.stream(mode, got)
    assert (got, mocked.calls) == (["hello", " world"], 1)


@_MOCK_MODES
def test_a_mock_that_pauses_after_its_first_event_raises_a_stall(
    mocked: _MockEndpoint, mode: str
) -> None:
    """A pause longer than the stale budget raises StreamStalled, once the next bytes come."""
    mocked.bodies = [_MOCK_STALLING]
    got: list[str] = []
    with pytest.raises(_MOCK_STALL_ERRORS) as info:
        mocked.stream(mode, got)
    assert _mock_stalled(info.value, mocked.flavor).elapsed >= _MOCK_SILENCE  # not at 0.2 s
    assert (got, mocked.calls) == (["hello"], 1)


@_MOCK_MODES
@pytest.mark.parametrize("then", ["keepalives", "healthy"])
def test_keepalives_alone_stall_and_are_re_sent(
    mocked: _MockEndpoint, mode: str, then: str
) -> None:
    """Keepalive comments only stall at the first-event budget and are re-sent once: the
    re-send answers whole, or stalls the same way."""
    mocked.bodies = [_MOCK_KEEPALIVES, _MOCK_KEEPALIVES if then == "keepalives" else _MOCK_HEALTHY]
    got: list[str] = []
    if then == "healthy":
        mocked.stream(mode, got)
        assert got == ["hello", " world"]
    else:
        with pytest.raises(openai.APITimeoutError) as info:
            mocked.stream(mode, got)
        assert "no first event" in str(_mock_stalled(info.value, mocked.flavor))
    assert mocked.calls == 2


@pytest.mark.timing
def test_an_async_mock_silent_before_its_first_event_is_cut_at_the_budget(
    mocked: _MockEndpoint,
) -> None:
    """Async, a first attempt silent past the budget is cancelled at it and re-sent (sync:
    cut when its late bytes come)."""
    mocked.bodies = [[1.0, _mock_event("late")], _MOCK_HEALTHY]
    got: list[str] = []
    started = time.monotonic()
    mocked.stream("asyncio", got)
    assert (got, mocked.calls) == (["hello", " world"], 2)
    assert time.monotonic() - started < 1.0


@pytest.mark.timing
@pytest.mark.parametrize(
    ("mode", "flowing"),
    [(m, True) for m in ("sync", "asyncio", "trio")] + [(m, False) for m in ("sync", "asyncio")],
)
def test_an_interrupt_lands_with_the_mocks_next_bytes(
    mocked: _MockEndpoint, mode: str, flowing: bool
) -> None:
    """Another thread's interrupt ends the iteration at the mock's next bytes: at once while they flow, only after a silence (no socket to shut down)."""
    mocked.bodies = [_MOCK_FLOWING if flowing else _MOCK_STALLING]
    token, got = Interrupt(), list[str]()
    when = interrupt_when(token, lambda: bool(got))
    with pytest.raises(StreamInterrupted) as info:
        mocked.stream(mode, got, token, _MOCK_PATIENT)
    late = time.monotonic() - when[0]
    assert (info.value.stage, got) == ("mid_stream", ["hello"])
    assert late < PROMPT if flowing else _MOCK_SILENCE / 5 < late < _MOCK_SILENCE + PROMPT


@pytest.mark.timing
def test_an_interrupt_before_a_mocks_headers_is_prompt_async(mocked: _MockEndpoint) -> None:
    """Async, a mock that holds its headers back is cancelled at once by an interrupt."""
    mocked.headers_delay = 5.0
    token = Interrupt()
    when = interrupt_when(token, lambda: mocked.calls == 1)
    with pytest.raises((StreamInterrupted, openai.APIConnectionError)) as info:
        mocked.stream("asyncio", [], token, _MOCK_PATIENT)
    caught = stream_error(info.value)
    assert isinstance(caught, StreamInterrupted), repr(info.value)
    assert_prompt(when, caught, "headers")
    mocked.forget_routes()


@pytest.mark.once
def test_the_mock_plugins_patch_nothing_unless_asked(
    flavor: Flavor, server: FaultServer, request: pytest.FixtureRequest
) -> None:
    """Loaded in every session, respx and pytest-httpx2 mock nothing in a test not asking."""
    assert request.config.pluginmanager.has_plugin("pytest_httpx2")
    assert not {"respx_mock", "httpx2_mock"} & set(request.fixturenames)
    assert [name for name, mocker in Mocker.registry.items() if mocker._patches] == []
    core = importlib.import_module("httpcore" if flavor.name == "httpx" else "httpcore2")
    for pool in (core.ConnectionPool, core.AsyncConnectionPool, core.HTTPProxy):
        assert not any(isinstance(v, unittest.mock.Mock) for v in vars(pool).values())
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=_MOCK_POLICY)) as client:
        url = server.base_url + "/chat/completions"
        with client.stream("POST", url, json=chat_body()) as response:
            assert b"[DONE]" in response.read()
    assert len(server.requests) == 1


@pytest.mark.once
def test_respx_on_the_client_layer_answers_past_the_watchdog() -> None:
    """respx.mock(using="httpx") replaces the client's transport: the watchdog never sees it."""
    token = Interrupt()
    token.interrupt("already")  # a watched request fails at once, sending nothing
    for using in ("httpx", "httpcore"):
        with (
            respx.mock(using=using, assert_all_called=False) as router,
            httpx.Client(transport=WatchdogTransport(interrupt=token)) as client,
        ):
            router.post(_MOCK_URL).respond(200, text="mocked")
            if using == "httpx":
                assert client.post(_MOCK_URL).text == "mocked"
            else:
                with pytest.raises(StreamInterrupted):
                    client.post(_MOCK_URL)


@pytest.mark.once
def test_respx_alone_mocks_no_httpx2_client() -> None:
    """respx patches httpcore only: an httpx2 request under ``respx.mock`` is sent (here to a
    closed loopback port), and a respx router cannot be an httpx2 inner transport."""
    httpx2 = pytest.importorskip("httpx2")
    from hermes_transport import httpx2 as ht2

    with respx.mock(assert_all_called=False) as router, httpx2.Client() as client:
        router.post(_MOCK_URL).respond(200, text="mocked")
        with pytest.raises(httpx2.ConnectError):
            client.post(_MOCK_URL)
    unused = respx.Router(assert_all_called=False)
    unused.post(_MOCK_URL).respond(200, text="mocked")
    inner = httpx2.MockTransport(unused.handler)
    with httpx2.Client(transport=ht2.WatchdogTransport(inner)) as client:
        with pytest.raises(TypeError):  # "Cannot use an async handler": respx's httpx.Response
            client.post(_MOCK_URL)
