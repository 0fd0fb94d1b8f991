"""What a streaming runner needs to know of one API (``SdkWire``), and the checks it shares.

One ``SdkWire`` per API the runners stream (Chat Completions and Responses on the
openai SDK, Messages on the anthropic SDK, content on google-genai): the client
classes it takes, how it makes its request, how one attempt's events are
accumulated into the result (``Assembly``), which events show the caller content
and where its http client is. No SDK is imported here: a client of an SDK that
was never imported cannot exist.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

__all__ = ["Assembly", "SdkWire", "check_client", "has_text"]

_T = TypeVar("_T")
_T_co = TypeVar("_T_co", covariant=True)

#: The runners of each SDK's clients (sync, async), to name the right one in a TypeError.
_RUNNERS = {
    "openai": ("OpenAI", "AsyncOpenAI", "stream_chat_completion() or stream_response()"),
    "anthropic": ("Anthropic", "AsyncAnthropic", "stream_message()"),
    "google.genai.client": ("Client", "AsyncClient", "stream_content()"),
}


class Assembly(Protocol[_T_co]):
    """One attempt's accumulator, made for its opened stream: fed every event, then asked
    for the result."""

    def take(self, event: Any) -> None:
        """Accumulate ``event``; raise the SDK's error if the event reports one."""

    def result(self) -> _T_co | None:
        """What the events assembled; ``None`` if the final event never came."""


@dataclass(frozen=True)
class SdkWire(Generic[_T]):
    """What a runner needs to know of one API."""

    sdk: str  # the SDK's module: "openai" or "anthropic"
    runner: str  # the sync runner's name; the async one's is "a" + runner
    unit: str  # what the stream is made of, in errors: "chunk", "event"
    final: str | None  # the event a complete stream ends with (None: none needed)
    endpoint: Callable[[Any], Any]  # client -> the resource whose create() streams
    assembly: Callable[[Any], Assembly[_T]]  # the opened SDK stream -> its accumulator
    carries_content: Callable[[Any], bool]  # whether an event shows the caller something
    # client -> its http client (its HTTP library's errors are raised; its policy is used)
    http_client: Callable[[Any], Any] = lambda client: getattr(client, "_client", None)


def check_client(wire: SdkWire[Any], client: object, is_async: bool) -> None:
    """A ``TypeError`` naming the runner for ``client`` unless the wire takes it."""
    sync_name, async_name, _ = _RUNNERS[wire.sdk]
    expected = async_name if is_async else sync_name
    # A client of an SDK that was never imported cannot exist: nothing to import here.
    if isinstance(client, getattr(sys.modules.get(wire.sdk), expected, ())):
        return
    hint = ""
    other = _sdk_class(client)
    if other is not None and other[0] == wire.sdk:
        kind, runner = ("a sync", wire.runner) if is_async else ("an async", "a" + wire.runner)
        hint = f"; for {kind} client use {runner}()"
    elif other is not None:
        sdk, name = other
        runners = _RUNNERS[sdk][2]
        if name.startswith("Async"):
            runners = " or ".join(f"a{r}" for r in runners.split(" or "))
        hint = f"; for an {sdk}.{name} client use {runners}"
    article = "an" if wire.sdk[0] in "aeiou" else "a"
    raise TypeError(
        f"client must be {article} {wire.sdk}.{expected}, got {type(client).__name__}{hint}"
    )


def _sdk_class(client: object) -> tuple[str, str] | None:
    """(SDK, class name) of a known SDK client, else ``None``."""
    for sdk, (sync_name, async_name, _) in _RUNNERS.items():
        module = sys.modules.get(sdk)
        for name in (sync_name, async_name):
            if isinstance(client, getattr(module, name, ())):
                return sdk, name
    return None


def has_text(value: object, keys: frozenset[str]) -> bool:
    """Whether ``value`` (a model's dump: dicts, lists, scalars) holds a non-empty string
    under one of ``keys``, at any depth."""
    if isinstance(value, dict):
        return any(
            (key in keys and isinstance(item, str) and item != "") or has_text(item, keys)
            for key, item in value.items()
        )
    if isinstance(value, list):
        return any(has_text(item, keys) for item in value)
    return False
