"""``Guard``: one request attempt's liveness state, shared across threads.

The owner is the caller's thread, which runs the request (for an async
request: its event loop's thread); it alone advances ``stage``, sets new
deadlines, and attaches and detaches connections. The watchdog (thread, or
loop timer) may expire the guard; any thread holding an ``Interrupt`` may
interrupt it; another thread or task may close the response while its body
is being read. Killing means shutting the attempt's socket down so the
owner's blocked read returns at once; the owner then raises the error the
guard records (``fired``, ``fired_stage``, ``reason``).

Invariants, all under ``_lock``:
- a connection is shut down only while it is attached to an open guard;
- a connection detaches (``detach``) before its owner closes the socket, and
  the guard closes (``close``) before its connection goes back to the pool, so
  a late kill can never reach a socket that now belongs to someone else, or a
  file descriptor number that was reused;
- a guard fires at most once; after ``close`` it never fires;
- a close of the attached connection by another thread while the guard is
  open is deferred (``defer_close``) and done when the guard closes, so no
  socket is closed under a request that is still using it;
- with no connection attached, or one whose socket cannot be reached, a kill
  stops the ``fallback`` instead (an async attempt cancels its own cancel
  scope: connecting, DNS, a pool wait); a sync attempt has none, and its kill
  lands when a connection attaches or the response returns;
- a guard is never expired before its deadline, and a deadline that passes
  while the caller is behind (bytes unread, or the reader not in a read) is
  put off, for at most ``CALLER_LAG_LIMIT``: the caller's lag is not taken
  for a silent server; nor is a reader that has caught up only just (it may
  be back from the socket with its bytes, not yet out of its read): it must
  be seen waiting with nothing pending twice, ``CAUGHT_UP_RECHECK`` apart.
Shutdown, scheduling a cancel on an event loop and a zero-timeout poll of
the socket are the only work done under the lock; none of them blocks.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Literal, Protocol, cast

from .clock import monotonic
from .stages import Stage

if TYPE_CHECKING:
    from .interrupt import Interrupt

__all__ = ["FiredKind", "Guard", "Killable", "current_guard"]

#: Why a guard fired: its deadline passed, an ``Interrupt`` fired, or another
#: thread or task closed the response while its body was being read.
FiredKind = Literal["stalled", "interrupted", "closed"]


#: A deadline that passes while the server's bytes wait unread in the socket,
#: or while the reader is not waiting in a read, shows the caller behind (a busy
#: thread or loop), not the server silent: the guard looks again this often, for
#: at most CALLER_LAG_LIMIT past the deadline, before it fires. Short: a keepalive
#: that has just arrived shows its reader behind for a moment, which must not put a
#: real stall off long (a look costs a lock and a zero-timeout poll).
CALLER_LAG_RECHECK = 0.005
CALLER_LAG_LIMIT = 1.0
#: A caller seen behind and then waiting is looked at once more, this soon: its
#: thread may have been just back from the socket with bytes it had not judged.
CAUGHT_UP_RECHECK = 0.01


class Killable(Protocol):
    """A connection that can be stopped from a foreign thread."""

    def kill(self) -> bool:
        """Shut the socket down (never close it: the owner does that); whether it was reached."""


class DeferredClose(Protocol):
    """A connection whose close was put off until its request ended."""

    def finish_close(self) -> None:
        """Close the socket now."""


class Guard:
    """Deadline, kill switch and attached connection of one request attempt."""

    __slots__ = (
        "_closed",
        "_conn",
        "_deferred_close",
        "_deferred_to",
        "_fallback",
        "_lock",
        "_overdue_since",
        "_pending_arm",
        "_pending_budget",
        "_tokens",
        "_was_behind",
        "connect_seconds",
        "deadline",
        "fired",
        "fired_stage",
        "reason",
        "stage",
        "tls_seconds",
    )

    def __init__(self, stage: Stage = "connecting") -> None:
        # How long the attempt's new connection took to open and to shake hands
        # (None: pooled, or not seen); written by the tracking backends, owner only.
        self.connect_seconds: float | None = None
        self.tls_seconds: float | None = None
        # Read by the watchdog without the lock; written by the owner (lazy re-arm).
        self.deadline: float | None = None
        self.fired: FiredKind | None = None
        self.reason: str | None = None
        # Where the attempt is, for error messages and logs; owner-written.
        self.stage: Stage = stage
        self.fired_stage: Stage | None = None
        self._lock = threading.Lock()
        self._conn: Killable | None = None
        self._fallback: Killable | None = None
        self._closed = False
        self._deferred_close: DeferredClose | None = None
        self._tokens: Sequence[Interrupt] = ()
        # A budget that starts only once the attempt has a connection (see start_budget).
        self._pending_budget: float | None = None
        self._pending_arm: Callable[[Guard], None] | None = None
        # The deadline the guard itself moved, when the caller was behind, and
        # the one that was first overdue (see _caller_behind).
        self._deferred_to: float | None = None
        self._overdue_since = 0.0
        self._was_behind = False  # this overdue deadline's caller was last seen behind

    def bind(self, tokens: Sequence[Interrupt]) -> bool:
        """Register with interrupt tokens (more of them on each call); ``False`` (and fired)
        if one is already interrupted."""
        registered: list[Interrupt] = []
        for token in tokens:
            if token in self._tokens:
                continue
            if not token._register(self):
                for done in registered:
                    done._unregister(self)
                self.fired = "interrupted"
                self.fired_stage = self.stage
                self.reason = token.reason or "interrupted"
                return False
            registered.append(token)
        self._tokens = [*self._tokens, *registered] if self._tokens else registered
        return True

    def unbind(self, tokens: Sequence[Interrupt]) -> None:
        """Leave these tokens (bound for one read of a longer-lived guard). Owner only."""
        for token in tokens:
            token._unregister(self)
        self._tokens = [token for token in self._tokens if token not in tokens]

    def budget_from_connection(self, budget: float, arm: Callable[[Guard], None]) -> None:
        """Start the deadline (``budget`` seconds, armed with ``arm``) only when the
        attempt gets its connection (``start_budget``): a wait for a free
        connection in a full pool is the client's, not the server's. Owner only."""
        self.deadline = None
        self._pending_budget = budget
        self._pending_arm = arm

    def budget_for_attempt(
        self, budget: float | None, started: float, arm: Callable[[Guard], None], tracked: bool
    ) -> None:
        """Give an attempt started at ``started`` its ``budget`` (``None``: none): from its
        connection where the connection is seen (``tracked``), else from its start. Owner
        only; the shell arms the guard either way."""
        if budget is None:
            return
        if tracked:
            self.stage = "pool"
            self.budget_from_connection(budget, arm)
        else:
            self.deadline = started + budget

    def start_budget(self) -> None:
        """The attempt has a connection (connecting a new one, or writing to a pooled
        one): start a budget put off by ``budget_from_connection``. Owner only."""
        budget, arm = self._pending_budget, self._pending_arm
        if budget is None or arm is None:
            return
        self._pending_budget = self._pending_arm = None
        if self.fired is None and not self._closed:
            self.deadline = monotonic() + budget
            arm(self)

    def attach(self, conn: Killable) -> None:
        """Make ``conn`` the connection a kill shuts down."""
        with self._lock:
            if self._closed:
                return
            self._conn = conn
            if self.fired is not None:
                # Fired before the attempt had a socket (e.g. while connecting).
                self._kill()

    def set_fallback(self, fallback: Killable | None) -> None:
        """What a kill stops while no connection is attached (an async attempt's cancel scope)."""
        with self._lock:
            if self._closed:
                return
            self._fallback = fallback
            if fallback is not None and self.fired is not None and self._conn is None:
                fallback.kill()

    def detach(self, conn: Killable) -> None:
        """Forget ``conn``; after this returns no kill can touch it."""
        with self._lock:
            if self._conn is conn:
                self._conn = None

    def defer_close(self, conn: DeferredClose) -> bool:
        """Put off closing ``conn`` until this guard closes, if it is live and holds it."""
        with self._lock:
            if self._closed or self._conn is not cast(object, conn):
                return False
            self._deferred_close = conn
            return True

    def expire(self) -> None:
        """Called by the watchdog when ``deadline`` has passed.

        Unless the caller is behind: then the guard moves its own deadline a
        little later instead, and the watchdog must watch it again.
        """
        self._fire("stalled", None)

    def _caller_behind(self) -> bool:
        # Under the lock. A reader that has not looked at what arrived would see
        # its stream cut (or its request re-sent) though the server is on time.
        # Connections that can tell have caller_behind(): whether bytes wait
        # unread, or the reader is not waiting in a read (from any thread, never
        # blocking).
        conn, deadline = self._conn, self.deadline
        caller_behind = getattr(conn, "caller_behind", None)
        if deadline is None or caller_behind is None:
            return False
        if deadline != self._deferred_to:  # overdue for the first time, not moved by us
            self._overdue_since = deadline
            self._was_behind = False
        now = monotonic()
        if now - self._overdue_since >= CALLER_LAG_LIMIT:
            return False
        recheck = CALLER_LAG_RECHECK
        if caller_behind():
            self._was_behind = True
        elif not self._was_behind:
            return False  # waiting with nothing pending, and never behind: silent
        else:
            # Caught up since the last look. A reader seen waiting with nothing
            # pending may be one just back from the socket with its bytes, its
            # thread not yet out of the read: silent only if seen so again, soon.
            self._was_behind = False
            recheck = CAUGHT_UP_RECHECK
        self.deadline = self._deferred_to = now + recheck
        return True

    def interrupt(self, reason: str) -> None:
        """Called by an interrupt token, from any thread."""
        self._fire("interrupted", reason)

    def close_from_afar(self) -> None:
        """Another thread or task closed the response while its body is being read."""
        self._fire("closed", "the response was closed while its body was being read")

    def let_go(self) -> None:
        """Forget the connection and the deadline, staying open: the attempt is over (its
        connection may go back to the pool) but its caller is not, so an interrupt or a
        close from afar still fires the guard, reaching no socket."""
        self._disarm(closing=False)

    def close(self) -> None:
        """Disarm for good: no deadline, no connection, no more firing."""
        self._disarm(closing=True)
        for token in self._tokens:
            token._unregister(self)
        self._tokens = ()

    def _disarm(self, *, closing: bool) -> None:
        with self._lock:
            self._closed = self._closed or closing
            self._conn = None
            self._fallback = None
            self.deadline = None
            deferred, self._deferred_close = self._deferred_close, None
        if deferred is not None:
            deferred.finish_close()

    def _fire(self, kind: FiredKind, reason: str | None) -> None:
        with self._lock:
            if self._closed or self.fired is not None:
                return
            if kind == "stalled" and self._caller_behind():
                return
            self.fired = kind
            self.reason = reason
            # Frozen here: after a kill the owner's I/O may still move `stage` on
            # (httpcore reads the response after a failed write).
            self.fired_stage = self.stage
            self.deadline = None
            self._pending_budget = self._pending_arm = None
            self._kill()

    def _kill(self) -> None:
        # Under the lock. A connection whose socket cannot be reached (an event
        # loop's socket object without a file descriptor) falls back too.
        conn, fallback = self._conn, self._fallback
        if (conn is None or not conn.kill()) and fallback is not None:
            fallback.kill()


# The guard of the attempt running in this context: network streams read it to
# attach themselves to whichever request is using them (pooled reuse included).
current_guard: ContextVar[Guard | None] = ContextVar("hermes_transport_guard", default=None)
