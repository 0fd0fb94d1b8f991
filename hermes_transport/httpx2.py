"""The httpx2 flavor: the watchdog transports for openai 3.x's own HTTP stack.

openai 3.x builds its clients on ``httpx2`` (a fork of httpx with the same
transport API), and the anthropic 2.x SDK accepts nothing else. The classes
here are the ones in ``hermes_transport``, naming httpx2 instead of httpx;
the logic is shared, and so is every limit their docstrings state. The SDK
helpers (``openai_client_for``, ``stream_chat_completion`` and their async
twins) live in ``hermes_transport`` and work on either flavor; with
``flavor=None`` the factory picks httpx2 on openai 3.x::

    import anthropic
    from hermes_transport import httpx2 as ht2

    client = anthropic.Anthropic(http_client=ht2.http_client_for("cron"))

Importable only where httpx2 is installed (``pip install
'hermes-transport[httpx2]'``). A stall on this flavor raises this module's
``StreamStalled``: an ``httpx2.ReadTimeout`` and ``httpx2.RemoteProtocolError``,
and also a ``hermes_transport.StreamStalled`` (hence an httpx one), so one
``except hermes_transport.StreamStalled`` catches a stall of either flavor.
``StreamInterrupted`` is the same class on both.
"""

from __future__ import annotations

# Without httpx2 installed, this import raises an ImportError that says how to install it.
from ._flavors.httpx2 import (
    AsyncWatchdogTransport,
    StreamStalled,
    WatchdogTransport,
    async_http_client_for,
    http_client_for,
)

__all__ = [
    "AsyncWatchdogTransport",
    "StreamStalled",
    "WatchdogTransport",
    "async_http_client_for",
    "http_client_for",
]

# Shown, documented and pickled under the public name (see ``hermes_transport``).
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
