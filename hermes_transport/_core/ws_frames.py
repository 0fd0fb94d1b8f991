"""What the frames and client events of a Responses WebSocket say, read cheaply.

A frame is one server event's JSON (what the SSE wire puts in ``data:``); ``frame_type``
reads its type from its leading bytes (one C call for the deltas that make up most of a
turn, a slice for the rest, a parse only for a frame whose ``"type"`` is not its first key);
``special_types`` are the types whose class ``wires.classify`` must decide (any other is
output). ``create_of``, ``field_of`` and ``size_of`` read a client event, a mapping or the
SDK's model alike. Pure; ``ws_turns`` judges with them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .wires import leading_type, read_types, sequence_number

__all__ = [
    "DELTAS",
    "STEER_TYPES",
    "create_of",
    "field_of",
    "frame_type",
    "sequence_of",
    "size_of",
    "special_types",
]


def field_of(event: object, name: str) -> Any:
    if isinstance(event, Mapping):
        return event.get(name)
    return getattr(event, name, None)


def create_of(event: object) -> bool:
    """Whether a client event (a mapping, or the SDK's model) is a ``response.create``."""
    return bool(field_of(event, "type") == "response.create")


def size_of(event: object) -> int | None:
    """The create's size in bytes as JSON, for the budget rules (``None``: unknown)."""
    dump = getattr(event, "to_json", None)
    try:
        text = dump() if callable(dump) else json.dumps(event, default=str)
    except (TypeError, ValueError):
        return None
    return len(text) if isinstance(text, str) else None


def frame_type(data: bytes) -> bytes:
    """A frame's type: its JSON's leading ``"type"`` (as the API sends it, sliced without
    a pattern), else the one the JSON names anywhere."""
    if data.startswith(_TYPE_STARTS):
        start = 9 if data[8] == 0x22 else 10  # after '{"type":"' or '{"type": "'
        end = data.find(b'"', start)
        if end > start:
            return data[start:end]
    return leading_type(data) or _type_of(data)


_TYPE_STARTS = (b'{"type":"', b'{"type": "')
#: The leading bytes of the deltas that make up most of a turn (output, whatever follows).
DELTAS = tuple(
    start + b"response." + kind + b'"'
    for start in _TYPE_STARTS
    for kind in (
        b"output_text.delta",
        b"function_call_arguments.delta",
        b"reasoning_summary_text.delta",
        b"reasoning_text.delta",
        b"refusal.delta",
        b"audio.delta",
        b"audio.transcript.delta",
        b"custom_tool_call_input.delta",
    )
)


def _type_of(data: bytes) -> bytes:
    """A frame's ``type`` where it is not the JSON's first key (``message``: none)."""
    try:
        payload = json.loads(data)
    except ValueError:
        return b"message"
    kind = payload.get("type") if isinstance(payload, dict) else None
    return kind.encode() if isinstance(kind, str) else b"message"


def sequence_of(data: bytes, last: int) -> int:
    number = sequence_number(data)
    return last if number is None else number


#: The WebSocket's own events about steering input (openai 3.x): lifecycle, no output.
STEER_TYPES = frozenset(
    {b"response.steer.accepted", b"response.steer.pending", b"response.steer.failed"}
)


def special_types(heartbeats: frozenset[bytes]) -> frozenset[bytes]:
    """The frame types that are not output whatever their data, or may not be, with these
    heartbeats (``wires.classify`` decides, or ``STEER_TYPES`` are preamble); any other
    type is output."""
    return heartbeats | read_types("responses") | STEER_TYPES
