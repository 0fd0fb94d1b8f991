"""Stream one SDK call to the end, whatever its wire: inline, on a worker, or on an event loop.

Inline, the request is issued and read on the calling thread. On a worker, it
runs on one thread (started per call, with the caller's contextvars) while the
caller waits, still responsive: an interrupt or a KeyboardInterrupt ends the
wait at once and stops the worker's request.

An ``SdkWire`` (``wire``) says what differs between APIs (Chat Completions, Responses,
Messages): which SDK client it takes, how the request is made, how its events
are accumulated into the result and which events show the caller content. The
rest is the same for all: errors, whatever the SDK and its major, are
``StreamStalled`` once the call's re-sends are spent, ``StreamInterrupted`` on
interrupt, other SDK errors as the SDK raised them. A run binds one ``Call``
(the re-send budget) to its context; under it the transport raises its stalls
and interrupts as a ``Handoff``, a ``BaseException`` that passes the SDK's
retry loop untouched, and the run unwraps it.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import Any, Generic, TypeVar

from .._core.calls import Call, bind_call
from .._core.checkpoints import CheckpointCallback
from .._core.contexts import ClientProfile
from .._core.errors import Handoff, StreamInterrupted, StreamStalled
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._flavors import flavor_named
from .._transports.builder import flavor_of, profile_of, transport_policy
from .wire import Assembly, SdkWire, check_client

__all__ = ["WORKER_GRACE", "astream_call", "stream_call"]

logger = logging.getLogger("hermes_transport")

# How long a worker may outlive its call once told to stop: its request is
# interrupted at once, so it needs only to unwind.
WORKER_GRACE = 2.0

R = TypeVar("R")


@dataclass(frozen=True)
class _Job(Generic[R]):
    """One streaming call, as the inline, worker and async paths all need it."""

    wire: SdkWire[R]
    client: Any  # the SDK's client, sync or async
    policy: StreamPolicy
    tokens: list[Interrupt]
    on_event: Callable[[Any], Any] | None
    create_kwargs: dict[str, Any]
    on_checkpoint: CheckpointCallback | None = None


def _profile(client: Any) -> ClientProfile | None:
    """What the factory that made ``client``, or its http client, decided (an anthropic
    client is built around ``http_client_for``'s: the SDKs keep it in ``_client``)."""
    return profile_of(client) or profile_of(getattr(client, "_client", None))


def _job(
    wire: SdkWire[R],
    client: Any,
    is_async: bool,
    interrupt: Interrupt | None,
    on_event: Callable[[Any], Any] | None,
    create_kwargs: dict[str, Any],
    on_checkpoint: CheckpointCallback | None = None,
) -> _Job[R]:
    check_client(wire, client, is_async)
    if create_kwargs.get("stream", True) is not True:
        raise ValueError("a streaming runner always streams; drop stream=False")
    if interrupt is not None and not isinstance(interrupt, Interrupt):
        raise TypeError(f"interrupt must be an Interrupt or None, got {interrupt!r}")
    if on_checkpoint is not None and not callable(on_checkpoint):
        raise TypeError(
            f"on_checkpoint must be a callable taking a ResumeCheckpoint, or None;"
            f" got {on_checkpoint!r}"
        )
    create_kwargs["stream"] = True
    profile = _profile(client)
    policy = profile.policy if profile is not None else transport_policy(wire.http_client(client))
    tokens = [t for t in (interrupt, profile.interrupt if profile else None) if t is not None]
    return _Job(wire, client, policy, tokens, on_event, create_kwargs, on_checkpoint)


class _Run(Generic[R]):
    """The attempts of one streaming call: what was accumulated and delivered, and re-sends.

    No I/O: the sync and async loops feed it events and errors.
    """

    def __init__(self, job: _Job[R]) -> None:
        self.job = job
        self.call = Call(job.policy.retries, job.policy.resumes, job.on_checkpoint)
        self._begin()

    def _begin(self) -> None:
        self.assembly: Assembly[R] | None = None
        self.delivered = False
        self.events = 0

    def opened(self, stream: Any) -> None:
        """The attempt's request returned its stream: accumulate its events from now on."""
        self.assembly = self.job.wire.assembly(stream)

    @contextmanager
    def bound(self) -> Iterator[None]:
        """Bind the call's interrupt tokens and re-send budget to this context."""
        with ExitStack() as stack:
            for token in self.job.tokens:
                stack.enter_context(token.bind())
            stack.enter_context(bind_call(self.call))
            yield

    def took(self, event: Any) -> Any:
        """Accumulate an event and hand it to ``on_event``; return what that returned."""
        assert self.assembly is not None, "an event before its stream was opened"
        self.assembly.take(event)
        self.events += 1
        if self.job.on_event is None:
            return None
        result = self.job.on_event(event)
        self.delivered = self.delivered or self.job.wire.carries_content(event)
        return result

    def result(self) -> R:
        wire = self.job.wire
        assembled = self.assembly.result() if self.assembly and self.events else None
        if assembled is None:
            # The HTTP library's own protocol error, as for any other broken stream.
            http = _http_library(wire.http_client(self.job.client))
            if not self.events:
                raise http.RemoteProtocolError(f"the stream ended without a single {wire.unit}")
            raise http.RemoteProtocolError(
                f"the stream ended after {self.events} {wire.unit}(s) without {wire.final}"
            )
        return assembled

    def failure(self, exc: Exception | Handoff) -> BaseException | None:
        """``None`` to send the call again (after a stall nobody saw), else what to raise."""
        error = _unwrapped(exc)
        if (
            isinstance(error, StreamStalled)
            and error.stage == "mid_stream"
            and not self.delivered
            and self.call.take_resend()
        ):
            logger.warning(
                "stream stalled after its first event with nothing delivered;"
                " re-sending (%d re-send(s) left)",
                self.call.resends_left,
            )
            self._begin()
            return None
        return error


def stream_call(
    wire: SdkWire[R],
    client: Any,
    inline: bool | None,
    interrupt: Interrupt | None,
    on_event: Callable[[Any], Any] | None,
    create_kwargs: dict[str, Any],
    on_checkpoint: CheckpointCallback | None = None,
) -> R:
    """Stream one call on ``wire`` with a sync client, inline or on a worker thread.

    ``inline=None``: as the factory that made ``client`` decided, else inline.
    ``on_checkpoint``: given the call's checkpoints (a background Responses stream's).
    """
    job = _job(wire, client, False, interrupt, on_event, create_kwargs, on_checkpoint)
    if inline is None:
        profile = _profile(client)
        inline = profile.inline if profile is not None else True
    return _stream(job) if inline else _stream_on_worker(job)


async def astream_call(
    wire: SdkWire[R],
    client: Any,
    interrupt: Interrupt | None,
    on_event: Callable[[Any], Any] | None,
    create_kwargs: dict[str, Any],
    on_checkpoint: CheckpointCallback | None = None,
) -> R:
    """Stream one call on ``wire`` with an async client, on the awaiting task."""
    job = _job(wire, client, True, interrupt, on_event, create_kwargs, on_checkpoint)
    attempts = _Run(job)
    with attempts.bound():
        while True:
            try:
                stream = await wire.endpoint(client).create(**job.create_kwargs)
                attempts.opened(stream)
                try:
                    async for event in stream:
                        delivered = attempts.took(event)
                        if delivered is not None and inspect.isawaitable(delivered):
                            await delivered
                finally:
                    await stream.close()
                return attempts.result()
            except (Exception, Handoff) as exc:
                error = attempts.failure(exc)
                if error is None:
                    continue
                if error is exc:
                    raise
                if not isinstance(exc, Handoff):
                    raise error from error.__cause__  # the SDK wrapper shows as context
            # Unwrapped from a Handoff: raised outside the handler, not to show it as context.
            raise error from error.__cause__


def _stream(job: _Job[R]) -> R:
    attempts = _Run(job)
    with attempts.bound():
        while True:
            try:
                stream = job.wire.endpoint(job.client).create(**job.create_kwargs)
                attempts.opened(stream)
                with contextlib.closing(stream):
                    for event in stream:
                        attempts.took(event)
                return attempts.result()
            except (Exception, Handoff) as exc:
                error = attempts.failure(exc)
                if error is None:
                    continue
                if error is exc:
                    raise
                if not isinstance(exc, Handoff):
                    raise error from error.__cause__  # the SDK wrapper shows as context
            # Unwrapped from a Handoff: raised outside the handler, not to show it as context.
            raise error from error.__cause__


def _stream_on_worker(job: _Job[R]) -> R:
    # The call's own token: how the caller stops the worker whatever stopped it.
    stop = Interrupt()
    finished = threading.Event()
    outcome: dict[str, Any] = {}
    context = contextvars.copy_context()

    def work() -> None:
        try:
            outcome["value"] = context.run(_stream, replace(job, tokens=[*job.tokens, stop]))
        except BaseException as exc:  # handed to the caller, whatever it is
            outcome["error"] = exc
        finally:
            finished.set()

    tokens = job.tokens
    removers = [token._add_listener(lambda _reason: finished.set()) for token in tokens]
    worker = threading.Thread(target=work, name="hermes-transport-call", daemon=True)
    try:
        worker.start()
        try:
            finished.wait()
        except BaseException as exc:  # KeyboardInterrupt (or any async exception) in the caller
            stop.interrupt(f"caller stopped waiting: {type(exc).__name__}")
            worker.join(WORKER_GRACE)
            raise
        if "error" not in outcome and "value" not in outcome:
            # Woken by an interrupt token: stop the worker and report it now.
            reason = next((t.reason for t in tokens if t.reason is not None), "interrupted")
            stop.interrupt(reason)
            worker.join(WORKER_GRACE)
            if "error" in outcome and isinstance(outcome["error"], StreamInterrupted):
                raise outcome["error"]
            raise StreamInterrupted(reason, stage="waiting")
    finally:
        for remove in removers:
            remove()
    if "error" in outcome:
        raise outcome["error"]
    value: R = outcome["value"]
    return value


def _http_library(http_client: object) -> Any:
    """The HTTP library ``http_client`` belongs to (httpx for anything unknown)."""
    root = type(http_client).__module__.split(".", 1)[0]
    fallback = flavor_named("httpx2" if root == "httpx2" else "httpx")
    return flavor_of(http_client, fallback).http


def _causes(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _unwrapped(exc: BaseException) -> BaseException:
    """Our error inside the SDK's wrappers, if any; else ``exc`` itself."""
    for cause in _causes(exc):
        if isinstance(cause, Handoff):
            return cause.error
        if isinstance(cause, (StreamStalled, StreamInterrupted)):
            return cause
    return exc
