"""Stream one chat completion to the end (Chat Completions API): inline, on a worker, or async.

The wire: ``client.chat.completions.create(stream=True, ...)``, chunks
accumulated by the SDK's own ``ChatCompletionStreamState``, content being
text, a refusal, a tool call or reasoning. The runs themselves (modes,
re-sends, errors) are ``runner``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._core.interrupt import Interrupt
from .runner import astream_call, stream_call
from .wire import SdkWire

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = ["astream_chat_completion", "stream_chat_completion"]


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
    return stream_call(CHAT, client, inline, interrupt, on_delta, create_kwargs)


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
    return await astream_call(CHAT, client, interrupt, on_delta, create_kwargs)


class _ChatAssembly:
    """The SDK's ``ChatCompletionStreamState``, for one attempt."""

    def __init__(self, stream: object) -> None:
        from openai.lib.streaming.chat import ChatCompletionStreamState

        self.state: ChatCompletionStreamState[object] = ChatCompletionStreamState()

    def take(self, chunk: ChatCompletionChunk) -> None:
        self.state.handle_chunk(chunk)

    def result(self) -> ChatCompletion:
        return _assembled(self.state)


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


CHAT: SdkWire[ChatCompletion] = SdkWire(
    sdk="openai",
    runner="stream_chat_completion",
    unit="chunk",
    final=None,
    endpoint=lambda client: client.chat.completions,
    assembly=_ChatAssembly,
    carries_content=_carries_content,
)
