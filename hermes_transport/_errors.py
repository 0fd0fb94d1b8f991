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
    "StallHandoff",
    "StreamInterrupted",
    "StreamStalled",
    "interrupted_before_response",
    "stall_for_caller",
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


_sdk_classes: dict[tuple[type[Exception], type[Exception]], type[Exception]] = {}


def _also_sdk_error(cls: type[_E]) -> type[_E]:
    """``cls``, also made an ``openai.OpenAIError`` when the SDK is loaded.

    openai 2.x and 3.x let their own errors raised from a transport through
    untouched, without retrying them; the class keeps its name and doc.
    """
    sdk_error = _sdk_error()
    if sdk_error is None:
        return cls
    mixed = _sdk_classes.get((cls, sdk_error))
    if mixed is None:
        attrs = {"__module__": __name__, "__doc__": cls.__doc__}
        mixed = _sdk_classes[(cls, sdk_error)] = type(cls.__name__, (cls, sdk_error), attrs)
    return cast("type[_E]", mixed)


def interrupted_before_response(reason: str, *, stage: str | None) -> StreamInterrupted:
    """A ``StreamInterrupted`` to raise before the response has returned.

    The openai SDK (2.x) retries, with backoff sleeps, any exception a
    transport raises before the response, except its own ``OpenAIError``s. So
    when the SDK is loaded the error is also an ``openai.OpenAIError``: the SDK
    lets it through untouched, once. ``except StreamInterrupted`` and ``except
    InterruptedError`` still catch it.
    """
    return _also_sdk_error(StreamInterrupted)(reason, stage=stage)


class StallHandoff(Exception):
    """Carries a ``StreamStalled`` from the transport to the streaming runner.

    Under the runner, a stall raised before the response must not be retried
    by the openai SDK (the runner owns the re-send budget), and the SDK retries
    every ``httpx.TimeoutException``. So there the transport raises this
    instead (also an ``openai.OpenAIError``, which SDK 2.x and 3.x pass through
    untouched) and the runner raises ``.stall``. Never seen outside the runner.
    """

    def __init__(self, stall: StreamStalled) -> None:
        super().__init__(str(stall))
        self.stall = stall


def stall_for_caller(stall: StreamStalled, *, handoff: bool) -> Exception:
    """The exception ``handle_request`` raises for a final stall."""
    return _also_sdk_error(StallHandoff)(stall) if handoff else stall


def _sdk_error() -> type[Exception] | None:
    openai = sys.modules.get("openai")
    sdk_error = getattr(openai, "OpenAIError", None)
    if isinstance(sdk_error, type) and issubclass(sdk_error, Exception):
        return sdk_error
    return None
