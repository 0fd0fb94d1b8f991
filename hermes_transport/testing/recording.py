"""How the fault server hears a request, before any wire counts it.

Owns :func:`heard`: a request as it arrived, its JSON body parsed and its headers
lower-cased, not yet numbered as an attempt. ``FaultServer`` numbers it (its wires'
attempts); the MCP wire, whose attempts its sessions decide, too. It imports nothing
else of the package but the request's record.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from .scenarios import RecordedRequest

if TYPE_CHECKING:
    from .handler import Handler

__all__ = ["heard"]


def heard(handler: Handler, body: bytes, arrived: float) -> RecordedRequest:
    """What arrived, before it is counted: its JSON body parsed (if it is JSON), its headers
    lower-cased (repeated ones joined), ``stream`` the body's own, attempt -1."""
    try:
        parsed: object | None = json.loads(body) if body else None
    except ValueError:
        parsed = None
    stream = parsed.get("stream") if isinstance(parsed, dict) else None
    headers: dict[str, str] = {}
    for name, value in handler.headers.items():
        key = name.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return RecordedRequest(
        method=handler.command,
        path=handler.path,
        headers=headers,
        body=body,
        json=parsed,
        stream=stream if isinstance(stream, bool) else None,
        time=arrived,
        attempt=-1,
    )
