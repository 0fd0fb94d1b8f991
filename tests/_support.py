"""Helpers shared by the tests."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import httpx

# Builds an httpx.Client over a WatchdogTransport: see the watchdog_client fixture.
ClientFactory = Callable[..., httpx.Client]


def chat_body(stream: bool = True, **extra: Any) -> dict[str, Any]:
    """A minimal chat-completions request body."""
    messages = [{"role": "user", "content": "hi"}]
    return {"model": "m", "messages": messages, "stream": stream, **extra}


def open_fds() -> int:
    """File descriptors this process has open (Linux)."""
    return len(os.listdir("/proc/self/fd"))
