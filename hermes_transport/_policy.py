"""``StreamPolicy``: how long a stream may go without progress, and how often to re-send."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

__all__ = ["StreamPolicy"]

ENV_STALE_TIMEOUT = "HERMES_STREAM_STALE_TIMEOUT"
ENV_FIRST_EVENT_TIMEOUT = "HERMES_STREAM_FIRST_EVENT_TIMEOUT"
ENV_RETRIES = "HERMES_STREAM_RETRIES"
_OFF = "off"


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

    Limits: the budgets are wall-clock seconds checked by one watcher thread,
    so a stall is reported a few milliseconds after its deadline, never before.
    DNS resolution cannot be interrupted and is not bounded by these budgets.
    """

    stale_timeout: float | None = 180.0
    first_event_timeout: float | None = None
    retries: int = 2

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
        ``HERMES_STREAM_RETRIES`` (an int >= 0). Unset or empty variables keep
        the defaults. ``environ`` defaults to ``os.environ``. A malformed value
        raises ``ValueError`` naming the variable.
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
        values.update(overrides)
        return replace(cls(), **values)


class _Unset:
    pass


_UNSET: Any = _Unset()


def _check_seconds(name: str, value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds > 0 or None, got {value!r}")
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be a number of seconds > 0 or None, got {value!r}")
    return float(value)


def _env_seconds(env: Mapping[str, str], name: str, *, off: float | None) -> Any:
    raw = env.get(name, "").strip()
    if not raw:
        return _UNSET
    if raw.lower() == _OFF:
        return off
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds > 0 or 'off', got {raw!r}") from None
    if math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be a number of seconds > 0 or 'off', got {raw!r}")
    return value
