"""When the cancel after an interrupt goes out, and on which thread: never before the caller has its error, never on a new thread.

Each test interrupts a background Responses stream on loopback (the fault
server, its cancel answered late). Async: the cancel is a task on the
caller's loop, so the caller's ``except`` runs before the cancel is even
answered, and closing the client waits for it. Sync: the caller's thread is
the only one, and nothing is sure to close the stream later (openai 1.x does
not), so the read that the interrupt broke sends the cancel, then raises. No
thread is started for a resume or a cancel, sync or async.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import anyio
import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy
from hermes_transport._core.resume import CANCEL_TIMEOUT
from hermes_transport.testing import RESPONSES_PATH, FaultServer, Scenario

from _support import (
    Flavor,
    answered_in_turn,
    build_responses_models,
    ignore_abandoned_async_generators,
    interrupt_when,
)

API_KEY = "sk-cancel-order"
BODY: dict[str, Any] = {"model": "m", "input": "hi", "background": True}
ID = "resp_hermes0"
CANCEL = f"{RESPONSES_PATH}/{ID}/cancel"
#: Events up to and with the first output (the " hello" delta, 5).
TO_FIRST_OUTPUT = 6
#: Budgets no test waits for, but a stale one that a test's stall is cut by.
PATIENT = StreamPolicy(stale_timeout=0.5, first_event_timeout=30.0, retries=0, resumes=2)
#: Seconds the server takes to answer a cancel: far longer than an interrupt takes to
#: reach its caller, far shorter than CANCEL_TIMEOUT (the cancel is answered, not given up).
CANCEL_DELAY = 1.0


@pytest.fixture(scope="module", autouse=True)
def _models_built() -> None:
    """The SDK builds its event models once, slowly: not in a test."""
    build_responses_models()


@pytest.fixture
def slow_cancel() -> Iterator[FaultServer]:
    """A fault server that answers a cancel CANCEL_DELAY seconds after it took effect."""
    with FaultServer(cancel_delay=CANCEL_DELAY) as server:
        yield server


def _cancel_answers(server: FaultServer) -> list[int | None]:
    """The status of each cancel's answer so far (``None``: not answered yet)."""
    return [sent.status for sent in server.sent if sent.request.path.endswith("/cancel")]


def _cancel_logs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "cancel" in r.getMessage()]


@pytest.mark.parametrize("backend", ["asyncio", pytest.param("trio", marks=pytest.mark.once)])
def test_an_async_interrupt_reaches_the_caller_before_its_cancel_is_answered(
    slow_cancel: FaultServer, sdk_flavor: Flavor, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On async, the interrupted caller's except runs while the cancel is still unanswered (it is a task on the loop); closing the client waits for it, and it is answered once."""
    caplog.set_level(logging.INFO, logger="hermes_transport")
    slow_cancel.scenario = Scenario.silent_after(TO_FIRST_OUTPUT)
    token = Interrupt()
    seen: list[Any] = []
    interrupt_when(token, lambda: len(seen) >= TO_FIRST_OUTPUT)
    at_except: dict[str, Any] = {}

    async def main() -> None:
        http_client = sdk_flavor.async_http_client_for("cron", policy=PATIENT, interrupt=token)
        sdk: dict[str, Any] = {
            "base_url": slow_cancel.base_url,
            "api_key": API_KEY,
            "max_retries": 0,
        }
        async with openai.AsyncOpenAI(http_client=http_client, **sdk) as client:
            try:
                async for event in await client.responses.create(stream=True, **BODY):
                    seen.append(event)
            except StreamInterrupted:
                at_except["answers"] = _cancel_answers(slow_cancel)
                at_except["logs"] = _cancel_logs(caplog)

    if backend == "trio":
        ignore_abandoned_async_generators()
    anyio.run(main, backend=backend)
    assert at_except["answers"] in ([], [None]), at_except
    assert at_except["logs"] == [], at_except
    assert _cancel_answers(slow_cancel) == [200]  # the client's close waited for it
    assert [r.path for r in slow_cancel.requests if r.path.endswith("/cancel")] == [CANCEL]
    assert any(m.startswith(f"cancelled {CANCEL}: 200") for m in _cancel_logs(caplog))


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_sync_interrupt_sends_its_cancel_on_the_callers_thread_before_raising(
    slow_cancel: FaultServer, sdk_flavor: Flavor
) -> None:
    """On sync there is no other thread: the read that the interrupt broke sends the cancel and waits for its answer (here CANCEL_DELAY, at most CANCEL_TIMEOUT), then raises; nothing is sent again when the stream is closed."""
    slow_cancel.scenario = Scenario.silent_after(TO_FIRST_OUTPUT)
    token = Interrupt()
    chunks: list[bytes] = []
    when = interrupt_when(token, lambda: b"output_text.delta" in b"".join(chunks))
    request = {"stream": True, **BODY}
    headers = {"authorization": f"Bearer {API_KEY}"}
    with sdk_flavor.http_client_for("cron", policy=PATIENT, interrupt=token) as client:
        url = slow_cancel.base_url + "/responses"
        with client.stream("POST", url, json=request, headers=headers) as response:
            try:
                for chunk in response.iter_raw():
                    chunks.append(chunk)
            except StreamInterrupted:
                waited = time.monotonic() - when[0]
                at_except = _cancel_answers(slow_cancel)
    assert at_except == [200]
    assert CANCEL_DELAY * 0.95 <= waited < CANCEL_TIMEOUT + 5.0
    assert [r.path for r in slow_cancel.requests if r.path.endswith("/cancel")] == [CANCEL]


# --- no thread for a resume or a cancel ------------------------------------------------------


@pytest.fixture
def thread_starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads started from now on (the fault server's excepted)."""
    started: list[str] = []
    start = threading.Thread.start

    def recording(thread: threading.Thread) -> None:
        if not thread.name.startswith("FaultServer"):
            started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", recording)
    return started


@pytest.mark.parametrize("mode", ["sync", "asyncio", pytest.param("trio", marks=pytest.mark.once)])
def test_no_thread_is_started_for_a_resume_or_a_cancel(
    server: FaultServer, sdk_flavor: Flavor, mode: str, thread_starts: list[str]
) -> None:
    """A call that is resumed after a stall and then interrupted, which cancels its response, starts no thread: all of it runs on the caller's thread or loop (and the watchdog already running)."""
    # After a warm-up call (attempt 0) on the same thread or loop, which starts what starts
    # once (the watchdog; asyncio's resolver thread): the creation stalls after its second
    # delta and is resumed; the resume sends two more events, stalls, and is interrupted.
    server.scenario = answered_in_turn(
        Scenario(), Scenario.silent_after(7), Scenario.silent_after(2)
    )
    token = Interrupt()
    seen: list[Any] = []
    started: list[str] = []

    def warmed_up() -> None:
        interrupt_when(token, lambda: len(seen) >= 9, delay=0.1)
        thread_starts.clear()  # the warm-up's, and interrupt_when's (the test's own)

    error = _calls(mode, sdk_flavor, server, token, seen, warmed_up, started, thread_starts)
    assert isinstance(error, StreamInterrupted), repr(error)
    assert [e.sequence_number for e in seen] == list(range(9))
    assert [r.method for r in server.requests[1:]] == ["POST", "GET", "POST"]
    assert server.requests[-1].path == f"{RESPONSES_PATH}/resp_hermes1/cancel"
    assert started == []


def _calls(
    mode: str,
    flavor: Flavor,
    server: FaultServer,
    token: Interrupt,
    seen: list[Any],
    warmed_up: Callable[[], None],
    started: list[str],
    thread_starts: list[str],
) -> BaseException | None:
    """A healthy call, ``warmed_up()``, then the call under test (its events into ``seen``),
    on one thread or loop: the latter's error; ``started`` gets the threads started
    since ``warmed_up()``, once its client is closed."""
    factory: dict[str, Any] = {"policy": PATIENT, "interrupt": token}
    sdk: dict[str, Any] = {"base_url": server.base_url, "api_key": API_KEY, "max_retries": 0}
    error: BaseException | None = None
    if mode == "sync":
        with openai.OpenAI(http_client=flavor.http_client_for("cron", **factory), **sdk) as client:
            list(client.responses.create(stream=True, **BODY))
            warmed_up()
            try:
                seen.extend(client.responses.create(stream=True, **BODY))
            except StreamInterrupted as exc:
                error = exc
        started.extend(thread_starts)
        return error

    async def main() -> BaseException | None:
        http_client = flavor.async_http_client_for("cron", **factory)
        error: BaseException | None = None
        async with openai.AsyncOpenAI(http_client=http_client, **sdk) as client:
            [event async for event in await client.responses.create(stream=True, **BODY)]
            warmed_up()
            try:
                async for event in await client.responses.create(stream=True, **BODY):
                    seen.append(event)
            except StreamInterrupted as exc:
                error = exc
        started.extend(thread_starts)  # before the loop's own shutdown starts its threads
        return error

    if mode == "trio":
        ignore_abandoned_async_generators()
    result: BaseException | None = anyio.run(main, backend=mode)
    return result
