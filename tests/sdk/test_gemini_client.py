"""google-genai on ``genai_client_for``: Gemini API and Vertex AI calls, sync and async, watched.

Through the real SDK against the fault server's gemini wire, on both HTTP libraries the SDK
runs on (httpx2, its default, and httpx).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    StreamStats,
    genai_client_for,
)
from hermes_transport.testing import FaultServer, Scenario

from _support import FLAVOR_NAMES, FlavorName, interrupt_when

pytest.importorskip("google.genai")
from google.auth import credentials

# google-genai on its own HTTP libraries: the same under every openai major.
pytestmark = pytest.mark.once

MODEL = "gemini-2.5-flash"
BUDGET = 0.5
FLAVORS = FLAVOR_NAMES
APIS = ["gemini", "vertex"]


class _Token(credentials.Credentials):
    """Vertex AI credentials that never need refreshing (no network)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.token = "test-token"

    def refresh(self, request: object) -> None:
        self.token = "test-token"

    @property
    def expired(self) -> bool:
        return False

    @property
    def valid(self) -> bool:
        return True


@pytest.fixture
def build(server: FaultServer) -> Iterator[Any]:
    """Builds genai clients on the fault server with ``genai_client_for``; closes them."""
    clients: list[Any] = []

    def build(api: str, flavor: FlavorName, **kwargs: Any) -> Any:
        root = server.base_url.removesuffix("/v1")
        kwargs.setdefault("policy", StreamPolicy(stale_timeout=BUDGET, retries=2))
        if api == "vertex":
            kwargs.update(vertexai=True, project="p", location="us-central1", credentials=_Token())
        else:
            kwargs["api_key"] = "test-key"
        client = genai_client_for("cron", flavor=flavor, http_options={"base_url": root}, **kwargs)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


def _text(client: Any) -> str:
    stream = client.models.generate_content_stream(model=MODEL, contents="hi")
    return "".join(chunk.text or "" for chunk in stream)


async def _atext(client: Any) -> str:
    stream = await client.aio.models.generate_content_stream(model=MODEL, contents="hi")
    text = "".join([chunk.text or "" async for chunk in stream])
    await client.aio.aclose()
    return text


def _run(client: Any, mode: str) -> str:
    return _text(client) if mode == "sync" else asyncio.run(_atext(client))


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize("api", APIS)
def test_a_silent_first_attempt_is_re_sent(
    server: FaultServer, build: Any, api: str, flavor: str, mode: str
) -> None:
    """A first attempt that sends nothing is re-sent after the budget, on the sync and the async client alike, and the statistics name the gemini wire and the path's model."""
    stats: list[StreamStats] = []
    client = build(api, flavor, on_stats=stats.append)
    server.scenario = Scenario.stall_first(1)
    started = time.monotonic()
    assert _run(client, mode) == "hello world"
    assert time.monotonic() - started < 10 * BUDGET + 5
    assert [(s.wire, s.model, s.outcome, s.resends) for s in stats] == [
        ("gemini", MODEL, "completed", 1)
    ]
    paths = [r.path.split("?")[0] for r in server.requests]
    assert len(paths) == 2
    assert all(path.endswith(f"/models/{MODEL}:streamGenerateContent") for path in paths)
    assert all(("/publishers/google/" in path) == (api == "vertex") for path in paths)


def test_async_calls_stay_watched_with_aiohttp_installed(server: FaultServer, build: Any) -> None:
    """With aiohttp installed, where the SDK would run its async calls on it, the factory's client runs them on the async watchdog transport."""
    pytest.importorskip("aiohttp")
    stats: list[StreamStats] = []
    client = build("gemini", "httpx2", on_stats=stats.append)
    assert asyncio.run(_atext(client)) == "hello world"
    assert [s.wire for s in stats] == ["gemini"]


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_stall_after_output_raises_into_the_sdk_iteration(
    server: FaultServer, build: Any, flavor: str, mode: str
) -> None:
    """A stream that goes silent after its first chunk raises StreamStalled (mid_stream) out of the SDK's iteration, as it is, never re-sent."""
    server.scenario = Scenario.silent_after(1)
    client = build("gemini", flavor)
    started = time.monotonic()
    with pytest.raises(StreamStalled) as raised:
        _run(client, mode)
    assert raised.value.stage == "mid_stream"
    assert time.monotonic() - started < 10 * BUDGET + 5
    assert len(server.requests) == 1


#: Where a Gemini call can be blocked: before the headers, in a thinking model's silence
#: before its first chunk, and mid-body.
BLOCKED = {
    "headers": Scenario.silent_before_headers(),
    "first_event": Scenario(think=30.0),
    "mid_stream": Scenario.silent_after(1),
}


@pytest.mark.parametrize("stage", sorted(BLOCKED))
@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("flavor", FLAVORS)
def test_an_interrupt_ends_a_blocked_gemini_stream_at_once(
    server: FaultServer, build: Any, flavor: FlavorName, mode: str, stage: str
) -> None:
    """An interrupt from another thread ends a Gemini call at once wherever it is blocked (its headers, a thinking silence, mid-body), sync or async, and says where."""
    server.scenario = BLOCKED[stage]
    token = Interrupt()
    client = build("gemini", flavor, policy=StreamPolicy(stale_timeout=60.0), interrupt=token)
    when = interrupt_when(token, lambda: len(server.requests) == 1, delay=0.2)
    with pytest.raises(StreamInterrupted) as raised:
        _run(client, mode)
    assert time.monotonic() - when[0] < 2.0
    assert raised.value.stage == stage
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("field", "named"),
    [
        ("httpx_client", "httpx_client"),
        ("httpx_async_client", "httpx_async_client"),
        ("client_args", "transport"),
        ("async_client_args", "mounts"),
    ],
)
def test_http_options_that_would_bypass_the_watch_are_refused(field: str, named: str) -> None:
    """An http client of the caller's own, or a transport in the client arguments, raises a TypeError that names it."""
    httpx2 = pytest.importorskip("httpx2")
    given: dict[str, Any] = {
        "httpx_client": httpx2.Client(),
        "httpx_async_client": httpx2.AsyncClient(),
        "client_args": {"transport": httpx2.HTTPTransport()},
        "async_client_args": {"mounts": {}},
    }
    try:
        with pytest.raises(TypeError, match=named):
            genai_client_for("cron", api_key="k", http_options={field: given[field]})
    finally:
        given["httpx_client"].close()
        given["client_args"]["transport"].close()


def test_the_default_timeout_never_undercuts_the_budgets() -> None:
    """The SDK's per-request timeout defaults above the longest budget any rule gives; one the caller set is kept."""
    policy = StreamPolicy()
    client = genai_client_for("cron", api_key="k", policy=policy)
    mine = genai_client_for("cron", api_key="k", http_options={"timeout": 5_000})
    try:
        timeout = client._api_client._http_options.timeout
        assert timeout is not None
        assert timeout >= policy.longest_budget * 1000
        assert mine._api_client._http_options.timeout == 5_000
    finally:
        client.close()
        mine.close()


def test_closing_the_client_closes_its_watched_clients() -> None:
    """The SDK builds the watched clients from the transports, so closing it closes them."""
    client = genai_client_for("cron", api_key="k", flavor="httpx2")
    sync_client = client._api_client._httpx_client
    client.close()
    assert sync_client.is_closed
