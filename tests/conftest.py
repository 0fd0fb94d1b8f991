from __future__ import annotations

import os
import ssl
from collections.abc import Iterator
from typing import Any

import pytest
import trustme

from hermes_transport import StreamPolicy
from hermes_transport.testing import FaultServer

from _support import (
    FLAVORS,
    OPENAI_MAJOR,
    SDK_FLAVORS,
    ClientFactory,
    Endpoint,
    Flavor,
    Wire,
    ignore_abandoned_async_generators,
    load_flavor,
)
from _ws_support import MODES, Drivers


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The versions this run tests against, first in pytest's header."""
    import importlib.metadata

    def version(name: str) -> str:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    names = ("openai", "anthropic", "httpx", "httpcore", "httpx2", "httpcore2", "anyio", "trio")
    return [
        "hermes-transport against " + ", ".join(f"{name} {version(name)}" for name in names),
        f"flavors: {', '.join(FLAVORS)}; SDK flavors: {', '.join(SDK_FLAVORS)}",
    ]


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """No HERMES_STREAM_* variable of the machine running the tests leaks into them."""
    for name in list(os.environ):
        if name.startswith("HERMES_STREAM_"):
            monkeypatch.delenv(name)


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every async test runs on asyncio and on trio."""
    backend: str = request.param
    return backend


@pytest.fixture(params=FLAVORS)
def flavor(request: pytest.FixtureRequest) -> Flavor:
    """Behavioural tests run on each HTTP library: httpx and httpx2."""
    return load_flavor(request.param)


@pytest.fixture(params=SDK_FLAVORS)
def sdk_flavor(request: pytest.FixtureRequest) -> Flavor:
    """SDK tests run on each HTTP library the installed openai accepts."""
    return load_flavor(request.param)


@pytest.fixture(scope="session")
def tls() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A throwaway CA: (server context, client context)."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server_context)
    client_context = ssl.create_default_context()
    ca.configure_trust(client_context)
    return server_context, client_context


@pytest.fixture(params=["tcp", "tls"])
def secure(request: pytest.FixtureRequest) -> bool:
    kind: str = request.param
    return kind == "tls"


@pytest.fixture
def fault(
    secure: bool, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> Iterator[tuple[FaultServer, Endpoint]]:
    with FaultServer(ssl_context=tls[0] if secure else None) as server:
        yield server, Endpoint(server.base_url, tls[1] if secure else True)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer() as fault_server:
        yield fault_server


@pytest.fixture
def watchdog_client(flavor: Flavor) -> Iterator[ClientFactory]:
    """Build clients of the flavor over its WatchdogTransport; all are closed after the test."""
    clients: list[Any] = []

    def build(
        *,
        stale: float | None = 1.0,
        first: Any = StreamPolicy.SAME_AS_STALE,  # seconds, None (off) or the default
        retries: int = 0,
        inner: Any = None,
        timeout: float = 30.0,
        **transport_kwargs: Any,
    ) -> Any:
        policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first, retries=retries)
        transport = flavor.WatchdogTransport(inner, policy=policy, **transport_kwargs)
        client = flavor.http.Client(transport=transport, timeout=timeout)
        clients.append(client)
        return client

    yield build
    for client in clients:
        client.close()


@pytest.fixture
def wire() -> Iterator[Wire]:
    """A loopback OpenAI-wire server that records each request's `stream` flag."""
    server = Wire()
    yield server
    server.close()


@pytest.fixture
def stalling_wire() -> Iterator[Wire]:
    """As ``wire``, but every stream stalls after its first chunk."""
    server = Wire(stall_after_first_chunk=True)
    yield server
    server.close()


@pytest.fixture
def sdk_abandons_async_generators(anyio_backend: str) -> None:
    """On trio with openai 2.x and 3.x, every stream that ends leaves the chain behind."""
    if anyio_backend == "trio" and OPENAI_MAJOR >= 2:
        ignore_abandoned_async_generators()


@pytest.fixture(params=MODES)
def ws_drivers(request: pytest.FixtureRequest) -> Iterator[Drivers]:
    """Watched Responses WebSockets, sync then async; each closed after the test."""
    made = Drivers(request.param)
    yield made
    made.close()
