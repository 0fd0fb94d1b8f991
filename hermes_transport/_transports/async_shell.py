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

from functools import partial
from types import TracebackType
from typing import Any, Protocol, TypeVar

from .._core.attempt import Attempt, GuardFired, shown_cause
from .._core.body import rebuilt
from .._core.checkpoints import CheckpointCallback
from .._core.errors import StreamInterrupted
from .._core.exchange import Exchange
from .._core.flavor import concrete
from .._core.guard import Guard, current_guard
from .._core.interrupt import Interrupt
from .._core.mcp_resume import unanswered_cancel
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._io.async_backend import AsyncTrackingBackend
from .._io.backend import Tracked, reach_untracked
from .._io.loop_watchdog import LoopWatchdog, loop_watchdog
from .async_body import AsyncWatchedStream
from .async_send import AsyncSend, Cancellable, Detached, apause, cancel_response, sent
from .shell import Shell

__all__ = ["AsyncShell"]


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
        on_stats: StatsCallback | None = None,
        on_checkpoint: CheckpointCallback | None = None,
    ) -> None:
        flavor = self._flavor
        self._configure(
            inner,
            policy,
            interrupt,
            (on_stats, on_checkpoint),
            http_transport_kwargs,
            flavor.http.AsyncHTTPTransport,
            flavor.core.AsyncConnectionPool,
            AsyncTrackingBackend,
        )
        self._detached = Detached()

    async def _handle(self, request: Any) -> Any:
        exchange = self._exchange(request)
        try:
            return await self._attempts(request, exchange)
        except StreamInterrupted as error:  # before sending: answered in band too, if so
            answer = self._answered(request, exchange, error)
            if answer is None:
                raise
            return answer
        finally:
            self._answer_sent(exchange)

    async def _attempts(self, request: Any, exchange: Exchange) -> Any:
        watcher = loop_watchdog()
        while True:
            guard, attempt = exchange.begin(watcher.arm, self._sockets_reachable)
            try:
                response = await self._send(request, guard, attempt, exchange, watcher)
            except BaseException as exc:
                guard.close()
                watcher.release(guard)
                latest = exchange.guard
                if latest is not None and latest is not guard:  # a resume before the first output
                    latest.close()
                    watcher.release(latest)
                error = exchange.failed(exc)
                if error is None:
                    if exchange.backoff:
                        await apause(exchange.backoff, exchange.tokens, watcher)
                    continue
                exchange.gave_up(error)
                cancel = unanswered_cancel(
                    exchange.resumable, exchange.guard, exchange.policy.cancel_on_interrupt
                )
                if cancel is not None:  # on a task of its own: after the caller has its error
                    work = partial(cancel_response, self._sender(watcher), watcher, cancel)
                    await self._detached.start(watcher, work)
                answer = self._answered(request, exchange, error)
                if answer is not None:
                    return answer
                if error is exc:
                    raise
                cause = shown_cause(exc)
            else:
                exchange.succeeded()
                return response
            # Raised out of the handler, so the dead attempt's exception is never the
            # error's context: its cause is only what shown_cause() keeps.
            raise error from (error.__cause__ or cause)  # given_up() sets its own

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
            with Cancellable(guard, watcher) as scope:
                response = await self._inner.handle_async_request(request)
                exchange.answered(response, guard)
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
                        exchange.budgets.stale,
                        exchange,
                        self._sender(watcher),
                        self._sockets_reachable,
                        watcher,
                        self._detached,
                        drains=isinstance(response.extensions.get("network_stream"), Tracked),
                    )
                except BaseException:
                    await response.aclose()
                    raise
                if exchange.gated and meter is not None:
                    await stream.await_first_event()
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

    def _sender(self, watcher: LoopWatchdog) -> AsyncSend:
        """How this transport's streams send a request (a resume, a cancel) under a guard."""
        inner, untracked = self._inner.handle_async_request, not self._sockets_reachable
        return lambda request, guard: sent(inner, request, guard, watcher, untracked=untracked)

    async def aclose(self) -> None:
        try:
            await self._detached.wait()  # cancels still under way, before the pool shuts
        finally:
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
        try:
            await self._detached.wait()
        finally:
            exit_ = getattr(self._inner, "__aexit__", None)
            if exit_ is not None:
                await exit_(exc_type, exc_value, traceback)
            else:
                await self._inner.aclose()
