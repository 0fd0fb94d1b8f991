"""The requests of an MCP server that wait for their client's answer: ``WaitingAsks``.

A server may ask its client something in the middle of a request's stream (an
elicitation, a sampling, the roots) and wait, silent, for the answer, which the client
sends as a ``POST`` of its own: a person answering a form for five minutes is no stall.
The body watch of the waiting stream suspends its budget and registers here, by session
and by the id of the server's request; the shell of the same transport says when the
answer has been sent (``answered``), and the stream's budget restarts. Pure: a dict and
its lock; the callbacks run outside it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["WaitingAsks"]

#: One ask: the session it came on ("" without one) and the id of the server's request.
AskKey = tuple[str, str | int]


class WaitingAsks:
    """The asks of one transport's streams still waiting for the client's answer."""

    __slots__ = ("_lock", "_waiting")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: dict[AskKey, Callable[[str | int], None]] = {}

    def wait(self, session: str, ask: str | int, on_answer: Callable[[str | int], None]) -> None:
        """Call ``on_answer(ask)`` once the client's answer to ``ask`` has been sent."""
        with self._lock:
            self._waiting[(session, ask)] = on_answer

    def forget(self, session: str, ask: str | int) -> None:
        """The stream that waited for ``ask`` is over: nothing to restart."""
        with self._lock:
            self._waiting.pop((session, ask), None)

    def answered(self, session: str, ask: str | int) -> None:
        """The client's answer to ``ask`` has been sent (or the attempt to send it is over:
        either way the server has all it will get): restart the stream that waited."""
        with self._lock:
            on_answer = self._waiting.pop((session, ask), None)
        if on_answer is not None:
            on_answer(ask)

    def __len__(self) -> int:
        return len(self._waiting)
