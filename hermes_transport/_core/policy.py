"""``StreamPolicy``: how long a stream may go without progress, and how often to re-send."""

from __future__ import annotations

import math
import os
import reprlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

from .sse import MAX_EVENT_TYPE

__all__ = ["StreamPolicy"]

ENV_STALE_TIMEOUT = "HERMES_STREAM_STALE_TIMEOUT"
ENV_FIRST_EVENT_TIMEOUT = "HERMES_STREAM_FIRST_EVENT_TIMEOUT"
ENV_RETRIES = "HERMES_STREAM_RETRIES"
ENV_HEARTBEAT_EVENTS = "HERMES_STREAM_HEARTBEAT_EVENTS"
_OFF = "off"
#: The longest finite budget, in seconds: a year. Longer ones are refused
#: (``math.inf`` or ``None`` turn a bound off) rather than handed to timers that
#: cannot hold them (``threading.TIMEOUT_MAX``, an event loop's millisecond clock).
MAX_SECONDS = 365 * 24 * 3600.0
#: Anthropic's Messages API sends ``event: ping`` while a model is silent.
DEFAULT_HEARTBEAT_EVENTS = frozenset({"ping"})


@dataclass(frozen=True, kw_only=True)
class StreamPolicy:
    """Liveness budgets for streaming responses, as a frozen value.

    ``stale_timeout``: seconds a stream may go without a progress event (an SSE
    event carrying ``data``; keepalive comments do not count) after its first
    one before it is cut and ``StreamStalled`` raised. ``None`` turns the
    stall watch off.

    ``first_event_timeout``: seconds from sending a streaming request to its
    first progress event, waiting for headers included, per attempt. ``None``
    means "same as ``stale_timeout``"; ``math.inf`` turns this bound off while
    keeping the stall watch (reasoning models may think for minutes before
    their first token).

    ``retries``: how many times a stream that stalled *before* its first event
    is re-sent (its connection is closed, never reused). A stream that stalled
    after its first event is never re-sent by the transport: the caller may
    have shown its content already.

    ``heartbeat_events``: SSE event types (the ``event:`` field) that are
    keepalives, not progress, even though they carry ``data``. The default,
    ``{"ping"}``, is Anthropic's: a model that only pings has stalled. Give
    any collection of names (stored as a frozenset); an empty one makes every
    data event progress.

    A finite budget is at most ``MAX_SECONDS`` (a year); anything longer is a
    ``ValueError``, like zero, negative, NaN or non-numeric ones.

    Limits: the budgets are wall-clock seconds checked by one watcher thread,
    so a stall is reported a few milliseconds after its deadline, never before.
    DNS resolution cannot be interrupted and is not bounded by these budgets.
    """

    stale_timeout: float | None = 180.0
    first_event_timeout: float | None = None
    retries: int = 2
    heartbeat_events: frozenset[str] = field(default=DEFAULT_HEARTBEAT_EVENTS)

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "stale_timeout", _check_seconds("stale_timeout", self.stale_timeout)
        )
        object.__setattr__(
            self,
            "first_event_timeout",
            _check_seconds("first_event_timeout", self.first_event_timeout),
        )
        if isinstance(self.retries, bool) or not isinstance(self.retries, int):
            raise ValueError(f"retries must be an int >= 0, got {self.retries!r}")
        if self.retries < 0:
            raise ValueError(f"retries must be an int >= 0, got {self.retries!r}")
        object.__setattr__(self, "heartbeat_events", _check_event_types(self.heartbeat_events))

    @property
    def first_event_budget(self) -> float | None:
        """Seconds allowed until the first progress event, or ``None`` for no bound."""
        budget = self.first_event_timeout
        if budget is None:
            budget = self.stale_timeout
        return None if budget is None or math.isinf(budget) else budget

    @property
    def stale_budget(self) -> float | None:
        """Seconds allowed between progress events, or ``None`` for no bound."""
        budget = self.stale_timeout
        return None if budget is None or math.isinf(budget) else budget

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> StreamPolicy:
        """Build a policy from the environment, then apply keyword ``overrides``.

        Reads ``HERMES_STREAM_STALE_TIMEOUT`` and
        ``HERMES_STREAM_FIRST_EVENT_TIMEOUT`` (seconds, or ``off``) and
        ``HERMES_STREAM_RETRIES`` (an int >= 0) and
        ``HERMES_STREAM_HEARTBEAT_EVENTS`` (event type names separated by
        commas, or ``off`` for none). Unset or empty variables keep
        the defaults. ``environ`` defaults to ``os.environ``. A malformed value
        (a budget above ``MAX_SECONDS`` included) raises ``ValueError`` naming
        the variable.
        """
        env = os.environ if environ is None else environ
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(
                f"StreamPolicy.from_env() got unknown field(s) {', '.join(unknown)};"
                f" fields are {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        stale = _env_seconds(env, ENV_STALE_TIMEOUT, off=None)
        if stale is not _UNSET:
            values["stale_timeout"] = stale
        first = _env_seconds(env, ENV_FIRST_EVENT_TIMEOUT, off=math.inf)
        if first is not _UNSET:
            values["first_event_timeout"] = first
        raw = env.get(ENV_RETRIES, "").strip()
        if raw:
            try:
                values["retries"] = int(raw)
            except ValueError:
                raise ValueError(f"{ENV_RETRIES} must be an integer >= 0, got {raw!r}") from None
            if values["retries"] < 0:
                raise ValueError(f"{ENV_RETRIES} must be an integer >= 0, got {raw!r}")
        raw = env.get(ENV_HEARTBEAT_EVENTS, "").strip()
        if raw:
            names = [] if raw.lower() == _OFF else [n.strip() for n in raw.split(",")]
            try:
                values["heartbeat_events"] = _check_event_types(names)
            except ValueError as exc:
                raise ValueError(
                    f"{ENV_HEARTBEAT_EVENTS} must be event type names separated by commas,"
                    f" or 'off'; got {raw!r}: {exc}"
                ) from None
        values.update(overrides)
        return replace(cls(), **values)


class _Unset:
    pass


_UNSET: Any = _Unset()


def _check_seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        # Compared before any float(): an int too large for a float is refused, not raised on.
        or not _in_range(value)
    ):
        raise ValueError(
            f"{name} must be a number of seconds > 0 and at most {MAX_SECONDS:.0f} (a year),"
            f" math.inf or None; got {reprlib.repr(value)}"
        )
    return float(value)


def _in_range(value: float) -> bool:
    """``0 < value <= MAX_SECONDS``, or ``+inf``; NaN is out (every comparison fails)."""
    return value == math.inf or 0 < value <= MAX_SECONDS


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


def _env_seconds(env: Mapping[str, str], name: str, *, off: float | None) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return _UNSET
    if raw.lower() == _OFF:
        return off
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # "1e400" parses as inf: only a spelled-out infinity means no bound.
    spelled_inf = raw.lower().lstrip("+") in ("inf", "infinity")
    if not _in_range(value) or (value == math.inf and not spelled_inf):
        raise ValueError(
            f"{name} must be a number of seconds > 0 and at most {MAX_SECONDS:.0f} (a year),"
            f" or 'off'; got {raw!r}"
        )
    return value
