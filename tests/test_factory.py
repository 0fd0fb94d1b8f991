"""Per-context factories: settings reach the transport, timeouts never undercut the watchdog."""

from __future__ import annotations

import ssl
from typing import Any

import httpx
import openai
import pytest

from hermes_transport import (
    StreamPolicy,
    StreamStalled,
    WatchdogTransport,
    http_client_for,
    openai_client_for,
)
from hermes_transport._factory import SDK_MAX_CONNECTIONS, SDK_MAX_KEEPALIVE, profile_of
from hermes_transport.testing import FaultServer, Scenario

from _support import CONNECTION_SETTINGS, chat_body


def _transport(client: httpx.Client) -> WatchdogTransport:
    transport = client._transport
    assert isinstance(transport, WatchdogTransport)
    return transport


@pytest.mark.parametrize("factory", ["http", "openai"])
def test_tls_settings_reach_the_transport(
    tls: tuple[ssl.SSLContext, ssl.SSLContext], factory: str
) -> None:
    """A CA bundle given to a factory is the one the watchdog transport verifies with."""
    with FaultServer(Scenario.healthy(), ssl_context=tls[0]) as server:
        if factory == "http":
            trusted = http_client_for("cron", verify=tls[1])
            untrusted = http_client_for("cron")
            for client, works in ((trusted, True), (untrusted, False)):
                with client:
                    if works:
                        body = client.post(server.base_url + "/chat/completions", json=chat_body())
                        assert b"[DONE]" in body.content
                    else:
                        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
                            client.post(server.base_url + "/chat/completions", json=chat_body())
        else:
            sdk = openai_client_for("cron", base_url=server.base_url, api_key="x", verify=tls[1])
            with sdk:
                reply = sdk.chat.completions.create(model="m", messages=[], stream=False)
            assert reply.choices[0].message.content == "hello world"


@pytest.mark.parametrize(
    "settings",
    CONNECTION_SETTINGS,
    ids=lambda settings: next(iter(settings)),
)
def test_connection_settings_configure_the_inner_transport(
    monkeypatch: pytest.MonkeyPatch, settings: dict[str, Any]
) -> None:
    """Every connection setting given to the factories is handed to the inner httpx transport."""
    seen: list[dict[str, Any]] = []
    real_init = httpx.HTTPTransport.__init__

    def spy(self: httpx.HTTPTransport, **kwargs: Any) -> None:
        seen.append(kwargs)
        real_init(self, **{k: v for k, v in kwargs.items() if k != "cert"})

    monkeypatch.setattr(httpx.HTTPTransport, "__init__", spy)
    http_client_for("cron", **settings).close()
    openai_client_for("cli", api_key="x", **settings).close()
    assert len(seen) == 2
    for kwargs in seen:
        for name, value in settings.items():
            assert kwargs[name] == value


def test_http2_is_refused_by_the_factories() -> None:
    """Asking a factory for HTTP/2 fails loudly instead of being dropped."""
    with pytest.raises(ValueError, match="HTTP/2"):
        http_client_for("cron", http2=True)
    with pytest.raises(ValueError, match="HTTP/2"):
        openai_client_for("cron", api_key="x", http2=True)


def test_an_explicit_proxy_is_used(server: FaultServer) -> None:
    """Requests go through the proxy given to the factory."""
    proxy = server.base_url.removesuffix("/v1")
    with http_client_for("cron", proxy=proxy) as client:
        client.post("http://api.example.invalid/v1/chat/completions", json=chat_body())
    assert server.requests[0].path == "http://api.example.invalid/v1/chat/completions"


def test_environment_proxies_are_honoured_like_httpx_does(
    server: FaultServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY reaches factory clients (httpx drops it once a transport is given), and NO_PROXY exempts."""
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    monkeypatch.setenv("NO_PROXY", "direct.invalid")
    with http_client_for("cron") as client:
        client.post("http://api.example.invalid/v1/chat/completions", json=chat_body(stream=False))
        with pytest.raises(httpx.ConnectError):
            client.post("http://direct.invalid/v1/chat/completions", json=chat_body(stream=False))
    assert [r.path for r in server.requests] == ["http://api.example.invalid/v1/chat/completions"]
    with http_client_for("cron", trust_env=False) as client, pytest.raises(httpx.ConnectError):
        client.post("http://api.example.invalid/v1/chat/completions", json=chat_body(stream=False))


def test_proxied_streams_are_watched(server: FaultServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that goes through an environment proxy still has the watchdog."""
    server.scenario = Scenario.comments_after(1)
    monkeypatch.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    policy = StreamPolicy(stale_timeout=0.3, retries=0)
    with http_client_for("cron", policy=policy) as client:
        request = client.build_request(
            "POST", "http://api.example.invalid/v1/chat/completions", json=chat_body()
        )
        response = client.send(request, stream=True)
        with pytest.raises(StreamStalled):
            response.read()
        response.close()


@pytest.mark.parametrize(
    ("stale", "first", "read"),
    [
        (180.0, None, 600.0),
        (900.0, None, 905.0),
        (60.0, 1200.0, 1205.0),
        (None, None, 600.0),
        (30.0, float("inf"), 600.0),
    ],
)
def test_default_timeouts_never_undercut_the_watchdog(
    stale: float | None, first: float | None, read: float
) -> None:
    """Socket timeouts default to the SDK's, raised above the watchdog's budgets so it fires first."""
    policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first)
    expected = httpx.Timeout(read, connect=5.0)
    with http_client_for("cron", policy=policy) as client:
        assert client.timeout == expected
    sdk = openai_client_for("cli", api_key="x", policy=policy)
    assert sdk.timeout == expected
    sdk.close()


def test_given_timeouts_and_limits_win() -> None:
    """Caller-given httpx and openai settings win over the factory's defaults."""
    with http_client_for("cron", timeout=3.0, limits=httpx.Limits(max_connections=2)) as client:
        assert client.timeout == httpx.Timeout(3.0)
        assert _transport(client).inner._pool._max_connections == 2  # type: ignore[attr-defined]
    sdk = openai_client_for("cron", api_key="x", timeout=7.0, max_retries=5)
    assert sdk.timeout == 7.0
    assert sdk.max_retries == 5
    sdk.close()


def test_sdk_defaults_where_nothing_is_given() -> None:
    """Without settings, the factory client has the SDK's limits and follows redirects."""
    with http_client_for("cli") as client:
        pool = _transport(client).inner._pool  # type: ignore[attr-defined]
        assert pool._max_connections == SDK_MAX_CONNECTIONS
        assert pool._max_keepalive_connections == SDK_MAX_KEEPALIVE
        assert client.follow_redirects is True


def test_client_kwargs_reach_httpx_client(server: FaultServer) -> None:
    """Event hooks and headers are httpx.Client settings and reach it."""
    seen: list[str] = []
    with http_client_for(
        "cron",
        headers={"x-agent": "hermes"},
        event_hooks={"request": [lambda request: seen.append(request.headers["x-agent"])]},
    ) as client:
        client.post(server.base_url + "/chat/completions", json=chat_body(stream=False))
    assert seen == ["hermes"]
    assert server.requests[0].headers["x-agent"] == "hermes"


def test_a_given_http_client_is_used_as_given() -> None:
    """openai_client_for uses a given http_client untouched, and remembers its policy."""
    policy = StreamPolicy(stale_timeout=42.0)
    http_client = http_client_for("cron", policy=policy)
    sdk = openai_client_for("cron", api_key="x", http_client=http_client)
    assert sdk._client is http_client
    profile = profile_of(sdk)
    assert profile is not None
    assert profile.policy == policy
    assert profile.inline is True
    sdk.close()


@pytest.mark.parametrize("name", ["transport", "mounts"])
def test_a_transport_of_ones_own_is_refused(name: str) -> None:
    """http_client_for builds the transport; passing one would bypass the watchdog."""
    with pytest.raises(TypeError, match=name):
        http_client_for("cron", **{name: httpx.HTTPTransport()})


def test_connection_settings_next_to_a_given_http_client_are_refused() -> None:
    """Settings that would be silently ignored next to a given http_client are an error."""
    with pytest.raises(TypeError, match="verify"):
        openai_client_for("cron", api_key="x", http_client=httpx.Client(), verify=False)


def test_openai_client_is_an_openai_client() -> None:
    """The factory returns the SDK's own client class."""
    sdk = openai_client_for("subagent", api_key="x")
    assert isinstance(sdk, openai.OpenAI)
    assert isinstance(_transport(sdk._client), WatchdogTransport)
    sdk.close()
