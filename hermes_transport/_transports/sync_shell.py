"""``SyncShell``: the sync watchdog transport, for any flavor.

A thin shell: it wires the progress meter, the process-wide watchdog thread
and the attempt's guard around an inner transport, with the decisions shared
with the async shell in ``_core`` (``Exchange``, ``BodyWatch``). Requests and
stream reads run on the caller's thread; the only other thread is the shared
watchdog. The public classes (``_flavors``) only name their HTTP library.
"""

from __future__ import annotations

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
from .._io.backend import TrackingBackend, reach_untracked
from .._io.watchdog import watchdog
from .shell import Shell
from .sync_body import WatchedStream
from .sync_send import pause, send_cancel

__all__ = ["SyncShell"]


class SyncInner(Protocol):
    """What a sync shell needs of its inner transport."""

    def handle_request(self, request: Any) -> Any: ...

    def close(self) -> None: ...


_SyncInner = TypeVar("_SyncInner", bound=SyncInner)
_Self = TypeVar("_Self", bound="SyncShell[Any]")


class SyncShell(Shell[_SyncInner]):
    """The sync transport of any flavor; subclasses name their HTTP library."""

    _inner_method = "handle_request"

    def _setup(
        self,
        inner: _SyncInner | None,
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
            flavor.http.HTTPTransport,
            flavor.core.ConnectionPool,
            lambda backend: TrackingBackend(backend, flavor),
        )

    def _handle(self, request: Any) -> Any:
        exchange = self._exchange(request)
        try:
            return self._attempts(request, exchange)
        except StreamInterrupted as error:  # before sending: answered in band too, if so
            answer = self._answered(request, exchange, error)
            if answer is None:
                raise
            return answer
        finally:
            self._answer_sent(exchange)

    def _attempts(self, request: Any, exchange: Exchange) -> Any:
        while True:
            guard, attempt = exchange.begin(watchdog.arm, self._sockets_reachable)
            watchdog.arm(guard)
            try:
                response = self._send(request, guard, attempt, exchange)
            except BaseException as exc:
                guard.close()
                if exchange.guard is not guard:  # a resume before the first output took over
                    exchange.guard.close()  # type: ignore[union-attr]
                error = exchange.failed(exc)
                if error is None:
                    if exchange.backoff:
                        pause(exchange.backoff, exchange.tokens)
                    continue
                exchange.gave_up(error)
                cancel = unanswered_cancel(
                    exchange.resumable, exchange.guard, exchange.policy.cancel_on_interrupt
                )
                if cancel is not None:  # on this thread, the only one, before the error
                    send_cancel(self._sent, cancel)
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

    def _sent(self, request: Any, guard: Guard) -> Any:
        """``request`` sent through the inner transport under ``guard``, which can reach
        its connection; the response, with its headers."""
        if guard.fired is not None:
            raise GuardFired
        guard.stage = "headers"
        context = current_guard.set(guard)
        try:
            response = self._inner.handle_request(request)
        finally:
            current_guard.reset(context)
        if not self._sockets_reachable:
            reach_untracked(response, guard)
        return response

    def _send(self, request: Any, guard: Guard, attempt: Attempt, exchange: Exchange) -> Any:
        response = self._sent(request, guard)
        exchange.answered(response, guard)
        try:
            meter = exchange.meter_for(response, guard)
            body = concrete(WatchedStream, self._flavor.http.SyncByteStream)
            stream = body(
                response.stream,
                guard,
                attempt,
                meter,
                exchange.budgets.stale,
                exchange,
                self._sent,
                self._sockets_reachable,
            )
        except BaseException:
            response.close()
            raise
        try:
            if exchange.gated and meter is not None:
                stream.await_first_event()
        except BaseException:
            stream.close()
            raise
        return rebuilt(response, stream)

    def close(self) -> None:
        self._inner.close()

    # A client enters and exits its transport (httpx's own pool opens and shuts
    # there); the inner transport gets the same calls, as httpx gives its own.
    def __enter__(self: _Self) -> _Self:
        enter = getattr(self._inner, "__enter__", None)
        if enter is not None:
            enter()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None = None,
        exc_value: BaseException | None = None,
        traceback: TracebackType | None = None,
    ) -> None:
        exit_ = getattr(self._inner, "__exit__", None)
        if exit_ is not None:
            exit_(exc_type, exc_value, traceback)
        else:
            self._inner.close()
