"""The ``mcp`` SDK's streamable HTTP client on a watched client: ``mcp_http_client_for``.

``streamable_http_client(url, http_client=...)`` (mcp 2.x, async only, on httpx2) takes
an ``httpx2.AsyncClient``. The SDK's own (``create_mcp_http_client``) has a 30 s timeout
and a 300 s read timeout for the streams a server holds open, and leaves redirects to
the SDK, which follows only those within the endpoint's origin. The factory builds one
the same way over httpx2's ``AsyncWatchdogTransport``, its read timeout kept above every
budget an MCP request can get, so that the watch, not the socket, decides a stall. mcp
itself is never imported here, and httpx2 only when the factory runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._core.budgets import DefaultSeconds
from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._flavors import clients_named
from .._transports.builder import BUDGET_MARGIN
from .._transports.shell import Shell

if TYPE_CHECKING:
    import httpx2

__all__ = ["MCP_READ_TIMEOUT", "MCP_TIMEOUT", "mcp_http_client_for", "mcp_longest_budget"]

#: The mcp SDK's own client's timeouts: 30 s, and 300 s to read (a stream held open).
MCP_TIMEOUT = 30.0
MCP_READ_TIMEOUT = 300.0


def mcp_longest_budget(policy: StreamPolicy) -> float:
    """The longest finite budget an MCP request can get under ``policy`` (0: none): MCP's
    defaults or what the user set, and the tool rules where no one set a budget."""
    budgets = policy.budgets_for(mcp=True)
    values = [b for b in (budgets.first_event, budgets.stale) if b is not None]
    rules = policy.budget_rules
    if rules is not None:
        first_free = isinstance(policy.first_event_budget, DefaultSeconds)
        stale_free = isinstance(policy.stale_timeout, DefaultSeconds)
        for rule in rules.tools:
            for free, value in ((first_free, rule.first_event), (stale_free, rule.stale)):
                if free and isinstance(value, float):
                    values.append(value)
    return max(values, default=0.0)


def mcp_http_client_for(
    context: str | None,
    *,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
    **client_kwargs: Any,
) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` for ``streamable_http_client(url, http_client=...)``, on
    httpx2's ``AsyncWatchdogTransport``.

    ``context`` is the platform, as for the other factories (recorded with the client).
    ``policy`` (default: ``StreamPolicy.from_env()``) and ``interrupt`` (which binds
    every request of the client) go to the transport, and ``on_stats`` is given every
    stream's statistics. Set up as the SDK sets its own: a 30 s timeout, redirects left
    to the SDK; the read timeout 300 s, or above the longest budget an MCP request can
    get when that is longer (a ``timeout`` given is used as it is). Connection settings
    (``verify``, ``cert``, ``proxy``, ``limits``, ``trust_env``, ...) go to the
    transport, everything else (``headers``, ``auth``, ...) to the client; a
    ``transport``, ``mounts`` or ``app`` would bypass the watch (``TypeError``). Needs
    httpx2 (the ``httpx2`` extra), as the mcp SDK does.

    A request the watch ends (a stall, an interrupt) is answered in the server's place
    with a JSON-RPC error for its id, code -32001 and the error's message, so that the
    SDK fails that call alone with ``MCPError``; ``stream_error(error)`` finds ours. The
    server's GET channel is never cut for silence, and errors of other kinds (a refused
    connection) are raised as the SDK's own client would.
    """
    clients = clients_named("httpx2")  # an ImportError that says how to install httpx2
    policy = policy if policy is not None else StreamPolicy.from_env()
    if "timeout" not in client_kwargs:
        read = max(MCP_READ_TIMEOUT, mcp_longest_budget(policy) + BUDGET_MARGIN)
        client_kwargs["timeout"] = clients.flavor.http.Timeout(MCP_TIMEOUT, read=read)
    client_kwargs.setdefault("follow_redirects", False)
    client: httpx2.AsyncClient = clients.client(
        "mcp_http_client_for",
        True,
        context,
        "mcp",
        None,
        policy,
        interrupt,
        on_stats,
        client_kwargs,
    )
    # The mcp SDK fails a request that an error answers on its stream, and nothing more;
    # an error raised from a request's POST ends its whole session. So a stall or an
    # interrupt is answered in band on this client's transports (proxies' included).
    for transport in (client._transport, *client._mounts.values()):
        if isinstance(transport, Shell):
            transport._in_band = True
    return client
