"""Stream one message to the end (Anthropic's Messages API): inline, on a worker, or async.

The wire: ``client.messages.create(stream=True, ...)`` on an
``anthropic.Anthropic`` or ``AsyncAnthropic`` (the anthropic SDK is optional:
imported only here, only when a runner runs); the events are accumulated by
the SDK's own ``accumulate_event`` (``anthropic.lib.streaming``), as its
``MessageStream`` does. The runs themselves (modes, re-sends, errors) are
``runner``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._core.interrupt import Interrupt
from .runner import astream_call, stream_call
from .wire import SdkWire, has_text

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message, RawMessageStreamEvent

__all__ = ["astream_message", "stream_message"]

#: Where a block or delta holds what a caller is shown: text, thinking, a tool's input.
_CONTENT = frozenset({"text", "thinking", "partial_json", "cited_text"})
#: Blocks that show nothing until they hold text; any other block (a tool use, a tool's
#: result) shows the caller something as soon as it opens, as a chat tool call does.
_TEXT_BLOCKS = frozenset({"text", "thinking", "redacted_thinking"})


def stream_message(
    client: anthropic.Anthropic,
    *,
    inline: bool | None = None,
    interrupt: Interrupt | None = None,
    on_event: Callable[[RawMessageStreamEvent], None] | None = None,
    **create_kwargs: Any,
) -> Message:
    """Stream a message (Anthropic Messages API) and return it assembled, as a ``Message``.

    The request is ``client.messages.create(stream=True, **create_kwargs)``
    (``model``, ``max_tokens`` and ``messages`` among them); the events are
    accumulated by the SDK's own ``accumulate_event`` and the result is a
    plain ``anthropic.types.Message`` (not the SDK's ``ParsedMessage``). A
    ``max_tokens`` stop is returned, not raised: check ``stop_reason``.
    ``on_event`` sees every event the SDK yields as it arrives (on the worker
    thread, in worker mode); the SDK drops ``ping`` events itself.
    ``inline=None`` streams inline unless the client was given a profile by a
    factory (``interrupt``: as for ``stream_chat_completion``). The client
    needs an http client of the httpx2 flavor to be watched:
    ``anthropic.Anthropic(http_client=hermes_transport.httpx2.http_client_for(...))``.

    A stall after the first event is re-sent when no event with content (a
    text, thinking or tool-input delta; a block that already holds some, or
    a tool use) reached ``on_event``; otherwise it raises, so no content is
    ever shown twice. Re-sends share one budget of ``policy.retries`` per
    call, as for ``stream_chat_completion``; the SDK never retries a stall or
    an interrupt (the transport hands them past its retry loop as a
    ``BaseException``), and its retries of other failures (per
    ``max_retries``) draw nothing from that budget.

    Raises: ``StreamStalled`` (of the httpx2 flavor) once the re-sends are
    spent, ``StreamInterrupted`` on interrupt (also when the caller is woken
    in worker mode), the SDK's own errors as it raised them (an in-stream
    ``error`` event among them, as ``anthropic.APIStatusError``), and the HTTP
    library's ``RemoteProtocolError`` for a stream that ended without a single
    event or without ``message_stop``.
    """
    return stream_call(MESSAGES, client, inline, interrupt, on_event, create_kwargs)


async def astream_message(
    client: anthropic.AsyncAnthropic,
    *,
    interrupt: Interrupt | None = None,
    on_event: Callable[[RawMessageStreamEvent], Awaitable[None] | None] | None = None,
    **create_kwargs: Any,
) -> Message:
    """Stream a message on the running event loop; as ``stream_message``.

    ``on_event`` may be a plain function or a coroutine function (awaited
    before the next event is read). ``interrupt`` may be fired from any
    thread, or from the loop. There is no worker mode, as for
    ``astream_chat_completion``; cancelling the awaiting task cancels the call
    as usual, closing its connection.
    """
    return await astream_call(MESSAGES, client, interrupt, on_event, create_kwargs)


class _MessageAssembly:
    """The SDK's ``accumulate_event`` over one attempt, as its ``MessageStream`` runs it."""

    def __init__(self, stream: object) -> None:
        from anthropic.lib.streaming._messages import accumulate_event

        self.accumulate = accumulate_event
        self.snapshot: Any = None
        self.json_bufs: dict[int, bytes] = {}
        self.stopped = False

    def take(self, event: RawMessageStreamEvent) -> None:
        self.snapshot = self.accumulate(
            event=event, current_snapshot=self.snapshot, json_bufs=self.json_bufs
        )
        self.stopped = self.stopped or event.type == "message_stop"

    def result(self) -> Message | None:
        if not self.stopped:
            return None
        from anthropic.types import Message

        return Message.construct(**self.snapshot.to_dict(mode="python"))


def _carries_content(event: RawMessageStreamEvent) -> bool:
    """Whether an event shows the caller something (see ``stream_message``)."""
    if event.type == "content_block_delta":
        return has_text(event.delta.to_dict(), _CONTENT)
    if event.type == "content_block_start":
        return _shows(event.content_block.to_dict())
    if event.type == "message_start":
        return any(_shows(block.to_dict()) for block in event.message.content)
    return False


def _shows(block: dict[str, Any]) -> bool:
    return block.get("type") not in _TEXT_BLOCKS or has_text(block, _CONTENT)


MESSAGES: SdkWire[Message] = SdkWire(
    sdk="anthropic",
    runner="stream_message",
    unit="event",
    final="message_stop",
    endpoint=lambda client: client.messages,
    assembly=_MessageAssembly,
    carries_content=_carries_content,
)
