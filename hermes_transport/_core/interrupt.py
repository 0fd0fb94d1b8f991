"""``Interrupt``: a token any thread can use to stop the requests bound to it at once.

The token keeps a registry of the live guards (request attempts) bound to it.
``interrupt()`` fires each of them on the calling thread: the guard shuts its
socket down, which wakes the blocked reader immediately, or, for an async
attempt with no socket yet, schedules the cancel of its scope on its loop
(``call_soon_threadsafe``). No thread is started. Listeners serve waiters
that have no socket (the runner's caller waiting for its worker thread).

Race-freedom: registration and ``interrupt()`` take the token's lock, so a
guard either is in the snapshot ``interrupt()`` fires or sees the token
already interrupted when it registers (and then sends nothing). A guard leaves
the registry when it closes, which happens before its connection goes back to
the pool: a pooled socket is out of every token's reach.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .guard import Guard

__all__ = ["Interrupt", "bound_interrupts"]


class Interrupt:
    """A cross-thread stop button for requests and streams.

    Bind requests with ``with token.bind():`` (everything this thread or
    contextvars context sends inside the block; a task or a copied context
    carries it), by giving it to a transport (``WatchdogTransport`` or
    ``AsyncWatchdogTransport``, ``interrupt=token``: everything through that
    transport) or to a factory (``http_client_for``, ``openai_client_for``,
    ...), or for one call to a streaming runner. ``token.interrupt(reason)``
    from any thread (or from the event loop) makes every bound call raise
    ``StreamInterrupted`` promptly, whether it is connecting, in the TLS
    handshake, sending, waiting for headers or reading the body; a call made
    while the token is interrupted fails at once and sends nothing. Nothing is
    re-sent after an interrupt. ``reset()`` re-arms the token for the next
    turn.

    The SDK may wrap the error: a bare openai 1.x client retries it (each
    retry fails at once, offline, after the SDK's back-off) and raises
    ``openai.APIConnectionError`` with the ``StreamInterrupted`` as
    ``__cause__``. openai 2.x and 3.x, the anthropic SDK and the streaming
    runners (on every major) let it through as it is.

    Limits, sync only: DNS resolution and a wait for a free connection in a
    full pool have no socket to shut down, so a call interrupted there fails
    as soon as it gets one; with an inner transport other than the flavor's
    own ``HTTPTransport``, a call interrupted before its headers fails when
    they arrive. (Async attempts are cancelled there instead, at once.) After
    the headers, an inner transport whose responses do not expose their
    socket (mocks) is stopped when its next bytes arrive, sync or async.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._guards: set[Guard] = set()
        self._listeners: set[Callable[[str], None]] = set()
        self._event = threading.Event()

    def __repr__(self) -> str:
        state = f"interrupted: {self._reason!r}" if self._reason is not None else "armed"
        return f"<Interrupt {state}, {len(self._guards)} live request(s)>"

    @property
    def interrupted(self) -> bool:
        """Whether ``interrupt()`` was called since the last ``reset()``."""
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        """The reason given to ``interrupt()``, or ``None`` while armed."""
        return self._reason

    def interrupt(self, reason: str = "interrupted") -> None:
        """Stop every bound request now. Any thread; idempotent."""
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {reason!r}")
        with self._lock:
            if self._event.is_set():
                return
            self._reason = reason
            self._event.set()
            guards = list(self._guards)
            listeners = list(self._listeners)
        # Outside the lock: firing shuts sockets down.
        for guard in guards:
            guard.interrupt(reason)
        for listener in listeners:
            listener(reason)

    def reset(self) -> None:
        """Re-arm the token for the next turn."""
        with self._lock:
            self._reason = None
            self._event.clear()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until interrupted or ``timeout`` passes; return ``interrupted``."""
        return self._event.wait(timeout)

    @contextmanager
    def bind(self) -> Iterator[Interrupt]:
        """Bind requests made in this context (thread / contextvars context) to the token."""
        context = _bound.set((*_bound.get(), self))
        try:
            yield self
        finally:
            _bound.reset(context)

    def _register(self, guard: Guard) -> bool:
        """Add a live guard; ``False`` (and not added) if already interrupted."""
        with self._lock:
            if self._event.is_set():
                return False
            self._guards.add(guard)
            return True

    def _unregister(self, guard: Guard) -> None:
        """Drop a guard that has closed."""
        with self._lock:
            self._guards.discard(guard)

    def _add_listener(self, listener: Callable[[str], None]) -> Callable[[], None]:
        """Call ``listener(reason)`` on interrupt; returns a function that removes it.

        For waiters that have no socket, such as a caller waiting on a worker
        thread or an event loop. A listener added to an interrupted token is
        called at once.
        """
        with self._lock:
            fired = self._event.is_set()
            reason = self._reason
            if not fired:
                self._listeners.add(listener)
        if fired:
            listener(reason or "interrupted")

        def remove() -> None:
            with self._lock:
                self._listeners.discard(listener)

        return remove


_bound: ContextVar[tuple[Interrupt, ...]] = ContextVar("hermes_transport_interrupts", default=())


#: The tokens bound in the current context, innermost last: the context variable's own
#: ``get`` (no Python frame: every read of a watched WebSocket asks).
bound_interrupts: Callable[[], tuple[Interrupt, ...]] = _bound.get
