"""Keepalive event types per wire: what ``StreamPolicy.heartbeat_events`` holds.

Owns ``WireEvents`` (a read-only, hashable mapping of every wire to its
names), the defaults, and the checks that turn what a caller or the
environment gives into one, with errors that name the field. Pure.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any, Final

from .sse import MAX_EVENT_TYPE
from .wires import WIRES, Wire

__all__ = ["DEFAULT_HEARTBEAT_EVENTS", "OFF", "WireEvents", "env_event_types", "per_wire"]

#: What an environment variable says for "none" (no bound, no keepalives).
OFF = "off"


class WireEvents(Mapping[Wire, frozenset[str]]):
    """Event type names per wire, every wire present: a read-only, hashable mapping.

    What ``StreamPolicy.heartbeat_events`` holds; equal to a ``dict`` with the
    same items, and pickled as one.
    """

    __slots__ = ("_names",)

    def __init__(self, names: Mapping[Wire, frozenset[str]]) -> None:
        self._names = {wire: names[wire] for wire in WIRES}

    def __getitem__(self, wire: Wire) -> frozenset[str]:
        return self._names[wire]

    def __iter__(self) -> Iterator[Wire]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __hash__(self) -> int:
        return hash(tuple(self._names.items()))

    def __repr__(self) -> str:
        return repr(self._names)

    def __reduce__(self) -> tuple[Any, ...]:
        return (WireEvents, (self._names,))


#: The keepalives each wire sends while a model is silent: Anthropic's Messages
#: API ``event: ping``, OpenAI's Responses API ``keepalive`` data events
#: (undocumented; seen in the wild since early 2026). ``ping`` stays a
#: keepalive on Chat Completions and generic streams, as it always was. Gemini
#: sends none: its events are untyped, and a proxy's comments are no events. MCP's
#: keepalive is the server's ``ping`` request, known from its data, not its type.
DEFAULT_HEARTBEAT_EVENTS: Final = WireEvents(
    {
        "chat_completions": frozenset({"ping"}),
        "responses": frozenset({"keepalive"}),
        "messages": frozenset({"ping"}),
        "gemini": frozenset(),
        "mcp": frozenset(),
        "generic": frozenset({"ping"}),
    }
)


def per_wire(value: object) -> WireEvents:
    """``heartbeat_events`` as given, checked, as a ``WireEvents`` of every wire."""
    if isinstance(value, WireEvents):
        return value
    if isinstance(value, Mapping):
        names = dict(DEFAULT_HEARTBEAT_EVENTS)
        for wire, given in value.items():
            if wire not in WIRES:
                raise ValueError(
                    f"heartbeat_events: unknown wire {wire!r}; the wires are {', '.join(WIRES)}"
                )
            names[wire] = _check_event_types(given)
        return WireEvents(names)
    checked = _check_event_types(value)
    return WireEvents(dict.fromkeys(WIRES, checked))


def env_event_types(raw: str) -> object:
    """``HERMES_STREAM_HEARTBEAT_EVENTS`` as ``heartbeat_events`` would take it."""

    def names(text: str) -> list[str]:
        text = text.strip()
        return [] if text.lower() == OFF else [name.strip() for name in text.split(",")]

    if "=" not in raw:
        return names(raw)
    per_wire: dict[str, list[str]] = {}
    for group in raw.split(";"):
        if not group.strip():
            continue
        wire, equals, given = group.partition("=")
        if not equals:
            raise ValueError(f"group {group.strip()!r} names no wire")
        per_wire[wire.strip()] = names(given)
    return per_wire


def _check_event_types(value: object) -> frozenset[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Collection):
        raise ValueError(
            "heartbeat_events must be a collection of event type names"
            f" (such as {{'ping'}}), got {value!r}"
        )
    for name in value:
        if (
            not isinstance(name, str)
            or not name
            or len(name.encode()) > MAX_EVENT_TYPE
            or any(c in name for c in "\r\n")
        ):
            raise ValueError(
                "heartbeat_events: each must be a str of 1 to"
                f" {MAX_EVENT_TYPE} bytes without line breaks, got {name!r}"
            )
    return frozenset(value)
