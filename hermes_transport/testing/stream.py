"""What every wire's streamed answer is made of, before the handler plays faults over it.

Owns :class:`WireStream`: the events of one complete streamed answer in order, the index
of the first output event (where a scenario's ``think`` pauses), and how that wire says
"still here" (its keepalive) and "failed" (its in-stream error event). Chat Completions
and Messages use it as is, with every event encoded up front; Responses subclasses it to
number its events as they are sent. And :class:`Writes`, which coalesces the events the
handler sends into fewer writes. It imports nothing else of the package.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["WireStream", "Writes", "error_cut", "sse_comment"]


def error_cut(after: int, events: int) -> int:
    """How many of ``events`` events an in-stream error after ``after`` events follows:
    all but the last at most."""
    return max(0, min(after, events - 1))


def sse_comment(crlf: bool) -> bytes:
    """The SSE comment ``: keepalive``, the Chat Completions keepalive."""
    return b": keepalive" + (b"\r\n\r\n" if crlf else b"\n\n")


class WireStream:
    """One streamed answer: ``len()`` events, fetched in order by :meth:`event`.

    The handler calls :meth:`event` once per event it sends, in order, :meth:`keepalive`
    and :meth:`error` when it sends those, and :meth:`ended` once when the answer is over,
    however it ended (complete, cut off, failed or its client gone).
    """

    def __init__(
        self, events: Sequence[bytes], *, think_at: int, keepalive: bytes, error: bytes
    ) -> None:
        self._events = list(events)
        self.think_at = think_at
        self._keepalive, self._error = keepalive, error

    def __len__(self) -> int:
        return len(self._events)

    def event(self, index: int) -> bytes:
        """Event number ``index`` (0-based), encoded."""
        return self._events[index]

    def keepalive(self) -> bytes:
        """The wire's keepalive, encoded."""
        return self._keepalive

    def error(self) -> bytes:
        """The wire's in-stream error event for the scenario, encoded."""
        return self._error

    def ended(self) -> None:
        """The answer is over; nothing to keep by default."""


class Writes:
    """Coalesces events into writes of at least ``size`` bytes (0: one write per event)."""

    def __init__(self, write: Callable[[bytes], None], size: int) -> None:
        self._write, self._size = write, size
        self._pending: list[bytes] = []
        self._pending_size = 0

    def send(self, event: bytes) -> None:
        self._pending.append(event)
        self._pending_size += len(event)
        if self._pending_size >= self._size:
            self.flush()

    def flush(self) -> None:
        """Write what is pending, before any pause."""
        if self._pending:
            self._write(b"".join(self._pending))
            self._pending, self._pending_size = [], 0
