"""Stream one chat completion to the end: inline, on a worker, or on an event loop.

Inline, the request is issued and read on the calling thread. On a worker, it
runs on one thread (started per call, with the caller's contextvars) while the
caller waits, still responsive: an interrupt or a KeyboardInterrupt ends the
wait at once and stops the worker's request.

Errors are the same whatever the openai major: ``StreamStalled`` once the
call's re-sends are spent, ``StreamInterrupted`` on interrupt, other SDK
errors as the SDK raised them. A run binds one ``Call`` (the re-send budget)
to its context; under it the transport raises its stalls and interrupts as a
``Handoff``, a ``BaseException`` that passes the SDK's retry loop untouched,
and the run unwraps it.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from .._core.calls import Call, bind_call
from .._core.errors import Handoff, StreamInterrupted, StreamStalled
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._flavors import flavor_named
from .._transports.builder import flavor_of, profile_of, transport_policy

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["astream_chat_completion", "stream_chat_completion"]

logger = logging.getLogger("hermes_transport")

# How long a worker may outlive its call once told to stop: its request is
# interrupted at once, so it needs only to unwind.
WORKER_GRACE = 2.0


def stream_chat_completion(
    client: openai.OpenAI,
    *,
    inline: bool | None = None,
    interrupt: Interrupt | None = None,
    on_delta: Callable[[ChatCompletionChunk], None] | None = None,
    **create_kwargs: Any,
) -> ChatCompletion:
    """Stream a chat completion and return it assembled, as a ``ChatCompletion``.

    The request always goes out with ``stream=True``; the chunks are
    accumulated by the SDK's own ``ChatCompletionStreamState``. ``on_delta``
    sees every chunk as it arrives (on the worker thread, in worker mode).
    ``inline=None`` streams as the factory that made ``client`` decided
    (``openai_client_for``), and inline for any other client.

    ``interrupt`` binds a token for this call, on top of the one the client's
    factory was given.

    A stall after the first event is re-sent when none of its content reached
    ``on_delta``; otherwise it raises, so no text is ever duplicated. Stalls
    cost one call at most ``policy.retries`` re-sends in all, made by the
    transport (before the first event) or by the runner (after it). The SDK
    never retries a stall or an interrupt here, on any major (the transport
    hands them past it as a ``BaseException``), but retries what it retries
    without the runner (a 5xx, a refused connection, per ``max_retries``):
    those attempts draw nothing from the budget and are counted in
    ``StreamStalled.attempts`` (when the first event is watched).

    Raises, on every openai major: ``StreamStalled`` (of the client's flavor)
    once the re-sends are spent, ``StreamInterrupted`` on interrupt (also
    when the caller is woken in worker mode), the SDK's own errors
    (``APIStatusError``, ...) as it raised them, and the HTTP library's
    ``RemoteProtocolError`` for a stream that ended without a single chunk.
    """
    import openai

    job = _Job.of(client, openai.OpenAI, interrupt, on_delta, create_kwargs)
    if inline is None:
        profile = profile_of(client)
        inline = profile.inline if profile is not None else True
    return _stream(job) if inline else _stream_on_worker(job)


async def astream_chat_completion(
    client: openai.AsyncOpenAI,
    *,
    interrupt: Interrupt | None = None,
    on_delta: Callable[[ChatCompletionChunk], Awaitable[None] | None] | None = None,
    **create_kwargs: Any,
) -> ChatCompletion:
    """Stream a chat completion on the running event loop; as ``stream_chat_completion``.

    ``on_delta`` may be a plain function or a coroutine function (awaited
    before the next chunk is read). ``interrupt`` may be fired from any
    thread, or from the loop. Re-sends, their budget, the SDK's retries and
    the errors are ``stream_chat_completion``'s. There is no worker mode: the
    call always runs on the awaiting task, whatever the client's platform.
    Cancelling that task cancels the call as usual, closing its connection.
    """
    import openai

    run = _Run(_Job.of(client, openai.AsyncOpenAI, interrupt, on_delta, create_kwargs))
    with run.bound():
        while True:
            try:
                stream = await run.job.client.chat.completions.create(**run.job.create_kwargs)
                try:
                    async for chunk in stream:
                        delivered = run.took(chunk)
                        if delivered is not None and inspect.isawaitable(delivered):
                            await delivered
                finally:
                    await stream.close()
                return run.result()
            except (Exception, Handoff) as exc:
                error = run.failure(exc)
                if error is None:
                    continue
                if error is exc:
                    raise
                if not isinstance(exc, Handoff):
                    raise error from error.__cause__  # the SDK wrapper shows as context
            # Unwrapped from a Handoff: raised outside the handler, not to show it as context.
            raise error from error.__cause__


@dataclass(frozen=True)
class _Job:
    """One streaming call, as the inline, worker and async paths all need it."""

    client: Any  # openai.OpenAI or openai.AsyncOpenAI
    policy: StreamPolicy
    tokens: list[Interrupt]
    on_delta: Callable[[ChatCompletionChunk], Any] | None
    create_kwargs: dict[str, Any]

    @classmethod
    def of(
        cls,
        client: Any,
        client_class: type[Any],
        interrupt: Interrupt | None,
        on_delta: Callable[[ChatCompletionChunk], Any] | None,
        create_kwargs: dict[str, Any],
    ) -> _Job:
        if not isinstance(client, client_class):
            sync = client_class.__name__ == "OpenAI"
            other = "astream_chat_completion" if sync else "stream_chat_completion"
            kind = "an async" if sync else "a sync"
            raise TypeError(
                f"client must be an openai.{client_class.__name__}, got"
                f" {type(client).__name__}; for {kind} client use {other}()"
            )
        if create_kwargs.get("stream", True) is not True:
            raise ValueError("a streaming runner always streams; drop stream=False")
        if interrupt is not None and not isinstance(interrupt, Interrupt):
            raise TypeError(f"interrupt must be an Interrupt or None, got {interrupt!r}")
        create_kwargs["stream"] = True
        profile = profile_of(client)
        if profile is not None:
            policy = profile.policy
        else:  # the SDK keeps its httpx client in `_client`
            policy = transport_policy(getattr(client, "_client", None))
        tokens = [t for t in (interrupt, profile.interrupt if profile else None) if t is not None]
        return cls(client, policy, tokens, on_delta, create_kwargs)


class _Run:
    """The attempts of one streaming call: what was accumulated and delivered, and re-sends.

    No I/O: the sync and async loops feed it chunks and errors.
    """

    def __init__(self, job: _Job) -> None:
        self.job = job
        self.call = Call(job.policy.retries)
        self._begin()

    def _begin(self) -> None:
        from openai.lib.streaming.chat import ChatCompletionStreamState

        self.state: ChatCompletionStreamState[object] = ChatCompletionStreamState()
        self.delivered = False
        self.chunks = 0

    @contextmanager
    def bound(self) -> Iterator[None]:
        """Bind the call's interrupt tokens and re-send budget to this context."""
        with ExitStack() as stack:
            for token in self.job.tokens:
                stack.enter_context(token.bind())
            stack.enter_context(bind_call(self.call))
            yield

    def took(self, chunk: ChatCompletionChunk) -> Any:
        """Accumulate a chunk and hand it to ``on_delta``; return what that returned."""
        self.state.handle_chunk(chunk)
        self.chunks += 1
        if self.job.on_delta is None:
            return None
        result = self.job.on_delta(chunk)
        self.delivered = self.delivered or _carries_content(chunk)
        return result

    def result(self) -> ChatCompletion:
        if not self.chunks:
            # The HTTP library's own protocol error, as for any other broken stream.
            http = flavor_of(getattr(self.job.client, "_client", None), flavor_named("httpx")).http
            raise http.RemoteProtocolError("the stream ended without a single chunk")
        return _assembled(self.state)

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


def _stream(job: _Job) -> ChatCompletion:
    run = _Run(job)
    with run.bound():
        while True:
            try:
                stream = job.client.chat.completions.create(**job.create_kwargs)
                with contextlib.closing(stream):
                    for chunk in stream:
                        run.took(chunk)
                return run.result()
            except (Exception, Handoff) as exc:
                error = run.failure(exc)
                if error is None:
                    continue
                if error is exc:
                    raise
                if not isinstance(exc, Handoff):
                    raise error from error.__cause__  # the SDK wrapper shows as context
            # Unwrapped from a Handoff: raised outside the handler, not to show it as context.
            raise error from error.__cause__


def _stream_on_worker(job: _Job) -> ChatCompletion:
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
    value: ChatCompletion = outcome["value"]
    return value


def _carries_content(chunk: ChatCompletionChunk) -> bool:
    """Whether a chunk shows the caller something (text, a refusal, a tool call, reasoning)."""
    for choice in chunk.choices:
        delta = choice.delta
        if delta.content or delta.refusal or delta.tool_calls or delta.function_call:
            return True
        extra = delta.model_extra or {}
        if extra.get("reasoning_content") or extra.get("reasoning"):
            return True
    return False


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


def _assembled(state: Any) -> ChatCompletion:
    """The accumulated completion, as a plain ``ChatCompletion``.

    ``get_final_completion()`` would raise on a ``length`` or
    ``content_filter`` finish; a streaming runner returns those as they came.
    """
    from openai.types.chat import ChatCompletion

    data = state.current_completion_snapshot.model_dump(mode="python", exclude_none=False)
    for choice in data.get("choices", []):
        message = choice.get("message") or {}
        message.pop("parsed", None)
        for call in message.get("tool_calls") or []:
            call.pop("index", None)  # a chunk's delta field, not a message's
            (call.get("function") or {}).pop("parsed_arguments", None)
    return ChatCompletion.model_validate(data)
