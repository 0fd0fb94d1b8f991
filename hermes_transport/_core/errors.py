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

Every error pickles (and copies) to an equal one: same class, ``args`` and
attributes, ``request`` included, as httpx's own errors keep theirs (an
``httpx.Request`` pickles without its body stream and extensions). As for any
exception, ``__cause__``, ``__context__`` and ``__traceback__`` are not
carried. An interrupt raised before the response (see
``interrupted_before_response``) comes back as the same ``StreamInterrupted``
mixed with the same SDK base errors, importing those SDKs if needed; one
that the unpickling process cannot import is left out.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import re
import sys
from typing import Any, Literal, TypeVar, cast

import httpx

from .mcp import McpCall, answered_for, error_event, keep_answered
from .stages import Stage

__all__ = [
    "Handoff",
    "StallStage",
    "StreamInterrupted",
    "StreamStalled",
    "for_caller",
    "in_band_answer",
    "interrupted_before_response",
    "stream_error",
]

#: Where a stall can be: the two ``Stage`` values a ``StreamStalled`` names.
StallStage = Literal["first_event", "mid_stream"]
_E = TypeVar("_E", bound=Exception)
#: An SDK base error by name: (module name, class name).
_SdkName = tuple[str, str]


class StreamStalled(httpx.ReadTimeout, httpx.RemoteProtocolError):
    """A streaming response made no progress within its budget and was cut.

    ``stage`` is where the attempt that stalled was: ``"first_event"`` when
    no output event (progress: not a preamble event, not a heartbeat; see the
    README's table of each wire's events) arrived within the first-event budget,
    ``"mid_stream"`` when none followed the last one within the stale budget. The
    first-event budget starts when the pool wait is over (the attempt begins
    connecting, or writes to a pooled connection; where the transport cannot
    see its inner transport's sockets, when the attempt starts), so sending
    the request and waiting for the headers count. ``budget`` is that budget
    in seconds and ``elapsed`` the seconds that attempt ran.

    ``attempts`` is the number of that attempt within its logical call: how
    many times the call had been sent, this time included, by every layer
    that sends it again. The transport's own re-sends, the SDK's retries of
    the same call (openai's and anthropic's, for any reason: a stall, a 5xx;
    found by their ``x-stainless-retry-count`` header) and the streaming
    runners' re-sends all count. The transport's and the runners' stall
    re-sends draw on the one ``StreamPolicy.retries`` budget; an SDK retry of
    a stream whose budget is spent fails at once, offline, and SDK retries of
    other failures draw nothing. A request whose first event is not
    watched (``first_event_timeout=None``, or a request not seen as
    streaming) is counted on its own: ``attempts`` is 1.
    """

    def __init__(
        self,
        message: str,
        *,
        request: httpx.Request | None = None,
        stage: StallStage,
        budget: float,
        elapsed: float,
        attempts: int,
    ) -> None:
        super().__init__(message, request=request)
        self.stage: StallStage = stage
        self.budget = budget
        self.elapsed = elapsed
        self.attempts = attempts

    def __reduce__(self) -> tuple[Any, ...]:
        # BaseException's own would rebuild with cls(*args): no keyword-only fields.
        fields = {
            "stage": self.stage,
            "budget": self.budget,
            "elapsed": self.elapsed,
            "attempts": self.attempts,
        }
        return _reduced(self, fields)


class StreamInterrupted(InterruptedError):
    """A request or stream was stopped by an ``Interrupt`` token.

    ``reason`` is the text given to ``Interrupt.interrupt()``; ``stage`` is
    where the attempt was when it was stopped (``None``: not known).
    """

    def __init__(self, reason: str, *, stage: Stage | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.stage: Stage | None = stage

    def __reduce__(self) -> tuple[Any, ...]:
        return _reduced(self, {"stage": self.stage})


#: The mixed classes (see ``_also_sdk_error``), by their bases, and the other
#: way round: what each was mixed from, to be found again when unpickled.
_sdk_classes: dict[tuple[type[Exception], ...], type[Exception]] = {}
_mixed_from: dict[type[Exception], tuple[type[Exception], tuple[_SdkName, ...]]] = {}

#: The SDKs whose own base error makes their retry loop let an exception raised
#: by a transport through untouched (module name, class name).
_SDK_ERRORS: tuple[_SdkName, ...] = (("openai", "OpenAIError"), ("anthropic", "AnthropicError"))


def _also_sdk_error(cls: type[_E]) -> type[_E]:
    """``cls``, also made the base error of every SDK that is loaded.

    openai 2.x and 3.x and anthropic let their own errors raised from a
    transport through untouched, without retrying them (and without sleeping
    their back-off first); the class keeps its name, its public module (as
    shown in tracebacks) and its doc.
    """
    return _mixed(cls, _sdk_errors(_SDK_ERRORS, load=False))


def _mixed(cls: type[_E], sdk_errors: tuple[tuple[_SdkName, type[Exception]], ...]) -> type[_E]:
    """``cls`` with ``sdk_errors`` as further bases: one class per set of bases."""
    if not sdk_errors:
        return cls
    key: tuple[type[Exception], ...] = (cls, *(error for _, error in sdk_errors))
    mixed = _sdk_classes.get(key)
    if mixed is None:
        attrs = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
        }
        made = type(cls.__name__, key, attrs)
        _mixed_from[made] = (cls, tuple(name for name, _ in sdk_errors))
        mixed = _sdk_classes.setdefault(key, made)  # one class, even if two threads race
    return cast("type[_E]", mixed)


def _reduced(error: Exception, fields: dict[str, Any]) -> tuple[Any, ...]:
    """How ``error`` pickles and copies: rebuilt by ``_rebuilt``, then its ``__dict__`` set.

    A mixed class cannot be pickled by reference (its name is the public
    class's), so what it was mixed from is pickled instead.
    """
    cls, sdk_names = _mixed_from.get(type(error), (type(error), ()))
    return (_rebuilt, (cls, sdk_names, error.args, fields), error.__dict__)


def _rebuilt(
    cls: type[_E], sdk_names: tuple[_SdkName, ...], args: tuple[Any, ...], fields: dict[str, Any]
) -> _E:
    """An error unpickled: ``cls``, mixed again with the named SDK errors that import."""
    known = tuple(name for name in sdk_names if name in _SDK_ERRORS)
    mixed = _mixed(cls, _sdk_errors(known, load=True))
    return mixed(*args, **fields)


def interrupted_before_response(reason: str, *, stage: Stage | None) -> StreamInterrupted:
    """A ``StreamInterrupted`` to raise before the response has returned.

    The openai SDK (2.x) and the anthropic SDK retry, with back-off sleeps,
    any exception a transport raises before the response, except their own
    base errors. So the error is also each loaded SDK's base error: the SDK
    lets it through untouched, once. ``except StreamInterrupted`` and
    ``except InterruptedError`` still catch it. (openai 1.x retries every
    exception: see ``Handoff`` for how the runners avoid that. openai 3.x
    retries only its HTTP libraries' request errors, so it would let a plain
    ``StreamInterrupted`` through anyway: the mix matters for 2.x and anthropic.)
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


def in_band_answer(call: McpCall | None, error: BaseException) -> bytes | None:
    """The JSON-RPC error event written in the server's place when ``error`` (a stall or
    an interrupt) ends ``call``, an MCP request answered in band, ``error`` kept for
    ``stream_error`` under the key written with it; ``None``: raise ``error``."""
    if call is None or not isinstance(error, (StreamStalled, StreamInterrupted)):
        return None
    data = {"error": type(error).__name__, "stage": error.stage, "key": keep_answered(error)}
    return error_event(call.id, str(error), data)


def stream_error(exc: BaseException | None) -> StreamStalled | StreamInterrupted | None:
    """The library's ``StreamStalled`` or ``StreamInterrupted`` in ``exc``'s chain, if any.

    Looks at ``exc`` itself, then through its ``__cause__`` and ``__context__``
    links (and the members of an ``ExceptionGroup``), nearest first, each
    exception once: clients wrap our errors differently (LangChain and
    pydantic-ai two levels deep, litellm only as ``__context__``, where
    ``except StreamInterrupted`` never matches); and for an error an MCP client raised
    for a request the watch answered in band (``mcp_http_client_for``), the one it
    answered with. ``None`` if neither is there.
    """
    seen: set[int] = set()
    queue = [exc]
    while queue:
        current = queue.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, Handoff):
            current = current.error
        if isinstance(current, (StreamStalled, StreamInterrupted)):
            return current
        answered = answered_for(current)
        if isinstance(answered, (StreamStalled, StreamInterrupted)):
            return answered
        queue.append(current.__cause__)
        queue.append(current.__context__)
        queue.extend(getattr(current, "exceptions", ()) if _is_group(current) else ())
    return None


def _is_group(exc: BaseException) -> bool:
    group = getattr(builtins, "BaseExceptionGroup", None)
    return group is not None and isinstance(exc, group)


def for_caller(
    error: StreamStalled | StreamInterrupted,
    *,
    handoff: bool,
    request: httpx.Request | None = None,
) -> BaseException:
    """What ``handle_request`` raises for a final stall or an interrupt: to a runner, a
    ``Handoff``; else a stall of ``request`` as the SDK that sent it would end it
    (``given_up``), or the error itself."""
    if handoff:
        return Handoff(error)
    if request is not None and isinstance(error, StreamStalled):
        return given_up(error, request)
    return error


#: The openai SDK's User-Agent: ``OpenAI/Python 2.54.0`` (``AsyncOpenAI/``, ``AzureOpenAI/``).
_OPENAI_USER_AGENT = re.compile(r"OpenAI/Python (\d+)\.")


def given_up(error: StreamStalled, request: httpx.Request) -> Exception:
    """What ``handle_request`` raises, off a runner, for a stall whose re-sends are spent.

    openai 2.x and 3.x retry a ``StreamStalled`` raised before the response (it is an
    httpx ``ReadTimeout``) up to ``max_retries`` times, then raise ``openai.APITimeoutError``
    from it. Each retry fails at once, offline (the call's re-sends are spent), but only
    after the SDK's back-off sleep (0.5, 1, 2 s, ...). For a request that SDK sent (its
    ``User-Agent`` says so) the transport raises that ``APITimeoutError`` itself, with the
    stall as its cause: the SDK lets its own errors through at once, so the caller gets
    the same error without the sleeps. openai 1.x retries every exception and the
    anthropic SDK its own connection errors (an ``APITimeoutError`` among them): their
    requests, and any other client's, get the stall as it is.
    """
    match = _OPENAI_USER_AGENT.search(request.headers.get("user-agent", ""))
    sdk_timeout = getattr(sys.modules.get("openai"), "APITimeoutError", None)
    if match is None or int(match.group(1)) < 2 or not isinstance(sdk_timeout, type):
        return error
    wrapped: Exception = sdk_timeout(request=request)
    wrapped.__cause__ = error
    return wrapped


def _sdk_errors(
    names: tuple[_SdkName, ...], *, load: bool
) -> tuple[tuple[_SdkName, type[Exception]], ...]:
    """The named SDK base errors found, with their names (``load``: import an SDK if need be)."""
    found = []
    for name in names:
        module_name, class_name = name
        module = sys.modules.get(module_name)
        if module is None and load:
            with contextlib.suppress(ImportError):
                module = importlib.import_module(module_name)
        sdk_error = getattr(module, class_name, None)
        if isinstance(sdk_error, type) and issubclass(sdk_error, Exception):
            found.append((name, sdk_error))
    return tuple(found)
