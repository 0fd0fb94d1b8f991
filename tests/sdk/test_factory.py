"""Per-context factories: settings reach the transport, timeouts never undercut the watchdog."""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Any

import anyio
import httpx
import openai
import pytest

from hermes_transport import (
    DefaultSeconds,
    StreamPolicy,
    StreamStalled,
    async_openai_client_for,
    openai_client_for,
    stream_chat_completion,
)
from hermes_transport._transports.builder import SDK_MAX_CONNECTIONS, SDK_MAX_KEEPALIVE, profile_of
from hermes_transport.testing import FaultServer, Scenario

from _support import (
    CONNECTION_SETTINGS,
    FLAVORS,
    NATIVE,
    SDK_FLAVORS,
    Flavor,
    chat_body,
    in_flavor,
    inner_transport_settings,
    load_flavor,
)

MESSAGES = [{"role": "user", "content": "hi"}]
# Whether the installed openai takes an httpx2 client at all (3.x, and late 2.x releases).
SDK_TAKES_HTTPX2 = "httpx2" in SDK_FLAVORS

# Both SDK factories: what the flavor= tests hold for each.
SDK_FACTORIES = pytest.mark.parametrize(
    "factory", [openai_client_for, async_openai_client_for], ids=["sync", "async"]
)


def _transport(client: Any, flavor: Flavor) -> Any:
    """The flavor's WatchdogTransport under `client`."""
    transport = client._transport
    assert isinstance(transport, flavor.WatchdogTransport)
    return transport


def _close(client: Any) -> None:
    """Close a client, sync or async (an async one on an event loop of its own)."""
    if isinstance(client, openai.AsyncOpenAI):
        anyio.run(client.close)
    elif hasattr(client, "aclose"):  # an AsyncClient of either library
        anyio.run(client.aclose)
    else:
        client.close()


@pytest.mark.parametrize("factory", ["http", "openai"])
def test_tls_settings_reach_the_transport(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], sdk_flavor: Flavor, factory: str
) -> None:
    """A CA bundle given to a factory is the one the watchdog transport verifies with."""
    with FaultServer(Scenario.healthy(), ssl_context=tls[0]) as server:
        if factory == "http":
            trusted = sdk_flavor.http_client_for("cron", verify=tls[1])
            untrusted = sdk_flavor.http_client_for("cron")
            for client, works in ((trusted, True), (untrusted, False)):
                with client:
                    if works:
                        body = client.post(server.base_url + "/chat/completions", json=chat_body())
                        assert b"[DONE]" in body.content
                    else:
                        with pytest.raises(
                            sdk_flavor.http.ConnectError, match="CERTIFICATE_VERIFY_FAILED"
                        ):
                            client.post(server.base_url + "/chat/completions", json=chat_body())
        else:
            sdk = openai_client_for(
                "cron",
                base_url=server.base_url,
                api_key="x",
                verify=tls[1],
                flavor=sdk_flavor.name,
            )
            with sdk:
                reply = sdk.chat.completions.create(model="m", messages=[], stream=False)
            assert reply.choices[0].message.content == "hello world"


@pytest.mark.parametrize(
    "settings",
    CONNECTION_SETTINGS,
    ids=lambda settings: next(iter(settings)),
)
def test_connection_settings_configure_the_inner_transport(
    monkeypatch: pytest.MonkeyPatch, sdk_flavor: Flavor, settings: dict[str, Any]
) -> None:
    """Every connection setting given to the factories is handed to the inner HTTPTransport of their library."""
    settings = in_flavor(settings, sdk_flavor)
    seen = inner_transport_settings(monkeypatch, sdk_flavor.http.HTTPTransport)
    sdk_flavor.http_client_for("cron", **settings).close()
    openai_client_for("cli", api_key="x", flavor=sdk_flavor.name, **settings).close()
    assert len(seen) == 2
    for kwargs in seen:
        for name, value in settings.items():
            assert kwargs[name] == value


def test_http2_is_refused_by_the_factories(sdk_flavor: Flavor) -> None:
    """Asking a factory for HTTP/2 fails loudly instead of being dropped."""
    with pytest.raises(ValueError, match="HTTP/2"):
        sdk_flavor.http_client_for("cron", http2=True)
    with pytest.raises(ValueError, match="HTTP/2"):
        openai_client_for("cron", api_key="x", http2=True, flavor=sdk_flavor.name)


def test_an_explicit_proxy_is_used(server: FaultServer, flavor: Flavor) -> None:
    """Requests go through the proxy given to the factory."""
    proxy = server.base_url.removesuffix("/v1")
    with flavor.http_client_for("cron", proxy=proxy) as client:
        client.post("http://api.example.invalid/v1/chat/completions", json=chat_body())
    assert server.requests[0].path == "http://api.example.invalid/v1/chat/completions"


def test_environment_proxies_are_honoured_like_httpx_does(
    server: FaultServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY reaches factory clients (httpx drops it once a transport is given), and NO_PROXY exempts."""
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "direct.invalid")
    with flavor.http_client_for("cron") as client:
        client.post("http://api.example.invalid/v1/chat/completions", json=chat_body(stream=False))
        with pytest.raises(flavor.http.ConnectError):
            client.post("http://direct.invalid/v1/chat/completions", json=chat_body(stream=False))
    assert [r.path for r in server.requests] == ["http://api.example.invalid/v1/chat/completions"]
    with (
        flavor.http_client_for("cron", trust_env=False) as client,
        pytest.raises(flavor.http.ConnectError),
    ):
        client.post("http://api.example.invalid/v1/chat/completions", json=chat_body(stream=False))


def test_proxied_streams_are_watched(
    server: FaultServer, flavor: Flavor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stream that goes through an environment proxy still has the watchdog."""
    server.scenario = Scenario.comments_after(1)
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    policy = StreamPolicy(stale_timeout=0.3, retries=0)
    with flavor.http_client_for("cron", policy=policy) as client:
        request = client.build_request(
            "POST", "http://api.example.invalid/v1/chat/completions", json=chat_body()
        )
        response = client.send(request, stream=True)
        with pytest.raises(StreamStalled) as info:
            response.read()
        response.close()
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
def test_default_timeouts_never_undercut_the_watchdog(
    sdk_flavor: Flavor, stale: float | None, first: Any, read: float
) -> None:
    """Socket timeouts default to the SDK's, raised above the watchdog's budgets so it fires first."""
    policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first)
    expected = sdk_flavor.http.Timeout(read, connect=5.0)
    with sdk_flavor.http_client_for("cron", policy=policy) as client:
        assert client.timeout == expected
    sdk = openai_client_for("cli", api_key="x", policy=policy, flavor=sdk_flavor.name)
    assert sdk.timeout == expected
    sdk.close()


def test_given_timeouts_and_limits_win(sdk_flavor: Flavor) -> None:
    """Caller-given httpx and openai settings win over the factory's defaults."""
    limits = sdk_flavor.http.Limits(max_connections=2)
    with sdk_flavor.http_client_for("cron", timeout=3.0, limits=limits) as client:
        assert client.timeout == sdk_flavor.http.Timeout(3.0)
        assert _transport(client, sdk_flavor).inner._pool._max_connections == 2
    sdk = openai_client_for(
        "cron", api_key="x", timeout=7.0, max_retries=5, flavor=sdk_flavor.name
    )
    assert sdk.timeout == 7.0
    assert sdk.max_retries == 5
    sdk.close()


def test_sdk_defaults_where_nothing_is_given(flavor: Flavor) -> None:
    """Without settings, the factory client has the SDK's limits and follows redirects."""
    with flavor.http_client_for("cli") as client:
        pool = _transport(client, flavor).inner._pool
        assert pool._max_connections == SDK_MAX_CONNECTIONS
        assert pool._max_keepalive_connections == SDK_MAX_KEEPALIVE
        assert client.follow_redirects is True


def test_client_kwargs_reach_httpx_client(server: FaultServer, flavor: Flavor) -> None:
    """Event hooks and headers are settings of the library's Client and reach it."""
    seen: list[str] = []
    with flavor.http_client_for(
        "cron",
        headers={"x-agent": "hermes"},
        event_hooks={"request": [lambda request: seen.append(request.headers["x-agent"])]},
    ) as client:
        client.post(server.base_url + "/chat/completions", json=chat_body(stream=False))
    assert seen == ["hermes"]
    assert server.requests[0].headers["x-agent"] == "hermes"


def test_a_given_http_client_is_used_as_given(sdk_flavor: Flavor) -> None:
    """openai_client_for uses a given http_client untouched, and remembers its policy."""
    policy = StreamPolicy(stale_timeout=42.0)
    http_client = sdk_flavor.http_client_for("cron", policy=policy)
    sdk = openai_client_for("cron", api_key="x", http_client=http_client)
    assert sdk._client is http_client
    profile = profile_of(sdk)
    assert profile is not None
    assert profile.policy == policy
    assert profile.inline is True
    sdk.close()


@pytest.mark.parametrize("name", ["transport", "mounts"])
def test_a_transport_of_ones_own_is_refused(flavor: Flavor, name: str) -> None:
    """http_client_for builds the transport; passing one would bypass the watchdog."""
    with pytest.raises(TypeError, match=name):
        flavor.http_client_for("cron", **{name: flavor.http.HTTPTransport()})


def test_connection_settings_next_to_a_given_http_client_are_refused(sdk_flavor: Flavor) -> None:
    """Settings that would be silently ignored next to a given http_client are an error."""
    with sdk_flavor.http.Client() as given, pytest.raises(TypeError, match="verify"):
        openai_client_for("cron", api_key="x", http_client=given, verify=False)


def test_openai_client_is_an_openai_client(sdk_flavor: Flavor) -> None:
    """The factory returns the SDK's own client class."""
    sdk = openai_client_for("subagent", api_key="x", flavor=sdk_flavor.name)
    assert isinstance(sdk, openai.OpenAI)
    assert isinstance(_transport(sdk._client, sdk_flavor), sdk_flavor.WatchdogTransport)
    sdk.close()


# --- flavor= ---------------------------------------------------------------------------------


@SDK_FACTORIES
@pytest.mark.parametrize("given", ["omitted", "None"])
def test_the_default_flavor_is_the_library_openai_builds_on(
    factory: Callable[..., Any], given: str
) -> None:
    """Without a flavor (or flavor=None) the SDK client sits on the library the installed openai uses natively: httpx2 from openai 3, httpx before."""
    chosen: dict[str, Any] = {} if given == "omitted" else {"flavor": None}
    sdk = factory("cron", api_key="x", **chosen)
    try:
        native = load_flavor(NATIVE)
        is_async = isinstance(sdk, openai.AsyncOpenAI)
        assert type(sdk._client) is (native.http.AsyncClient if is_async else native.http.Client)
        watchdog = native.AsyncWatchdogTransport if is_async else native.WatchdogTransport
        assert type(sdk._client._transport) is watchdog
    finally:
        _close(sdk)


def test_an_explicit_flavor_builds_on_that_library_and_streams(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """openai_client_for(flavor=...) puts the SDK on that library's Client (httpx on openai 3.x: the legacy path), and it streams."""
    sdk = openai_client_for(
        "subagent", base_url=server.base_url, api_key="x", flavor=sdk_flavor.name
    )
    with sdk:
        assert type(sdk._client) is sdk_flavor.http.Client
        _transport(sdk._client, sdk_flavor)
        completion = stream_chat_completion(sdk, model="m", messages=MESSAGES)
    assert completion.choices[0].message.content == "hello world"
    assert [r.stream for r in server.requests] == [True]


@SDK_FACTORIES
@pytest.mark.parametrize(
    "name", ["requests", "HTTPX", "", httpx], ids=["requests", "HTTPX", "empty", "module"]
)
def test_an_unknown_flavor_is_a_value_error_naming_the_field(
    factory: Callable[..., Any], name: object
) -> None:
    """A flavor that is not "httpx", "httpx2" or None is a ValueError naming flavor= and the value."""
    with pytest.raises(ValueError, match=r"flavor must be one of 'httpx', 'httpx2'") as info:
        factory("cron", api_key="x", flavor=name)
    assert repr(name) in str(info.value)


@SDK_FACTORIES
@pytest.mark.parametrize("name", FLAVORS)
def test_a_flavor_next_to_a_given_http_client_is_refused(
    sdk_flavor: Flavor, factory: Callable[..., Any], name: str
) -> None:
    """flavor= together with an http_client is a TypeError naming both, whichever library either is."""
    is_async = factory is async_openai_client_for
    given = (
        sdk_flavor.async_http_client_for("cron")
        if is_async
        else sdk_flavor.http_client_for("cron")
    )
    try:
        with pytest.raises(TypeError, match=rf"flavor={name!r} together with an http_client"):
            factory("cron", api_key="x", http_client=given, flavor=name)
    finally:
        _close(given)


@SDK_FACTORIES
@pytest.mark.skipif("httpx2" not in FLAVORS, reason="httpx2 is not installed (Python 3.10)")
def test_flavor_httpx2_works_where_openai_takes_httpx2_and_fails_loudly_where_not(
    factory: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """flavor="httpx2" builds an SDK client on httpx2 where the installed openai takes one, and is the SDK's TypeError naming http_client where it does not (openai 1.x), never silently something else and never leaking the client it built."""
    httpx2 = load_flavor("httpx2")
    if not SDK_TAKES_HTTPX2:
        closed: list[object] = []
        close = httpx2.http.Client.close
        monkeypatch.setattr(httpx2.http.Client, "close", lambda self: closed.append(close(self)))
        with pytest.raises(TypeError, match=r"Invalid `http_client` argument.*httpx2"):
            factory("cron", api_key="x", flavor="httpx2")
        assert len(closed) == (1 if factory is openai_client_for else 0)  # async: nothing opened
        return
    sdk = factory("cron", api_key="x", flavor="httpx2")
    try:
        is_async = isinstance(sdk, openai.AsyncOpenAI)
        assert type(sdk._client) is (httpx2.http.AsyncClient if is_async else httpx2.http.Client)
    finally:
        _close(sdk)
