"""A pytest plugin that puts every httpx and httpx2 client on the watchdog transport.

Loaded by ``tools/sdk_transparency.py`` into the second of its two runs of an
SDK's own tests (``PYTHONPATH=tools python -m pytest -p watchdog_everywhere``).
At ``pytest_configure`` it patches the constructors of ``httpx.Client``,
``httpx.AsyncClient``, ``httpx2.Client`` and ``httpx2.AsyncClient`` (whichever
are installed; subclasses such as the SDKs' default clients included, like
google-genai's ``SyncHttpx2Client`` / ``AsyncHttpx2Client``, whose constructors
call these): once
the original constructor has built the client, every transport it holds is
wrapped, ``client._transport`` and each mounted one alike::

    WatchdogTransport(inner=<the transport the client would have used>)

So the client keeps exactly the transport it built for itself (its TLS,
limits, proxy and environment settings) or was given (``transport=``, a
``MockTransport``, a respx mock, a test's own ``http_client``), with the
watchdog between it and the client. An httpx client gets
``hermes_transport.WatchdogTransport`` (async: ``AsyncWatchdogTransport``),
an httpx2 one the classes of ``hermes_transport.httpx2``; a transport already
on the watchdog is left as it is. Nothing else about a client changes, and
the watchdog runs with its default policy (``StreamPolicy.from_env()``; the
check clears the ``HERMES_*`` variables). A transport the watchdog refuses
fails the client's construction, as it would for a user.

Under ``httpx2.alias_httpx()`` (``import httpx`` gives ``httpx2``) the two
names are one module: its clients are patched once, as httpx2 clients.

With ``WATCHDOG_EVERYWHERE_REPORT`` set to a directory, every process (each
xdist worker too) writes ``wrapped-<pid>.json`` there as it ends: how many
transports it wrapped, per flavor, so the check can tell a run in which the
plugin wrapped nothing (and so proved nothing) from a real one.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

__all__ = ["patch_clients", "wrapped"]

REPORT_VARIABLE = "WATCHDOG_EVERYWHERE_REPORT"

# Transports wrapped so far in this process: "httpx sync", "httpx2 async", ...
wrapped: Counter[str] = Counter()
_patched: dict[type[Any], Callable[..., None]] = {}


def _library(name: str) -> ModuleType | None:
    """The HTTP library ``name`` if it is installed (imported on demand)."""
    try:
        return __import__(name)
    except ImportError:
        return None


def _watchdog_classes(library: ModuleType) -> tuple[type[Any], type[Any]]:
    """The (sync, async) watchdog transports for clients of ``library``."""
    if library.__name__ == "httpx2":
        from hermes_transport import httpx2 as flavor

        return flavor.WatchdogTransport, flavor.AsyncWatchdogTransport
    import hermes_transport

    return hermes_transport.WatchdogTransport, hermes_transport.AsyncWatchdogTransport


# Every watchdog class of the flavors patched: a transport already on one is left alone.
_watchdogs: set[type[Any]] = set()


def _wrap_client(client: Any, watchdog: type[Any], kind: str) -> None:
    """Put ``client``'s own transport and each mounted one under ``watchdog``."""

    def wrap(transport: Any) -> Any:
        if transport is None or isinstance(transport, tuple(_watchdogs)):
            return transport
        wrapped[kind] += 1
        return watchdog(inner=transport)

    client._transport = wrap(client._transport)
    # The same patterns in the same (sorted) order: only the transports change.
    client._mounts = {pattern: wrap(mounted) for pattern, mounted in client._mounts.items()}


def _patch(client_class: type[Any], watchdog: type[Any], kind: str) -> None:
    if client_class in _patched:
        return
    original: Callable[..., None] = client_class.__init__

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        _wrap_client(self, watchdog, kind)

    _patched[client_class] = original
    client_class.__init__ = __init__


def patch_clients() -> None:
    """Patch the client constructors of httpx and httpx2, those installed; idempotent."""
    for name in ("httpx2", "httpx"):  # httpx2 first: under an alias, httpx is httpx2
        library = _library(name)
        if library is None:
            continue
        flavor = library.__name__  # "httpx2" for an aliased httpx
        sync_watchdog, async_watchdog = _watchdog_classes(library)
        _watchdogs.update((sync_watchdog, async_watchdog))
        _patch(library.Client, sync_watchdog, f"{flavor} sync")
        _patch(library.AsyncClient, async_watchdog, f"{flavor} async")


def unpatch_clients() -> None:
    """Restore the original constructors."""
    while _patched:
        client_class, original = _patched.popitem()
        client_class.__init__ = original


def _write_report() -> None:
    directory = os.environ.get(REPORT_VARIABLE)
    if not directory:
        return
    path = Path(directory) / f"wrapped-{os.getpid()}.json"
    path.write_text(json.dumps(dict(wrapped), sort_keys=True), encoding="utf-8")


# Configure runs after the early plugins (an SDK's ``-p tests._alias_httpx``
# must alias httpx before anything imports it) and before any test builds a client.
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    patch_clients()


def pytest_report_header(config: pytest.Config) -> str:
    libraries = sorted({f"{c.__module__}.{c.__qualname__}" for c in _patched})
    return "watchdog_everywhere: every client on the watchdog: " + ", ".join(libraries)


def pytest_unconfigure(config: pytest.Config) -> None:
    _write_report()
    unpatch_clients()
