"""How a sync shell and its streams send on the caller's thread what nobody waits for.

The sync twin of ``async_send``'s helpers: ``Send`` (how a shell sends one request
under a guard that can reach its sockets), ``pause`` (how a caller's thread waits before
sending again: a re-send, a resume after a refusal) and ``send_cancel`` (a cancel after
an interrupt or a given-up stall, bounded by ``CANCEL_TIMEOUT``, on this thread: the
only one there is to send it on).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from .._core.clock import monotonic
from .._core.guard import Guard
from .._core.interrupt import Interrupt
from .._core.resume import CANCEL_TIMEOUT
from .._io.watchdog import watchdog

__all__ = ["Send", "pause", "send_cancel"]

logger = logging.getLogger("hermes_transport")

#: How a shell sends one request under a guard (its sockets reachable by it).
Send = Callable[[Any, Guard], Any]


def pause(
    seconds: float, tokens: Sequence[Interrupt], woken: threading.Event | None = None
) -> None:
    """Wait ``seconds`` before a re-send or a resume, or until one of ``tokens`` fires (the
    next attempt then fails at once, sending nothing) or ``woken`` is set."""
    woken = woken if woken is not None else threading.Event()
    removers = [token._add_listener(lambda _reason: woken.set()) for token in tokens]
    try:
        woken.wait(seconds)
    finally:
        for remove in removers:
            remove()


def send_cancel(send: Send, request: Any) -> None:
    """Send the cancel ``request`` within ``CANCEL_TIMEOUT`` seconds, reading its answer;
    never raises (a cancel that fails is logged)."""
    guard = Guard("connecting")
    guard.deadline = monotonic() + CANCEL_TIMEOUT
    watchdog.arm(guard)
    try:
        response = send(request, guard)
        try:
            response.read()
        finally:
            response.close()
    except Exception as exc:
        logger.warning("cancelling %s failed: %r", request.url.path, exc)
    else:
        logger.info("cancelled %s: %d", request.url.path, response.status_code)
    finally:
        guard.close()
