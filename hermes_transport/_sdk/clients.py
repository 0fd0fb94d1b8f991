"""SDK clients for each kind of caller: ``openai_client_for`` and its async twin.

They build the http client with the flavor's ``ClientFactory`` (``None``: the
HTTP library the installed openai uses natively), hand the SDK timeouts that
never undercut the watchdog, and record the client's ``ClientProfile`` so the
runners know how it streams.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from .._core.checkpoints import CheckpointCallback
from .._core.contexts import ClientProfile, should_stream_inline
from .._core.flavor import FlavorName
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._flavors import clients_named
from .._transports.builder import (
    TRANSPORT_SETTINGS,
    ClientFactory,
    default_timeout,
    flavor_of,
    profile_of,
    record_profile,
    transport_policy,
    with_checkpoints,
)

if TYPE_CHECKING:
    import openai

__all__ = ["async_openai_client_for", "clients_for", "native_flavor", "openai_client_for"]

_SDK = TypeVar("_SDK")


def native_flavor() -> FlavorName:
    """The HTTP library the installed openai SDK builds its own clients on.

    openai 3.x builds ``httpx2`` clients (a plain ``httpx.Client`` is its
    legacy path); earlier majors build ``httpx`` ones.
    """
    import openai

    native = getattr(openai, "DefaultHttpxClient", None)
    if isinstance(native, type) and issubclass(native, httpx.Client):
        return "httpx"
    return "httpx2"


def clients_for(flavor: object) -> ClientFactory:
    """The client factory of the flavor named ``flavor`` (``None``: openai's native one)."""
    return clients_named(native_flavor() if flavor is None else flavor)


def openai_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    flavor: FlavorName | None = None,
    on_stats: StatsCallback | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    **openai_kwargs: Any,
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for this kind of caller.

    Its ``http_client`` is built with ``http_client_for`` of the ``flavor``
    named (``None``: the HTTP library the installed openai uses natively,
    ``httpx2`` for openai 3.x, ``httpx`` before) from the same arguments (TLS
    and connection settings among ``openai_kwargs`` go there), unless
    ``openai_kwargs`` holds an ``http_client``, which is then used as given
    (with connection settings, ``on_stats`` or a ``flavor`` too: ``TypeError``); its
    policy and interrupt are then the ones its factory recorded, unless given
    here. The SDK's ``timeout`` defaults to one that never undercuts the
    watchdog's budgets; everything else, ``max_retries`` included, goes to
    ``openai.OpenAI`` as given. An SDK that refuses the client (openai 1.x
    takes no httpx2 client) raises its ``TypeError``; a client built here
    does not leak. ``stream_chat_completion`` later streams inline or on a
    worker thread as ``should_stream_inline`` decides for this platform.
    ``on_stats`` and ``on_checkpoint`` go to the transport (``WatchdogTransport``).
    """
    import openai

    return _sdk_client(
        "openai_client_for",
        openai.OpenAI,
        False,
        _Choice(platform, api_mode, provider, policy, interrupt, flavor, on_stats),
        with_checkpoints(openai_kwargs, on_checkpoint),
    )


def async_openai_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    flavor: FlavorName | None = None,
    on_stats: StatsCallback | None = None,
    on_checkpoint: CheckpointCallback | None = None,
    **openai_kwargs: Any,
) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` client for this kind of caller; as ``openai_client_for``.

    Its ``http_client`` comes from ``async_http_client_for`` of the flavor.
    An async caller always streams on its own event loop
    (``astream_chat_completion``): the platform's inline decision is recorded
    but changes nothing; the policy and interrupt recorded with it are used.
    """
    import openai

    return _sdk_client(
        "async_openai_client_for",
        openai.AsyncOpenAI,
        True,
        _Choice(platform, api_mode, provider, policy, interrupt, flavor, on_stats),
        with_checkpoints(openai_kwargs, on_checkpoint),
    )


@dataclass(frozen=True)
class _Choice:
    """The arguments every factory shares."""

    platform: str | None
    api_mode: str
    provider: str | None
    policy: StreamPolicy | None
    interrupt: Interrupt | None
    flavor: object
    on_stats: StatsCallback | None


def _sdk_client(
    factory: str,
    sdk_class: Callable[..., _SDK],
    is_async: bool,
    choice: _Choice,
    openai_kwargs: dict[str, Any],
) -> _SDK:
    clients = clients_for(choice.flavor)
    connection = {
        name: openai_kwargs.pop(name) for name in TRANSPORT_SETTINGS if name in openai_kwargs
    }
    http_client = openai_kwargs.pop("http_client", None)
    built = http_client is None
    if built:
        http_client = clients.client(
            factory,
            is_async,
            choice.platform,
            choice.api_mode,
            choice.provider,
            choice.policy,
            choice.interrupt,
            choice.on_stats,
            connection,
        )
    elif connection or choice.on_stats is not None:
        given_here = sorted(connection) + (["on_stats"] if choice.on_stats is not None else [])
        raise TypeError(
            f"{factory}() got {', '.join(given_here)} together with"
            " an http_client: configure the http_client you pass instead"
        )
    elif choice.flavor is not None:
        raise TypeError(
            f"{factory}() got flavor={choice.flavor!r} together with an http_client:"
            " the http_client's own library is used; drop one"
        )
    given = profile_of(http_client)
    policy, interrupt = choice.policy, choice.interrupt
    if policy is None:
        policy = given.policy if given is not None else transport_policy(http_client)
    if interrupt is None and given is not None:
        interrupt = given.interrupt
    openai_kwargs.setdefault(
        "timeout", default_timeout(policy, flavor_of(http_client, clients.flavor))
    )
    try:
        client = sdk_class(http_client=http_client, **openai_kwargs)
    except BaseException:
        # Ours, and refused (httpx2 on openai 1.x, say): it must not leak. An async one
        # has no sync close, and has opened nothing yet.
        if built and hasattr(http_client, "close"):
            http_client.close()
        raise
    record_profile(
        client,
        ClientProfile(
            inline=should_stream_inline(choice.platform, choice.api_mode, choice.provider),
            policy=policy,
            interrupt=interrupt,
        ),
    )
    return client
