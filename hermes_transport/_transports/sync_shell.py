"""``SyncShell``: the sync watchdog transport, for any flavor.

A thin shell: it wires the progress meter, the process-wide watchdog thread
and the attempt's guard around an inner transport, with the decisions shared
with the async shell in ``_core`` (``Exchange``, ``BodyWatch``). Requests and
stream reads run on the caller's thread; the only other thread is the shared
watchdog. The public classes (``_flavors``) only name their HTTP library.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeVar

from .._core.body import BodyWatch, rebuilt
from .._core.exchange import Attempt, Exchange, shown_cause
from .._core.flavor import concrete
from .._core.guard import Guard, current_guard
from .._core.interrupt import Interrupt, bound_interrupts
from .._core.policy import StreamPolicy
from .._core.progress import ProgressMeter
from .._core.wires import ErrorEvent
from .._io.backend import TrackingBackend, reach_untracked
from .._io.watchdog import watchdog
from .shell import Shell

__all__ = ["SyncShell", "WatchedStream"]


class WatchedStream(BodyWatch):
    """The response body, passed up byte for byte while its progress is watched.

    Made a subclass of the flavor's ``SyncByteStream`` where it is built.
    """

    def __init__(
        self,
        inner: Any,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        resend_error: Callable[[ErrorEvent, Attempt], bool],
    ) -> None:
        super().__init__(guard, attempt, meter, stale, watchdog.arm, resend_error)
        self._inner = inner
        self._chunks = iter(inner)
        # The caller's iteration, once started: close() must know whether a
        # thread is inside it right now.
        self._iteration: Generator[bytes, None, None] | None = None
        self._closed = False

    def await_first_event(self) -> None:
        """Hold chunks until the first progress event, the end, or ``HOLD_LIMIT`` bytes."""
        try:
            for chunk in self._chunks:
                if self._hold(chunk):
                    return
        except Exception as exc:
            if self._broke_early(exc):
                return
            raise
        self._ended()
        self._progressed()

    def __iter__(self) -> Iterator[bytes]:
        self._iteration = iteration = self._iterate()
        return iteration

    def _iterate(self) -> Generator[bytes, None, None]:
        yield from self._take_held()
        if self._broken is not None:
            self._close()
            self._raise_if_broken()
        try:
            for chunk in self._chunks:
                self._saw(chunk)
                yield chunk
            if self._closed:
                # Closed by another thread while the caller held a chunk: the
                # body did not end, so it must not look complete.
                raise self._attempt.flavor.http.StreamClosed()
            self._ended()
        except self._attempt.dead as exc:
            # The body is dead: release everything now, on this thread, since a
            # caller's iter_raw() (for one) does not close a response that raised.
            self._close()
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

    def close(self) -> None:
        if getattr(self._iteration, "gi_running", False):
            # Another thread is reading this body right now, and its generators
            # cannot be closed from here: stop the read instead (as plain httpx's
            # close() does not); the reader closes everything as it unwinds.
            self._guard.close_from_afar()
            return
        self._close()

    def _close(self) -> None:
        self._closed = True
        if self._start_drain():
            self._drain()
        # Disarm before the connection can go back to the pool (see the invariants
        # in ``_core.guard``).
        self._release_guard()
        try:
            self._chunks.close()
        finally:
            self._inner.close()

    def _drain(self) -> None:
        # Bounded by the guard's deadline; an error means the connection is not reusable.
        with contextlib.suppress(*self._attempt.dead):
            for chunk in self._chunks:
                if not self._drained(chunk):
                    return


def _pause(seconds: float, tokens: Sequence[Interrupt]) -> None:
    """Wait ``seconds`` before a re-send, or until one of ``tokens`` fires (the next
    attempt then fails at once, sending nothing)."""
    woken = threading.Event()
    removers = [token._add_listener(lambda _reason: woken.set()) for token in tokens]
    try:
        woken.wait(seconds)
    finally:
        for remove in removers:
            remove()


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
    ) -> None:
        flavor = self._flavor
        self._configure(
            inner,
            policy,
            interrupt,
            http_transport_kwargs,
            flavor.http.HTTPTransport,
            flavor.core.ConnectionPool,
            lambda backend: TrackingBackend(backend, flavor),
        )

    def _handle(self, request: Any) -> Any:
        flavor = self._flavor
        exchange = Exchange(request, flavor, self._policy, self._interrupt, bound_interrupts())
        while True:
            guard, attempt = exchange.begin(watchdog.arm, self._sockets_reachable)
            watchdog.arm(guard)
            try:
                response = self._send(request, guard, attempt, exchange)
            except BaseException as exc:
                guard.close()
                error = exchange.failed(guard, attempt, exc)
                if error is None:
                    if exchange.backoff:
                        _pause(exchange.backoff, exchange.tokens)
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

    def _send(self, request: Any, guard: Guard, attempt: Attempt, exchange: Exchange) -> Any:
        guard.stage = "headers"
        context = current_guard.set(guard)
        try:
            response = self._inner.handle_request(request)
        finally:
            current_guard.reset(context)
        try:
            meter = exchange.meter_for(response, guard)
            if not self._sockets_reachable:
                reach_untracked(response, guard)
            body = concrete(WatchedStream, self._flavor.http.SyncByteStream)
            stream = body(
                response.stream,
                guard,
                attempt,
                meter,
                self._policy.stale_budget,
                exchange.resend_error,
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
