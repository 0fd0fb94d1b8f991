"""Per-context clients: how each kind of caller streams.

Background contexts (cron turns, delegated sub-agents) stream *inline*, on the
calling thread: a worker thread wedges inside their nested thread pools.
Interactive contexts keep a worker thread, so the caller stays responsive to
a /stop while the request runs. Both get the same watchdog transport.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ._interrupt import Interrupt
from ._policy import StreamPolicy
from ._transport import WatchdogTransport

try:  # how httpx itself reads proxy environment variables
    from httpx._utils import get_environment_proxies
except ImportError:  # pragma: no cover - another httpx layout: no environment proxies
    get_environment_proxies = None  # type: ignore[assignment]

if TYPE_CHECKING:
    import openai

__all__ = [
    "ClientProfile",
    "http_client_for",
    "openai_client_for",
    "profile_of",
    "should_stream_inline",
]

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
SDK_LIMITS = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
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


def default_timeout(policy: StreamPolicy) -> httpx.Timeout:
    """The SDK's default timeout, raised where it would undercut the watchdog."""
    budgets = [b for b in (policy.stale_budget, policy.first_event_budget) if b is not None]
    longest = max([SDK_TIMEOUT, *(b + BUDGET_MARGIN for b in budgets)])
    return httpx.Timeout(longest, connect=SDK_CONNECT_TIMEOUT)


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
    raised above the watchdog's budgets; given settings win.
    """
    for name in ("transport", "mounts", "app"):
        if name in httpx_client_kwargs:
            raise TypeError(
                f"http_client_for() builds the transport itself; {name}= would bypass it"
            )
    policy = policy if policy is not None else StreamPolicy.from_env()
    transport_kwargs = {
        name: httpx_client_kwargs.pop(name)
        for name in TRANSPORT_SETTINGS
        if name in httpx_client_kwargs
    }
    transport_kwargs.setdefault("limits", SDK_LIMITS)
    if "trust_env" in transport_kwargs:
        httpx_client_kwargs["trust_env"] = transport_kwargs["trust_env"]  # .netrc
    transport = WatchdogTransport(policy=policy, interrupt=interrupt, **transport_kwargs)
    httpx_client_kwargs.setdefault("timeout", default_timeout(policy))
    httpx_client_kwargs.setdefault("follow_redirects", True)
    mounts = _environment_proxy_mounts(policy, interrupt, transport_kwargs)
    client = httpx.Client(transport=transport, mounts=mounts, **httpx_client_kwargs)
    _profiles[client] = ClientProfile(
        inline=should_stream_inline(platform, api_mode, provider),
        policy=policy,
        interrupt=interrupt,
    )
    return client


def _environment_proxy_mounts(
    policy: StreamPolicy, interrupt: Interrupt | None, transport_kwargs: dict[str, Any]
) -> dict[str, httpx.BaseTransport | None] | None:
    """Watchdog transports for HTTP(S)_PROXY / ALL_PROXY / NO_PROXY, as httpx would mount.

    httpx.Client honours proxy environment variables only when it builds its
    own transport; without this, a factory client would silently go direct.
    """
    if not transport_kwargs.get("trust_env", True) or "proxy" in transport_kwargs:
        return None
    proxies = get_environment_proxies() if get_environment_proxies is not None else {}
    if not proxies:
        return None
    return {
        pattern: None
        if url is None
        else WatchdogTransport(policy=policy, interrupt=interrupt, proxy=url, **transport_kwargs)
        for pattern, url in proxies.items()
    }


def openai_client_for(
    platform: str | None,
    *,
    api_mode: str = "chat_completions",
    provider: str | None = None,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    **openai_kwargs: Any,
) -> openai.OpenAI:
    """An ``openai.OpenAI`` client for this kind of caller.

    Its ``http_client`` is built with ``http_client_for`` from the same
    arguments (TLS and connection settings among ``openai_kwargs`` go there),
    unless ``openai_kwargs`` holds an ``http_client``, which is then used as
    given. ``stream_chat_completion`` later streams inline or on a worker
    thread as ``should_stream_inline`` decides for this platform.
    """
    import openai

    connection = {
        name: openai_kwargs.pop(name) for name in TRANSPORT_SETTINGS if name in openai_kwargs
    }
    http_client = openai_kwargs.pop("http_client", None)
    if http_client is None:
        http_client = http_client_for(
            platform,
            api_mode=api_mode,
            provider=provider,
            policy=policy,
            interrupt=interrupt,
            **connection,
        )
    elif connection:
        raise TypeError(
            f"openai_client_for() got {', '.join(sorted(connection))} together with an"
            " http_client: configure the http_client you pass instead"
        )
    given = profile_of(http_client)
    if policy is None:
        policy = given.policy if given is not None else transport_policy(http_client)
    if interrupt is None and given is not None:
        interrupt = given.interrupt
    openai_kwargs.setdefault("timeout", default_timeout(policy))
    client = openai.OpenAI(http_client=http_client, **openai_kwargs)
    _profiles[client] = ClientProfile(
        inline=should_stream_inline(platform, api_mode, provider),
        policy=policy,
        interrupt=interrupt,
    )
    return client


def transport_policy(http_client: object) -> StreamPolicy:
    """The policy of the watchdog transport under ``http_client``, else the environment's."""
    transport = getattr(http_client, "_transport", None)
    if isinstance(transport, WatchdogTransport):
        return transport.policy
    return StreamPolicy.from_env()
