"""The exceptions hermes-transport raises.

Every error also subclasses the httpx or builtin class that existing ``except``
clauses already catch, so adopting the transport never lets an error slip past
code written for plain httpx::

    Exception
    ├── httpx.TransportError
    │   ├── httpx.TimeoutException
    │   │   └── httpx.ReadTimeout ──────┐
    │   └── httpx.ProtocolError         ├── StreamStalled ─────────┐
    │       └── httpx.RemoteProtocolError ┘                        │
    ├── httpx2.TransportError                                       ├── httpx2's StreamStalled
    │   ├── ... httpx2.ReadTimeout ────────────────────────────────┤
    │   └── ... httpx2.RemoteProtocolError ────────────────────────┘
    └── OSError
        └── InterruptedError
            └── StreamInterrupted         (one class for both flavors)

``StreamStalled`` is both a ``ReadTimeout`` (it is a timeout: no progress within
a budget) and a ``RemoteProtocolError`` (the connection was cut mid-message), so
callers that catch either keep working. On the httpx2 flavor the stall is
``hermes_transport.httpx2.StreamStalled``: the same for httpx2's classes, and a
subclass of this ``StreamStalled``, so one ``except StreamStalled`` (or ``except
httpx.RemoteProtocolError``) catches a stall whichever library carried it.
"""

from __future__ import annotations

import sys
from typing import Literal, TypeVar, cast

import httpx

__all__ = [
    "Handoff",
    "StreamInterrupted",
    "StreamStalled",
    "for_caller",
    "interrupted_before_response",
]

Stage = Literal["first_event", "mid_stream"]
_E = TypeVar("_E", bound=Exception)


class StreamStalled(httpx.ReadTimeout, httpx.RemoteProtocolError):
    """A streaming response made no progress within its budget and was cut.

    ``stage`` is ``"first_event"`` when no data event arrived within the
    first-event budget (waiting for headers included) on any attempt, and
    ``"mid_stream"`` when events stopped arriving after the first one.
    ``budget`` is that budget in seconds, ``elapsed`` the seconds the last
    attempt ran, and ``attempts`` how many times the request was sent by the
    transport.
    """

    def __init__(
        self,
        message: str,
        *,
        request: httpx.Request | None = None,
        stage: Stage,
        budget: float,
        elapsed: float,
        attempts: int,
    ) -> None:
        super().__init__(message, request=request)
        self.stage: Stage = stage
        self.budget = budget
        self.elapsed = elapsed
        self.attempts = attempts


class StreamInterrupted(InterruptedError):
    """A request or stream was stopped by an ``Interrupt`` token.

    ``reason`` is the text given to ``Interrupt.interrupt()``.
    """

    def __init__(self, reason: str, *, stage: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stage = stage


_sdk_classes: dict[tuple[type[Exception], ...], type[Exception]] = {}

#: The SDKs whose own base error makes their retry loop let an exception raised
#: by a transport through untouched (module name, class name).
_SDK_ERRORS = (("openai", "OpenAIError"), ("anthropic", "AnthropicError"))


def _also_sdk_error(cls: type[_E]) -> type[_E]:
    """``cls``, also made the base error of every SDK that is loaded.

    openai 2.x and 3.x and anthropic let their own errors raised from a
    transport through untouched, without retrying them (and without sleeping
    their back-off first); the class keeps its name and doc.
    """
    sdk_errors = _sdk_errors()
    if not sdk_errors:
        return cls
    key: tuple[type[Exception], ...] = (cls, *sdk_errors)
    mixed = _sdk_classes.get(key)
    if mixed is None:
        attrs = {"__module__": __name__, "__doc__": cls.__doc__}
        mixed = _sdk_classes[key] = type(cls.__name__, key, attrs)
    return cast("type[_E]", mixed)


def interrupted_before_response(reason: str, *, stage: str | None) -> StreamInterrupted:
    """A ``StreamInterrupted`` to raise before the response has returned.

    The openai SDK (2.x) and the anthropic SDK retry, with back-off sleeps,
    any exception a transport raises before the response, except their own
    base errors. So the error is also each loaded SDK's base error: the SDK
    lets it through untouched, once. ``except StreamInterrupted`` and
    ``except InterruptedError`` still catch it. (openai 1.x retries every
    exception: see ``Handoff`` for how the runners avoid that.)
    """
    return _also_sdk_error(StreamInterrupted)(reason, stage=stage)


class Handoff(BaseException):
    """Carries our error from the transport to the streaming runner, past the SDK.

    Under a runner, an error raised before the response must reach the runner
    without the SDK retrying it and sleeping its back-off: the runner owns the
    re-send budget, and an interrupt is never retried. Every SDK major
    catches ``Exception`` around a request (openai 1.x retries them all), so
    this is a ``BaseException``: it passes every SDK untouched, and the runner,
    which alone raises it, turns it back into ``.error``. Never seen outside
    a runner.
    """

    def __init__(self, error: StreamStalled | StreamInterrupted) -> None:
        super().__init__(str(error))
        self.error = error


def for_caller(error: StreamStalled | StreamInterrupted, *, handoff: bool) -> BaseException:
    """What ``handle_request`` raises for a final stall or an interrupt."""
    return Handoff(error) if handoff else error


def _sdk_errors() -> tuple[type[Exception], ...]:
    found = []
    for module_name, class_name in _SDK_ERRORS:
        sdk_error = getattr(sys.modules.get(module_name), class_name, None)
        if isinstance(sdk_error, type) and issubclass(sdk_error, Exception):
            found.append(sdk_error)
    return tuple(found)
