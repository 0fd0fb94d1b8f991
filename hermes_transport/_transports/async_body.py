"""``AsyncWatchedStream``: an async response body, passed up while its progress is watched.

The async twin of ``sync_body``: the reads of one response body (and of the
resumes that continue it, and the cancel sent after an interrupt) on the
caller's event loop, the decisions ``McpWatch``'s (``_core``); requests
go out through the shell's ``async_send.sent``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

import anyio

from .._core.attempt import Attempt, GuardFired, shown_cause
from .._core.exchange import Exchange
from .._core.guard import Guard
from .._core.mcp_watch import McpWatch
from .._core.progress import ProgressMeter
from .._core.resume import REFUSAL_LIMIT, ResumeRefused
from .._io.backend import Tracked
from .._io.loop_watchdog import LoopWatchdog
from .async_send import AsyncSend, Detached, apause, cancel_response

__all__ = ["READ_AFTER_KILL_LIMIT", "AsyncWatchedStream"]

#: Bytes read (and dropped) after a kill to bring an inner async body to its
#: end rather than abandon its generators mid-body (at most a socket buffer).
READ_AFTER_KILL_LIMIT = 1024 * 1024


class AsyncWatchedStream(McpWatch):
    """The response body, passed up byte for byte while its progress is watched.

    On a resumable stream, passed up event by event, and continued from a
    resume when the connection stalls or dies. Made a subclass of the flavor's
    ``AsyncByteStream`` where it is built.
    """

    def __init__(
        self,
        inner: Any,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        exchange: Exchange,
        send: AsyncSend,
        sockets_reachable: bool,
        watcher: LoopWatchdog,
        detached: Detached,
        *,
        drains: bool,
    ) -> None:
        super().__init__(guard, attempt, meter, stale, watcher.arm, exchange)
        self._inner = inner
        self._chunks = inner.__aiter__()
        self._send = send
        self._sockets_reachable = sockets_reachable
        self._watcher = watcher
        self._detached = detached
        # Whether a kill shuts this body's socket down. Then bytes that arrive
        # after it are read to the end of the body (at most the socket buffer)
        # instead of abandoning the inner async generators mid-body: httpcore
        # never closes those, and trio warns when they are collected.
        self._drains = drains
        self._read_after_kill = 0
        # The caller's iteration, once started: aclose() must know whether a
        # task is inside it right now.
        self._iteration: AsyncGenerator[bytes, None] | None = None
        self._closed = False
        self._released = False  # closed, and its close done to its end
        # Set while the reader waits to resume again: a close from another task wakes it.
        self._pausing: anyio.Event | None = None

    def _draining(self, chunk: bytes) -> bool:
        """After a kill (``guard.fired`` is set): whether to drop ``chunk`` and read on."""
        if not self._drains:
            return False
        self._read_after_kill += len(chunk)
        return self._read_after_kill <= READ_AFTER_KILL_LIMIT

    async def await_first_event(self) -> None:
        """Hold chunks until the first progress event, the end, or ``HOLD_LIMIT`` bytes.

        A resumable stream that breaks meanwhile is resumed, what was held kept.
        """
        while True:
            try:
                async for chunk in self._chunks:
                    if self._guard.fired is not None and self._draining(chunk):
                        continue
                    if self._hold(chunk):
                        return
                self._ended()
            except Exception as exc:
                if self._whole is None or not isinstance(exc, self._attempt.dead):
                    if self._broke_early(exc):
                        return
                    raise
                failure: BaseException | None = exc
            else:
                if not self._may_resume():
                    break
                failure = None
            outcome = await self._resume_or_fail(failure)
            if outcome is None:
                continue
            if outcome is False:
                break
            self._held_failed(failure, outcome)
            return
        self._hold_ended()

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._iteration = iteration = self._iterate()
        return iteration

    async def _iterate(self) -> AsyncGenerator[bytes, None]:
        try:
            for chunk in self._take_held():
                yield chunk
            if self._broken is not None:
                self._ending = self._broken
                await self._aclose()
                self._raise_if_broken()
            if self._whole is not None:
                async for whole in self._iterate_whole():
                    yield whole
                return
            try:
                async for chunk in self._chunks:
                    # Hot path: one attribute read unless the attempt was killed.
                    if self._guard.fired is not None and self._draining(chunk):
                        continue
                    self._saw(chunk)
                    yield chunk
                if self._closed:
                    # Closed by another task while the caller held a chunk: the
                    # body did not end, so it must not look complete.
                    raise self._attempt.flavor.http.StreamClosed()
                self._ended()
            except self._attempt.dead as exc:
                # The body is dead: release everything now, since a caller's
                # aiter_raw() (for one) does not close a response that raised.
                self._ending = exc
                await self._aclose()
                if self._cut_after_done():
                    return
                error = self._failure(exc)
                if error is None:
                    raise
                cause = shown_cause(exc)
            else:
                return
            if (answer := self._in_band(error, cause)) is not None:
                yield answer  # in band: the client fails this request alone
                return
            raise error from cause  # here: never the dead attempt's exception as context
        finally:
            if self._released:  # closed in here, its error built: see _forget
                self._forget()

    async def _iterate_whole(self) -> AsyncGenerator[bytes, None]:
        """A resumable stream's reads: whole events, and a resume where it broke."""
        while True:
            try:
                async for chunk in self._chunks:
                    if self._guard.fired is not None and self._draining(chunk):
                        continue
                    whole = self._pass(chunk)
                    if whole:
                        yield whole
                        self._asking()
                if self._closed:
                    raise self._attempt.flavor.http.StreamClosed()
                self._ended()
            except self._attempt.dead as exc:
                failure: BaseException | None = exc
            else:
                if not self._may_resume():
                    break
                failure = None
            outcome = await self._resume_or_fail(failure)
            if outcome is None:
                continue
            self._ending = outcome[0] if outcome else None
            await self._aclose()
            if outcome is False:
                break
            if (answer := self._answer_for(outcome)) is not None:
                yield answer  # in band: the client fails this request alone
                return
            raise outcome[0] from outcome[1]
        rest = self._rest()
        if rest:
            yield rest

    async def _resume_or_fail(self, failure: BaseException | None) -> Any:
        """Resume after ``failure`` (``None``: the body ended early), as often as the
        budget allows, waiting a little after a refusal that may pass: ``None`` once
        resumed, else ``_unresumed``'s answer (``False``: end cleanly) for the first
        failure if the last resume was refused, else for the latest."""
        first = outcome = self._outcome(failure)
        refused: ResumeRefused | None = None
        self._refusals = 0
        while (request := self._resume_request()) is not None:
            try:
                await self._reopen(request)
            except self._attempt.dead as exc:
                outcome, refused = self._outcome(exc), None  # it may be resumed again
                continue
            except ResumeRefused as exc:
                refused, wait = exc, self._retry_wait(exc)
                if wait is None:
                    break
                self._pausing = anyio.Event()
                try:
                    await apause(wait, self._exchange.tokens, self._watcher, self._pausing)
                finally:
                    self._pausing = None
                continue
            return None
        if self._guard.fired in ("interrupted", "closed"):  # while a resume was under way
            return self._unresumed(self._outcome(GuardFired()), None)
        return self._unresumed(first if refused else outcome, refused)

    async def _reopen(self, request: Any) -> None:
        """Send the resume ``request`` and read on from its stream (raises if it failed)."""
        self._release_guard()  # before the cut connection is closed (``_core.guard``)
        self._watcher.release(self._guard)
        await self._retire()
        watcher = self._watcher
        guard, attempt = self._exchange.begin_resume(
            request, self._resume_budget(), watcher.arm, self._sockets_reachable
        )
        self._adopt(guard, attempt)
        response = await self._send(request, guard)
        try:
            await self._check_resumed(request, response)
        except BaseException:
            # Its connection may go back to the pool, and another caller's request on it
            # must be out of this guard's reach, which the wait that may follow keeps open.
            guard.let_go()
            await response.aclose()
            raise
        self._inner = response.stream
        self._chunks = self._inner.__aiter__()
        self._drains = isinstance(response.extensions.get("network_stream"), Tracked)
        self._read_after_kill = 0
        self._resumed()

    async def _check_resumed(self, request: Any, response: Any) -> None:
        """Raise ``ResumeRefused`` unless ``response`` is the rest of the stream."""
        if self._is_rest(response):
            return
        body = b""
        async for chunk in response.stream:
            body += chunk
            if len(body) >= REFUSAL_LIMIT:
                break
        raise self._refused(request, response, body)

    async def _retire(self) -> None:
        """Let go of the cut stream before a resume replaces it (its connection is dead)."""
        with contextlib.suppress(Exception):
            try:
                await _aclose_iterator(self._chunks)
            finally:
                await self._inner.aclose()

    async def aclose(self) -> None:
        if getattr(self._iteration, "ag_running", False):
            # Another task is reading this body right now, and its generators
            # cannot be closed from here: stop the read instead; the reader
            # closes everything as it unwinds.
            self._guard.close_from_afar()
            if self._pausing is not None:  # waiting to resume again: no read to stop, wake it
                self._pausing.set()
            return
        await self._aclose()

    async def _aclose(self) -> None:
        """Let go of the body and its connection, report how it ended, and start any
        cancel (once): on a task of its own, so that nobody waits for it."""
        if self._closed:
            return
        self._closed = True
        if self._start_drain():
            await self._drain()
        # Disarm before the connection can go back to the pool (see the invariants
        # in ``_core.guard``).
        self._release_guard()
        self._watcher.release(self._guard)
        try:
            await _aclose_iterator(self._chunks)
        finally:
            try:
                await self._inner.aclose()
            finally:
                try:
                    self._report()
                finally:
                    request = self._cancel_request()
                    if request is not None:
                        send, watcher = self._send, self._watcher
                        await self._detached.start(
                            watcher, lambda: cancel_response(send, watcher, request)
                        )
                    self._released = True
                    if not getattr(self._iteration, "ag_running", False):  # else as it unwinds
                        self._forget()

    def _drop(self) -> None:
        super()._drop()
        # A read of the closed body finds it ended (and raises StreamClosed).
        self._inner, self._chunks, self._iteration = None, _SPENT, None
        del self._send, self._detached

    async def _drain(self) -> None:
        # Bounded by the guard's deadline; an error means the connection is not reusable.
        with contextlib.suppress(*self._attempt.dead):
            async for chunk in self._chunks:
                if not self._drained(chunk):
                    return


class _Spent:
    """The chunks of a body that was let go of (``_forget``): none."""

    __slots__ = ()

    def __aiter__(self) -> _Spent:
        return self

    async def __anext__(self) -> bytes:
        raise StopAsyncIteration


_SPENT = _Spent()


async def _aclose_iterator(chunks: AsyncIterator[bytes]) -> None:
    """Close the inner body's iterator: an async generator has ``aclose``; any other
    iterator (a stream's ``__aiter__`` may return one) has nothing to close."""
    aclose = getattr(chunks, "aclose", None)
    if aclose is not None:
        await aclose()
