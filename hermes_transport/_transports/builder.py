"""The client builder: watchdog http clients of any flavor, set up as the SDKs set theirs.

``ClientFactory`` builds one flavor's clients (``_flavors`` makes one per
flavor): the transport gets the connection settings, the client the rest,
with the openai SDK's defaults and socket timeouts raised above the
watchdog's budgets. It records each client's ``ClientProfile`` so the runners
and SDK factories can read back what was decided.
"""

from __future__ import annotations

import weakref
from typing import Any

from .._core.contexts import ClientProfile, should_stream_inline
from .._core.flavor import Flavor
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .shell import Shell

__all__ = [
    "BUDGET_MARGIN",
    "TRANSPORT_SETTINGS",
    "ClientFactory",
    "default_timeout",
    "flavor_of",
    "profile_for",
    "profile_of",
    "record_profile",
    "transport_policy",
    "with_checkpoints",
]

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
        # Not a connection setting, but the transport's as they are: a factory gives it
        # to the transport it builds (see ``with_checkpoints``).
        "on_checkpoint",
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


def default_timeout(policy: StreamPolicy, flavor: Flavor) -> Any:
    """The SDK's default timeout (the flavor's ``Timeout``), raised where it would
    undercut the watchdog."""
    longest = max(SDK_TIMEOUT, policy.longest_budget + BUDGET_MARGIN)
    return flavor.http.Timeout(longest, connect=SDK_CONNECT_TIMEOUT)


_profiles: weakref.WeakKeyDictionary[object, ClientProfile] = weakref.WeakKeyDictionary()


def profile_of(client: object) -> ClientProfile | None:
    """The profile a factory recorded for ``client``, if one made it."""
    try:
        return _profiles.get(client)
    except TypeError:  # not weak-referenceable: no factory made it
        return None


def record_profile(client: object, profile: ClientProfile) -> None:
    """Remember what a factory decided for ``client`` (for as long as it lives)."""
    _profiles[client] = profile


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
        on_stats: StatsCallback | None,
        client_kwargs: dict[str, Any],
    ) -> Any:
        """An http client (async: an async one) over the flavor's watchdog transport;
        ``on_stats`` is given every stream's statistics."""
        profile = profile_for(platform, api_mode, provider, policy, interrupt)
        return self._client(factory, is_async, profile, client_kwargs, on_stats)

    def _client(
        self,
        factory: str,
        is_async: bool,
        profile: ClientProfile,
        client_kwargs: dict[str, Any],
        on_stats: StatsCallback | None = None,
    ) -> Any:
        for name in ("transport", "mounts", "app"):
            if name in client_kwargs:
                raise TypeError(
                    f"{factory}() builds the transport itself; {name}= would bypass it"
                )
        http = self.flavor.http
        transport, mounts = self.transports(is_async, profile, client_kwargs, on_stats)
        client_kwargs.setdefault("timeout", default_timeout(profile.policy, self.flavor))
        client_kwargs.setdefault("follow_redirects", True)
        client_class = http.AsyncClient if is_async else http.Client
        client = client_class(transport=transport, mounts=mounts, **client_kwargs)
        record_profile(client, profile)
        return client

    def transports(
        self,
        is_async: bool,
        profile: ClientProfile,
        client_kwargs: dict[str, Any],
        on_stats: StatsCallback | None = None,
    ) -> tuple[Any, dict[str, Any] | None]:
        """A watchdog transport (async: an async one) and the ones to mount for the proxy
        environment variables, from the connection settings in ``client_kwargs`` (taken
        out of it; a ``trust_env`` is left in it too, for .netrc)."""
        transport_kwargs = {
            name: client_kwargs.pop(name) for name in TRANSPORT_SETTINGS if name in client_kwargs
        }
        transport_kwargs.setdefault(
            "limits",
            self.flavor.http.Limits(
                max_connections=SDK_MAX_CONNECTIONS, max_keepalive_connections=SDK_MAX_KEEPALIVE
            ),
        )
        if "trust_env" in transport_kwargs:
            client_kwargs["trust_env"] = transport_kwargs["trust_env"]  # .netrc
        transport_class = self.async_transport if is_async else self.sync_transport
        transport = transport_class(
            policy=profile.policy,
            interrupt=profile.interrupt,
            on_stats=on_stats,
            **transport_kwargs,
        )
        mounts = self._environment_proxy_mounts(
            transport_class, profile, transport_kwargs, on_stats
        )
        return transport, mounts

    def _environment_proxy_mounts(
        self,
        transport_class: type[Any],
        profile: ClientProfile,
        transport_kwargs: dict[str, Any],
        on_stats: StatsCallback | None,
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
                policy=profile.policy,
                interrupt=profile.interrupt,
                on_stats=on_stats,
                proxy=url,
                **transport_kwargs,
            )
            for pattern, url in proxies.items()
        }


_client_factories: dict[str, ClientFactory] = {}


def with_checkpoints(kwargs: dict[str, Any], on_checkpoint: Any) -> dict[str, Any]:
    """A factory's ``kwargs``, with its ``on_checkpoint`` for the transport it builds."""
    if on_checkpoint is not None:
        kwargs["on_checkpoint"] = on_checkpoint
    return kwargs


def profile_for(
    platform: str | None,
    api_mode: str,
    provider: str | None,
    policy: StreamPolicy | None,
    interrupt: Interrupt | None,
) -> ClientProfile:
    """What a factory decides for a client of this kind (``policy`` default: the environment's)."""
    return ClientProfile(
        inline=should_stream_inline(platform, api_mode, provider),
        policy=policy if policy is not None else StreamPolicy.from_env(),
        interrupt=interrupt,
    )


def flavor_of(http_client: object, fallback: Flavor) -> Flavor:
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
