"""A background WebSocket turn resumed over HTTP, sync and async.

When a turn created with ``background: true`` stalls (or its connection drops) after
output, the watched connection (``websocket``, ``awebsocket``) goes on with it here:
``GET /responses/{id}?stream=true&starting_after=N`` on the client's base URL, with the
client's headers, through a watchdog transport of the connection's policy and interrupt
(so the resumed stream is watched, and resumed again, under the SSE wire's rules). Its
events come back as frames, after event ``N`` only: none twice. Owns the HTTP client of
each resume, closed with its stream.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import httpx

from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .._core.wires import sequence_number
from .._core.ws_ends import NO_CLIENT
from .._core.ws_turns import TurnWatch
from .._flavors.httpx import async_http_client_for, http_client_for
from .websocket_link import FrameReader, Link, resume_request

__all__ = ["aresumed", "resumed"]

logger = logging.getLogger("hermes_transport")

#: Why not, the error that said so, and the resumed turn's frames (``None``: not resumed).
Resumed = tuple[str, BaseException | None, Iterator[bytes] | None]
AsyncResumed = tuple[str, BaseException | None, AsyncIterator[bytes] | None]


def _target(link: Link, turns: TurnWatch) -> tuple[httpx.Request, int] | str:
    turn = turns.turn
    assert turn is not None
    assert turn.response_id is not None
    client = link.client
    if client is None:
        return NO_CLIENT
    return resume_request(client, turn.response_id, turn.sequence), turn.sequence


def _resumed(turns: TurnWatch) -> None:
    turn = turns.turn
    assert turn is not None
    turn.record.resumed()
    turns.unwatch()  # the turn's events come over HTTP, watched there
    logger.warning("WebSocket background turn cut after output; resumed over HTTP")


def resumed(
    link: Link, turns: TurnWatch, policy: StreamPolicy, interrupts: tuple[Interrupt, ...]
) -> Resumed:
    """Resume the current turn over HTTP; see the module docstring."""
    target = _target(link, turns)
    if isinstance(target, str):
        return target, None, None
    request, after = target
    interrupt = interrupts[0] if interrupts else None
    # The factory's client: proxies from the environment, as the SDK's own would have.
    http = http_client_for(None, policy=policy, interrupt=interrupt, timeout=None)
    try:
        response = http.send(request, stream=True)
    except BaseException as exc:
        http.close()
        if not isinstance(exc, Exception):
            raise
        return f"; not resumed: {type(exc).__name__}: {exc}", exc, None
    if response.status_code != 200:
        response.read()
        response.close()
        http.close()
        return f"; not resumed: HTTP {response.status_code}", None, None
    _resumed(turns)
    return "", None, _frames(http, response, after)


async def aresumed(
    link: Link, turns: TurnWatch, policy: StreamPolicy, interrupts: tuple[Interrupt, ...]
) -> AsyncResumed:
    """``resumed``, async."""
    target = _target(link, turns)
    if isinstance(target, str):
        return target, None, None
    request, after = target
    interrupt = interrupts[0] if interrupts else None
    http = async_http_client_for(None, policy=policy, interrupt=interrupt, timeout=None)
    try:
        response = await http.send(request, stream=True)
    except BaseException as exc:
        await http.aclose()
        if not isinstance(exc, Exception):
            raise
        return f"; not resumed: {type(exc).__name__}: {exc}", exc, None
    if response.status_code != 200:
        await response.aread()
        await response.aclose()
        await http.aclose()
        return f"; not resumed: HTTP {response.status_code}", None, None
    _resumed(turns)
    return "", None, _aframes(http, response, after)


def _after(frame: bytes, after: int) -> bool:
    number = sequence_number(frame)
    return number is None or number > after


def _frames(http: httpx.Client, response: httpx.Response, after: int) -> Iterator[bytes]:
    reader = FrameReader()
    try:
        for line in response.iter_lines():
            frame = reader.line(line)
            if frame is not None and _after(frame, after):
                yield frame
        frame = reader.end()
        if frame is not None and _after(frame, after):
            yield frame
    finally:
        response.close()
        http.close()


async def _aframes(
    http: httpx.AsyncClient, response: httpx.Response, after: int
) -> AsyncIterator[bytes]:
    reader = FrameReader()
    try:
        async for line in response.aiter_lines():
            frame = reader.line(line)
            if frame is not None and _after(frame, after):
                yield frame
        frame = reader.end()
        if frame is not None and _after(frame, after):
            yield frame
    finally:
        await response.aclose()
        await http.aclose()
