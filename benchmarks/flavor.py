"""The HTTP library every client of a run is built on: the run's flavor (``--flavor``).

``httpx``, or ``httpx2``: openai 3.x's own fork, with httpx's API but classes of its own,
which its clients insist on (an httpx2 client takes only httpx2 transports, limits,
timeouts and body streams, and raises only httpx2's errors). This module is the only one
that knows which: the other modules build their client-side objects and catch their
errors through ``http``, and take the watchdog transports from here.

The flavor is read from the environment once, at import (run.py sets it from
``--flavor``): a process runs one flavor, and the children it spawns (fig_threads'
counters) inherit it with the environment, so no figure can mix the two libraries.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Literal

__all__ = [
    "FLAVOR",
    "FLAVORS",
    "FLAVOR_VARIABLE",
    "AsyncWatchdogTransport",
    "FlavorName",
    "WatchdogTransport",
    "http",
]

FlavorName = Literal["httpx", "httpx2"]
FLAVORS: tuple[FlavorName, ...] = ("httpx", "httpx2")
#: How run.py hands ``--flavor`` on (it spells the name out: it sets the variable before
#: it may import anything of this package).
FLAVOR_VARIABLE = "HERMES_BENCH_FLAVOR"


def _flavor() -> FlavorName:
    name = os.environ.get(FLAVOR_VARIABLE, "httpx")
    for flavor in FLAVORS:
        if name == flavor:
            return flavor
    raise ValueError(f"{FLAVOR_VARIABLE} must be one of {', '.join(FLAVORS)}, got {name!r}")


FLAVOR: FlavorName = _flavor()

# `http` is the flavor's httpx-like module. httpx2 has httpx's API class for class, so
# httpx's types describe either library to a type checker.
if TYPE_CHECKING:
    import httpx as http

    from hermes_transport import AsyncWatchdogTransport, WatchdogTransport
elif FLAVOR == "httpx2":
    import httpx2 as http

    from hermes_transport.httpx2 import AsyncWatchdogTransport, WatchdogTransport
else:
    import httpx as http

    from hermes_transport import AsyncWatchdogTransport, WatchdogTransport
