"""What the sync and async transports share: one request's attempts, and its watched body.

The transports are I/O shells around this: ``Exchange`` decides budgets,
re-sends and which error a killed attempt raises; ``BodyWatch`` holds the
per-stream state and the per-chunk step. Neither does I/O, sleeps or awaits.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import httpx

from ._backend import Tracked, refuse_http2, track_sockets
from ._calls import Call, call_for_request, under_runner
from ._clock import monotonic
from ._errors import (
    StreamInterrupted,
    StreamStalled,
    for_caller,
    interrupted_before_response,
)
from ._flavor import Flavor, library_of, runs_on
from ._guard import Guard
from ._interrupt import Interrupt
from ._policy import StreamPolicy
from ._progress import ProgressMeter, is_event_stream, wants_stream
from ._sockets import shutdown_socket, socket_has_input

__all__ = [
    "HOLD_LIMIT",
    "Attempt",
    "BodyWatch",
    "Exchange",
    "Fired",
    "Shell",
    "check_settings",
    "rebuilt",
]

logger = logging.getLogger("hermes_transport")

#: Bytes of a streaming response held back while waiting for its first event.
#: Past this the response is handed up as if the first event had arrived.
HOLD_LIMIT = 1024 * 1024

#: A stream closed after ``data: [DONE]`` but before its end (the openai SDK
#: does that) is read on to its end, so that its connection goes back to the
#: pool, if the rest comes within these bounds; otherwise it is closed.
DRAIN_BYTES = 64 * 1024
DRAIN_SECONDS = 0.05
#: A caller that reads on after ``data: [DONE]`` (openai 1.x does) waits at
#: most this long for the body's end; then the body ends there, cleanly, and
#: its connection is closed: the answer was complete at ``[DONE]``.
AFTER_DONE_SECONDS = 0.5

Arm = Callable[[Guard], None]

STAGE_NAMES = {
    "pool": "waiting for a connection from the pool",
    "connecting": "connecting",
    "sending": "sending the request",
    "headers": "waiting for headers",
    "first_event": "waiting for the first event",
    "mid_stream": "reading the stream",
    "body": "reading the body",
}


class Fired(Exception):
    """The guard fired while no I/O error said so (no socket to shut down)."""


class Attempt:
    """What one attempt needs to say what happened to it."""

    __slots__ = ("budget", "dead", "flavor", "number", "request", "started", "url")

    def __init__(
        self, request: httpx.Request, flavor: Flavor, number: int, budget: float | None
    ) -> None:
        self.request = request
        self.flavor = flavor
        # What a dead connection raises: the flavor's transport errors, a
        # socket's, and ours when a guard fired with no socket to shut down.
        self.dead: tuple[type[Exception], ...] = (flavor.http.TransportError, OSError, Fired)
        self.number = number  # of the logical call, SDK retries and runner re-sends included
        self.budget = budget
        self.started = monotonic()
        # Never log a query string: some providers put API keys there.
        url = request.url
        self.url = f"{url.scheme}://{url.netloc.decode('ascii', 'replace')}{url.path}"


def _mapped_error(
    guard: Guard,
    attempt: Attempt,
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
    if guard.fired is None or not isinstance(exc, attempt.dead):
        return None
    elapsed = monotonic() - attempt.started
    stage = guard.fired_stage or guard.stage
    if guard.fired == "closed":
        # What httpx raises when a closed response is read: the truth, here too.
        closed: Exception = attempt.flavor.http.StreamClosed()
        return closed
    if guard.fired == "interrupted":
        reason = guard.reason or "interrupted"
        logger.info(
            "%s %s interrupted while %s, %.3f s into the attempt: %s",
            attempt.request.method,
            attempt.url,
            STAGE_NAMES.get(stage, stage),
            elapsed,
            reason,
        )
        if in_body:
            return StreamInterrupted(reason, stage=stage)
        return interrupted_before_response(reason, stage=stage)
    if stage == "mid_stream":
        assert stale is not None
        return attempt.flavor.stalled(
            f"stream stalled: no progress event for {stale:g} s after {events} event(s),"
            f" {elapsed:.2f} s into attempt {attempt.number}",
            request=attempt.request,
            stage="mid_stream",
            budget=stale,
            elapsed=elapsed,
            attempts=attempt.number,
        )
    assert attempt.budget is not None
    return attempt.flavor.stalled(
        f"stream stalled: no first event within {attempt.budget:g} s"
        f" ({STAGE_NAMES.get(stage, stage)}) on attempt {attempt.number}",
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

    def kill(self) -> bool:
        return shutdown_socket(self._stream.get_extra_info("socket"))

    def caller_behind(self) -> bool:
        return socket_has_input(self._stream.get_extra_info("socket"))


def check_settings(
    transport: str,
    inner: object,
    policy: object,
    interrupt: object,
    settings: dict[str, Any],
    flavor: Flavor,
    method: str,
) -> None:
    """Validate a transport's constructor arguments; the message names the culprit.

    ``method`` is what the shell calls on ``inner`` (``handle_request`` or
    ``handle_async_request``).
    """
    if inner is not None and not runs_on(inner, flavor):
        library = library_of(inner)
        if library is not None and library != flavor.name:
            home = "hermes_transport" + ("" if library == "httpx" else f".{library}")
            raise TypeError(
                f"{transport} runs on {flavor.name}, but inner is an {library} transport"
                f" ({type(inner).__name__}): use {home}.{transport} with it, or give an"
                f" {flavor.name} inner transport"
            )
    if inner is not None and not callable(getattr(inner, method, None)):
        raise TypeError(
            f"inner must be a transport with {method}() ({transport} is"
            f" {'async' if 'async' in method else 'sync'}), got {inner!r}"
        )
    if inner is not None and settings:
        raise TypeError(
            f"{transport} got {', '.join(sorted(settings))} together"
            " with an inner transport: those settings configure the transport it builds"
            " when inner is None; configure your inner transport instead"
        )
    if inner is None:
        refuse_http2(settings.get("http2"), transport)
    if policy is not None and not isinstance(policy, StreamPolicy):
        raise TypeError(f"policy must be a StreamPolicy or None, got {policy!r}")
    if interrupt is not None and not isinstance(interrupt, Interrupt):
        raise TypeError(f"interrupt must be an Interrupt or None, got {interrupt!r}")


_Inner = TypeVar("_Inner")


class Shell(Generic[_Inner]):
    """What the sync and async transports hold: inner transport, policy, own interrupt.

    Each public class sets ``_flavor``: the HTTP library it runs on, through which
    every library name is looked up.
    """

    _flavor: ClassVar[Flavor]
    _inner_method: ClassVar[str]  # what the shell calls on its inner transport
    _inner: _Inner
    _policy: StreamPolicy
    _interrupt: Interrupt | None
    _sockets_reachable: bool

    def _configure(
        self,
        inner: _Inner | None,
        policy: StreamPolicy | None,
        interrupt: Interrupt | None,
        settings: dict[str, Any],
        http_transport: type[Any],
        pool: type[Any],
        tracking_backend: Callable[[Any], Any],
    ) -> None:
        """Build (``http_transport(**settings)``) or take the inner transport, and
        let guards reach its sockets when it is an ``http_transport`` over a ``pool``."""
        name = type(self).__name__
        check_settings(name, inner, policy, interrupt, settings, self._flavor, self._inner_method)
        self._inner = inner if inner is not None else http_transport(**settings)
        self._sockets_reachable = track_sockets(
            self._inner, http_transport, pool, tracking_backend, name
        )
        self._interrupt = interrupt
        self._policy = policy if policy is not None else StreamPolicy.from_env()

    @property
    def policy(self) -> StreamPolicy:
        """The liveness budgets this transport applies."""
        return self._policy

    @property
    def inner(self) -> _Inner:
        """The transport that does the HTTP."""
        return self._inner


class Exchange:
    """The attempts of one ``handle_request``: budgets, re-sends, and their errors.

    The shell loops: ``begin()`` an attempt, send it, and on an exception ask
    ``failed()`` whether to send again (``None``) or what to raise.
    """

    __slots__ = (
        "_budget",
        "_call",
        "_flavor",
        "_handoff",
        "_policy",
        "_replayable",
        "_request",
        "_tokens",
    )

    def __init__(
        self,
        request: httpx.Request,
        flavor: Flavor,
        policy: StreamPolicy,
        own_interrupt: Interrupt | None,
        bound: Sequence[Interrupt],
    ) -> None:
        self._request = request
        self._flavor = flavor
        self._policy = policy
        # A ByteStream is bytes in memory: replayable, and readable without
        # consuming anything. (A request httpx rebuilt for a 307/308 redirect
        # carries the original ByteStream but has no `content` of its own.)
        stream = request.stream
        self._replayable = isinstance(stream, flavor.http.ByteStream)
        streaming = wants_stream(
            request.headers.get("accept", ""),
            request.headers.get("content-type", ""),
            b"".join(stream) if self._replayable else None,  # type: ignore[arg-type]
        )
        self._budget = policy.first_event_budget if streaming else None
        self._call: Call | None = (
            call_for_request(request.headers, policy.retries) if self._budget is not None else None
        )
        self._handoff = under_runner()
        if self._call is not None and self._call.exhausted_by_stalls():
            # An SDK retry of a stream whose re-sends are spent: fail at once, offline.
            assert self._call.last_stall is not None
            raise for_caller(self._call.last_stall, handoff=self._handoff)
        self._tokens = (*bound, own_interrupt) if own_interrupt is not None else tuple(bound)

    @property
    def gated(self) -> bool:
        """Whether the response is held back until its first progress event."""
        return self._budget is not None

    def begin(self, arm: Arm, sockets_reachable: bool) -> tuple[Guard, Attempt]:
        """A new attempt with its guard bound to the interrupt tokens; raises if one fired.

        The first-event budget runs from when the attempt gets its connection
        where the guard can see that (``sockets_reachable``: the shell tracks
        its inner transport's connections), else from now. The guard's deadline
        is set or put off; the shell arms it with ``arm`` either way.
        """
        call, request = self._call, self._request
        number = call.start_attempt() if call is not None else 1
        attempt = Attempt(request, self._flavor, number, self._budget)
        guard = Guard()
        if not guard.bind(self._tokens):
            reason = guard.reason or "interrupted"
            logger.info(
                "%s %s not sent: already interrupted: %s", request.method, attempt.url, reason
            )
            raise for_caller(
                interrupted_before_response(reason, stage="before_sending"),
                handoff=self._handoff,
            )
        if self._budget is not None:
            if sockets_reachable:
                guard.stage = "pool"
                guard.budget_from_connection(self._budget, arm)
            else:
                guard.deadline = attempt.started + self._budget
        return guard, attempt

    def succeeded(self) -> None:
        if self._call is not None:
            self._call.last_stall = None

    def failed(self, guard: Guard, attempt: Attempt, exc: BaseException) -> BaseException | None:
        """After the attempt raised ``exc`` (its guard closed): ``None`` to send it again,
        else the exception to raise (``exc`` itself when the guard did not kill it)."""
        request = self._request
        error = _mapped_error(guard, attempt, self._policy.stale_budget, 0, exc, in_body=False)
        if error is None:
            return exc
        if isinstance(error, StreamInterrupted):
            if self._handoff:
                error.__cause__ = exc  # kept when the runner unwraps the handoff
            return for_caller(error, handoff=self._handoff)
        if not isinstance(error, StreamStalled):
            return error
        call = self._call
        assert call is not None
        call.last_stall = error
        if self._replayable and call.take_resend():
            logger.warning(
                "%s %s: %s; re-sending; that connection is closed (%d re-send(s) left)",
                request.method,
                attempt.url,
                error,
                call.resends_left,
            )
            return None
        logger.warning("%s %s: %s; no re-send left", request.method, attempt.url, error)
        error.__cause__ = exc  # kept when the runner unwraps a handoff
        return for_caller(error, handoff=self._handoff)

    def meter_for(
        self, response: httpx.Response, guard: Guard, sockets_reachable: bool
    ) -> ProgressMeter | None:
        """The progress meter of a response just received (``None``: not an event stream).

        Raises ``Fired`` if the guard fired meanwhile; lets the guard reach the
        socket of an untracked inner transport.
        """
        if guard.fired is not None:
            raise Fired
        if not sockets_reachable:
            network_stream = response.extensions.get("network_stream")
            if (
                network_stream is not None
                and not isinstance(network_stream, Tracked)
                # One HTTP/2 socket carries sibling streams: shutting it down to
                # stop this one would kill them too. Such a body is stopped when
                # its next bytes arrive (or by its read timeout) instead.
                and response.extensions.get("http_version") != b"HTTP/2"
            ):
                guard.attach(_ForeignConnection(network_stream))
        if is_event_stream(response.status_code, response.headers.get("content-type", "")):
            return ProgressMeter(
                response.headers.get("content-encoding", ""), self._policy.heartbeat_events
            )
        # Not watched for progress, but interruptible, and the guard keeps the
        # socket from being closed under the body by another thread.
        return None


class BodyWatch:
    """The watched state of one response body; the sync and async streams build on it.

    Owner-thread state except ``guard``, which the watchdog and interrupt
    tokens read under its lock.
    """

    def __init__(
        self,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        arm: Arm,
    ) -> None:
        self._guard = guard
        self._attempt = attempt
        self._meter = meter
        self._stale = stale
        self._arm = arm
        self._armed = False  # the stale deadline is in the watchdog's heap
        self._held: list[bytes] = []
        self._held_size = 0
        self._complete = False  # the inner body was read to its end
        self._drained_size = 0  # read after [DONE] when the caller closed early
        self._broken: Exception | None = None  # see _broke_early
        guard.stage = "first_event" if meter is not None else "body"
        if meter is None:
            # Not an event stream: it has answered, and its body is not watched
            # for progress (only interrupts reach it).
            guard.deadline = None
        # Closes the guard once: on close, or when a response dropped unclosed
        # is collected (which also runs any close deferred on the guard).
        self._release_guard = weakref.finalize(self, guard.close)

    def _hold(self, chunk: bytes) -> bool:
        """Hold a chunk read before the first event; whether holding is over."""
        if self._guard.fired is not None:
            raise Fired
        self._held.append(chunk)
        self._held_size += len(chunk)
        assert self._meter is not None
        if self._meter.feed(chunk) or self._held_size >= HOLD_LIMIT:
            self._progressed()
            return True
        return False

    def _broke_early(self, exc: Exception) -> bool:
        """Whether to keep ``exc``, raised by the body before its first event, for later.

        A stall or interrupt (the guard fired) is raised from the request,
        where a stall can be re-sent. Any other failure came from a server that
        answered: plain httpx would raise it from the caller's first read, and
        the SDK would not send the request again; so it is raised there, after
        the bytes held so far.
        """
        if self._guard.fired is not None:
            return False
        self._broken = exc
        self._guard.deadline = None  # nothing more to wait for
        return True

    def _take_held(self) -> list[bytes]:
        held, self._held = self._held, []
        return held

    def _raise_if_broken(self) -> None:
        """After the held bytes: the failure ``_broke_early`` kept, if any."""
        broken, self._broken = self._broken, None
        if broken is not None:
            raise broken

    def _ended(self) -> None:
        """The inner body ended."""
        self._complete = True
        if self._guard.fired is not None:
            raise Fired  # a close-delimited body "ends" when its socket is shut down

    def _start_drain(self) -> bool:
        """At close: whether to read the rest of the body so its connection can be pooled.

        Only after ``[DONE]``, and only for ``DRAIN_SECONDS``: the guard's
        deadline bounds it (a kill shuts the socket down, and the connection
        is then closed rather than pooled).
        """
        meter, guard = self._meter, self._guard
        if self._complete or meter is None or not meter.done or guard.fired is not None:
            return False
        guard.stage = "draining"
        guard.deadline = monotonic() + DRAIN_SECONDS
        self._arm(guard)
        return True

    def _drained(self, chunk: bytes) -> bool:
        """Count a drained chunk; whether the drain may go on."""
        self._drained_size += len(chunk)
        return self._drained_size <= DRAIN_BYTES and self._guard.fired is None

    def _progressed(self) -> None:
        guard, meter = self._guard, self._meter
        if meter is not None and meter.done:
            # Complete at [DONE]: only the end of the body is left, and a caller
            # that reads on (openai 1.x) waits for it at most AFTER_DONE_SECONDS.
            guard.stage = "after_done"
            guard.deadline = None if self._complete else monotonic() + AFTER_DONE_SECONDS
            self._arm(guard)  # earlier than the stale deadline: pushed, not moved
            return
        guard.stage = "mid_stream"
        if self._stale is None:
            guard.deadline = None
            return
        guard.deadline = monotonic() + self._stale
        if not self._armed:
            # Once per attempt: the stale deadline may be earlier than the
            # first-event one the heap holds, so it must be pushed, not lazily moved.
            self._armed = True
            self._arm(guard)

    def _saw(self, chunk: bytes) -> None:
        """The per-chunk step: one scan, and on progress a clock read and an attribute write."""
        if self._guard.fired is not None:
            raise Fired
        meter = self._meter
        if meter is not None and meter.feed(chunk):
            if self._armed and not meter.done:
                self._guard.deadline = monotonic() + self._stale  # type: ignore[operator]
            else:
                self._progressed()

    def _cut_after_done(self) -> bool:
        """Whether the body was cut only because its end did not follow ``[DONE]`` in time:
        then it ends there, cleanly (its connection is closed, not pooled)."""
        guard = self._guard
        return guard.fired == "stalled" and guard.fired_stage == "after_done"

    def _failure(self, exc: BaseException) -> Exception | None:
        """The error to raise instead of ``exc`` (the body is already closed), if any."""
        meter = self._meter
        error = _mapped_error(
            self._guard,
            self._attempt,
            self._stale,
            meter.events if meter is not None else 0,
            exc,
            in_body=True,
        )
        if isinstance(error, StreamStalled):
            attempt = self._attempt
            logger.warning("%s %s: %s", attempt.request.method, attempt.url, error)
        return error


_Response = TypeVar("_Response", bound=httpx.Response)


def rebuilt(response: _Response, stream: Any) -> _Response:
    """``response`` itself, with its body stream replaced by the watched one.

    Nothing else changes: the caller gets the inner transport's own object,
    with its class, ``request``, ``extensions`` and any state it already had.
    """
    response.stream = stream
    return response
