"""Google's ``google-genai`` SDK on watched clients: ``genai_client_for``.

The SDK builds its own httpx or httpx2 clients from ``HttpOptions.client_args``
and ``async_client_args`` (and closes them with the client); for its async
methods (``client.aio``) it uses aiohttp whenever aiohttp is installed and no
async httpx client is set up, so a client given only a sync watchdog would
leave every async call unwatched. The factory therefore hands it both
watchdog transports, of one flavor, as the ``transport`` of both client
arguments (with the proxy environment's transports as ``mounts``): the SDK
builds and closes both clients itself, as it would its own. google-genai is
optional: imported only here, only when the factory runs.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

from .._core.flavor import FlavorName
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._flavors import clients_named
from .._transports.builder import (
    TRANSPORT_SETTINGS,
    default_timeout,
    profile_for,
    record_profile,
)

if TYPE_CHECKING:
    from google import genai
    from google.genai import types

__all__ = ["genai_client_for", "genai_native_flavor"]

#: What ``HttpOptions`` may not hold: an http client or transport of the caller's own
#: would bypass the watch, or (aiohttp) take the async calls away from it.
_BYPASSES = ("httpx_client", "httpx_async_client", "aiohttp_client")
_BUILT = ("transport", "mounts", "app")


def genai_native_flavor() -> FlavorName:
    """The HTTP library google-genai builds its own clients on: the one
    ``GOOGLE_GENAI_HTTP_CLIENT`` names (``httpx`` or ``httpx2``), else httpx2 where it
    is installed (Python 3.11 and later, with the ``httpx2`` extra), else httpx."""
    named = os.environ.get("GOOGLE_GENAI_HTTP_CLIENT", "").strip().lower()
    if named in ("httpx", "httpx2"):
        return named  # type: ignore[return-value]
    try:
        import httpx2  # noqa: F401
    except ImportError:
        return "httpx"
    return "httpx2"


def genai_client_for(
    context: str | None,
    *,
    flavor: FlavorName | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
    **client_kwargs: Any,
) -> genai.Client:
    """A ``google.genai.Client`` for this kind of caller, its sync and async calls watched.

    ``context`` is the platform, as for ``openai_client_for`` (``"cron"``,
    ``"subagent"``, ``"cli"``, ...): the streaming runners decide from it as
    ``should_stream_inline`` does for Chat Completions. ``flavor``: the HTTP
    library (``None``: the one google-genai builds on, ``genai_native_flavor``).
    Connection settings (``verify``, ``cert``, ``proxy``, ``limits``,
    ``trust_env``, ...) go to the watchdog transports; everything else
    (``api_key``, ``vertexai``, ``project``, ``location``, ``credentials``,
    ``http_options``) to ``genai.Client``. ``http_options`` (an ``HttpOptions`` or
    its dict) may hold anything but an http client (``httpx_client``,
    ``httpx_async_client``, ``aiohttp_client``) or a ``transport``, ``mounts`` or
    ``app`` in its client arguments: those would bypass the watch (``TypeError``).
    Its ``timeout`` (milliseconds, per request) defaults to one that never undercuts
    the watchdog's budgets: the SDK's own default is none at all.

    The SDK closes the clients it built from the transports with ``client.close()``
    (the sync one) and ``client.aio.aclose()`` (the async one). Statistics report the
    ``gemini`` wire, with the model from the request's path.
    """
    from google import genai

    options = _http_options(client_kwargs.pop("http_options", None))
    clients = clients_named(genai_native_flavor() if flavor is None else flavor)
    profile = profile_for(context, "chat_completions", None, policy, interrupt)
    connection = {
        name: client_kwargs.pop(name) for name in TRANSPORT_SETTINGS if name in client_kwargs
    }
    update: dict[str, Any] = {}
    built: list[Any] = []  # the sync transports: closed if the SDK refuses its arguments
    for field, is_async in (("client_args", False), ("async_client_args", True)):
        args = dict(getattr(options, field) or {})
        settings = dict(connection)
        transport, mounts = clients.transports(is_async, profile, settings, on_stats)
        if not is_async:
            built += [transport, *(mounts or {}).values()]
        args.update(settings)  # what is left of them for the client: trust_env
        args["transport"] = transport
        if mounts:
            args["mounts"] = mounts
        update[field] = args
    if options.timeout is None:
        longest = default_timeout(profile.policy, clients.flavor).read
        update["timeout"] = math.ceil(longest * 1000)
    try:
        client = genai.Client(http_options=options.model_copy(update=update), **client_kwargs)
    except BaseException:
        for transport in built:
            if transport is not None:
                transport.close()
        raise
    record_profile(client, profile)
    record_profile(client.aio, profile)  # what the async runner is given, or finds
    return client


def _http_options(given: object) -> types.HttpOptions:
    """``http_options`` as an ``HttpOptions``, refused if it would bypass the watch."""
    from google.genai import types

    if given is None:
        return types.HttpOptions()
    options = (
        given if isinstance(given, types.HttpOptions) else types.HttpOptions.model_validate(given)
    )
    for name in _BYPASSES:
        if getattr(options, name, None) is not None:
            raise TypeError(
                f"genai_client_for() builds the http clients itself; http_options.{name}"
                " would bypass the watch: pass connection settings as keyword arguments"
            )
    for field in ("client_args", "async_client_args"):
        taken = sorted(set(getattr(options, field) or {}) & set(_BUILT))
        if taken:
            raise TypeError(
                f"genai_client_for() builds the transports itself; http_options.{field}"
                f" holds {', '.join(taken)}, which would bypass the watch"
            )
    return options
