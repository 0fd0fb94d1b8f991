"""A bare ``websockets`` connection watched per Responses turn: ``awatch_websocket``.

For clients that speak the Responses WebSocket wire themselves, on a ``websockets.asyncio``
connection they open (the OpenAI Agents SDK's WebSocket mode does, with no hook for the
openai SDK's ``responses.connect()``). ``WatchedWebSocket`` keeps the face of the
connection it wraps (``send`` of JSON text, ``recv``, ``close``, ``state``, ``transport``,
and any other attribute, read through) and puts ``AsyncWatchedConnection``'s watch under
it: a ``response.create`` sent starts a turn, each ``recv`` is watched, a stall or an
interrupt cuts the connection and raises. ``_Bare`` gives the bare connection the shape
of the SDK's connection that the watched connection drives. Re-sending on a fresh
connection needs ``reopen`` (how the client opens one); a resume over HTTP needs a client
and is not done here.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .awebsocket import AsyncWatchedConnection
from .websocket_link import Link

__all__ = ["WatchedWebSocket", "awatch_websocket"]

#: How a client opens a fresh connection of the same kind.
Reopen = Callable[[], Awaitable[Any]]


def awatch_websocket(
    websocket: Any,
    *,
    policy: StreamPolicy | None = None,
    interrupt: Interrupt | None = None,
    on_stats: StatsCallback | None = None,
    reopen: Reopen | None = None,
) -> WatchedWebSocket:
    """Watch the Responses turns of a ``websockets.asyncio`` client connection that its
    client drives itself, as ``awatch_connection`` does the openai SDK's.

    The result is used as the connection was (``await send(text)``, ``await recv()``,
    ``await close()``, ``state``, ``transport``). ``reopen``, if given, opens a fresh
    connection (``await reopen()``): a turn cut before its first output is then sent again
    on one, up to ``policy.retries`` times; without it the turn's ``StreamStalled`` is
    raised at once.
    """
    if not callable(getattr(websocket, "recv", None)) or not hasattr(websocket, "transport"):
        raise TypeError(
            "awatch_websocket() takes a websockets.asyncio client connection;"
            f" got {type(websocket).__name__}"
        )
    bare = _Bare(websocket, reopen)
    watched = AsyncWatchedConnection(
        Link(None, bare), policy or StreamPolicy.from_env(), interrupt, on_stats
    )
    return WatchedWebSocket(watched, bare)


class _Create(dict[str, Any]):
    """A ``response.create`` read from the text a client sent, and that text, sent as is."""

    text: str | bytes = ""


class _Bare:
    """A bare connection in the shape of the openai SDK's, for ``AsyncWatchedConnection``."""

    response = None  # no resource: the client sends its own frames

    def __init__(self, websocket: Any, reopen: Reopen | None) -> None:
        self._connection = websocket
        self._make_ws: Callable[[Any, Any], Awaitable[Any]] | None = None
        if reopen is not None:
            self._make_ws = lambda query, headers: reopen()

    async def recv_bytes(self) -> bytes:
        data = await self._connection.recv(decode=False)
        return data if isinstance(data, bytes) else bytes(data)

    async def send(self, event: Any) -> None:
        message = event.text if isinstance(event, _Create) else event
        await self._connection.send(message)

    def parse_event(self, data: str | bytes) -> str:
        return data.decode() if isinstance(data, bytes) else data

    async def close(self, *, code: int = 1000, reason: str = "") -> None:
        await self._connection.close(code, reason)


def _create_in(message: object) -> _Create | None:
    """The ``response.create`` in a message the client sends, if it is one."""
    if not isinstance(message, str | bytes) or b"response.create" not in (
        message.encode() if isinstance(message, str) else message
    ):
        return None
    try:
        payload = json.loads(message)
    except ValueError:
        return None
    if not isinstance(payload, dict) or payload.get("type") != "response.create":
        return None
    create = _Create(payload)
    create.text = message
    return create


class WatchedWebSocket:
    """A ``websockets.asyncio`` connection whose Responses turns are watched."""

    def __init__(self, watched: AsyncWatchedConnection, bare: _Bare) -> None:
        self._watched = watched
        self._bare = bare

    async def send(self, message: Any) -> None:
        """Send a message; a ``response.create`` starts a turn."""
        create = _create_in(message)
        await self._watched.send(create if create is not None else message)

    async def recv(self, decode: bool | None = None) -> str | bytes:
        """The next message, watched (text, as ``websockets`` gives a text frame; bytes
        with ``decode=False``)."""
        data = await self._watched.recv_bytes()
        return data if decode is False else data.decode()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        await self._watched.close(code=code, reason=reason)

    @property
    def state(self) -> Any:
        """The current connection's state (a fresh one after a re-send)."""
        return self._bare._connection.state

    @property
    def transport(self) -> Any:
        return self._bare._connection.transport

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bare._connection, name)
