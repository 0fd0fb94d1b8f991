"""What the frameworks' recipe tests share: a framework's import, how they interrupt, and
the ways of running a framework that more than one recipe test uses (pydantic-ai's
streams, litellm kept offline).

The frameworks' tests run in the frameworks' own environments, which the test command
builds (``.venvs/frameworks-openai3`` and ``.venvs/frameworks-openai2``: their
frameworks do not install beside one another). ``HERMES_TEST_FRAMEWORKS`` names, comma
separated, the modules an environment must have: there a missing one fails its tests
instead of skipping them, so a recipe never passes by not running. Elsewhere (the
project's own environments) a module whose framework is not installed skips.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sized
from types import ModuleType
from typing import Any

import pytest

from hermes_transport import Interrupt
from hermes_transport.testing import FaultServer, Scenario

from _support import interrupt_when

REQUIRED_VARIABLE = "HERMES_TEST_FRAMEWORKS"


def framework(module: str) -> ModuleType:
    """Import ``module``: a failure skips the test module, or fails it where it is required."""
    required = {name.strip() for name in os.environ.get(REQUIRED_VARIABLE, "").split(",")}
    if module in required:
        return importlib.import_module(module)
    imported: ModuleType = pytest.importorskip(module)
    return imported


async def interrupt_from_task(
    stop: Interrupt, ready: Callable[[], bool], when: list[float]
) -> None:
    """Run as a task on the loop: interrupt 0.1 s after ``ready()`` holds; note when in ``when``."""
    while not ready():
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.1)
    when.append(time.monotonic())
    stop.interrupt("user pressed stop")


def interrupt_at(stop: Interrupt, stage: str, server: FaultServer, seen: Sized) -> list[float]:
    """Interrupt ``stop`` from a thread 0.2 s after the stream reaches ``stage``: its first
    text in ``seen`` (``mid_stream``), else its request at the server; returns when."""
    ready = (lambda: bool(seen)) if stage == "mid_stream" else lambda: bool(server.requests)
    return interrupt_when(stop, ready, delay=0.2)


@contextlib.asynccontextmanager
async def interrupting(
    stop: Interrupt, stage: str, server: FaultServer, seen: Sized, from_task: bool
) -> AsyncIterator[list[float]]:
    """``interrupt_at``, or from a task on the loop once text is in ``seen``; yields when
    it fired, and awaits the task on the way out."""
    if not from_task:
        yield interrupt_at(stop, stage, server, seen)
        return
    when: list[float] = []
    task = asyncio.create_task(interrupt_from_task(stop, lambda: bool(seen), when))
    try:
        yield when
    finally:
        await task


#: Where an async recipe test interrupts its stream, and from where (a thread or a task).
ASYNC_INTERRUPTS = pytest.mark.parametrize(
    ("scenario", "stage", "from_task"),
    [
        (Scenario.silent_before_headers(), "headers", False),
        (Scenario.silent_after(1), "mid_stream", False),
        (Scenario.silent_after(1), "mid_stream", True),
    ],
    ids=["headers-thread", "mid_stream-thread", "mid_stream-task"],
)


def pai_stream(agent: Any, run: str, loop: asyncio.AbstractEventLoop, into: list[str]) -> None:
    """Stream a pydantic-ai agent's answer's text deltas into `into`, the documented way:
    run_stream_sync, or run_stream on `loop`."""
    if run == "run_stream_sync":
        with agent.run_stream_sync("hi") as result:
            for text in result.stream_text(delta=True):
                into.append(text)
        return

    async def stream() -> None:
        async with agent.run_stream("hi") as result:
            async for text in result.stream_text(delta=True):
                into.append(text)

    loop.run_until_complete(stream())


#: The host names a recipe test may resolve.
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


@contextlib.contextmanager
def loopback_only() -> Iterator[list[str]]:
    """Meanwhile every host name resolved is loopback, any other refused: nothing leaves the
    machine. Yields the names asked for."""
    resolved: list[str] = []
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        resolved.append(str(host))
        if str(host) not in LOOPBACK:
            raise socket.gaierror(f"not loopback: {host}")
        return real(host, *args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket, "getaddrinfo", getaddrinfo)
        yield resolved


@contextlib.contextmanager
def litellm_offline(litellm: ModuleType, warm_up: Callable[[], None]) -> Iterator[list[str]]:
    """No callbacks, every host name resolved meanwhile loopback (``loopback_only``: yields
    the names asked for), no event loop left open, and ``warm_up`` run first: litellm's
    first call in a process spends seconds (its tokenizer, lazy imports), more than a
    test's budgets."""
    # A sync call dispatches litellm's service hooks on asyncio.get_event_loop(), which
    # would make the main thread a loop that nothing closes: give it one closed after.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        with loopback_only() as resolved, pytest.MonkeyPatch.context() as patch:
            for name in ("callbacks", "success_callback", "failure_callback"):
                patch.setattr(litellm, name, [])
            warm_up()
            yield resolved
    finally:
        asyncio.set_event_loop(None)
        loop.close()
