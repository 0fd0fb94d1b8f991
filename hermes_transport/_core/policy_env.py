"""What the ``HERMES_STREAM_*`` environment variables say: ``StreamPolicy.from_env``'s reading.

Owns the variables' names and ``env_values``, which turns them into policy field values,
with a ``ValueError`` naming the variable for a malformed one. Read only when asked (the
policy's ``from_env``); nothing here reads ``os.environ`` by itself.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from .budgets import MAX_SECONDS, in_range
from .heartbeats import OFF, env_event_types, per_wire

__all__ = [
    "ENV_BUDGET_RULES",
    "ENV_FIRST_EVENT_TIMEOUT",
    "ENV_HEARTBEAT_EVENTS",
    "ENV_RESUMES",
    "ENV_RETRIES",
    "ENV_STALE_TIMEOUT",
    "ENV_VARIABLES",
    "env_values",
]

ENV_STALE_TIMEOUT = "HERMES_STREAM_STALE_TIMEOUT"
ENV_FIRST_EVENT_TIMEOUT = "HERMES_STREAM_FIRST_EVENT_TIMEOUT"
ENV_RETRIES = "HERMES_STREAM_RETRIES"
ENV_HEARTBEAT_EVENTS = "HERMES_STREAM_HEARTBEAT_EVENTS"
ENV_RESUMES = "HERMES_STREAM_RESUMES"
ENV_BUDGET_RULES = "HERMES_STREAM_BUDGET_RULES"
ENV_VARIABLES: Final = (
    ENV_STALE_TIMEOUT,
    ENV_FIRST_EVENT_TIMEOUT,
    ENV_RETRIES,
    ENV_RESUMES,
    ENV_BUDGET_RULES,
    ENV_HEARTBEAT_EVENTS,
)


def env_values(env: Mapping[str, str]) -> dict[str, Any]:
    """The policy field values ``env`` sets (the unset and blank variables set none)."""
    values: dict[str, Any] = {}
    for name, variable in (
        ("stale_timeout", ENV_STALE_TIMEOUT),
        ("first_event_timeout", ENV_FIRST_EVENT_TIMEOUT),
    ):
        seconds = _env_seconds(env, variable)
        if seconds is not _UNSET:
            values[name] = seconds
    for name, variable in (("retries", ENV_RETRIES), ("resumes", ENV_RESUMES)):
        raw = env.get(variable, "").strip()
        if raw:
            count = int(raw) if raw.isascii() and raw.isdigit() else -1  # no sign, no "1_0"
            if count < 0:
                raise ValueError(f"{variable} must be an integer >= 0, got {raw!r}")
            values[name] = count
    raw = env.get(ENV_BUDGET_RULES, "").strip().lower()
    if raw == OFF:
        values["budget_rules"] = None
    elif raw not in ("", "on"):
        raise ValueError(
            f"{ENV_BUDGET_RULES} must be 'off' (no budget rules) or 'on' (the defaults),"
            f" got {env.get(ENV_BUDGET_RULES)!r}"
        )
    raw = env.get(ENV_HEARTBEAT_EVENTS, "").strip()
    if raw:
        try:
            values["heartbeat_events"] = per_wire(env_event_types(raw))
        except ValueError as exc:
            raise ValueError(
                f"{ENV_HEARTBEAT_EVENTS} must be event type names separated by commas"
                " (or 'off'), for every wire, or per wire as 'wire=names' groups"
                f" separated by ';'; got {raw!r}: {exc}"
            ) from None
    return values


_UNSET: Any = object()  # an unset or blank variable


def _env_seconds(env: Mapping[str, str], name: str) -> Any:
    """The variable's seconds, ``None`` for ``off``, or ``_UNSET`` when unset or blank."""
    raw = env.get(name, "").strip()
    if not raw:
        return _UNSET
    if raw.lower() == OFF:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    # "1e400" parses as inf: only a spelled-out infinity means no bound.
    spelled_inf = raw.lower().lstrip("+") in ("inf", "infinity")
    if not in_range(value) or (value == math.inf and not spelled_inf):
        raise ValueError(
            f"{name} must be a number of seconds > 0 and at most {MAX_SECONDS:.0f} (a year),"
            f" or 'off'; got {raw!r}"
        )
    return value
