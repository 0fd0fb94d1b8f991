"""``WatchdogTransport``: the sync httpx transport.

A thin shell: it wires the progress meter, the process-wide watchdog and the
attempt's guard around an inner transport. Requests and stream reads run on
the caller's thread; the only other thread is the shared watchdog.
"""

from __future__ import annotations

import logging
import time
import weakref
from collections.abc import Iterator
from typing import Any

import httpcore
import httpx

from ._backend import TrackingBackend, TrackingStream, shutdown_socket
from ._calls import call_for_request
from ._errors import (
    StreamInterrupted,
    StreamStalled,
    interrupted_before_response,
    stall_for_caller,
)
from ._guard import Guard, current_guard
from ._interrupt import Interrupt, bound_interrupts
from ._policy import StreamPolicy
from ._progress import ProgressMeter, is_event_stream, wants_stream
from ._watchdog import watchdog

__all__ = ["HOLD_LIMIT", "WatchdogTransport"]

logger = logging.getLogger("hermes_transport")

#: Bytes of a streaming response held back while waiting for its first event.
#: Past this the response is handed up as if the first event had arrived.
HOLD_LIMIT = 1024 * 1024


_STAGES = {
    "connecting": "connecting",
    "sending": "sending the request",
    "headers": "waiting for headers",
    "first_event": "waiting for the first event",
    "mid_stream": "reading the stream",
    "body": "reading the body",
}


class _Fired(Exception):
    """The guard fired while no I/O error said so (no socket to shut down)."""


class _Attempt:
    """What one attempt needs to say what happened to it."""

    __slots__ = ("budget", "number", "request", "started", "url")

    def __init__(self, request: httpx.Request, number: int, budget: float | None) -> None:
        self.request = request
        self.number = number  # of the logical call, SDK retries and runner re-sends included
        self.budget = budget
        self.started = time.monotonic()
        # Never log a query string: some providers put API keys there.
        url = request.url
        self.url = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"


def _mapped_error(
    guard: Guard,
    attempt: _Attempt,
    stale: float | None,
    events: int,
    exc: BaseException,
    *,
    in_body: bool,
) -> Exception | None:
    """The error to raise for ``exc`` if the guard killed the attempt, else ``None``.

    The one place where a killed connection's httpx error becomes ours.
    ``in_body``: raised while the caller reads the body, not in ``handle_request``.
    """
    if guard.fired is None or not isinstance(exc, (httpx.TransportError, OSError, _Fired)):
        return None
    elapsed = time.monotonic() - attempt.started
    stage = guard.fired_stage or guard.stage
    if guard.fired == "interrupted":
        reason = guard.reason or "interrupted"
        logger.info(
            "%s %s interrupted while %s, %.3f s into the attempt: %s",
            attempt.request.method,
            attempt.url,
            _STAGES.get(stage, stage),
            elapsed,
            reason,
        )
        if in_body:
            return StreamInterrupted(reason, stage=stage)
        return interrupted_before_response(reason, stage=stage)
    if stage == "mid_stream":
        assert stale is not None
        return StreamStalled(
            f"stream stalled: no progress event for {stale:g} s after {events} event(s),"
            f" {elapsed:.2f} s into attempt {attempt.number}",
            request=attempt.request,
            stage="mid_stream",
            budget=stale,
            elapsed=elapsed,
            attempts=attempt.number,
        )
    assert attempt.budget is not None
    return StreamStalled(
        f"stream stalled: no first event within {attempt.budget:g} s"
        f" ({_STAGES.get(stage, stage)}) on attempt {attempt.number}",
        request=attempt.request,
        stage="first_event",
        budget=attempt.budget,
        elapsed=elapsed,
        attempts=attempt.number,
    )


class _ForeignConnection:
    """Kill switch for a socket found in ``network_stream`` of an untracked transport."""

    __slots__ = ("_stream",)

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    def kill(self) -> None:
        shutdown_socket(self._stream.get_extra_info("socket"))


class WatchedStream(httpx.SyncByteStream):
    """The response body, passed up byte for byte while its progress is watched."""

    def __init__(
        self,
        inner: httpx.SyncByteStream,
        guard: Guard,
        attempt: _Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
    ) -> None:
        self._inner = inner
        self._chunks = iter(inner)
        self._held: list[bytes] = []
        self._guard = guard
        self._attempt = attempt
        self._meter = meter
        self._stale = stale
        self._armed = False  # the stale deadline is in the watchdog's heap
        guard.stage = "first_event" if meter is not None else "body"
        # Closes the guard once: on close(), or when a response dropped unclosed
        # is collected (which also runs any close deferred on the guard).
        self._release_guard = weakref.finalize(self, guard.close)

    def await_first_event(self) -> None:
        """Read and hold chunks until the first progress event, the end, or ``HOLD_LIMIT``."""
        guard, meter, held = self._guard, self._meter, self._held
        assert meter is not None
        size = 0
        for chunk in self._chunks:
            if guard.fired is not None:
                raise _Fired
            held.append(chunk)
            size += len(chunk)
            if meter.feed(chunk) or size >= HOLD_LIMIT:
                break
        else:
            if guard.fired is not None:
                raise _Fired  # a close-delimited body "ends" when its socket is shut down
        self._progressed()

    def _progressed(self) -> None:
        guard = self._guard
        guard.stage = "mid_stream"
        if self._stale is None or (self._meter is not None and self._meter.done):
            guard.deadline = None
            return
        guard.deadline = time.monotonic() + self._stale
        if not self._armed:
            # Once per attempt: the stale deadline may be earlier than the
            # first-event one the heap holds, so it must be pushed, not lazily moved.
            self._armed = True
            watchdog.arm(guard)

    def __iter__(self) -> Iterator[bytes]:
        guard, meter, stale = self._guard, self._meter, self._stale
        held, self._held = self._held, []
        try:
            yield from held
            for chunk in self._chunks:
                if guard.fired is not None:
                    raise _Fired
                # Hot path: one scan, and on progress a clock read and an attribute write.
                if meter is not None and meter.feed(chunk):
                    if self._armed and not meter.done:
                        guard.deadline = time.monotonic() + stale  # type: ignore[operator]
                    else:
                        self._progressed()
                yield chunk
            if guard.fired is not None:
                raise _Fired  # a close-delimited body "ends" when its socket is shut down
        except (httpx.TransportError, OSError, _Fired) as exc:
            # The body is dead: release everything now, on this thread, since a
            # caller's iter_raw() (for one) does not close a response that raised.
            self.close()
            error = _mapped_error(
                guard, self._attempt, stale, meter.events if meter else 0, exc, in_body=True
            )
            if error is None:
                raise
            if isinstance(error, StreamStalled):
                logger.warning("%s %s: %s", self._attempt.request.method, self._attempt.url, error)
            raise error from exc

    def close(self) -> None:
        # Disarm before the connection can go back to the pool (see _guard).
        self._release_guard()
        try:
            self._chunks.close()  # type: ignore[attr-defined]
        finally:
            self._inner.close()


def _refuse_http2(enabled: object) -> None:
    if enabled:
        raise ValueError(
            "http2=True is not supported by WatchdogTransport: HTTP/2 multiplexes"
            " streams over one socket, and shutting that socket down to stop one"
            " stalled or interrupted stream would kill every sibling stream; use HTTP/1.1"
        )


def _track_sockets(inner: httpx.BaseTransport) -> bool:
    """Let guards reach the sockets of ``inner`` before headers arrive, if possible."""
    pool = getattr(inner, "_pool", None) if isinstance(inner, httpx.HTTPTransport) else None
    if not isinstance(pool, httpcore.ConnectionPool):
        return False
    _refuse_http2(getattr(pool, "_http2", False))
    backend = getattr(pool, "_network_backend", None)
    if backend is None:
        return False
    if not isinstance(backend, TrackingBackend):
        pool._network_backend = TrackingBackend(backend)
    return True


class WatchdogTransport(httpx.BaseTransport):
    """An httpx transport that kills hung SSE streams and re-sends early stalls.

    ``inner`` is the transport that does the HTTP; by default an
    ``httpx.HTTPTransport`` built from ``http_transport_kwargs`` (``verify``,
    ``cert``, ``trust_env``, ``limits``, ``proxy``, ``socket_options``, ...):
    httpx ignores a client's TLS and connection settings once a transport is
    given, so they belong here. ``policy`` defaults to
    ``StreamPolicy.from_env()``.

    Streaming requests (a JSON body with ``"stream": true``, or
    ``Accept: text/event-stream``) are held in ``handle_request`` until their
    first progress event, so a stall before it is re-sent up to
    ``policy.retries`` times before ``StreamStalled`` is raised. Note that the
    openai SDK's own retry loop (``max_retries``) retries that error again, on
    top of these re-sends. After the first event, a stream with no progress for
    ``policy.stale_timeout`` seconds is cut and its reader raises
    ``StreamStalled``.

    Limits: HTTP/2 is refused (one socket carries many streams). With an inner
    transport whose sockets cannot be reached before headers (mocks, custom
    transports), a stall while waiting for headers is noticed only when the
    response arrives, and a mid-stream stall when the next bytes arrive.
    """

    def __init__(
        self,
        inner: httpx.BaseTransport | None = None,
        *,
        policy: StreamPolicy | None = None,
        interrupt: Interrupt | None = None,
        **http_transport_kwargs: Any,
    ) -> None:
        if inner is None:
            _refuse_http2(http_transport_kwargs.get("http2"))
            inner = httpx.HTTPTransport(**http_transport_kwargs)
        elif http_transport_kwargs:
            raise TypeError(
                f"WatchdogTransport got {', '.join(sorted(http_transport_kwargs))} together"
                " with an inner transport: those settings configure the transport it builds"
                " when inner is None; configure your inner transport instead"
            )
        if policy is not None and not isinstance(policy, StreamPolicy):
            raise TypeError(f"policy must be a StreamPolicy or None, got {policy!r}")
        if interrupt is not None and not isinstance(interrupt, Interrupt):
            raise TypeError(f"interrupt must be an Interrupt or None, got {interrupt!r}")
        self._interrupt = interrupt
        self._inner = inner
        self._sockets_reachable = _track_sockets(inner)
        self._policy = policy if policy is not None else StreamPolicy.from_env()

    @property
    def policy(self) -> StreamPolicy:
        """The liveness budgets this transport applies."""
        return self._policy

    @property
    def inner(self) -> httpx.BaseTransport:
        """The transport that does the HTTP."""
        return self._inner

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        policy = self._policy
        replayable = isinstance(request.stream, httpx.ByteStream)
        streaming = wants_stream(
            request.headers.get("accept", ""),
            request.headers.get("content-type", ""),
            request.content if replayable else None,
        )
        budget = policy.first_event_budget if streaming else None
        call = call_for_request(request.headers, policy.retries) if budget is not None else None
        if call is not None and call.exhausted_by_stalls():
            # An SDK retry of a stream whose re-sends are spent: fail at once, offline.
            assert call.last_stall is not None
            raise stall_for_caller(call.last_stall, handoff=call.handoff)
        tokens = bound_interrupts()
        if self._interrupt is not None:
            tokens = (*tokens, self._interrupt)
        while True:
            number = call.start_attempt() if call is not None else 1
            attempt = _Attempt(request, number, budget)
            guard = Guard()
            if not guard.bind(tokens):
                reason = guard.reason or "interrupted"
                logger.info(
                    "%s %s not sent: already interrupted: %s", request.method, attempt.url, reason
                )
                raise interrupted_before_response(reason, stage="before_sending")
            if budget is not None:
                guard.deadline = attempt.started + budget
                watchdog.arm(guard)
            try:
                response = self._send(request, guard, attempt, gate=budget is not None)
            except BaseException as exc:
                guard.close()
                error = _mapped_error(guard, attempt, policy.stale_budget, 0, exc, in_body=False)
                if error is None:
                    raise
                if not isinstance(error, StreamStalled):
                    raise error from exc
                assert call is not None
                call.last_stall = error
                if replayable and call.take_resend():
                    logger.warning(
                        "%s %s: %s; re-sending; that connection is closed (%d re-send(s) left)",
                        request.method,
                        attempt.url,
                        error,
                        call.resends_left,
                    )
                    continue
                logger.warning("%s %s: %s; no re-send left", request.method, attempt.url, error)
                error.__cause__ = exc  # kept when the runner unwraps a handoff
                raise stall_for_caller(error, handoff=call.handoff) from exc
            if call is not None:
                call.last_stall = None
            return response

    def _send(
        self, request: httpx.Request, guard: Guard, attempt: _Attempt, *, gate: bool
    ) -> httpx.Response:
        guard.stage = "headers"
        context = current_guard.set(guard)
        try:
            response = self._inner.handle_request(request)
        finally:
            current_guard.reset(context)
        try:
            if guard.fired is not None:
                raise _Fired
            if not self._sockets_reachable:
                network_stream = response.extensions.get("network_stream")
                if network_stream is not None and not isinstance(network_stream, TrackingStream):
                    guard.attach(_ForeignConnection(network_stream))
            assert isinstance(response.stream, httpx.SyncByteStream)
            if is_event_stream(response.status_code, response.headers.get("content-type", "")):
                meter: ProgressMeter | None = ProgressMeter(
                    response.headers.get("content-encoding", "")
                )
            else:
                # Not watched for progress, but interruptible, and the guard keeps
                # the socket from being closed under the body by another thread.
                meter = None
                gate = False
            stream = WatchedStream(
                response.stream, guard, attempt, meter, self._policy.stale_budget
            )
        except BaseException:
            response.close()
            raise
        try:
            if gate:
                stream.await_first_event()
        except BaseException:
            stream.close()
            raise
        return httpx.Response(
            status_code=response.status_code,
            headers=response.headers,
            stream=stream,
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._inner.close()
