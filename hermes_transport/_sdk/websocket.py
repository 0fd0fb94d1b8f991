"""Responses over a WebSocket, watched per turn: ``watch_connection`` and its connection.

``WatchedConnection`` wraps the openai SDK's sync ``ResponsesConnection`` (or the manager
``responses.connect()`` returns, entered on ``with`` or ``enter()``) and is used like it:
``send``, ``recv``, ``recv_bytes``, iteration, ``close`` and the ``response`` resource
(the SDK's own, sending through the watched ``send``). Its turns are judged by the pure
``TurnWatch``; this module owns the I/O: the connection's guard (one per turn and one
between turns, attached to the socket, armed on the process's one watchdog thread), the
shutdown that cuts a stalled or interrupted connection (a ``recv`` blocked on another
thread wakes at once), the re-send of a turn that stalled before its output (on a fresh
connection, opened as the SDK opens them), and the resume over HTTP of a background turn
that stalled after it. One reader at a time; a sender may be another thread.
"""

from __future__ import annotations

import contextlib
import logging
import ssl
from collections.abc import Iterator
from types import TracebackType
from typing import Any

from .._core.attempt import Arm
from .._core.guard import Guard
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._core.ws_turns import create_of
from .._io.watchdog import watchdog
from .._io.websocket_kill import SocketKill
from .websocket_base import ENTER_FIRST, WatchedBase
from .websocket_link import link_of
from .websocket_resume import resumed

__all__ = ["WatchedConnection", "watch_connection"]

logger = logging.getLogger("hermes_transport")


def watch_connection(
    connection: Any,
    *,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
) -> WatchedConnection:
    """Watch the turns of a sync Responses WebSocket: ``connection`` is what
    ``client.responses.connect()`` returns (entered by ``with`` or ``enter()``), or the
    connection entering it gave.

    Each ``response.create`` sent starts a turn: until its first output event it has the
    policy's first-event budget (by model, as on HTTP), then the stale budget between
    outputs; keepalives and lifecycle events are not output, and between turns the
    connection is never cut. A turn that stalls has its connection shut down (a ``recv``
    blocked on another thread wakes) and its reader gets ``StreamStalled``; before any
    output it is first sent again, up to ``policy.retries`` times, on a fresh connection
    (not a create chained with ``store=False`` to a response only the dead connection
    knew); a background turn that stalls after output is resumed over HTTP from its last
    event. ``interrupt`` (or a token bound around a call) stops a waiting ``recv`` at once
    with ``StreamInterrupted`` and closes the connection, which ends a turn on the server
    (a background one is left to run, resumable). ``on_stats`` gets each turn's
    ``StreamStats`` (``transport="websocket"``).
    """
    return WatchedConnection(
        link_of(connection), policy or StreamPolicy.from_env(), interrupt, on_stats
    )


class WatchedConnection(WatchedBase):
    """A sync Responses WebSocket whose turns are watched; see ``watch_connection``."""

    _resumed: Iterator[bytes] | None = None  # a turn's events resumed over HTTP

    # -- the SDK connection's face ----------------------------------------------------

    def enter(self) -> WatchedConnection:
        """Open the connection, when given the manager (``with`` does it too)."""
        if self._link.connection is None:
            self._link.connection = self._link.manager.enter()
            self._adopt()
        return self

    def __enter__(self) -> WatchedConnection:
        return self.enter()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[Any]:
        """Events until the connection closes cleanly (the SDK's iteration, watched)."""
        closed, closed_ok, _ = self._closed_errors
        while True:
            try:
                yield self.recv()
            except closed_ok:
                return
            except closed as exc:
                if not self._reconnected(exc):
                    raise

    def recv(self) -> Any:
        """The next event, parsed by the SDK; ``StreamStalled`` or ``StreamInterrupted``
        when its turn was cut."""
        return self._conn.parse_event(self.recv_bytes())

    def recv_bytes(self) -> bytes:
        """The next frame as it came, watched."""
        turns = self._turns
        if turns is None:
            raise RuntimeError(ENTER_FIRST)
        ready = self._ready
        while True:
            if ready:
                return ready.popleft()
            data = self._next_frame()
            if data is None:
                continue  # re-sent or resumed: read on
            verdict = turns.judge(data)
            if verdict == "pass":
                return data  # the hot path: one judgement
            if verdict == "hold":
                continue
            if verdict == "resend":
                logger.warning("a WebSocket turn opened with a transient error; sending it again")
                self._resend(again=False)
                continue
            ready.extend(turns.release(data))
            if verdict == "end":
                self._drop_resumed()
                self._next_guard()

    def send(self, event: Any) -> None:
        """Send a client event; a ``response.create`` starts a turn (on a fresh connection
        when the last one was cut and another can be opened)."""
        sdk = self._sdk
        if not create_of(event):
            sdk.send(event)
            return
        if self._before_create():
            self._reopen()
        self._open_turn(event)
        try:
            sdk.send(event)
        except Exception as exc:
            self._send_failed(exc)
            raise

    def close(self, *, code: int = 1000, reason: str = "") -> None:
        """Close the connection; turns under way end ``closed``."""
        self._closed = True
        if self._turns is not None:
            self._turns.end_all("closed", None, None)
        self._ready.clear()
        self._set_guard(None)
        self._drop_resumed()
        if self._link.connection is not None:
            self._sdk.close(code=code, reason=reason)

    # -- what the base leaves to each library -----------------------------------------

    def _tls(self, ws: Any) -> bool:
        return isinstance(ws.socket, ssl.SSLSocket)

    def _kill(self) -> SocketKill:
        return SocketKill(self._sdk._connection, self._is_reading)

    def _arm(self) -> Arm:
        return watchdog.arm

    def _drop_resumed(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            # A read under way on another thread may hold it: its HTTP stream then ends
            # when that read does (a running generator cannot be closed from here).
            with contextlib.suppress(ValueError, RuntimeError):
                resumed.close()  # type: ignore[attr-defined]

    # -- reading ----------------------------------------------------------------------

    def _next_frame(self) -> bytes | None:
        """One frame; ``None`` when the turn was sent again or resumed instead."""
        if self._resumed is not None:
            return self._next_resumed()
        guard = self._guard
        if guard is None:
            raise self._closed_errors[2](None, None)  # cut before: nothing more to read
        extra = self._bind_reader(guard)
        self._reading = True
        try:
            self._cut_before(guard)
            return self._conn.recv_bytes()  # type: ignore[no-any-return]
        except (self._closed_errors[0], OSError) as exc:
            self._recover(exc, guard)
            return None
        finally:
            self._reading = False
            if extra:
                self._unbind_reader(guard, extra)

    def _recover(self, exc: BaseException, guard: Guard) -> None:
        """After the connection died under a read: send the turn again or resume it, or
        raise what happened."""
        turns = self._turns
        assert turns is not None
        guard = self._cut_by(guard)
        plan, note = turns.plan(self._link.can_reopen and not self._closed)
        cause: BaseException | None = None
        if plan == "resend":
            self._log_resend(guard)
            try:
                self._reopen()
                self._resend(again=True)
            except Exception as error:
                note = f"; not re-sent: a fresh connection failed: {type(error).__name__}: {error}"
                raise turns.given_up(exc, guard, note) from error
            return
        if plan == "resume":
            note, cause, self._resumed = resumed(self._link, turns, self._policy, self._given)
            if self._resumed is not None:
                return
        raise turns.given_up(exc, guard, note) from cause

    def _next_resumed(self) -> bytes | None:
        resumed, turns = self._resumed, self._turns
        assert resumed is not None
        assert turns is not None
        try:
            return next(resumed)
        except StopIteration:
            self._resumed = None
            raise self._resumed_ended() from None
        except BaseException as exc:
            self._resumed = None
            turns.failed(exc)
            raise

    def _reconnected(self, exc: BaseException) -> bool:
        """Between turns, the SDK's own reconnect (only with its ``on_reconnecting``)."""
        sdk = self._sdk
        if self._turns is None or self._turns.turn is not None:
            return False
        if getattr(sdk, "_on_reconnecting", None) is None or not sdk._reconnect(exc):
            return False
        self._set_guard(self._new_guard("between_turns"))
        return True

    def _reopen(self) -> None:
        """Put a fresh connection in place of the dead one, under the SDK's own lock."""
        sdk = self._sdk
        if self._closed:
            raise self._closed_errors[1](None, None)  # closed meanwhile: nothing reopens
        ws = self._link.reopen()
        with getattr(sdk, "_connection_lock", None) or contextlib.nullcontext():
            old, sdk._connection = sdk._connection, ws
        with contextlib.suppress(Exception):
            old.close()
        self._set_guard(self._new_guard("between_turns"))

    def _resend(self, *, again: bool) -> None:
        """Send the current turn's create again: on a fresh connection (``again``: with
        the creates sent behind it, lost with the old one), or behind those on this one."""
        turns = self._turns
        assert turns is not None
        turn = turns.resent() if again else turns.requeue()
        self._watch_turn()
        self._sdk.send(turn.event)
        if again:
            for waiting in turns.waiting:
                waiting.record.new_attempt()
                self._sdk.send(waiting.event)
