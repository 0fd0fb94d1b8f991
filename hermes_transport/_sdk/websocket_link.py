"""What a watched Responses WebSocket needs from the openai SDK's objects, sync or async.

The SDK's ``responses.connect()`` returns a connection manager; entering it gives the
connection (``ResponsesConnection``, or the async one), whose ``_connection`` is the
``websockets`` client connection. The watched connections (``websocket``, ``awebsocket``)
take either. This module finds, in whichever they were given, how to open a fresh
connection (the manager's own connect, or the one the connection keeps for its
reconnects) and the client (for a resume over HTTP), names the connection for errors and
statistics (its handshake's URL), and reads a resumed HTTP stream's events as frames.
It reads the SDK's private attributes in this one place, each with a fallback: what it
cannot find, the watched connection does without and says so in its errors. No I/O.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from .._core.resume import Resumable

logger = logging.getLogger("hermes_transport")

__all__ = [
    "FrameReader",
    "Link",
    "closed_errors",
    "handshake_request",
    "link_of",
    "resume_request",
]


class Link:
    """What was found: the SDK connection (once entered), how to open another, the client."""

    def __init__(self, manager: Any, connection: Any) -> None:
        self.manager = manager  # None when given an entered connection
        self.connection = connection  # None until the manager is entered
        make_ws = getattr(connection, "_make_ws", None)
        if manager is not None:
            make_ws = getattr(manager, "_connect_ws", None)
        self.owner = manager if manager is not None else getattr(make_ws, "__self__", None)
        self._make_ws: Callable[[Any, Any], Any] | None = make_ws
        if manager is not None and (make_ws is None or self.client is None):
            logger.warning(
                "watch_connection: this openai's connection manager (%s) does not keep its"
                " client and its connect where this version expects them: turns will not be"
                " sent again on a fresh connection, nor resumed",
                type(manager).__qualname__,
            )

    @property
    def can_reopen(self) -> bool:
        return self._make_ws is not None

    def reopen(self) -> Any:
        """A fresh ``websockets`` connection (or its awaitable), as the SDK opens them."""
        assert self._make_ws is not None
        conn = self.connection
        return self._make_ws(
            getattr(conn, "_extra_query", {}), getattr(conn, "_extra_headers", {})
        )

    @property
    def client(self) -> Any:
        """The openai client the connection was made from, if it can be found."""
        owner = self.owner
        if owner is None:
            return None
        return getattr(owner, f"_{type(owner).__name__}__client", None)


def link_of(target: object) -> Link:
    """The link of what ``responses.connect()`` returned, or of the connection it entered."""
    if callable(getattr(target, "_connect_ws", None)) and callable(getattr(target, "enter", None)):
        return Link(target, None)
    if not hasattr(target, "_connection") or not callable(getattr(target, "recv_bytes", None)):
        raise TypeError(
            "watch_connection() takes what client.responses.connect() returns, or the"
            f" connection entering it gives; got {type(target).__name__}"
        )
    return Link(None, target)


def handshake_request(ws: Any, tls: bool) -> httpx.Request:
    """The request errors and statistics name for a connection: its handshake's URL."""
    handshake = getattr(ws, "request", None)
    headers = getattr(handshake, "headers", None)
    host = headers.get("Host") if headers is not None else None
    path = str(getattr(handshake, "path", "/responses"))
    url = f"{'wss' if tls else 'ws'}://{host or 'localhost'}{path}"
    try:
        return httpx.Request("WEBSOCKET", url)
    except (httpx.InvalidURL, ValueError):
        return httpx.Request("WEBSOCKET", "ws://localhost/responses")


def resume_request(client: Any, response_id: str, after: int) -> httpx.Request:
    """``GET /responses/{id}?stream=true&starting_after=N`` on ``client``'s base URL and
    default query (Azure's ``api-version``, say), with its authentication and default
    headers: built by ``Resumable``, as the transport builds an HTTP stream's resume, from
    the ``POST /responses`` the client would have sent."""
    headers: dict[str, str] = {}
    for source in ("default_headers", "auth_headers"):
        found = getattr(client, source, None)
        if isinstance(found, Mapping):
            headers.update({k: v for k, v in found.items() if isinstance(v, str)})
    headers["Accept"] = "text/event-stream"
    query = getattr(client, "default_query", None)
    params = {k: str(v) for k, v in query.items()} if isinstance(query, Mapping) else {}
    url = str(client.base_url).rstrip("/") + "/responses"
    create = httpx.Request("POST", url, params=params, headers=headers)
    return Resumable(create, None, -1, httpx).resume_request(response_id, after)


class FrameReader:
    """The data of each event of a server-sent-events body read line by line: one frame
    each, as the WebSocket would carry it (a resumed turn's events, sync or async)."""

    def __init__(self) -> None:
        self._data: list[str] = []

    def line(self, line: str) -> bytes | None:
        """Take one line; the frame it completes, if it does."""
        if line.startswith("data:"):
            self._data.append(line[5:].removeprefix(" "))
        elif not line and self._data:
            return self.end()
        return None

    def end(self) -> bytes | None:
        """The body ended: the frame it completes, if any."""
        data, self._data = self._data, []
        return "\n".join(data).encode() if data else None


def closed_errors() -> tuple[type[Exception], type[Exception], type[Exception]]:
    """``websockets``' ``ConnectionClosed``, ``ConnectionClosedOK`` and
    ``ConnectionClosedError`` (imported when a watched connection is made, never with the
    package: ``websockets`` is an optional dependency)."""
    try:
        from websockets.exceptions import (
            ConnectionClosed,
            ConnectionClosedError,
            ConnectionClosedOK,
        )
    except ImportError as error:
        raise ImportError(
            "a watched Responses WebSocket needs the websockets library (>= 13):"
            " pip install 'hermes-transport[websocket]'"
        ) from error
    return ConnectionClosed, ConnectionClosedOK, ConnectionClosedError
