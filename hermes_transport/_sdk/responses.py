"""Stream one response to the end (OpenAI's Responses API): inline, on a worker, or async.

The wire: ``client.responses.create(stream=True, ...)``; the events are
accumulated by the SDK's own ``ResponseStreamState``
(``openai.lib.streaming.responses``, the same class on openai 1.x, 2.x and
3.x), which is fed the ``response.*`` events only: a ``keepalive`` event (sent
during long requests, even before ``response.created``) would make it fail.
The runs themselves (modes, re-sends, errors) are ``runner``'s.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .._core.checkpoints import CheckpointCallback
from .._core.interrupt import Interrupt
from .runner import astream_call, stream_call
from .wire import SdkWire, has_text

if TYPE_CHECKING:
    import openai
    from openai.types.responses import Response, ResponseStreamEvent

__all__ = ["astream_response", "stream_response"]

#: The events a stream ends with, and the ones that carry the whole response.
_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_LIFECYCLE = _FINAL | {"response.created", "response.in_progress", "response.queued"}
#: Where an event or output item holds what a caller is shown: text, a refusal, a tool
#: call's name, arguments or input, code, a search query, a transcript.
_CONTENT = frozenset({"text", "refusal", "name", "arguments", "input", "code", "query"})
_CONTENT |= {"transcript", "result"}
#: Parsed fields of the SDK's ``Parsed*`` models that a plain ``Response`` does not have.
_PARSED_FIELDS = ("parsed", "parsed_arguments")


def stream_response(
    client: openai.OpenAI,
    *,
    inline: bool | None = None,
    interrupt: Interrupt | None = None,
    on_event: Callable[[ResponseStreamEvent], None] | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    **create_kwargs: Any,
) -> Response:
    """Stream a response (Responses API) and return it assembled, as a ``Response``.

    The request is ``client.responses.create(stream=True, **create_kwargs)``;
    the events are accumulated by the SDK's own ``ResponseStreamState`` and
    the result is the response of the final event, a plain ``Response`` (not
    the SDK's ``ParsedResponse``). A response that ended ``incomplete`` (its
    ``max_output_tokens`` reached, say) is returned, not raised: check
    ``response.status``. ``on_event`` sees every event as it arrives (on the
    worker thread, in worker mode), ``keepalive`` events included (the SDK
    builds those as some other event model whose ``type`` is
    ``"keepalive"``). ``inline`` and ``interrupt`` are
    ``stream_chat_completion``'s. ``on_checkpoint`` is given the checkpoints of a
    background response (``background=True``): where ``resume_response`` goes on from,
    in another process too (see ``ResumeCheckpoint``); the transport's own
    ``on_checkpoint``, if any, is then not called for this call.

    A stall after the first event is re-sent when no event with content (a
    text, refusal, reasoning or tool-call delta; an output item or part that
    already holds some) reached ``on_event``; otherwise it raises, so no
    content is ever shown twice. Re-sends share one budget of
    ``policy.retries`` per call, as for ``stream_chat_completion``, and the
    SDK never retries a stall or an interrupt.

    Raises, on every openai major (from 1.x releases that have the Responses
    API): ``StreamStalled`` once the re-sends are spent, ``StreamInterrupted``
    on interrupt (also when the caller is woken in worker mode), the SDK's
    own errors as it raised them, ``openai.APIError`` for an ``error`` event
    or a ``response.failed`` one (its ``body`` the error the server sent;
    ``on_event`` does not see that event), and the HTTP library's
    ``RemoteProtocolError`` for a stream that ended without a single event or
    without a final one (``response.completed``, ``.incomplete`` or
    ``.failed``).
    """
    return stream_call(
        RESPONSES, client, inline, interrupt, on_event, create_kwargs, on_checkpoint
    )


async def astream_response(
    client: openai.AsyncOpenAI,
    *,
    interrupt: Interrupt | None = None,
    on_event: Callable[[ResponseStreamEvent], Awaitable[None] | None] | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    **create_kwargs: Any,
) -> Response:
    """Stream a response on the running event loop; as ``stream_response``.

    ``on_event`` may be a plain function or a coroutine function (awaited
    before the next event is read). ``interrupt`` may be fired from any
    thread, or from the loop. There is no worker mode, as for
    ``astream_chat_completion``; cancelling the awaiting task cancels the call
    as usual, closing its connection.
    """
    return await astream_call(RESPONSES, client, interrupt, on_event, create_kwargs, on_checkpoint)


class _ResponseAssembly:
    """The SDK's ``ResponseStreamState``, for one attempt, and the final response it made."""

    def __init__(self, stream: openai.Stream[Any] | openai.AsyncStream[Any]) -> None:
        import openai
        from openai.lib.streaming.responses import ResponseStreamState

        omit: Any = getattr(openai, "omit", openai.NOT_GIVEN)  # older 1.x: NOT_GIVEN only
        self.state: ResponseStreamState[None] = ResponseStreamState(
            input_tools=omit, text_format=omit
        )
        self.final: Response | None = None
        self.request = stream.response.request

    def take(self, event: ResponseStreamEvent) -> None:
        kind = event.type
        if kind == "error":
            raise _error_event(self.request, event)
        if not kind.startswith("response."):
            return  # keepalive, or an event type the accumulator cannot know
        for handled in self.state.handle_event(event):
            if handled.type in _FINAL:
                final: Any = handled
                self.final = _plain(final.response)
        if kind == "response.failed" and self.final is not None:
            failure = self.final.error
            raise _api_error(self.request, event, failure.to_dict() if failure else {})

    def result(self) -> Response | None:
        return self.final


def _error_event(request: Any, event: ResponseStreamEvent) -> openai.APIError:
    """``openai.APIError`` for an ``error`` event: its body the error the server sent."""
    data = event.to_dict()
    nested = data.get("error")  # as the live API sends it (and the SDK's body then)
    return _api_error(request, event, nested if isinstance(nested, dict) else data)


def _api_error(request: Any, event: ResponseStreamEvent, body: dict[str, Any]) -> openai.APIError:
    """``openai.APIError`` for an error the stream reported, as the SDK raises for chat."""
    import openai

    message = body.get("message")
    if not isinstance(message, str) or not message:
        message = f"the stream reported {event.type}"
    return openai.APIError(message, request, body=body)


def _plain(response: Any) -> Response:
    """The SDK's ``ParsedResponse``, or a ``Response``, as a plain ``Response``."""
    from openai.types.responses import Response

    data = response.to_dict(mode="python")
    for item in data.get("output") or []:
        content = item.get("content")
        for entry in [item, *(content if isinstance(content, list) else [])]:
            for field in _PARSED_FIELDS:
                if isinstance(entry, dict):
                    entry.pop(field, None)
    return Response.construct(**data)


def _carries_content(event: ResponseStreamEvent) -> bool:
    """Whether an event shows the caller something (see ``stream_response``)."""
    kind = event.type
    if kind.endswith(".delta"):
        return bool(getattr(event, "delta", None))
    if kind in _LIFECYCLE:
        response = getattr(event, "response", None)
        output = getattr(response, "output", None) or []
        return any(has_text(item.to_dict(), _CONTENT) for item in output)
    return has_text(event.to_dict(), _CONTENT)


RESPONSES: SdkWire[Response] = SdkWire(
    sdk="openai",
    runner="stream_response",
    unit="event",
    final="a final event (response.completed, .incomplete or .failed)",
    endpoint=lambda client: client.responses,
    assembly=_ResponseAssembly,
    carries_content=_carries_content,
)
