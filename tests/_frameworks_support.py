"""What the frameworks' recipe tests share: a framework's import, and how they interrupt.

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
import time
from collections.abc import AsyncIterator, Callable, Sized
from types import ModuleType

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
