"""Per-context clients: how each kind of caller streams.

Background contexts (cron turns, delegated sub-agents) stream *inline*, on the
calling thread: a worker thread wedges inside their nested thread pools.
Interactive contexts keep a worker thread, so the caller stays responsive to
a /stop while the request runs. Both get the same watchdog transport.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx

from ._async_transport import AsyncWatchdogTransport
from ._exchange import Shell
from ._flavor import HTTPX, Flavor, FlavorName, flavor_named, native_flavor
from ._interrupt import Interrupt
from ._policy import StreamPolicy
from ._transport import WatchdogTransport

if TYPE_CHECKING:
    import openai

__all__ = [
    "ClientFactory",
    "ClientProfile",
    "async_http_client_for",
    "async_openai_client_for",
    "http_client_for",
    "openai_client_for",
    "profile_of",
    "should_stream_inline",
]

_SDK = TypeVar("_SDK")

INLINE_PLATFORMS = frozenset({"cron", "subagent"})

# Settings of the connection layer. httpx.Client ignores them once a transport
# is given, so the factories hand them to the transport they build instead.
TRANSPORT_SETTINGS = frozenset(
    {
        "verify",
        "cert",
        "trust_env",
        "limits",
        "proxy",
        "http1",
        "http2",
        "uds",
        "local_address",
        "socket_options",
    }
)
# The openai SDK's own defaults (DEFAULT_CONNECTION_LIMITS, DEFAULT_TIMEOUT).
SDK_MAX_CONNECTIONS = 1000
SDK_MAX_KEEPALIVE = 100
SDK_TIMEOUT = 600.0
SDK_CONNECT_TIMEOUT = 5.0
# Socket timeouts stay this far above the watchdog's budgets, so that on a
# silent stream the watchdog, which says what happened, fires first.
BUDGET_MARGIN = 5.0


def should_stream_inline(
    platform: str | None, api_mode: str = "chat_completions", provider: str | None = None
) -> bool:
    """Whether a caller of this kind streams on its own thread.

    True for platform ``"cron"`` or ``"subagent"`` on the chat-completions API
    with any provider but ``"moa"``; False otherwise (``"cli"`` and other
    interactive platforms, ``"anthropic_messages"``, ``"moa"``).
    """
    return platform in INLINE_PLATFORMS and api_mode == "chat_completions" and provider != "moa"


def default_timeout(policy: StreamPolicy, flavor: Flavor = HTTPX) -> Any:
    """The SDK's default timeout (the flavor's ``Timeout``), raised where it would
    undercut the watchdog."""
    budgets = [b for b in (policy.stale_budget, policy.first_event_budget) if b is not None]
    longest = max([SDK_TIMEOUT, *(b + BUDGET_MARGIN for b in budgets)])
    return flavor.http.Timeout(longest, connect=SDK_CONNECT_TIMEOUT)


@dataclass(frozen=True)
class ClientProfile:
    """What a factory decided for a client: how it streams, with which budgets."""

    inline: bool
    policy: StreamPolicy
    interrupt: Interrupt | None


_profiles: weakref.WeakKeyDictionary[object, ClientProfile] = weakref.WeakKeyDictionary()


def profile_of(client: object) -> ClientProfile | None:
    """The profile a factory recorded for ``client``, if one made it."""
    try:
        return _profiles.get(client)
    except TypeError:  # not weak-referenceable: no factory made it
        return None


class ClientFactory:
    """Builds one flavor's watchdog clients; the public factories of each flavor call it."""

    def __init__(self, flavor: Flavor, sync_transport: type[Any], async_transport: type[Any]):
        self.flavor = flavor
        self.sync_transport = sync_transport
        self.async_transport = async_transport
        _client_factories[flavor.name] = self

    def client(
        self,
        factory: str,
        is_async: bool,
        platform: str | None,
        api_mode: str,
        provider: str | None,
        policy: StreamPolicy | None,
        interrupt: Interrupt | None,
        client_kwargs: dict[str, Any],
    ) -> Any:
        """An http client (async: an async one) over the flavor's watchdog transport."""
        profile = _profile(platform, api_mode, provider, policy, interrupt)
        return self._client(factory, is_async, profile, client_kwargs)

    def _client(
        self, factory: str, is_async: bool, profile: ClientProfile, client_kwargs: dict[str, Any]
    ) -> Any:
        for name in ("transport", "mounts", "app"):
            if name in client_kwargs:
                raise TypeError(
                    f"{factory}() builds the transport itself; {name}= would bypass it"
                )
        http = self.flavor.http
        policy, interrupt = profile.policy, profile.interrupt
        transport_kwargs = {
            name: client_kwargs.pop(name) for name in TRANSPORT_SETTINGS if name in client_kwargs
        }
        transport_kwargs.setdefault(
            "limits",
            http.Limits(
                max_connections=SDK_MAX_CONNECTIONS, max_keepalive_connections=SDK_MAX_KEEPALIVE
            ),
        )
        if "trust_env" in transport_kwargs:
            client_kwargs["trust_env"] = transport_kwargs["trust_env"]  # .netrc
        transport_class = self.async_transport if is_async else self.sync_transport
        transport = transport_class(policy=policy, interrupt=interrupt, **transport_kwargs)
        client_kwargs.setdefault("timeout", default_timeout(policy, self.flavor))
        client_kwargs.setdefault("follow_redirects", True)
        mounts = self._environment_proxy_mounts(transport_class, profile, transport_kwargs)
        client_class = http.AsyncClient if is_async else http.Client
        client = client_class(transport=transport, mounts=mounts, **client_kwargs)
        _profiles[client] = profile
        return client

    def _environment_proxy_mounts(
        self, transport_class: type[Any], profile: ClientProfile, transport_kwargs: dict[str, Any]
    ) -> dict[str, Any] | None:
        """Watchdog transports for HTTP(S)_PROXY / ALL_PROXY / NO_PROXY, as httpx would mount.

        httpx clients honour proxy environment variables only when they build
        their own transport; without this, a factory client would silently go direct.
        """
        if not transport_kwargs.get("trust_env", True) or "proxy" in transport_kwargs:
            return None
        read_proxies = self.flavor.environment_proxies
        proxies = read_proxies() if read_proxies is not None else {}
        if not proxies:
            return None
        return {
            pattern: None
            if url is None
            else transport_class(
                policy=profile.policy, interrupt=profile.interrupt, proxy=url, **transport_kwargs
            )
            for pattern, url in proxies.items()
        }


_client_factories: dict[str, ClientFactory] = {}
_HTTPX_CLIENTS = ClientFactory(HTTPX, WatchdogTransport, AsyncWatchdogTransport)


def client_factory(flavor: object) -> ClientFactory:
    """The client factory of the flavor named ``flavor`` (``None``: openai's native one)."""
    name = native_flavor() if flavor is None else flavor
    return _client_factories[flavor_named(name).name]


def http_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    **httpx_client_kwargs: Any,
) -> httpx.Client:
    """An ``httpx.Client`` over a ``WatchdogTransport`` for this kind of caller.

    TLS and connection settings (``verify``, ``cert``, ``trust_env``,
    ``limits``, ``proxy``, ``http2``, ...) configure the transport; everything
    else (``event_hooks``, ``headers``, ``timeout``, ...) goes to
    ``httpx.Client``. Defaults follow the openai SDK's (limits, a 600 s
    timeout with 5 s to connect, following redirects), with socket timeouts
    raised above the watchdog's budgets; given settings win. Proxy
    environment variables are honoured. ``hermes_transport.httpx2`` has the
    same factory for ``httpx2`` clients.
    """
    client: httpx.Client = _HTTPX_CLIENTS.client(
        "http_client_for",
        False,
        platform,
        api_mode,
        provider,
        policy,
        interrupt,
        httpx_client_kwargs,
    )
    return client


def async_http_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    **httpx_async_client_kwargs: Any,
) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` over an ``AsyncWatchdogTransport``; as ``http_client_for``."""
    client: httpx.AsyncClient = _HTTPX_CLIENTS.client(
        "async_http_client_for",
        True,
        platform,
        api_mode,
        provider,
        policy,
        interrupt,
        httpx_async_client_kwargs,
    )
    return client


def _profile(
    platform: str | None,
    api_mode: str,
    provider: str | None,
    policy: StreamPolicy | None,
    interrupt: Interrupt | None,
) -> ClientProfile:
    return ClientProfile(
        inline=should_stream_inline(platform, api_mode, provider),
        policy=policy if policy is not None else StreamPolicy.from_env(),
        interrupt=interrupt,
    )


def openai_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    flavor: FlavorName | None = None,
    **openai_kwargs: Any,
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for this kind of caller.

    Its ``http_client`` is built with ``http_client_for`` of the ``flavor``
    named (``None``: the HTTP library the installed openai uses natively,
    ``httpx2`` for openai 3.x, ``httpx`` before) from the same arguments (TLS
    and connection settings among ``openai_kwargs`` go there), unless
    ``openai_kwargs`` holds an ``http_client``, which is then used as given.
    ``stream_chat_completion`` later streams inline or on a worker thread as
    ``should_stream_inline`` decides for this platform.
    """
    import openai

    return _sdk_client(
        "openai_client_for",
        openai.OpenAI,
        False,
        _Choice(platform, api_mode, provider, policy, interrupt, flavor),
        openai_kwargs,
    )


def async_openai_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    flavor: FlavorName | None = None,
    **openai_kwargs: Any,
) -> openai.AsyncOpenAI:
    """An ``openai.AsyncOpenAI`` client for this kind of caller; as ``openai_client_for``.

    Its ``http_client`` comes from ``async_http_client_for`` of the flavor.
    An async caller always streams on its own event loop
    (``astream_chat_completion``); the platform still picks the policy
    recorded for the client.
    """
    import openai

    return _sdk_client(
        "async_openai_client_for",
        openai.AsyncOpenAI,
        True,
        _Choice(platform, api_mode, provider, policy, interrupt, flavor),
        openai_kwargs,
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


def _sdk_client(
    factory: str,
    sdk_class: Callable[..., _SDK],
    is_async: bool,
    choice: _Choice,
    openai_kwargs: dict[str, Any],
) -> _SDK:
    clients = client_factory(choice.flavor)
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
            connection,
        )
    elif connection:
        raise TypeError(
            f"{factory}() got {', '.join(sorted(connection))} together with"
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
    _profiles[client] = ClientProfile(
        inline=should_stream_inline(choice.platform, choice.api_mode, choice.provider),
        policy=policy,
        interrupt=interrupt,
    )
    return client


def flavor_of(http_client: object, fallback: Flavor = HTTPX) -> Flavor:
    """The flavor whose client ``http_client`` is (its ``Timeout`` and errors are the ones
    it takes and raises); ``fallback`` for anything else."""
    for clients in _client_factories.values():
        http = clients.flavor.http
        if isinstance(http_client, (http.Client, http.AsyncClient)):
            return clients.flavor
    return fallback


def transport_policy(http_client: object) -> StreamPolicy:
    """The policy of the watchdog transport under ``http_client``, else the environment's."""
    transport = getattr(http_client, "_transport", None)
    if isinstance(transport, Shell):
        return transport.policy
    return StreamPolicy.from_env()
