"""One module per HTTP library, the same shape each; and how to find them by name.

Each flavor module (``httpx``, ``httpx2``) defines ``FLAVOR``, its
``StreamStalled``, ``WatchdogTransport``, ``AsyncWatchdogTransport``,
``CLIENTS`` (its ``ClientFactory``), ``http_client_for`` and
``async_http_client_for``. They are imported here lazily, downwards: httpx2
is optional, and only a caller that names it pays for (or needs) it.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .._core.flavor import FLAVOR_NAMES, Flavor
from .._transports.builder import ClientFactory

__all__ = ["clients_named", "flavor_module", "flavor_named"]


def flavor_module(name: object) -> ModuleType:
    """The flavor module called ``name``; httpx2's needs httpx2 installed (a clear
    ImportError if not)."""
    if name not in FLAVOR_NAMES:
        raise ValueError(
            f"flavor must be one of {', '.join(map(repr, FLAVOR_NAMES))} or None, got {name!r}"
        )
    # httpx2's module raises an ImportError that says how to install httpx2.
    return importlib.import_module(f"{__name__}.{name}")


def flavor_named(name: object) -> Flavor:
    """The flavor called ``name``."""
    flavor: Flavor = flavor_module(name).FLAVOR
    return flavor


def clients_named(name: object) -> ClientFactory:
    """The client factory of the flavor called ``name``."""
    clients: ClientFactory = flavor_module(name).CLIENTS
    return clients
