"""``AsyncShell``: the async watchdog transport, for any flavor.

The async twin of ``sync_shell``, sharing its decisions (``_core``): the
same budgets, re-sends, gating and errors. Deadlines run on the event loop's
own timers (``_io.loop_watchdog``); no thread is started.

How a kill reaches an attempt: while the attempt has a socket (from its first
write, new or pooled connection), the socket is shut down, from whichever
thread fired, and the loop sees end-of-file at once. Before that (DNS,
connecting, the TLS handshake, waiting for a pooled connection) the attempt
runs inside a cancel scope, and the kill cancels it on the loop's thread.

The public classes (``_flavors``) only name their HTTP library.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

import anyio

from .._core.body import BodyWatch, rebuilt
from .._core.exchange import Attempt, Exchange, GuardFired, shown_cause
from .._core.flavor import concrete
from .._core.guard import Guard, current_guard
from .._core.interrupt import Interrupt, bound_interrupts
from .._core.policy import StreamPolicy
from .._core.progress import ProgressMeter
from .._core.wires import ErrorEvent
from .._io.async_backend import AsyncTrackingBackend
from .._io.backend import Tracked, reach_untracked
from .._io.loop_watchdog import LoopWatchdog, loop_watchdog
from .shell import Shell

__all__ = ["AsyncShell", "AsyncWatchedStream"]

#: Bytes read (and dropped) after a kill to bring an inner async body to its
#: end rather than abandon its generators mid-body (at most a socket buffer).
READ_AFTER_KILL_LIMIT = 1024 * 1024


class _CancelAttempt:
    """A guard's fallback kill: cancel the attempt's scope, on the loop's thread."""

    __slots__ = ("_scope", "_watcher", "active")

    def __init__(self, scope: anyio.CancelScope, watcher: LoopWatchdog) -> None:
        self._scope = scope
        self._watcher = watcher
        self.active = True  # loop-thread state: False once the scope has exited

    def kill(self) -> bool:
        self._watcher.call_soon_threadsafe(self._cancel)
        return True

    def _cancel(self) -> None:
        if self.active:
            self._scope.cancel()


class AsyncWatchedStream(BodyWatch):
    """The response body, passed up byte for byte while its progress is watched.

    Made a subclass of the flavor's ``AsyncByteStream`` where it is built.
    """

    def __init__(
        self,
        inner: Any,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        watcher: LoopWatchdog,
        *,
        drains: bool,
        resend_error: Callable[[ErrorEvent, Attempt], bool],
    ) -> None:
        super().__init__(guard, attempt, meter, stale, watcher.arm, resend_error)
        self._inner = inner
        self._chunks = inner.__aiter__()
        self._watcher = watcher
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

    def _draining(self, chunk: bytes) -> bool:
        """After a kill (``guard.fired`` is set): whether to drop ``chunk`` and read on."""
        if not self._drains:
            return False
        self._read_after_kill += len(chunk)
        return self._read_after_kill <= READ_AFTER_KILL_LIMIT

    async def await_first_event(self) -> None:
        """Hold chunks until the first progress event, the end, or ``HOLD_LIMIT`` bytes."""
        try:
            async for chunk in self._chunks:
                if self._guard.fired is not None and self._draining(chunk):
                    continue
                if self._hold(chunk):
                    return
        except Exception as exc:
            if self._broke_early(exc):
                return
            raise
        self._ended()
        self._progressed()

    def __aiter__(self) -> AsyncIterator[bytes]:
        self._iteration = iteration = self._iterate()
        return iteration

    async def _iterate(self) -> AsyncGenerator[bytes, None]:
        for chunk in self._take_held():
            yield chunk
        if self._broken is not None:
            await self._aclose()
            self._raise_if_broken()
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
            await self._aclose()
            if self._cut_after_done():
                return
            error = self._failure(exc)
            if error is None:
                raise
            cause = shown_cause(exc)
        else:
            return
        # Raised out of the handler, so the dead attempt's exception is never the
        # error's context: its cause is only what shown_cause() keeps.
        raise error from cause

    async def aclose(self) -> None:
        if getattr(self._iteration, "ag_running", False):
            # Another task is reading this body right now, and its generators
            # cannot be closed from here: stop the read instead; the reader
            # closes everything as it unwinds.
            self._guard.close_from_afar()
            return
        await self._aclose()

    async def _aclose(self) -> None:
        self._closed = True
        if self._start_drain():
            await self._drain()
        # Disarm before the connection can go back to the pool (see the invariants
        # in ``_core.guard``).
        self._release_guard()
        self._watcher.release(self._guard)
        try:
            await self._chunks.aclose()
        finally:
            await self._inner.aclose()

    async def _drain(self) -> None:
        # Bounded by the guard's deadline; an error means the connection is not reusable.
        with contextlib.suppress(*self._attempt.dead):
            async for chunk in self._chunks:
                if not self._drained(chunk):
                    return


async def _pause(seconds: float, tokens: Sequence[Interrupt], watcher: LoopWatchdog) -> None:
    """Wait ``seconds`` before a re-send, or until one of ``tokens`` fires (from any
    thread; the next attempt then fails at once, sending nothing)."""
    woken = anyio.Event()
    removers = [
        token._add_listener(lambda _reason: watcher.call_soon_threadsafe(woken.set))
        for token in tokens
    ]
    try:
        with anyio.move_on_after(seconds):
            await woken.wait()
    finally:
        for remove in removers:
            remove()


class AsyncInner(Protocol):
    """What an async shell needs of its inner transport."""

    async def handle_async_request(self, request: Any) -> Any: ...

    async def aclose(self) -> None: ...


_AsyncInner = TypeVar("_AsyncInner", bound=AsyncInner)
_Self = TypeVar("_Self", bound="AsyncShell[Any]")


class AsyncShell(Shell[_AsyncInner]):
    """The async transport of any flavor; subclasses name their HTTP library."""

    _inner_method = "handle_async_request"

    def _setup(
        self,
        inner: _AsyncInner | None,
        policy: StreamPolicy | None,
        interrupt: Interrupt | None,
        http_transport_kwargs: dict[str, Any],
    ) -> None:
        flavor = self._flavor
        self._configure(
            inner,
            policy,
            interrupt,
            http_transport_kwargs,
            flavor.http.AsyncHTTPTransport,
            flavor.core.AsyncConnectionPool,
            AsyncTrackingBackend,
        )

    async def _handle(self, request: Any) -> Any:
        flavor = self._flavor
        exchange = Exchange(request, flavor, self._policy, self._interrupt, bound_interrupts())
        watcher = loop_watchdog()
        while True:
            guard, attempt = exchange.begin(watcher.arm, self._sockets_reachable)
            try:
                response = await self._send(request, guard, attempt, exchange, watcher)
            except BaseException as exc:
                guard.close()
                watcher.release(guard)
                error = exchange.failed(guard, attempt, exc)
                if error is None:
                    if exchange.backoff:
                        await _pause(exchange.backoff, exchange.tokens, watcher)
                    continue
                if error is exc:
                    raise
                cause = shown_cause(exc)
            else:
                exchange.succeeded()
                return response
            # Raised out of the handler, so the dead attempt's exception is never the
            # error's context: its cause is only what shown_cause() keeps.
            raise error from cause

    async def _send(
        self,
        request: Any,
        guard: Guard,
        attempt: Attempt,
        exchange: Exchange,
        watcher: LoopWatchdog,
    ) -> Any:
        guard.stage = "headers"
        context = current_guard.set(guard)
        stream: AsyncWatchedStream | None = None
        try:
            # One scope per attempt, around everything up to the first event:
            # where no socket is attached, a kill cancels it.
            with anyio.CancelScope() as scope:
                fallback = _CancelAttempt(scope, watcher)
                guard.set_fallback(fallback)
                watcher.arm(guard)
                try:
                    response = await self._inner.handle_async_request(request)
                    try:
                        meter = exchange.meter_for(response, guard)
                        if not self._sockets_reachable:
                            reach_untracked(response, guard)
                        body = concrete(AsyncWatchedStream, self._flavor.http.AsyncByteStream)
                        stream = body(
                            response.stream,
                            guard,
                            attempt,
                            meter,
                            self._policy.stale_budget,
                            watcher,
                            drains=isinstance(response.extensions.get("network_stream"), Tracked),
                            resend_error=exchange.resend_error,
                        )
                    except BaseException:
                        await response.aclose()
                        raise
                    if exchange.gated and meter is not None:
                        await stream.await_first_event()
                finally:
                    fallback.active = False
                    guard.set_fallback(None)
            if scope.cancelled_caught:
                raise GuardFired
        except BaseException:
            if stream is not None:
                await stream.aclose()
            raise
        finally:
            current_guard.reset(context)
        assert stream is not None
        return rebuilt(response, stream)

    async def aclose(self) -> None:
        await self._inner.aclose()

    # A client enters and exits its transport (httpx's own pool opens and shuts
    # there); the inner transport gets the same calls, as httpx gives its own.
    async def __aenter__(self: _Self) -> _Self:
        enter = getattr(self._inner, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        exit_ = getattr(self._inner, "__aexit__", None)
        if exit_ is not None:
            await exit_(exc_type, exc_value, traceback)
        else:
            await self._inner.aclose()
