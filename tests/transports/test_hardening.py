"""Defects an adversarial review found, each kept found by a test that failed before its fix.

Redirects, the wait after [DONE], pool waits, closing from another thread or task,
SDK back-off under the runner and under anthropic, httpx2.alias_httpx(), the inner
transport's context manager and its own response object, and a kill whose socket
cannot be reached.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace
from typing import Any
from unittest import mock

import anyio
import httpcore
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    stream_chat_completion,
)
from hermes_transport._core.body import AFTER_DONE_SECONDS
from hermes_transport._core.guard import CALLER_LAG_RECHECK, Guard, current_guard
from hermes_transport._flavors import flavor_named
from hermes_transport._io.backend import TrackingStream
from hermes_transport.testing import FaultServer, Scenario

from _support import FLAVORS, PROMPT, Flavor, chat_body, interrupt_when, redirector

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]
BODY = b'data: {"x": 1}\n\n'


# --- 1. Redirects ----------------------------------------------------------------------


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_redirected_streaming_post_is_followed_and_streams(
    flavor: Flavor, server: FaultServer, status: int
) -> None:
    """A 307/308 redirect of a streaming POST is followed with its body, as plain httpx does."""
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0))
    with (
        redirector(status, server.base_url) as url,
        flavor.http.Client(transport=transport, follow_redirects=True, timeout=30.0) as client,
    ):
        response = client.post(url + "/chat/completions", json=chat_body())
    assert response.status_code == 200
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert [r.json for r in server.requests] == [chat_body()]


@pytest.mark.parametrize("status", [307, 308])
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_redirected_streaming_request_is_still_watched(
    flavor: Flavor, server: FaultServer, status: int
) -> None:
    """The request a 307/308 leads to is a streaming request too: its stall is caught at its budget."""
    server.scenario = Scenario.silent_before_headers()
    policy = StreamPolicy(stale_timeout=0.3, retries=1)
    transport = flavor.WatchdogTransport(policy=policy)
    with (
        redirector(status, server.base_url) as url,
        flavor.http.Client(transport=transport, follow_redirects=True, timeout=30.0) as client,
    ):
        started = time.monotonic()
        with pytest.raises(StreamStalled) as info:
            client.post(url + "/chat/completions", json=chat_body())
    assert info.value.stage == "first_event"
    assert 0.3 * 2 <= time.monotonic() - started < 0.3 * 2 + PROMPT
    assert len(server.requests) == 2  # the redirected request, re-sent once


@pytest.mark.anyio
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
# Each loop once, each flavor once: redirects are the HTTP library's, the same on either loop.
@pytest.mark.parametrize(
    ("anyio_backend", "flavor"),
    [("asyncio", FLAVORS[0]), ("trio", FLAVORS[-1])],
    indirect=["flavor"],
    ids=str,
)
@pytest.mark.once  # no SDK: the same under every openai major
async def test_async_redirects_behave_as_in_plain_httpx(
    flavor: Flavor, server: FaultServer, status: int
) -> None:
    """Every redirect status gives the async watchdog client the answer plain httpx gets."""
    outcomes = []
    with redirector(status, server.base_url) as url:
        for transport in (flavor.AsyncWatchdogTransport(), flavor.http.AsyncHTTPTransport()):
            async with flavor.http.AsyncClient(
                transport=transport, follow_redirects=True, timeout=30.0
            ) as client:
                response = await client.post(url + "/chat/completions", json=chat_body())
                outcomes.append((response.status_code, response.content[-16:]))
    assert outcomes[0] == outcomes[1]


@pytest.mark.parametrize("status", [301, 302, 303])
@pytest.mark.once  # no SDK: the same under every openai major
def test_sync_redirects_that_drop_the_body_behave_as_in_plain_httpx(
    flavor: Flavor, server: FaultServer, status: int
) -> None:
    """301/302/303 turn the POST into a GET; the watchdog client gets what plain httpx gets."""
    outcomes = []
    with redirector(status, server.base_url) as url:
        for transport in (flavor.WatchdogTransport(), flavor.http.HTTPTransport()):
            with flavor.http.Client(
                transport=transport, follow_redirects=True, timeout=30.0
            ) as client:
                response = client.post(url + "/chat/completions", json=chat_body())
                outcomes.append((response.status_code, response.content))
    assert outcomes[0] == outcomes[1]


def test_the_sdk_streams_through_a_redirecting_base_url(
    sdk_flavor: Flavor, server: FaultServer
) -> None:
    """An openai client whose base_url answers 307 streams the completion from where it points."""
    with (
        redirector(307, server.base_url) as url,
        openai.OpenAI(
            base_url=url, api_key="x", http_client=sdk_flavor.http_client_for("cron")
        ) as client,
    ):
        completion = stream_chat_completion(client, model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "hello world"


# --- 6. After [DONE] --------------------------------------------------------------------


@pytest.mark.once  # no SDK: the same under every openai major
def test_reading_on_after_done_waits_a_bounded_time_and_ends_cleanly(
    flavor: Flavor, server: FaultServer
) -> None:
    """A body held open after [DONE] ends cleanly, complete, within the after-[DONE] bound."""
    server.scenario = Scenario(linger_after_done=8.0)
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=30.0))
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        started = time.monotonic()
        body = client.post(server.base_url + "/chat/completions", json=chat_body()).content
        took = time.monotonic() - started
    assert body.endswith(b"data: [DONE]\n\n")
    assert AFTER_DONE_SECONDS <= took < AFTER_DONE_SECONDS + PROMPT


@pytest.mark.anyio
@pytest.mark.once  # no SDK: the same under every openai major
async def test_async_reading_on_after_done_waits_a_bounded_time_and_ends_cleanly(
    flavor: Flavor, server: FaultServer
) -> None:
    """The async transport bounds the wait after [DONE] the same way, and raises nothing."""
    server.scenario = Scenario(linger_after_done=8.0)
    transport = flavor.AsyncWatchdogTransport(policy=StreamPolicy(stale_timeout=30.0))
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        started = time.monotonic()
        response = await client.post(server.base_url + "/chat/completions", json=chat_body())
        took = time.monotonic() - started
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert AFTER_DONE_SECONDS <= took < AFTER_DONE_SECONDS + PROMPT


@pytest.mark.parametrize("platform", ["cron", "cli"])
def test_a_complete_answer_is_returned_when_the_server_holds_the_connection_after_done(
    sdk_flavor: Flavor, server: FaultServer, platform: str
) -> None:
    """On every openai major (1.x reads on after [DONE]) the runner returns the completion promptly."""
    server.scenario = Scenario(linger_after_done=8.0)
    with openai.OpenAI(
        base_url=server.base_url, api_key="x", http_client=sdk_flavor.http_client_for(platform)
    ) as client:
        started = time.monotonic()
        completion = stream_chat_completion(client, model="m", messages=MESSAGES)
        took = time.monotonic() - started
    assert completion.choices[0].message.content == "hello world"
    assert completion.choices[0].finish_reason == "stop"
    assert took < AFTER_DONE_SECONDS + PROMPT


# --- 9. Waiting for a pooled connection -------------------------------------------------

SLOW = replace(Scenario.healthy(content=("a", "b", "c", "d", "e")), event_interval=0.3)
# The first request holds the only connection for seconds (SLOW), well past the queued
# one's first-event budget; the queued one, once it has the connection, streams at once.
HOLDS_THE_POOL = Scenario.stall_first(1, stall=SLOW, then=Scenario.healthy())


@pytest.mark.once  # no SDK, and slow (a pool wait of seconds): newest major only
def test_a_wait_for_the_pool_is_not_a_stall_of_the_server(
    flavor: Flavor, server: FaultServer
) -> None:
    """A request queued behind a full one-connection pool for longer than its first-event budget succeeds."""
    server.scenario = HOLDS_THE_POOL
    policy = StreamPolicy(stale_timeout=5.0, first_event_timeout=0.5, retries=0)
    transport = flavor.WatchdogTransport(
        policy=policy, limits=flavor.http.Limits(max_connections=1)
    )
    results: list[object] = []
    with flavor.http.Client(transport=transport, timeout=30.0) as client:

        def call() -> None:
            try:
                results.append(
                    client.post(server.base_url + "/chat/completions", json=chat_body()).content
                )
            except Exception as exc:  # recorded for the assertion
                results.append(exc)

        threads = [threading.Thread(target=call) for _ in range(2)]
        for thread in threads:
            thread.start()
            time.sleep(0.1)
        for thread in threads:
            thread.join(30)
    assert len(results) == 2
    for result in results:
        assert isinstance(result, bytes), result
        assert result.endswith(b"data: [DONE]\n\n")
    assert server.connections_opened == 1


@pytest.mark.anyio
@pytest.mark.once  # no SDK, and slow (a pool wait of seconds): newest major only
async def test_async_a_wait_for_the_pool_is_not_a_stall_of_the_server(
    flavor: Flavor, server: FaultServer
) -> None:
    """On a loop too, a request waiting for a pooled connection is not cut by its first-event budget."""
    server.scenario = HOLDS_THE_POOL
    policy = StreamPolicy(stale_timeout=5.0, first_event_timeout=0.5, retries=0)
    transport = flavor.AsyncWatchdogTransport(
        policy=policy, limits=flavor.http.Limits(max_connections=1)
    )
    bodies: list[bytes] = []
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:

        async def call() -> None:
            response = await client.post(server.base_url + "/chat/completions", json=chat_body())
            bodies.append(response.content)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call)
            await anyio.sleep(0.1)
            tasks.start_soon(call)
    assert [body.endswith(b"data: [DONE]\n\n") for body in bodies] == [True, True]


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_stall_after_the_pool_wait_is_still_caught_at_its_budget(
    flavor: Flavor, server: FaultServer
) -> None:
    """Once a queued request has its connection, its own first-event budget runs as usual."""
    server.scenario = Scenario.stall_first(2, then=SLOW, stall=Scenario.silent_before_headers())
    policy = StreamPolicy(stale_timeout=5.0, first_event_timeout=0.5, retries=0)
    transport = flavor.WatchdogTransport(
        policy=policy, limits=flavor.http.Limits(max_connections=1)
    )
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        started = time.monotonic()
        with pytest.raises(StreamStalled) as info:
            client.post(server.base_url + "/chat/completions", json=chat_body())
    assert info.value.stage == "first_event"
    assert 0.5 <= time.monotonic() - started < 0.5 + PROMPT


# --- 10. Closing a response from another thread or task ---------------------------------


@pytest.mark.once  # no SDK: the same under every openai major
def test_closing_a_response_from_another_thread_returns_and_stops_the_reader(
    flavor: Flavor, server: FaultServer
) -> None:
    """close() from another thread returns, and the reader blocked in the body raises StreamClosed at once."""
    server.scenario = replace(Scenario.silent_after(1), hold=30.0)
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=60.0))
    caught: list[BaseException] = []
    first = threading.Event()
    with flavor.http.Client(transport=transport, timeout=60.0) as client:
        with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:

            def read() -> None:
                try:
                    for _ in response.iter_raw():
                        first.set()
                except BaseException as exc:  # recorded for the assertion
                    caught.append(exc)

            reader = threading.Thread(target=read)
            reader.start()
            assert first.wait(10)
            time.sleep(0.1)  # the reader is now blocked on the silent socket
            closed = time.monotonic()
            response.close()
            reader.join(PROMPT)
            assert not reader.is_alive(), "the reader was not stopped"
            assert time.monotonic() - closed < PROMPT
        assert len(caught) == 1
        assert isinstance(caught[0], flavor.http.StreamClosed)
        server.scenario = Scenario.healthy()
        assert client.post(server.base_url + "/chat/completions", json=chat_body()).is_success


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_body_closed_from_another_thread_between_chunks_does_not_look_complete(
    flavor: Flavor, server: FaultServer
) -> None:
    """A reader that resumes after another thread closed its response raises, not a silent end."""
    server.scenario = replace(Scenario.healthy(content=("a", "b", "c")), event_interval=0.2)
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0))
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:
            chunks = response.iter_raw()
            next(chunks)
            closer = threading.Thread(target=response.close)
            closer.start()
            closer.join(PROMPT)
            assert not closer.is_alive()
            with pytest.raises(flavor.http.StreamClosed):
                for _ in chunks:
                    pass


@pytest.mark.anyio
@pytest.mark.once  # no SDK: the same under every openai major
async def test_closing_a_response_from_another_task_returns_and_stops_the_reader(
    flavor: Flavor, server: FaultServer
) -> None:
    """aclose() from another task returns, and the task blocked in the body raises StreamClosed at once."""
    server.scenario = replace(Scenario.silent_after(1), hold=30.0)
    transport = flavor.AsyncWatchdogTransport(policy=StreamPolicy(stale_timeout=60.0))
    caught: list[BaseException] = []
    first = anyio.Event()
    async with flavor.http.AsyncClient(transport=transport, timeout=60.0) as client:
        request = client.build_request(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        )
        response = await client.send(request, stream=True)

        async def read() -> None:
            try:
                async for _ in response.aiter_raw():
                    first.set()
            except Exception as exc:  # recorded for the assertion
                caught.append(exc)

        with anyio.fail_after(PROMPT * 2):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(read)
                await first.wait()
                await anyio.sleep(0.1)
                closed = time.monotonic()
                await response.aclose()
                assert time.monotonic() - closed < PROMPT
        assert len(caught) == 1
        assert isinstance(caught[0], flavor.http.StreamClosed)
        await response.aclose()
        server.scenario = Scenario.healthy()
        again = await client.post(server.base_url + "/chat/completions", json=chat_body())
        assert again.is_success


# --- 8. The runner on openai 1.x, and the anthropic SDK: no back-off ----------------------


@pytest.mark.parametrize("platform", ["cron", "cli"])
def test_an_interrupt_while_waiting_for_headers_reaches_the_runner_at_once_with_its_stage(
    sdk_flavor: Flavor, server: FaultServer, platform: str
) -> None:
    """Under the runner, with the SDK's default max_retries, an interrupt arrives at once (no back-off, every major) with stage 'headers'."""
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    with openai.OpenAI(
        base_url=server.base_url,
        api_key="x",
        http_client=sdk_flavor.http_client_for(platform, interrupt=token),
    ) as client:
        when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.3)
        with pytest.raises(StreamInterrupted) as info:
            stream_chat_completion(client, model="m", messages=MESSAGES)
        latency = time.monotonic() - when[0]
    assert latency < 0.5, f"the interrupt took {latency:.2f} s"
    assert info.value.stage == "headers"
    assert len(server.requests) == 1


def test_a_stall_before_the_first_event_reaches_the_runner_without_sdk_back_off(
    sdk_flavor: Flavor, server: FaultServer
) -> None:
    """Under the runner, with the SDK's default max_retries, a spent first-event stall is raised at its budget."""
    server.scenario = Scenario.silent_before_headers()
    policy = StreamPolicy(stale_timeout=1.0, retries=0)
    with openai.OpenAI(
        base_url=server.base_url,
        api_key="x",
        http_client=sdk_flavor.http_client_for("cron", policy=policy),
    ) as client:
        started = time.monotonic()
        with pytest.raises(StreamStalled) as info:
            stream_chat_completion(client, model="m", messages=MESSAGES)
        took = time.monotonic() - started
    assert info.value.stage == "first_event"
    assert 1.0 <= took < 1.0 + 0.5, f"took {took:.2f} s: the SDK slept its back-off"
    assert len(server.requests) == 1


def test_an_interrupt_before_the_response_reaches_an_anthropic_caller_at_once(
    server: FaultServer,
) -> None:
    """The anthropic SDK, with its default max_retries, lets an interrupt before the response through untouched."""
    anthropic = pytest.importorskip("anthropic")
    ht2 = pytest.importorskip("hermes_transport.httpx2")
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    client = anthropic.Anthropic(
        base_url=server.base_url.removesuffix("/v1"),
        api_key="test-key",
        http_client=ht2.http_client_for("cron", interrupt=token),
    )
    with client:
        when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.3)
        with pytest.raises(StreamInterrupted) as info:
            with client.messages.stream(
                model="claude-test", max_tokens=64, messages=MESSAGES
            ) as stream:
                stream.until_done()
        latency = time.monotonic() - when[0]
    assert latency < 0.5, f"the interrupt took {latency:.2f} s"
    assert info.value.reason == "user pressed stop"
    assert len(server.requests) == 1


# --- 11. httpx2.alias_httpx() -----------------------------------------------------------

_ALIASED = textwrap.dedent(
    """
    import json, sys
    import httpx2
    httpx2.alias_httpx()
    import hermes_transport
    from hermes_transport import httpx2 as ht2
    from hermes_transport.testing import FaultServer

    results = {}
    with FaultServer() as server:
        for name, transport in [
            ("ht2", ht2.WatchdogTransport(httpx2.HTTPTransport())),
            ("default", hermes_transport.WatchdogTransport(httpx2.HTTPTransport())),
        ]:
            with httpx2.Client(transport=transport) as client:
                body = client.post(
                    server.base_url + "/chat/completions",
                    json={"model": "m", "messages": [], "stream": True},
                ).content
            results[name] = body.endswith(b"data: [DONE]\\n\\n")
    print(json.dumps(results))
    """
)


@pytest.mark.once  # no SDK: the same under every openai major
def test_httpx2_inner_transports_are_accepted_under_alias_httpx() -> None:
    """After httpx2.alias_httpx(), an httpx2 inner transport is told by its classes and accepted."""
    pytest.importorskip("httpx2")
    done = subprocess.run(
        [sys.executable, "-c", _ALIASED], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"ht2": True, "default": True}


@pytest.mark.once  # no SDK: the same under every openai major
def test_an_inner_transport_of_the_other_library_is_still_refused(flavor: Flavor) -> None:
    """Telling libraries apart by class still refuses a transport of the other library."""
    other = "httpx2" if flavor.name == "httpx" else "httpx"
    module = pytest.importorskip(other)
    with pytest.raises(TypeError, match=f"inner is an {other} transport"):
        flavor.WatchdogTransport(module.HTTPTransport())


# --- 12 and 13. The inner transport's context manager and its own responses -------------


class _Inner:
    """An inner transport that records how it is entered, exited and closed."""

    def __init__(self, http: Any, response: Any = None) -> None:
        self.calls: list[str] = []
        self.response = response
        self._http = http

    def handle_request(self, request: Any) -> Any:
        return self.response

    async def handle_async_request(self, request: Any) -> Any:
        return self.response

    def __enter__(self) -> _Inner:
        self.calls.append("enter")
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.calls.append("exit")

    async def __aenter__(self) -> _Inner:
        self.calls.append("aenter")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.calls.append("aexit")

    def close(self) -> None:
        self.calls.append("close")

    async def aclose(self) -> None:
        self.calls.append("aclose")


@pytest.mark.once  # no SDK: the same under every openai major
def test_the_client_context_enters_and_exits_the_inner_transport(flavor: Flavor) -> None:
    """Entering and leaving a client enters and exits a given inner transport, as httpx does its own."""
    inner = _Inner(flavor.http)
    with flavor.http.Client(transport=flavor.WatchdogTransport(inner)):
        assert inner.calls == ["enter"]
    assert inner.calls == ["enter", "exit"]


@pytest.mark.anyio
@pytest.mark.once  # no SDK: the same under every openai major
async def test_the_async_client_context_enters_and_exits_the_inner_transport(
    flavor: Flavor,
) -> None:
    """An async client's context enters and exits the inner transport with __aenter__/__aexit__."""
    inner = _Inner(flavor.http)
    async with flavor.http.AsyncClient(transport=flavor.AsyncWatchdogTransport(inner)):
        assert inner.calls == ["aenter"]
    assert inner.calls == ["aenter", "aexit"]


@pytest.mark.once  # no SDK: the same under every openai major
def test_an_inner_transport_without_a_context_manager_is_closed_on_exit(flavor: Flavor) -> None:
    """An inner transport with only close() is closed when the client's context ends."""
    inner = flavor.http.MockTransport(lambda request: flavor.http.Response(200))
    closed: list[bool] = []
    inner.close = lambda: closed.append(True)
    with flavor.http.Client(transport=flavor.WatchdogTransport(inner)):
        pass
    assert closed == [True]


@pytest.mark.parametrize("streaming", [True, False])
@pytest.mark.once  # no SDK: the same under every openai major
def test_the_inner_transports_own_response_object_is_returned(
    flavor: Flavor, streaming: bool
) -> None:
    """handle_request returns the inner transport's response itself: its class, request and read state kept."""
    own_request = flavor.http.Request("GET", "http://inner.invalid/")
    headers = {"content-type": "text/event-stream"} if streaming else {}
    response = flavor.http.Response(200, headers=headers, content=BODY, request=own_request)
    transport = flavor.WatchdogTransport(_Inner(flavor.http, response))
    body = chat_body(stream=streaming)
    request = flavor.http.Request("POST", "http://127.0.0.1:9/v1/chat/completions", json=body)
    got = transport.handle_request(request)
    assert got is response
    assert got.request is own_request
    assert got.content == BODY  # read before the transport saw it, and still readable
    got.close()


@pytest.mark.anyio
@pytest.mark.once  # no SDK: the same under every openai major
async def test_the_async_inner_transports_own_response_object_is_returned(
    flavor: Flavor,
) -> None:
    """handle_async_request returns the inner transport's response itself, too."""
    response = flavor.http.Response(
        200, headers={"content-type": "text/event-stream"}, content=BODY
    )
    transport = flavor.AsyncWatchdogTransport(_Inner(flavor.http, response))
    request = flavor.http.Request(
        "POST", "http://127.0.0.1:9/v1/chat/completions", json=chat_body()
    )
    got = await transport.handle_async_request(request)
    assert got is response
    assert b"".join([chunk async for chunk in got.stream]) == BODY
    await got.aclose()


class _ListBody:
    """A response body whose iterators are plain ones, not generators (nothing to close)."""

    def __iter__(self) -> Any:
        return iter(BODY_CHUNKS)

    def __aiter__(self) -> Any:
        return _PlainAsyncIterator(BODY_CHUNKS)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class _PlainAsyncIterator:
    """An async iterator that is not an async generator: it has no ``aclose``."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = iter(chunks)

    def __aiter__(self) -> _PlainAsyncIterator:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._chunks)
        except StopIteration:
            raise StopAsyncIteration from None


BODY_CHUNKS = [BODY[: len(BODY) // 2], BODY[len(BODY) // 2 :]]


@pytest.mark.once  # no SDK: the same under every openai major
def test_an_inner_body_whose_iterator_is_not_a_generator_is_read_and_closed(
    flavor: Flavor,
) -> None:
    """A caller-supplied body whose ``__iter__`` returns a plain iterator reads to its end and closes cleanly (it once raised AttributeError at close)."""
    response = flavor.http.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_ListBody()
    )
    inner = _Inner(flavor.http, response)
    with flavor.http.Client(transport=flavor.WatchdogTransport(inner)) as client:
        got = client.post("http://127.0.0.1:9/v1/chat/completions", json=chat_body())
    assert got.content == BODY


@pytest.mark.anyio
@pytest.mark.once  # no SDK: the same under every openai major
async def test_an_async_inner_body_whose_iterator_is_not_a_generator_is_read_and_closed(
    flavor: Flavor,
) -> None:
    """A caller-supplied body whose ``__aiter__`` returns a plain async iterator reads to its end and closes cleanly."""
    response = flavor.http.Response(
        200, headers={"content-type": "text/event-stream"}, stream=_ListBody()
    )
    inner = _Inner(flavor.http, response)
    async with flavor.http.AsyncClient(transport=flavor.AsyncWatchdogTransport(inner)) as client:
        got = await client.post("http://127.0.0.1:9/v1/chat/completions", json=chat_body())
    assert got.content == BODY


# --- A kill whose socket cannot be reached ----------------------------------------------


class _Switch:
    """A kill switch that records being pulled and says whether it reached its socket."""

    def __init__(self, reaches: bool) -> None:
        self.reaches = reaches
        self.pulled = 0

    def kill(self) -> bool:
        self.pulled += 1
        return self.reaches


@pytest.mark.parametrize("reaches", [True, False])
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_kill_that_cannot_reach_its_socket_falls_back(reaches: bool) -> None:
    """A connection whose socket cannot be shut down makes the guard stop its fallback instead, never nothing."""
    guard = Guard()
    conn, fallback = _Switch(reaches), _Switch(True)
    guard.attach(conn)
    guard.set_fallback(fallback)
    guard.interrupt("stop")
    assert conn.pulled == 1
    assert fallback.pulled == (0 if reaches else 1)


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_budget_put_off_until_the_connection_starts_only_then() -> None:
    """A guard whose budget waits for its connection has no deadline until start_budget(), then one armed."""
    guard = Guard()
    armed: list[Guard] = []
    guard.budget_from_connection(0.5, armed.append)
    assert guard.deadline is None
    time.sleep(0.05)
    before = time.monotonic()
    guard.start_budget()
    assert armed == [guard]
    assert guard.deadline is not None
    assert before + 0.5 <= guard.deadline <= time.monotonic() + 0.5
    guard.start_budget()  # only once
    assert armed == [guard]


# --- A caller that is behind is not a silent server ---------------------------------------


class _PausingSyncStream(httpcore.NetworkStream):
    """A socket stream whose thread, once a read has its bytes, is held back before it returns."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.took = threading.Event()
        self.go_on = threading.Event()
        self.reads = 0

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.reads += 1
        data = self._sock.recv(max_bytes)
        if data:
            self.took.set()
            self.go_on.wait(10.0)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._sock.sendall(buffer)

    def close(self) -> None:
        self._sock.close()

    def get_extra_info(self, info: str) -> Any:
        return self._sock if info == "socket" else None


def _guarded_stream() -> tuple[TrackingStream, _PausingSyncStream, Guard, socket.socket]:
    """A tracked stream over one end of a socket pair, attached to a new guard, and the other end."""
    ours, theirs = socket.socketpair()
    inner = _PausingSyncStream(ours)
    stream = TrackingStream(inner, flavor_named("httpx"))
    guard = Guard()
    token = current_guard.set(guard)
    try:
        stream.write(b"GET / HTTP/1.1\r\n\r\n")
    finally:
        current_guard.reset(token)
    return stream, inner, guard, theirs


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_reader_that_was_never_behind_is_cut_at_the_first_look() -> None:
    """A deadline that finds the reader waiting with nothing pending fires at once: a silent server costs no recheck."""
    stream, inner, guard, theirs = _guarded_stream()
    reader = threading.Thread(target=stream.read, args=(100,))
    reader.start()
    try:
        deadline = time.monotonic() + 10.0
        while inner.reads < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        guard.deadline = time.monotonic() - 0.01
        guard.expire()
        assert guard.fired == "stalled"
    finally:
        reader.join(10.0)
        inner._sock.close()
        theirs.close()


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_read_that_has_just_taken_its_bytes_is_not_a_silent_server() -> None:
    """A caller that catches up is not cut while its read is back from the socket but not yet from the read; once it waits with nothing pending, a recheck later, it is."""
    stream, inner, guard, theirs = _guarded_stream()
    reads: list[bytes] = []
    reader = threading.Thread(target=lambda: reads.extend([stream.read(100), stream.read(100)]))
    theirs.sendall(b"HTTP/1.1 200 OK\r\n")
    try:
        guard.deadline = time.monotonic() - 0.01
        guard.expire()  # the answer waits unread: the caller is behind
        assert guard.fired is None
        reader.start()
        assert inner.took.wait(10.0)
        time.sleep(CALLER_LAG_RECHECK + 0.01)
        guard.expire()  # the socket is empty, the read not over: not yet a silent server
        assert guard.fired is None
        inner.go_on.set()
        deadline = time.monotonic() + 10.0
        while inner.reads < 2 and time.monotonic() < deadline:  # into the second read
            time.sleep(0.01)
        time.sleep(CALLER_LAG_RECHECK + 0.01)
        guard.expire()  # waiting with nothing pending, seen so twice: silent
        assert guard.fired == "stalled"
        reader.join(10.0)
        assert reads == [b"HTTP/1.1 200 OK\r\n", b""]
    finally:
        inner.go_on.set()
        reader.join(10.0)
        inner._sock.close()
        theirs.close()


TICKING = replace(Scenario.healthy(content=tuple("abcdefghij")), event_interval=0.1)


@pytest.mark.timing
def test_a_caller_that_pauses_longer_than_the_budget_is_not_cut(
    flavor: Flavor, server: FaultServer
) -> None:
    """A reader that spends longer than the stale budget on one chunk, while the server keeps sending, gets the whole stream."""
    server.scenario = TICKING
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=0.5))
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:
            body = b""
            for chunk in response.iter_raw():
                if not body:
                    time.sleep(1.0)  # the caller is busy; the server is not
                body += chunk
    assert body.endswith(b"data: [DONE]\n\n")


@pytest.mark.timing
def test_a_caller_held_up_before_reading_its_headers_is_not_re_sent(
    flavor: Flavor, server: FaultServer
) -> None:
    """A thread held up past the first-event budget while its answer waits in the socket gets it, sent once."""
    held: list[str] = []

    def trace(name: str, info: object) -> None:
        if name.endswith("receive_response_headers.started") and not held:
            held.append(name)
            time.sleep(0.8)

    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=0.5, retries=1))
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        response = client.post(
            server.base_url + "/chat/completions", json=chat_body(), extensions={"trace": trace}
        )
    assert response.content.endswith(b"data: [DONE]\n\n")
    assert held
    assert len(server.requests) == 1


@pytest.mark.timing
@pytest.mark.anyio
async def test_a_loop_that_was_busy_longer_than_the_budget_does_not_cut_a_healthy_stream(
    flavor: Flavor, server: FaultServer
) -> None:
    """A loop blocked past the stale budget while events arrive on time reads them all afterwards."""
    server.scenario = TICKING
    transport = flavor.AsyncWatchdogTransport(policy=StreamPolicy(stale_timeout=0.5))
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        async with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:
            body = b""
            async for chunk in response.aiter_raw():
                if not body:
                    time.sleep(1.0)  # blocks the whole loop
                body += chunk
    assert body.endswith(b"data: [DONE]\n\n")


@pytest.mark.timing
def test_a_stall_is_still_cut_after_the_caller_caught_up(
    flavor: Flavor, server: FaultServer
) -> None:
    """Lag forgiveness ends once the caller has read what waited: a silent server is then cut at its budget."""
    server.scenario = replace(Scenario.silent_after(3), hold=30.0)
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=0.5))
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        with client.stream(
            "POST", server.base_url + "/chat/completions", json=chat_body()
        ) as response:
            chunks = response.iter_raw()
            next(chunks)
            time.sleep(1.0)  # behind: the rest of the events wait in the socket
            seen: list[float] = []
            with pytest.raises(StreamStalled) as info:
                seen.extend(time.monotonic() for _ in chunks)
    assert info.value.stage == "mid_stream"
    assert seen, "the events that waited in the socket were not delivered"
    assert 0.5 <= time.monotonic() - seen[-1] < 0.5 + PROMPT


# --- A body that breaks before its first event ------------------------------------------


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_body_that_breaks_before_its_first_event_fails_the_read_not_the_request(
    flavor: Flavor, server: FaultServer
) -> None:
    """A 200 stream whose connection drops before any event raises from the caller's read, as in plain httpx, and is not re-sent."""
    server.scenario = Scenario.truncated(0)
    outcomes = []
    for transport in (
        flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0, retries=2)),
        flavor.http.HTTPTransport(),
    ):
        with flavor.http.Client(transport=transport, timeout=30.0) as client:
            with client.stream(
                "POST", server.base_url + "/chat/completions", json=chat_body()
            ) as response:
                assert response.status_code == 200  # the request itself succeeded
                with pytest.raises(flavor.http.RemoteProtocolError) as info:
                    response.read()
                outcomes.append(type(info.value))
    assert outcomes[0] is outcomes[1]
    assert len(server.requests) == 2  # once each: nothing re-sent


def test_the_sdk_does_not_repeat_a_request_whose_body_broke_before_its_first_event(
    sdk_flavor: Flavor, server: FaultServer
) -> None:
    """Through openai with its default max_retries, a body broken before any event fails while iterating, after one request."""
    server.scenario = Scenario.truncated(0)
    with openai.OpenAI(
        base_url=server.base_url, api_key="x", http_client=sdk_flavor.http_client_for("cron")
    ) as client:
        stream = client.chat.completions.create(model="m", messages=MESSAGES, stream=True)
        with pytest.raises((sdk_flavor.http.RemoteProtocolError, openai.APIConnectionError)):
            for _ in stream:
                pass
    assert len(server.requests) == 1


@pytest.mark.parametrize("name", ["BaseTransport", "AsyncBaseTransport"])
def test_a_transport_class_patched_with_a_mock_does_not_break_the_watchdog(
    flavor: Flavor, name: str
) -> None:
    """A test that patches the HTTP library's transport base class with a mock and hands that mock over as the transport (as google-genai's own tests do) still gets a watchdog around it."""
    inner = mock.MagicMock()
    watchdog_class = (
        flavor.AsyncWatchdogTransport if name.startswith("Async") else flavor.WatchdogTransport
    )
    with mock.patch.object(flavor.http, name):
        transport = watchdog_class(inner=inner)
    assert transport is not None
