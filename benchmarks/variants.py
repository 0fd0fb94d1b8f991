"""The three clients every figure compares, built alike except for what is compared.

* ``watchdog``: ``WatchdogTransport`` (or ``AsyncWatchdogTransport``);
* ``plain``: the HTTP library's own transport, the limit of cost (and of protection: none);
* ``seed``: the library's own transport driven by ``seed_model`` (its request hook included).

All share the openai SDK's connection limits, so that no figure measures a pool that is
too small for one of them, and the run's HTTP library (``flavor.http``: httpx or httpx2),
so that the plain baseline is always the library under the watchdog.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import openai

from hermes_transport import StreamPolicy

from . import seed_model
from .flavor import AsyncWatchdogTransport, WatchdogTransport, http

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = [
    "CHAT",
    "LIMITS",
    "VARIANTS",
    "Variant",
    "async_http_client",
    "complete",
    "http_client",
    "open_stream",
    "openai_client",
]

Variant = Literal["watchdog", "plain", "seed"]
VARIANTS: tuple[Variant, ...] = ("plain", "watchdog", "seed")

#: The openai SDK's defaults (DEFAULT_CONNECTION_LIMITS).
LIMITS = http.Limits(max_connections=1000, max_keepalive_connections=100)

RequestHook = Callable[[http.Request], None]
ResponseHook = Callable[[http.Response], None]

#: The chat request every figure sends (the server answers from its scenario anyway).
CHAT: dict[str, Any] = {"model": "bench", "messages": [{"role": "user", "content": "hi"}]}


def open_stream(client: openai.OpenAI) -> openai.Stream[ChatCompletionChunk]:
    """``create(stream=True)`` with the benchmark's request."""
    stream: openai.Stream[ChatCompletionChunk] = client.chat.completions.create(
        stream=True, **CHAT
    )
    return stream


def complete(client: openai.OpenAI) -> ChatCompletion:
    """A non-streaming completion (its connection goes back to the pool)."""
    completion: ChatCompletion = client.chat.completions.create(**CHAT)
    return completion


def http_client(
    variant: Variant,
    *,
    policy: StreamPolicy | None = None,
    timeout: http.Timeout | float | None = 600.0,
    hooks: Sequence[RequestHook] = (),
    response_hooks: Sequence[ResponseHook] = (),
    limits: http.Limits = LIMITS,
) -> http.Client:
    """A sync client for ``variant``; ``policy`` applies to the watchdog only."""
    request_hooks = list(hooks)
    transport: http.BaseTransport
    if variant == "watchdog":
        transport = WatchdogTransport(policy=policy or StreamPolicy(), limits=limits)
    else:
        transport = http.HTTPTransport(limits=limits)
    if variant == "seed":
        request_hooks.append(seed_model.trace_hook)  # last: it chains the traces before it
    return http.Client(
        transport=transport,
        timeout=timeout,
        event_hooks={"request": request_hooks, "response": list(response_hooks)},
    )


def async_http_client(
    variant: Variant,
    *,
    policy: StreamPolicy | None = None,
    limits: http.Limits | None = LIMITS,
    verify: ssl.SSLContext | bool = True,
) -> http.AsyncClient:
    """An async client for ``variant`` (``watchdog`` or ``plain``: the seed was sync only).

    ``limits=None`` leaves the transport's own default; ``verify`` may be one SSL context
    shared by many clients (each builds its own otherwise: about 25 ms here).
    """
    if variant == "seed":
        raise ValueError("the seed's design is sync only: no async client to build")
    settings: dict[str, Any] = {"verify": verify}
    if limits is not None:
        settings["limits"] = limits
    transport: http.AsyncBaseTransport
    if variant == "watchdog":
        transport = AsyncWatchdogTransport(policy=policy or StreamPolicy(), **settings)
    else:
        transport = http.AsyncHTTPTransport(**settings)
    return http.AsyncClient(transport=transport, timeout=600.0)


def openai_client(
    variant: Variant,
    base_url: str,
    *,
    policy: StreamPolicy | None = None,
    timeout: http.Timeout | float = 600.0,
    hooks: Sequence[RequestHook] = (),
    response_hooks: Sequence[ResponseHook] = (),
    limits: http.Limits = LIMITS,
) -> openai.OpenAI:
    """An ``openai.OpenAI`` over ``http_client(variant)``, with no SDK retries.

    ``timeout`` is the SDK's, which it sends with every request (it overrides the
    HTTP client's own).
    """
    client = http_client(
        variant,
        policy=policy,
        timeout=timeout,
        hooks=hooks,
        response_hooks=response_hooks,
        limits=limits,
    )
    return openai.OpenAI(
        base_url=base_url, api_key="bench", http_client=client, max_retries=0, timeout=timeout
    )
