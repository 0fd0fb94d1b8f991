"""What the sync and async watched Responses WebSockets share: their state and their guards.

``WatchedBase`` owns, for ``WatchedConnection`` (``websocket``) and
``AsyncWatchedConnection`` (``awebsocket``), everything of a watched connection that does
no I/O: the turns (``TurnWatch``), the connection's guard (one a turn, one between turns,
attached to whatever the subclass cuts, armed on whatever watchdog it has), the tokens a
read binds, and which guard cut a read. The subclasses do the reading, sending,
reopening and resuming, each the way its library does them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from typing import Any

import httpx

from .._core.attempt import Arm
from .._core.errors import StreamInterrupted
from .._core.guard import Guard, Killable
from .._core.interrupt import Interrupt, bound_interrupts
from .._core.policy import StreamPolicy
from .._core.stages import Stage
from .._core.stats import StatsCallback
from .._core.ws_turns import TurnWatch
from .websocket_link import Link, closed_errors, handshake_request

__all__ = ["ENTER_FIRST", "WatchedBase"]

ENTER_FIRST = "enter the watched connection first (with / async with, or enter())"

logger = logging.getLogger("hermes_transport")


class WatchedBase:
    """The shared state and guards of a watched connection (see the module docstring)."""

    def __init__(
        self,
        link: Link,
        policy: StreamPolicy,
        interrupt: Interrupt | None,
        on_stats: StatsCallback | None,
    ) -> None:
        self._link = link
        self._policy = policy
        self._given: tuple[Interrupt, ...] = () if interrupt is None else (interrupt,)
        self._on_stats = on_stats
        self._closed_errors = closed_errors()
        self._turns: TurnWatch | None = None
        self._guard: Guard | None = None  # None while the socket is dead or not yet open
        self._reader_tokens: tuple[Interrupt, ...] = ()  # bound around the read under way
        self._reading = False
        self._ready: deque[bytes] = deque()  # frames released from a turn's hold, in order
        self.response: Any = None
        self._conn: Any = None  # the SDK connection, once entered
        # The guard and the turn it watches change under this lock: a sender on another
        # thread starts turns while the reader ends them. I/O is never done under it.
        self._lock = threading.RLock()
        self._watched: object = None  # the turn the current guard watches
        self._closed = False  # close() was called: nothing is opened again
        if link.connection is not None:
            self._adopt()

    def parse_event(self, data: str | bytes) -> Any:
        """The SDK's parse of a frame into its event model."""
        return self._sdk.parse_event(data)

    @property
    def _sdk(self) -> Any:
        conn = self._link.connection
        if conn is None:
            raise RuntimeError(ENTER_FIRST)
        return conn

    # -- what each subclass does its own way ------------------------------------------

    def _tls(self, ws: Any) -> bool:
        raise NotImplementedError

    def _kill(self) -> Killable:
        """What the connection's guards cut: its current connection."""
        raise NotImplementedError

    def _arm(self) -> Arm:
        raise NotImplementedError

    def _released(self, guard: Guard) -> None:
        """A guard is done with (closed already)."""

    # -- guards -----------------------------------------------------------------------

    def _adopt(self) -> None:
        """The SDK connection is open: its turns, its resource, its guard between turns."""
        self._conn = self._sdk  # read on every frame: an attribute, not the property
        ws = self._conn._connection
        if self._turns is None:
            request = handshake_request(ws, self._tls(ws))
            self._turns = TurnWatch(self._policy, request, self._on_stats)
            resource = self._conn.response  # the SDK's own, sending through this face
            self.response = None if resource is None else type(resource)(self)
        self._set_guard(self._new_guard("between_turns"))

    def _is_reading(self) -> bool:
        return self._reading

    def _new_guard(self, stage: Stage) -> Guard:
        guard = Guard(stage)
        tokens = self._given + self._reader_tokens
        if tokens:
            guard.bind(tokens)
        guard.attach(self._kill())  # cuts at once if a token fired it already
        return guard

    def _set_guard(self, guard: Guard | None) -> None:
        with self._lock:
            old, self._guard = self._guard, guard
            if guard is None or guard.stage == "between_turns":
                self._watched = None
        if old is not None:
            old.close()
            self._released(old)

    def _open_turn(self, event: object) -> None:
        """A create is about to be sent: its turn, watched at once if it is the current one."""
        turns = self._turns
        assert turns is not None
        with self._lock:
            turn = turns.open(event)
            if turns.turn is turn:
                self._watch_turn()

    def _watch_turn(self) -> None:
        """The current turn gets a guard of its own, with its budget."""
        turns = self._turns
        assert turns is not None
        with self._lock:
            guard = self._new_guard("first_event")
            turns.watch(guard, self._arm())
            self._set_guard(guard)
            self._watched = turns.turn

    def _next_guard(self) -> None:
        """A turn ended on a live socket: the next turn's guard, or the one between turns."""
        turns = self._turns
        assert turns is not None
        with self._lock:
            if self._guard is None:
                return  # resumed over HTTP: the socket is dead; the next create opens one
            if turns.turn is None:
                self._set_guard(self._new_guard("between_turns"))
            elif turns.turn is not self._watched:  # not watched yet by a sender's start
                self._watch_turn()

    def _dead(self) -> bool:
        """Whether the connection is gone: cut by a guard, or closed, read or not."""
        guard = self._guard
        if guard is None or guard.fired is not None:
            return True
        state = getattr(getattr(self._conn, "_connection", None), "state", None)
        return getattr(state, "name", "OPEN") != "OPEN"

    def _before_create(self) -> bool:
        """Before a create is sent: raise at once, sending nothing, if a token given or
        bound is interrupted; whether a fresh connection must be opened for it (the last
        one is gone), the turns cut with it ended."""
        for token in (*self._given, *bound_interrupts()):
            if token.interrupted:
                raise StreamInterrupted(token.reason or "interrupted", stage="before_sending")
        if self._closed or not self._link.can_reopen or not self._dead():
            return False
        turns, guard = self._turns, self._guard
        assert turns is not None
        if guard is not None and guard.fired is not None:
            turns.end_all(guard.fired, guard.fired_stage, guard.reason)
        else:
            turns.end_all("error", None, "its connection closed before it was read")
        return True

    def _send_failed(self, exc: BaseException) -> None:
        """A create could not be sent: its turns end; the SDK does not send it later."""
        queue = getattr(self._conn, "_send_queue", None)
        drain = getattr(queue, "drain", None)
        if callable(drain):  # openai 2.x queues a failed send, for its reconnect
            drain()
        assert self._turns is not None
        self._turns.failed(exc)
        if isinstance(exc, (self._closed_errors[0], OSError)):
            self._set_guard(None)  # the connection is gone: the next create opens one
        else:
            self._next_guard()  # not sent, the connection fine (a malformed event, say)

    # -- reading ----------------------------------------------------------------------

    def _bind_reader(self, guard: Guard) -> tuple[Interrupt, ...]:
        """Bind the tokens bound around this read (not given to the connection) to
        ``guard``, for the read only; a token interrupted already fires it."""
        bound = bound_interrupts()
        extra = tuple(t for t in bound if t not in self._given) if bound else ()
        if extra:
            self._reader_tokens = extra
            guard.bind(extra)
        return extra

    def _unbind_reader(self, guard: Guard, extra: tuple[Interrupt, ...]) -> None:
        self._reader_tokens = ()
        guard.unbind(extra)

    def _cut_before(self, guard: Guard) -> None:
        """Raise, to the read's handler, if ``guard`` fired since the last read (what came
        since is not handed up), cutting the connection if a token bound here fired it."""
        if guard.fired is not None:
            guard.attach(self._kill())
            raise self._closed_errors[2](None, None)

    def _cut_by(self, guard: Guard) -> Guard:
        """The connection died under a read guarded by ``guard``: the guard that cut it (a
        send on another thread may have started a turn meanwhile), the socket now dead;
        ``StreamInterrupted`` for every turn if an interrupt cut it."""
        turns, current = self._turns, self._guard
        assert turns is not None
        if guard.fired is None and current is not None and current.fired is not None:
            guard = current
        self._set_guard(None)
        if guard.fired == "interrupted":
            raise turns.interrupted(guard) from None
        return guard

    def _log_resend(self, guard: Guard) -> None:
        logger.warning(
            "WebSocket turn %s before any output; sending it again", guard.fired or "cut"
        )

    def _resumed_ended(self) -> BaseException:
        """A resumed turn's stream ended before its response: the error its reader gets
        (not the library's ``ConnectionClosed``, which an iteration would reconnect on)."""
        assert self._turns is not None
        error = httpx.RemoteProtocolError(
            "the resumed stream of a background WebSocket turn ended before its response"
        )
        self._turns.failed(error)
        return error
