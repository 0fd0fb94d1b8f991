"""Responses over a WebSocket, watched per turn, async: ``awatch_connection``.

The async twin of ``websocket``: ``AsyncWatchedConnection`` wraps the openai SDK's
``AsyncResponsesConnection`` (or the manager ``responses.connect()`` returns, entered by
``async with`` or ``await enter()``), with the same turns (``TurnWatch``), budgets,
re-sends and resumes. Its guards are armed on the running loop's timers
(``loop_watchdog``: no thread), and a cut aborts the connection's transport on its loop
(``call_soon_threadsafe``, from whichever thread the interrupt or the timer fired on), so
a ``recv`` awaited by any task of that loop wakes at once. asyncio only (the SDK's
WebSocket client is ``websockets.asyncio``). One reader task at a time.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from .._core.attempt import Arm
from .._core.guard import Guard
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._core.ws_turns import create_of
from .._io.loop_watchdog import LoopWatchdog, loop_watchdog
from .._io.websocket_kill import TransportAbort
from .websocket_base import ENTER_FIRST, WatchedBase
from .websocket_link import link_of
from .websocket_resume import aresumed

__all__ = ["AsyncWatchedConnection", "awatch_connection"]

logger = logging.getLogger("hermes_transport")


def awatch_connection(
    connection: Any,
    *,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
) -> AsyncWatchedConnection:
    """Watch the turns of an async Responses WebSocket, as ``watch_connection`` does a sync
    one: ``connection`` is what ``AsyncOpenAI().responses.connect()`` returns (entered by
    ``async with`` or ``await enter()``), or the connection entering it gave."""
    return AsyncWatchedConnection(
        link_of(connection), policy or StreamPolicy.from_env(), interrupt, on_stats
    )


class AsyncWatchedConnection(WatchedBase):
    """An async Responses WebSocket whose turns are watched; see ``awatch_connection``."""

    _watcher: LoopWatchdog | None = None  # the loop's, taken on the loop
    _resumed: AsyncIterator[bytes] | None = None  # a turn's events resumed over HTTP

    # -- the SDK connection's face ----------------------------------------------------

    async def enter(self) -> AsyncWatchedConnection:
        """Open the connection, when given the manager (``async with`` does it too)."""
        if self._link.connection is None:
            self._link.connection = await self._link.manager.enter()
            self._adopt()
        return self

    async def __aenter__(self) -> AsyncWatchedConnection:
        return await self.enter()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def __aiter__(self) -> AsyncIterator[Any]:
        """Events until the connection closes cleanly (the SDK's iteration, watched)."""
        closed, closed_ok, _ = self._closed_errors
        while True:
            try:
                yield await self.recv()
            except closed_ok:
                return
            except closed as exc:
                if not await self._reconnected(exc):
                    raise

    async def recv(self) -> Any:
        """The next event, parsed by the SDK; ``StreamStalled`` or ``StreamInterrupted``
        when its turn was cut."""
        return self._conn.parse_event(await self.recv_bytes())

    async def recv_bytes(self) -> bytes:
        """The next frame as it came, watched."""
        turns = self._turns
        if turns is None:
            raise RuntimeError(ENTER_FIRST)
        ready = self._ready
        while True:
            if ready:
                return ready.popleft()
            data = await self._next_frame()
            if data is None:
                continue  # re-sent or resumed: read on
            verdict = turns.judge(data)
            if verdict == "pass":
                return data  # the hot path: one judgement
            if verdict == "hold":
                continue
            if verdict == "resend":
                logger.warning("a WebSocket turn opened with a transient error; sending it again")
                await self._resend(again=False)
                continue
            ready.extend(turns.release(data))
            if verdict == "end":
                await self._drop_resumed()
                self._next_guard()

    async def send(self, event: Any) -> None:
        """Send a client event; a ``response.create`` starts a turn (on a fresh connection
        when the last one was cut and another can be opened)."""
        sdk = self._sdk
        if not create_of(event):
            await sdk.send(event)
            return
        if self._before_create():
            await self._reopen()
        self._open_turn(event)
        try:
            await sdk.send(event)
        except Exception as exc:
            self._send_failed(exc)
            raise

    async def close(self, *, code: int = 1000, reason: str = "") -> None:
        """Close the connection; turns under way end ``closed``."""
        self._closed = True
        if self._turns is not None:
            self._turns.end_all("closed", None, None)
        self._ready.clear()
        self._set_guard(None)
        await self._drop_resumed()
        if self._link.connection is not None:
            await self._sdk.close(code=code, reason=reason)

    # -- what the base leaves to each library -----------------------------------------

    def _tls(self, ws: Any) -> bool:
        transport = getattr(ws, "transport", None)
        return transport is not None and transport.get_extra_info("ssl_object") is not None

    def _loop_watcher(self) -> LoopWatchdog:
        if self._watcher is None:
            self._watcher = loop_watchdog()
        return self._watcher

    def _kill(self) -> TransportAbort:
        return TransportAbort(self._sdk._connection, self._is_reading, self._loop_watcher())

    def _arm(self) -> Arm:
        return self._loop_watcher().arm

    def _released(self, guard: Guard) -> None:
        if self._watcher is not None:
            self._watcher.release(guard)

    async def _drop_resumed(self) -> None:
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            # A read under way on another thread may hold it: its HTTP stream then ends
            # when that read does (a running generator cannot be closed from here).
            with contextlib.suppress(ValueError, RuntimeError):
                await resumed.aclose()  # type: ignore[attr-defined]

    # -- reading ----------------------------------------------------------------------

    async def _next_frame(self) -> bytes | None:
        """One frame; ``None`` when the turn was sent again or resumed instead."""
        if self._resumed is not None:
            return await self._next_resumed()
        guard = self._guard
        if guard is None:
            raise self._closed_errors[2](None, None)  # cut before: nothing more to read
        extra = self._bind_reader(guard)
        self._reading = True
        try:
            self._cut_before(guard)
            return await self._conn.recv_bytes()  # type: ignore[no-any-return]
        except (self._closed_errors[0], OSError) as exc:
            await self._recover(exc, guard)
            return None
        finally:
            self._reading = False
            if extra:
                self._unbind_reader(guard, extra)

    async def _recover(self, exc: BaseException, guard: Guard) -> None:
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
                await self._reopen()
                await self._resend(again=True)
            except Exception as error:
                note = f"; not re-sent: a fresh connection failed: {type(error).__name__}: {error}"
                raise turns.given_up(exc, guard, note) from error
            return
        if plan == "resume":
            note, cause, self._resumed = await aresumed(
                self._link, turns, self._policy, self._given
            )
            if self._resumed is not None:
                return
        raise turns.given_up(exc, guard, note) from cause

    async def _next_resumed(self) -> bytes | None:
        resumed, turns = self._resumed, self._turns
        assert resumed is not None
        assert turns is not None
        try:
            return await resumed.__anext__()
        except StopAsyncIteration:
            self._resumed = None
            raise self._resumed_ended() from None
        except BaseException as exc:
            self._resumed = None
            turns.failed(exc)
            raise

    async def _reconnected(self, exc: BaseException) -> bool:
        """Between turns, the SDK's own reconnect (only with its ``on_reconnecting``)."""
        sdk = self._sdk
        if self._turns is None or self._turns.turn is not None:
            return False
        if getattr(sdk, "_on_reconnecting", None) is None or not await sdk._reconnect(exc):
            return False
        self._set_guard(self._new_guard("between_turns"))
        return True

    async def _reopen(self) -> None:
        """Put a fresh connection in place of the dead one (the loop's only thread: no lock)."""
        sdk = self._sdk
        if self._closed:
            raise self._closed_errors[1](None, None)  # closed meanwhile: nothing reopens
        ws = await self._link.reopen()
        old, sdk._connection = sdk._connection, ws
        with contextlib.suppress(Exception):
            await old.close()
        self._set_guard(self._new_guard("between_turns"))

    async def _resend(self, *, again: bool) -> None:
        """Send the current turn's create again: on a fresh connection (``again``: with
        the creates sent behind it, lost with the old one), or behind those on this one."""
        turns = self._turns
        assert turns is not None
        turn = turns.resent() if again else turns.requeue()
        self._watch_turn()
        await self._sdk.send(turn.event)
        if again:
            for waiting in turns.waiting:
                waiting.record.new_attempt()
                await self._sdk.send(waiting.event)
