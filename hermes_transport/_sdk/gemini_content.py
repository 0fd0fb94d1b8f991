"""Stream one Gemini answer to the end (google-genai): inline, on a worker, or async.

The wire: ``client.models.generate_content_stream(...)`` on a ``google.genai.Client``
(``client.aio.models...`` for the async runner; google-genai is optional: imported only
here, only when a runner runs). The chunks are merged into one
``GenerateContentResponse`` here (``_ContentAssembly``), since the SDK has no
accumulator of its own. The runs themselves (modes, re-sends, errors) are ``runner``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._core.interrupt import Interrupt
from .runner import astream_call, stream_call
from .wire import SdkWire

if TYPE_CHECKING:
    from google import genai
    from google.genai import types

__all__ = ["astream_content", "stream_content"]

#: The fields of a part that show the caller something: text (a thought summary too), a
#: function call or response, inline or file data, code and its result.
_CONTENT = (
    "text",
    "function_call",
    "function_response",
    "inline_data",
    "file_data",
    "executable_code",
    "code_execution_result",
)


def stream_content(
    client: genai.Client,
    *,
    inline: bool | None = None,
    interrupt: Interrupt | None = None,
    on_chunk: Callable[[types.GenerateContentResponse], None] | None = None,
    **generate_kwargs: Any,
) -> types.GenerateContentResponse:
    """Stream a Gemini answer and return it merged, as one ``GenerateContentResponse``.

    The request is ``client.models.generate_content_stream(**generate_kwargs)``
    (``model``, ``contents``, ``config``). The result holds the first candidate's parts
    merged in order: adjacent text parts of the same kind joined (a thought summary
    apart from the answer), every other part (a function call, inline data, code) whole;
    with the last ``finish_reason`` and ``usage_metadata`` the chunks carried.
    ``on_chunk`` sees every chunk as it arrives (on the worker thread, in worker mode).
    ``inline=None`` streams inline unless the client was given a profile by a factory
    (``genai_client_for``: as it decided for the caller's context).

    A stall after the first chunk is re-sent when no chunk with content (text, a thought
    summary, a function call, data, code) reached ``on_chunk``; otherwise it raises, so
    no content is ever shown twice. Re-sends share one budget of ``policy.retries`` per
    call, as for ``stream_chat_completion``; the SDK's own retries
    (``HttpOptions(retry_options=...)``) never retry a stall or an interrupt under the
    runner (the transport hands them past its retry loop as a ``BaseException``).

    Raises: ``StreamStalled`` once the re-sends are spent, ``StreamInterrupted`` on
    interrupt, the SDK's own errors as it raised them (``google.genai.errors.APIError``
    for an error status or an in-stream error event), and the HTTP library's
    ``RemoteProtocolError`` for a stream that ended without a single chunk or without a
    ``finish_reason``.
    """
    return stream_call(CONTENT, client, inline, interrupt, on_chunk, generate_kwargs)


async def astream_content(
    client: genai.Client | genai.client.AsyncClient,
    *,
    interrupt: Interrupt | None = None,
    on_chunk: Callable[[types.GenerateContentResponse], Awaitable[None] | None] | None = None,
    **generate_kwargs: Any,
) -> types.GenerateContentResponse:
    """Stream a Gemini answer on the running event loop; as ``stream_content``, over
    ``client.aio.models.generate_content_stream`` (``client``: a ``genai.Client``, or its
    ``aio``). ``on_chunk`` may be a coroutine function (awaited before the next chunk)."""
    aio = getattr(client, "aio", client)
    return await astream_call(ASYNC_CONTENT, aio, interrupt, on_chunk, generate_kwargs)


class _Models:
    """``client.models`` as a runner calls an endpoint: ``create(stream=True, ...)``."""

    def __init__(self, models: Any) -> None:
        self._models = models

    def create(self, *, stream: bool, **generate_kwargs: Any) -> Any:
        return self._models.generate_content_stream(**generate_kwargs)


class _AsyncModels(_Models):
    """``client.aio.models``: the stream as an async iterator with an awaitable ``close``."""

    async def create(self, *, stream: bool, **generate_kwargs: Any) -> Any:
        return _AsyncChunks(await self._models.generate_content_stream(**generate_kwargs))


class _AsyncChunks:
    def __init__(self, chunks: AsyncIterator[Any]) -> None:
        self._chunks = chunks

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._chunks

    async def close(self) -> None:
        close = getattr(self._chunks, "aclose", None)
        if close is not None:
            await close()


class _ContentAssembly:
    """The first candidate's parts over one attempt, merged; the last chunk's ending."""

    def __init__(self, stream: object) -> None:
        self.parts: list[Any] = []
        self.last: Any = None
        self.finish_reason: Any = None
        self.usage: Any = None
        self.feedback: Any = None

    def take(self, chunk: types.GenerateContentResponse) -> None:
        self.last = chunk
        self.usage = chunk.usage_metadata or self.usage
        self.feedback = chunk.prompt_feedback or self.feedback
        candidate = chunk.candidates[0] if chunk.candidates else None
        if candidate is None:
            return
        self.finish_reason = candidate.finish_reason or self.finish_reason
        for part in (candidate.content.parts if candidate.content else None) or ():
            self._add(part)

    def _add(self, part: Any) -> None:
        previous = self.parts[-1] if self.parts else None
        if (
            previous is not None
            and _only_text(part)
            and _only_text(previous)
            and bool(part.thought) == bool(previous.thought)
        ):
            signature = part.thought_signature or previous.thought_signature
            self.parts[-1] = previous.model_copy(
                update={"text": previous.text + part.text, "thought_signature": signature}
            )
        else:
            self.parts.append(part)

    def result(self) -> types.GenerateContentResponse | None:
        if self.finish_reason is None:
            return None
        from google.genai import types

        last = self.last
        candidate = last.candidates[0] if last.candidates else types.Candidate()
        merged = candidate.model_copy(
            update={
                "content": types.Content(role="model", parts=self.parts),
                "finish_reason": self.finish_reason,
                "index": candidate.index or 0,
            }
        )
        return last.model_copy(  # type: ignore[no-any-return]
            update={
                "candidates": [merged],
                "usage_metadata": self.usage,
                "prompt_feedback": self.feedback,
            }
        )


def _only_text(part: Any) -> bool:
    """A part of text alone (answer or thought, a signature allowed), to join with its kind."""
    return part.text is not None and not any(getattr(part, f) for f in _CONTENT[1:])


def _carries_content(chunk: types.GenerateContentResponse) -> bool:
    """Whether a chunk shows the caller something (see ``stream_content``)."""
    for candidate in chunk.candidates or ():
        for part in (candidate.content.parts if candidate.content else None) or ():
            if any(getattr(part, field) for field in _CONTENT):
                return True
    return False


CONTENT: SdkWire[types.GenerateContentResponse] = SdkWire(
    sdk="google.genai.client",
    runner="stream_content",
    unit="chunk",
    final="a finish_reason",
    endpoint=lambda client: _Models(client.models),
    assembly=_ContentAssembly,
    carries_content=_carries_content,
    http_client=lambda client: client._api_client._httpx_client,
)
ASYNC_CONTENT = replace(
    CONTENT,
    endpoint=lambda client: _AsyncModels(client.models),
    http_client=lambda client: client._api_client._async_httpx_client,
)
