"""The async factories: async_http_client_for and async_openai_client_for build watched clients."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable
from typing import Any

import openai
import pytest

from hermes_transport import (
    DefaultSeconds,
    Interrupt,
    StreamPolicy,
    StreamStalled,
    astream_chat_completion,
    async_openai_client_for,
    openai_client_for,
    stream_chat_completion,
)
from hermes_transport._transports.builder import SDK_MAX_CONNECTIONS, SDK_MAX_KEEPALIVE, profile_of
from hermes_transport.testing import FaultServer, Scenario

from _support import (
    CONNECTION_SETTINGS,
    Flavor,
    chat_body,
    in_flavor,
    inner_transport_settings,
)
from _support import async_sdk_client as _client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("sdk_abandons_async_generators")]

STALE = 0.3
MESSAGES = [{"role": "user", "content": "hi"}]


def _watchdog(client: Any, flavor: Flavor) -> Any:
    """The flavor's AsyncWatchdogTransport under `client`."""
    transport = client._transport
    assert isinstance(transport, flavor.AsyncWatchdogTransport)
    return transport


async def test_the_factories_return_async_clients_over_the_watchdog(sdk_flavor: Flavor) -> None:
    """async_http_client_for gives an AsyncClient of its library, async_openai_client_for an openai.AsyncOpenAI over one, both watched."""
    async with sdk_flavor.async_http_client_for("cron") as http_client:
        assert type(http_client) is sdk_flavor.http.AsyncClient
        _watchdog(http_client, sdk_flavor)
    async with async_openai_client_for("subagent", api_key="x", flavor=sdk_flavor.name) as sdk:
        assert isinstance(sdk, openai.AsyncOpenAI)
        assert isinstance(sdk._client, sdk_flavor.http.AsyncClient)
        _watchdog(sdk._client, sdk_flavor)


async def test_an_explicit_flavor_builds_on_that_library_and_streams(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """async_openai_client_for(flavor=...) puts the SDK on that library's AsyncClient (httpx on openai 3.x: the legacy path), and it streams."""
    async with _client(server, sdk_flavor, "subagent") as client:
        assert type(client._client) is sdk_flavor.http.AsyncClient
        completion = await astream_chat_completion(client, model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "hello world"
    assert [r.stream for r in server.requests] == [True]


@pytest.mark.parametrize("platform", ["cron", "cli"])
async def test_the_async_clients_carry_the_policy_and_the_token(
    sdk_flavor: Flavor, platform: str
) -> None:
    """The policy and interrupt given to a factory are recorded on the client and applied by its transport."""
    policy = StreamPolicy(stale_timeout=42.0, first_event_timeout=7.0, retries=5)
    token = Interrupt()
    async with sdk_flavor.async_http_client_for(
        platform, policy=policy, interrupt=token
    ) as http_client:
        profile = profile_of(http_client)
        assert profile is not None
        assert (profile.policy, profile.interrupt) == (policy, token)
        assert _watchdog(http_client, sdk_flavor).policy == policy
    async with async_openai_client_for(
        platform, api_key="x", policy=policy, interrupt=token, flavor=sdk_flavor.name
    ) as sdk:
        profile = profile_of(sdk)
        assert profile is not None
        assert (profile.policy, profile.interrupt) == (policy, token)
        assert _watchdog(sdk._client, sdk_flavor).policy == policy


async def test_the_policy_defaults_to_the_environment(
    sdk_flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without policy=, the async factories read HERMES_STREAM_* like StreamPolicy.from_env()."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "12")
    monkeypatch.setenv("HERMES_STREAM_RETRIES", "4")
    expected = StreamPolicy(stale_timeout=12.0, retries=4)
    async with sdk_flavor.async_http_client_for("cron") as http_client:
        assert _watchdog(http_client, sdk_flavor).policy == expected
    async with async_openai_client_for("cron", api_key="x", flavor=sdk_flavor.name) as sdk:
        profile = profile_of(sdk)
        assert profile is not None
        assert profile.policy == expected
        assert _watchdog(sdk._client, sdk_flavor).policy == expected


@pytest.mark.parametrize("factory", ["http", "openai"])
async def test_tls_settings_reach_the_transport(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], sdk_flavor: Flavor, factory: str
) -> None:
    """A CA bundle given to an async factory is the one the watchdog transport verifies with."""
    with FaultServer(Scenario.healthy(), ssl_context=tls[0]) as server:
        if factory == "http":
            async with sdk_flavor.async_http_client_for("cron", verify=tls[1]) as trusted:
                response = await trusted.post(
                    server.base_url + "/chat/completions", json=chat_body()
                )
                assert b"[DONE]" in response.content
            async with sdk_flavor.async_http_client_for("cron") as untrusted:
                with pytest.raises(sdk_flavor.http.ConnectError) as info:
                    await untrusted.post(server.base_url + "/chat/completions", json=chat_body())
            causes: list[BaseException] = [info.value]
            while (cause := causes[-1].__cause__ or causes[-1].__context__) is not None:
                causes.append(cause)
            assert any(isinstance(cause, ssl.SSLCertVerificationError) for cause in causes)
        else:
            async with async_openai_client_for(
                "cron",
                base_url=server.base_url,
                api_key="x",
                verify=tls[1],
                flavor=sdk_flavor.name,
            ) as sdk:
                completion = await astream_chat_completion(sdk, model="m", messages=MESSAGES)
            assert completion.choices[0].message.content == "hello world"


@pytest.mark.parametrize(
    "settings",
    CONNECTION_SETTINGS,
    ids=lambda settings: next(iter(settings)),
)
async def test_connection_settings_configure_the_inner_transport(
    monkeypatch: pytest.MonkeyPatch, sdk_flavor: Flavor, settings: dict[str, Any]
) -> None:
    """Every connection setting given to the async factories is handed to the inner AsyncHTTPTransport of their library."""
    settings = in_flavor(settings, sdk_flavor)
    seen = inner_transport_settings(monkeypatch, sdk_flavor.http.AsyncHTTPTransport)
    await sdk_flavor.async_http_client_for("cron", **settings).aclose()
    await async_openai_client_for("cli", api_key="x", flavor=sdk_flavor.name, **settings).close()
    assert len(seen) == 2
    for kwargs in seen:
        for name, value in settings.items():
            assert kwargs[name] == value


@pytest.mark.parametrize("factory", ["http", "openai"])
async def test_http2_is_refused_by_the_async_factories(sdk_flavor: Flavor, factory: str) -> None:
    """Asking an async factory for HTTP/2 fails loudly instead of being dropped."""
    build: Callable[..., object] = (
        sdk_flavor.async_http_client_for
        if factory == "http"
        else functools.partial(async_openai_client_for, flavor=sdk_flavor.name)
    )
    with pytest.raises(ValueError, match="HTTP/2"):
        build("cron", api_key="x", http2=True)


@pytest.mark.parametrize("name", ["transport", "mounts"])
async def test_a_transport_of_ones_own_is_refused(flavor: Flavor, name: str) -> None:
    """async_http_client_for builds the transport; passing one would bypass the watchdog."""
    inner = flavor.http.AsyncHTTPTransport()
    given: dict[str, Any] = {name: inner if name == "transport" else {"all://": inner}}
    with pytest.raises(TypeError, match=name):
        flavor.async_http_client_for("cron", **given)
    await inner.aclose()


async def test_an_explicit_proxy_is_used(server: FaultServer, flavor: Flavor) -> None:
    """Requests go through the proxy given to the async factory."""
    proxy = server.base_url.removesuffix("/v1")
    async with flavor.async_http_client_for("cron", proxy=proxy) as client:
        await client.post("http://api.example.invalid/v1/chat/completions", json=chat_body())
    assert server.requests[0].path == "http://api.example.invalid/v1/chat/completions"


async def test_environment_proxies_are_honoured_like_httpx_does(
    server: FaultServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY reaches async factory clients (httpx drops it once a transport is given), and NO_PROXY exempts."""
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "direct.invalid")
    url = "http://{}/v1/chat/completions"
    async with flavor.async_http_client_for("cron") as client:
        await client.post(url.format("api.example.invalid"), json=chat_body(stream=False))
        with pytest.raises(flavor.http.ConnectError):
            await client.post(url.format("direct.invalid"), json=chat_body(stream=False))
    assert [r.path for r in server.requests] == [url.format("api.example.invalid")]
    async with flavor.async_http_client_for("cron", trust_env=False) as client:
        with pytest.raises(flavor.http.ConnectError):
            await client.post(url.format("api.example.invalid"), json=chat_body(stream=False))


async def test_proxied_streams_are_watched(
    server: FaultServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream that goes through an environment proxy still has the watchdog."""
    server.scenario = Scenario.comments_after(1)
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    policy = StreamPolicy(stale_timeout=STALE, retries=0)
    async with flavor.async_http_client_for("cron", policy=policy) as client:
        async with client.stream(
            "POST", "http://api.example.invalid/v1/chat/completions", json=chat_body()
        ) as response:
            with pytest.raises(StreamStalled) as info:
                await response.aread()
    assert len(server.requests) == 1
    assert type(info.value) is flavor.StreamStalled


@pytest.mark.parametrize(
    ("stale", "first", "read"),
    [
        (180.0, None, 600.0),
        (900.0, None, 905.0),
        (60.0, 1200.0, 1205.0),
        (None, None, 600.0),
        (30.0, float("inf"), 600.0),
        (DefaultSeconds(180.0), StreamPolicy.SAME_AS_STALE, 605.0),  # the rules' 600 s
    ],
)
async def test_default_timeouts_never_undercut_the_watchdog(
    sdk_flavor: Flavor, stale: float | None, first: Any, read: float
) -> None:
    """Socket timeouts default to the SDK's, raised above the watchdog's budgets so it fires first."""
    policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first)
    expected = sdk_flavor.http.Timeout(read, connect=5.0)
    async with sdk_flavor.async_http_client_for("cron", policy=policy) as client:
        assert client.timeout == expected
    async with async_openai_client_for(
        "cli", api_key="x", policy=policy, flavor=sdk_flavor.name
    ) as sdk:
        assert sdk.timeout == expected


async def test_given_timeouts_and_limits_win(sdk_flavor: Flavor) -> None:
    """Caller-given httpx and openai settings win over the async factories' defaults."""
    limits = sdk_flavor.http.Limits(max_connections=2)
    async with sdk_flavor.async_http_client_for("cron", timeout=3.0, limits=limits) as client:
        assert client.timeout == sdk_flavor.http.Timeout(3.0)
        inner = _watchdog(client, sdk_flavor).inner
        assert inner._pool._max_connections == 2
    async with async_openai_client_for(
        "cron", api_key="x", timeout=7.0, max_retries=5, flavor=sdk_flavor.name
    ) as sdk:
        assert sdk.timeout == 7.0
        assert sdk.max_retries == 5


async def test_sdk_defaults_where_nothing_is_given(flavor: Flavor) -> None:
    """Without settings, the async factory client has the SDK's limits and follows redirects."""
    async with flavor.async_http_client_for("cli") as client:
        pool = _watchdog(client, flavor).inner._pool
        assert pool._max_connections == SDK_MAX_CONNECTIONS
        assert pool._max_keepalive_connections == SDK_MAX_KEEPALIVE
        assert client.follow_redirects is True


async def test_client_kwargs_reach_httpx_async_client(server: FaultServer, flavor: Flavor) -> None:
    """Event hooks and headers are AsyncClient settings and reach it."""
    seen: list[str] = []

    async def hook(request: Any) -> None:
        seen.append(request.headers["x-agent"])

    async with flavor.async_http_client_for(
        "cron", headers={"x-agent": "hermes"}, event_hooks={"request": [hook]}
    ) as client:
        await client.post(server.base_url + "/chat/completions", json=chat_body(stream=False))
    assert seen == ["hermes"]
    assert server.requests[0].headers["x-agent"] == "hermes"


async def test_a_given_http_client_is_used_as_given(sdk_flavor: Flavor) -> None:
    """async_openai_client_for uses a given http_client untouched, and remembers its policy and token."""
    policy = StreamPolicy(stale_timeout=42.0)
    token = Interrupt()
    http_client = sdk_flavor.async_http_client_for("cron", policy=policy, interrupt=token)
    async with async_openai_client_for("cron", api_key="x", http_client=http_client) as sdk:
        assert sdk._client is http_client
        profile = profile_of(sdk)
        assert profile is not None
        assert (profile.policy, profile.interrupt, profile.inline) == (policy, token, True)


async def test_connection_settings_next_to_a_given_http_client_are_refused(
    sdk_flavor: Flavor,
) -> None:
    """Settings that would be silently ignored next to a given http_client are an error."""
    async with sdk_flavor.http.AsyncClient() as given:
        with pytest.raises(TypeError, match="verify"):
            async_openai_client_for("cron", api_key="x", http_client=given, verify=False)


@pytest.mark.parametrize("runner", ["sync", "async"])
async def test_a_client_of_the_other_kind_is_refused_before_sending(
    server: FaultServer, sdk_flavor: Flavor, runner: str
) -> None:
    """Each runner refuses the other kind of client with a TypeError naming the right runner."""
    if runner == "sync":
        client: Any = async_openai_client_for(
            "cron", base_url=server.base_url, api_key="x", flavor=sdk_flavor.name
        )
        with pytest.raises(TypeError, match="astream_chat_completion"):
            stream_chat_completion(client, model="m", messages=MESSAGES)
        await client.close()
    else:
        client = openai_client_for(
            "cron", base_url=server.base_url, api_key="x", flavor=sdk_flavor.name
        )
        with pytest.raises(TypeError, match=r"openai\.AsyncOpenAI.*stream_chat_completion"):
            await astream_chat_completion(client, model="m", messages=MESSAGES)
        client.close()
    assert server.requests == []
