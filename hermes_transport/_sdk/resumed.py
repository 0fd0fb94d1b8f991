"""Go on with a background response from a checkpoint: ``resume_response``, ``aresume_response``.

A ``ResumeCheckpoint`` (``on_checkpoint``'s, written down by a process that may be gone
since) names a background response and the last event its caller had. Resuming first
asks for the response (``GET /responses/{id}``): one already over is returned as it is
(unless its caller wants the events it missed), one the server no longer has is
``ResponseGone``. Otherwise its stream goes on from the
event after the checkpoint (``GET /responses/{id}?stream=true&starting_after=N``) under
the same watch, resume and cancel rules as a live stream (``runner``), and what is
returned is the response of its final event: the whole response, as an uninterrupted
``stream_response`` returns it. The events are the SDK's; nothing here parses SSE.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

from .._core.checkpoints import ResumeCheckpoint
from .._core.interrupt import Interrupt
from .responses import _FINAL, RESPONSES, _api_error, _error_event, _plain
from .runner import _profile, astream_call, stream_call
from .wire import SdkWire, check_client

if TYPE_CHECKING:
    import openai
    from openai.types.responses import Response, ResponseStreamEvent

__all__ = ["ResponseGone", "aresume_response", "resume_response"]

logger = logging.getLogger("hermes_transport")

#: A response in one of these states streams nothing more.
_OVER = frozenset({"completed", "incomplete", "failed", "cancelled"})


class ResponseGone(LookupError):
    """The server no longer has the response a checkpoint names (it answered 404): it
    expired, or was deleted. ``response_id`` names it; the SDK's ``NotFoundError`` is the
    ``__cause__``."""

    def __init__(self, response_id: str) -> None:
        super().__init__(
            f"response {response_id!r} is gone: the server no longer has it (404);"
            " a background response can be resumed for a limited time only"
        )
        self.response_id = response_id


def resume_response(
    client: openai.OpenAI,
    checkpoint: ResumeCheckpoint,
    *,
    inline: bool | None = None,
    interrupt: Interrupt | None = None,
    on_event: Callable[[ResponseStreamEvent], None] | None = None,
) -> Response:
    """Go on with the background response ``checkpoint`` names, from the event after it,
    and return the whole response, as ``stream_response`` would have.

    ``on_event`` sees the events after the checkpoint (the ones its caller had not seen),
    those of a response already over too (its stream is replayed, at once). A response
    already over (completed, incomplete, failed or cancelled) is returned at once, as the
    server keeps it, when there is no ``on_event`` or its stream can no longer be
    replayed; one the server no longer has raises ``ResponseGone``.
    ``inline``, ``interrupt`` and the errors are ``stream_response``'s; an interrupt also
    cancels the response on the server unless the policy says ``cancel_on_interrupt=False``.
    The client's transport keeps giving checkpoints to its ``on_checkpoint``, if it has one.
    """
    wire = _resumed(checkpoint)
    check_client(wire, client, False)
    with _bound(client, interrupt):
        stored = _stored(checkpoint, lambda: client.responses.retrieve(checkpoint.response_id))
    if stored.status in _OVER and on_event is None:
        return _plain(stored)
    try:
        return stream_call(wire, client, inline, interrupt, on_event, {})
    except Exception as exc:
        return _unstreamed(exc, checkpoint, stored)


async def aresume_response(
    client: openai.AsyncOpenAI,
    checkpoint: ResumeCheckpoint,
    *,
    interrupt: Interrupt | None = None,
    on_event: Callable[[ResponseStreamEvent], Awaitable[None] | None] | None = None,
) -> Response:
    """Go on with the background response ``checkpoint`` names, on the running event loop;
    as ``resume_response`` (``on_event`` may be a coroutine function)."""
    wire = _resumed(checkpoint)
    check_client(wire, client, True)
    with _bound(client, interrupt):
        try:
            stored = await client.responses.retrieve(checkpoint.response_id)
        except Exception as exc:
            _raise_gone(exc, checkpoint)
    if stored.status in _OVER and on_event is None:
        return _plain(stored)
    try:
        return await astream_call(wire, client, interrupt, on_event, {})
    except Exception as exc:
        return _unstreamed(exc, checkpoint, stored)


@contextmanager
def _bound(client: Any, interrupt: Interrupt | None) -> Iterator[None]:
    """The interrupts of the call (``interrupt`` and the client's own) bound around the
    request that asks for the response."""
    profile = _profile(client)
    with ExitStack() as stack:
        for token in (interrupt, profile.interrupt if profile is not None else None):
            if token is not None:
                stack.enter_context(token.bind())
        yield


def _stored(checkpoint: ResumeCheckpoint, retrieve: Callable[[], Response]) -> Response:
    """The response as the server keeps it now (``ResponseGone`` for a 404)."""
    try:
        return retrieve()
    except Exception as exc:
        _raise_gone(exc, checkpoint)


def _unstreamed(exc: Exception, checkpoint: ResumeCheckpoint, stored: Response) -> Response:
    """After the stream of the rest failed with ``exc``: a response that was already over
    is returned as the server keeps it (its stream may no longer be replayed: too old);
    else the error (``ResponseGone`` for a 404)."""
    import openai

    if stored.status not in _OVER or not isinstance(exc, openai.APIStatusError):
        _raise_gone(exc, checkpoint)
    logger.warning(
        "response %s is over, but its events after %d could not be streamed again (%s):"
        " returned as the server keeps it",
        checkpoint.response_id,
        checkpoint.sequence_number,
        exc,
    )
    return _plain(stored)


def _raise_gone(exc: Exception, checkpoint: ResumeCheckpoint) -> NoReturn:
    """Raise ``ResponseGone`` for the SDK's 404 (``exc`` its cause), else ``exc`` as it is."""
    import openai

    if isinstance(exc, openai.NotFoundError):
        raise ResponseGone(checkpoint.response_id) from exc
    raise exc


class _ResumedAssembly:
    """The events after a checkpoint: the final one carries the whole response."""

    def __init__(self, stream: Any) -> None:
        self.final: Response | None = None
        self.request = stream.response.request

    def take(self, event: ResponseStreamEvent) -> None:
        kind = event.type
        if kind == "error":
            raise _error_event(self.request, event)
        if kind in _FINAL:
            final: Any = event
            self.final = _plain(final.response)
            if kind == "response.failed":
                failure = self.final.error
                raise _api_error(self.request, event, failure.to_dict() if failure else {})

    def result(self) -> Response | None:
        return self.final


class _Retrieve:
    """The resource a runner calls ``create`` on: the resume of ``checkpoint``'s stream."""

    def __init__(self, client: Any, checkpoint: ResumeCheckpoint) -> None:
        self._responses = client.responses
        self._checkpoint = checkpoint

    def create(self, **kwargs: Any) -> Any:
        kwargs.pop("stream", None)
        after = self._checkpoint.sequence_number
        if after >= 0:
            kwargs["starting_after"] = after
        return self._responses.retrieve(self._checkpoint.response_id, stream=True, **kwargs)


def _resumed(checkpoint: object) -> SdkWire[Response]:
    """The wire of the resume of ``checkpoint``'s stream (a ``TypeError`` for anything but
    a ``ResumeCheckpoint``)."""
    if not isinstance(checkpoint, ResumeCheckpoint):
        raise TypeError(
            f"checkpoint must be a ResumeCheckpoint (ResumeCheckpoint.from_json() reads"
            f" a stored one), got {type(checkpoint).__name__}"
        )
    return SdkWire(
        sdk="openai",
        runner="resume_response",
        unit="event",
        final=RESPONSES.final,
        endpoint=lambda client: _Retrieve(client, checkpoint),
        assembly=_ResumedAssembly,
        carries_content=RESPONSES.carries_content,
    )
