"""Resuming a background Responses stream at its edges: the wait between refused resumes, the caller's own resume, the loop's end.

On loopback against the fault server, through the real openai SDK or httpx
itself. While the transport waits to resume again after a refusal, the
refused resume's connection is back in the pool and out of the interrupt's
reach, and a close from another thread ends the wait at once. Refusals are
counted per break. The caller's own resume of a response is never cancelled
for it. An async client whose close is cancelled still closes its pool, and a
cancel that falls due as its task is cancelled (as ``asyncio.run()`` cancels what is left)
still goes out.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from dataclasses import replace
from typing import Any

import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy
from hermes_transport.testing import FaultServer, Scenario

from _support import (
    Flavor,
    answered_in_turn,
    build_responses_models,
    interrupt_when,
    read_responses,
)

API_KEY = "sk-resume-edges"
BODY: dict[str, Any] = {"model": "m", "input": "hi", "stream": True, "background": True}
ID = "resp_hermes0"
#: A stall after the first output is cut by this stale budget alone.
POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=10.0, retries=0, resumes=3)
#: The creation stalls after its second delta; the resume is answered 503, come back in 4 s.
REFUSED_FOR_A_WHILE = answered_in_turn(
    Scenario.silent_after(7), replace(Scenario.error(503), retry_after=4.0)
)


@pytest.fixture(scope="module", autouse=True)
def _models_built() -> None:
    """The SDK builds its event models once, slowly: not in a test."""
    build_responses_models()


def _in_the_wait(server: FaultServer) -> None:
    """Return once the stream's first resume was refused and the transport waits."""
    assert server.wait_for_requests(2)
    time.sleep(0.3)


@pytest.mark.once  # no SDK: the same under every openai major
def test_an_interrupt_during_the_wait_reaches_no_other_request(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """Interrupted while it waits to resume again, a call raises StreamInterrupted, and another thread's request on the connection the refused resume gave back to the pool reads on unharmed (the inner transport is a wrapper, so sockets are reached through the response)."""
    http = sdk_flavor.http

    class Wrapper:  # an inner transport of another class: sockets reached through responses
        def __init__(self) -> None:
            self.inner = http.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            return self.inner.handle_request(request)

        def close(self) -> None:
            self.inner.close()

    server.scenario = answered_in_turn(
        Scenario.silent_after(7),
        replace(Scenario.error(503), retry_after=3.0),
        Scenario(event_interval=0.1),  # the other thread's request: slow, on the pooled socket
    )
    token = Interrupt()
    transport = sdk_flavor.WatchdogTransport(Wrapper(), policy=POLICY)
    results: dict[str, Any] = {}
    with http.Client(transport=transport, timeout=30.0) as client:

        def read(name: str, body: dict[str, Any], bound: bool) -> None:
            try:
                with token.bind() if bound else contextlib.nullcontext():
                    with client.stream("POST", server.base_url + "/responses", json=body) as r:
                        results[name] = sum(len(chunk) for chunk in r.iter_raw())
            except Exception as exc:
                results[name] = exc

        first = threading.Thread(target=read, args=("interrupted", BODY, True))
        first.start()
        _in_the_wait(server)
        other = threading.Thread(target=read, args=("other", {**BODY, "background": False}, False))
        other.start()
        assert server.wait_for_requests(3)
        time.sleep(0.3)  # the other request is reading, on the connection pooled by the refusal
        token.interrupt("user pressed stop")
        first.join(10.0)
        other.join(10.0)
    assert isinstance(results["interrupted"], StreamInterrupted), results
    assert isinstance(results["other"], int), results
    # The creation's, the refused resume's (which the other request reused), the cancel's.
    assert server.connections_opened == 3


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_close_from_another_thread_ends_the_wait_at_once(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """A response closed by another thread while its reader waits 4 s to resume again ends the read at once with StreamClosed, as any close during a read does, and nothing more is sent."""
    server.scenario = REFUSED_FOR_A_WHILE
    results: dict[str, Any] = {}
    opened = threading.Event()
    transport = sdk_flavor.WatchdogTransport(policy=POLICY)
    with sdk_flavor.http.Client(transport=transport, timeout=30.0) as client:

        def read() -> None:
            try:
                with client.stream("POST", server.base_url + "/responses", json=BODY) as r:
                    results["response"] = r
                    opened.set()
                    for _ in r.iter_raw():
                        pass
            except Exception as exc:
                results["error"] = exc
            results["at"] = time.monotonic()

        reader = threading.Thread(target=read)
        reader.start()
        assert opened.wait(10.0)
        _in_the_wait(server)
        closed_at = time.monotonic()
        results["response"].close()
        reader.join(10.0)
    assert isinstance(results["error"], sdk_flavor.http.StreamClosed), results
    assert results["at"] - closed_at < 2.0, "the wait was not woken"
    assert [r.method for r in server.requests] == ["POST", "GET"]


def test_refusals_are_counted_per_break(server: FaultServer, sdk_flavor: Flavor) -> None:
    """A stream whose first break was resumed after one 503 and whose second break's resume is refused once says it was tried once, not twice, that time."""
    server.scenario = answered_in_turn(
        Scenario.silent_after(7),
        Scenario.error(503),
        Scenario.silent_after(2),
        Scenario.error(400),
    )
    body = {k: v for k, v in BODY.items() if k != "stream"}
    error = read_responses("sync", server.base_url, sdk_flavor, body, API_KEY, POLICY, None)
    stall = error.__cause__ if isinstance(error, openai.APITimeoutError) else error
    assert "resume was tried and refused: 400" in str(stall), repr(stall)


@pytest.mark.parametrize("mode", ["sync", "asyncio"])
def test_the_callers_own_resume_is_never_cancelled(
    server: FaultServer, sdk_flavor: Flavor, mode: str
) -> None:
    """The caller's own responses.retrieve(id, stream=True) that stalls before its first output and is re-sent sends no cancel: the caller knows the id, and the re-sent resume reads the response to its end."""
    server.scenario = answered_in_turn(Scenario.dropped_after(3), Scenario.thinking(5.0))
    with pytest.raises(sdk_flavor.http.HTTPError):
        _read_plainly(server, sdk_flavor)  # the caller's process loses the creation
    policy = StreamPolicy(first_event_timeout=0.5, stale_timeout=5.0, retries=1, resumes=0)
    sdk: dict[str, Any] = {"base_url": server.base_url, "api_key": API_KEY, "max_retries": 0}
    if mode == "sync":
        http_client = sdk_flavor.http_client_for("cron", policy=policy)
        with openai.OpenAI(http_client=http_client, **sdk) as client:
            events = list(client.responses.retrieve(ID, stream=True, starting_after=2))
    else:

        async def main() -> list[Any]:
            http_client = sdk_flavor.async_http_client_for("cron", policy=policy)
            async with openai.AsyncOpenAI(http_client=http_client, **sdk) as client:
                stream = await client.responses.retrieve(ID, stream=True, starting_after=2)
                return [event async for event in stream]

        events = asyncio.run(main())
    assert events[-1].type == "response.completed"
    assert [r.method for r in server.requests] == ["POST", "GET", "GET"]


def _read_plainly(server: FaultServer, flavor: Flavor) -> None:
    with flavor.http.Client(timeout=10.0) as plain:
        with plain.stream("POST", server.base_url + "/responses", json=BODY) as r:
            for _ in r.iter_raw():
                pass


def test_an_async_close_cancelled_while_a_cancel_runs_still_closes_its_pool(
    sdk_flavor: Flavor,
) -> None:
    """A task cancelled while its client's close waits for the cancel still closes the transport's pool: no connection is left in it."""
    with FaultServer(Scenario.silent_after(6), cancel_delay=0.6) as server:
        token = Interrupt()
        seen: list[Any] = []
        interrupt_when(token, lambda: len(seen) >= 6, delay=0.05)
        http_client = sdk_flavor.async_http_client_for("cron", policy=POLICY, interrupt=token)
        sdk: dict[str, Any] = {"base_url": server.base_url, "api_key": API_KEY, "max_retries": 0}

        async def user() -> None:
            async with openai.AsyncOpenAI(http_client=http_client, **sdk) as client:
                try:
                    async for event in await client.responses.create(**BODY):
                        seen.append(event)
                except StreamInterrupted:
                    pass

        async def main() -> list[Any]:
            task = asyncio.create_task(user())
            while not token.interrupted:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.3)  # user() is in the client's close, waiting for the cancel
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.8)  # the cancel ends; its connection would go to the pool
            return list(http_client._transport._inner._pool.connections)

        assert asyncio.run(main()) == []


def test_a_cancel_due_as_its_task_is_cancelled_is_sent_there_and_then(
    sdk_flavor: Flavor,
) -> None:
    """A stream interrupted just as its task is cancelled (what asyncio.run() does to the tasks left when main() returns) sends its cancel from that task, shielded, and the cancel is answered by the time the task ends: a task spawned then might never run."""
    with FaultServer(Scenario.silent_after(6), cancel_delay=0.3) as server:
        token = Interrupt()
        seen: list[Any] = []
        http_client = sdk_flavor.async_http_client_for("cron", policy=POLICY, interrupt=token)
        sdk: dict[str, Any] = {"base_url": server.base_url, "api_key": API_KEY, "max_retries": 0}

        async def main() -> list[int | None]:
            async with openai.AsyncOpenAI(http_client=http_client, **sdk) as client:

                async def worker() -> None:
                    async with await client.responses.create(**BODY) as stream:
                        async for event in stream:
                            seen.append(event)

                task = asyncio.create_task(worker())
                while len(seen) < 6:
                    await asyncio.sleep(0.01)
                token.interrupt("shutting down")
                task.cancel()  # before the worker has seen the interrupt
                with pytest.raises(asyncio.CancelledError):
                    await task
                return [s.status for s in server.sent if s.request.path.endswith("/cancel")]

        assert asyncio.run(main()) == [200]
