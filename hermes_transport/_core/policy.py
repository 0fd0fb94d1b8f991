"""``StreamPolicy``: how long a stream may go without progress, and how often to re-send."""

from __future__ import annotations

import enum
import os
import reprlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, ClassVar, Final, Literal

from .budgets import (
    DEFAULT_BUDGET_RULES,
    BudgetRules,
    DefaultSeconds,
    check_seconds,
    estimate_tokens,
)
from .call_budgets import CallBudgets, derive
from .heartbeats import DEFAULT_HEARTBEAT_EVENTS, WireEvents, per_wire
from .policy_env import ENV_VARIABLES, env_values
from .wires import Wire

__all__ = ["StreamPolicy"]

#: ``stale_timeout``'s default: 180 s, which the budget rules may change per call.
DEFAULT_STALE_TIMEOUT: Final = DefaultSeconds(180.0)


class _SameAsStale(enum.Enum):
    """The type of ``StreamPolicy.SAME_AS_STALE``: one member, so it stays one object.

    An enum member (as urllib3's ``_DEFAULT_TIMEOUT`` is) keeps its identity through
    ``copy``, ``deepcopy`` and ``pickle``, hashes, and narrows under a type checker.
    """

    SAME_AS_STALE = "same as stale"

    def __repr__(self) -> str:
        return "StreamPolicy.SAME_AS_STALE"

    __str__ = __repr__


#: ``first_event_timeout``'s default: "whatever ``stale_timeout`` is", off included.
SAME_AS_STALE: Final = _SameAsStale.SAME_AS_STALE


@dataclass(frozen=True, kw_only=True)
class StreamPolicy:
    """Liveness budgets for streaming responses, as a frozen value.

    ``stale_timeout``: seconds a stream may go without a progress event (an SSE
    event carrying ``data`` that its wire counts as output or end: keepalive
    comments, ``heartbeat_events`` and the Responses and Messages preamble do
    not count) after its first one before it is cut and ``StreamStalled``
    raised. ``None`` turns the stall watch off.

    ``first_event_timeout``: seconds from when a streaming attempt gets its
    connection (a new one, or a pooled one; waiting for a free one in a full
    pool does not count) to its first progress event, per attempt. The
    default, ``StreamPolicy.SAME_AS_STALE``, means "whatever ``stale_timeout``
    is" (off when it is off); ``None`` turns this bound off while keeping the
    stall watch (reasoning models may think for minutes before their first
    token).

    ``None`` means "no bound" for both budgets; ``math.inf`` is accepted as
    the same thing and stored as ``None``, so that equal settings make equal
    policies.

    ``retries``: how many times a stream that stalled *before* its first event
    is re-sent (its connection is closed, never reused). A stream that stalled
    after its first event is never re-sent by the transport: the caller may
    have shown its content already (but see ``resumes``).

    ``resumes``: how many times, per call, a resumable stream is resumed
    instead of failed: a Responses stream created with ``"background": true``
    (or the resume ``GET /responses/{id}?stream=true`` itself) that stalls or
    whose connection dies, before or after its first event, is continued from
    the last event the caller got (``GET /responses/{id}?stream=true&starting_after=N``),
    in the same response body. Each resumed stream is watched by the same
    budgets. ``0`` turns resuming off.

    ``cancel_on_interrupt``: whether an interrupt of a resumable stream whose
    response id is known also cancels that response on the server
    (``POST /responses/{id}/cancel``, given at most ``CANCEL_TIMEOUT`` seconds;
    async sends it on a task of the caller's loop, after the caller has its
    error; sync, having no other thread, before raising it), so that
    an abandoned background turn stops running. This governs interrupts only:
    a creation given up after a stall before the caller saw any of it is
    cancelled whatever this says.

    ``checkpoint_interval``: seconds between two checkpoints of a background Responses
    stream given to an ``on_checkpoint`` callback (``ResumeCheckpoint``: where a next
    process resumes it); one is given as soon as the response id is known, and at every
    stall, interrupt and close while the response is unfinished. ``None``: only those.

    ``budget_rules``: how a call's budgets follow what its request says
    (``BudgetRules``: the model, by pattern, with floors for reasoning-class
    models out of the box; the prompt's size, scaling the first-event
    budget); ``None`` turns them off. They change only the budgets no one
    set: a ``stale_timeout`` or ``first_event_timeout`` given here or in the
    environment wins over every rule, shorter or longer (a first-event
    budget left to follow the stale one follows a stale one given as it is).
    ``budgets_for(model, body_size)`` says what a call gets.

    ``heartbeat_events``: per wire (``chat_completions``, ``responses``,
    ``messages``, ``generic``: what the request's path speaks), the SSE event
    types (the ``event:`` field, or on the Responses and Messages wires the
    data's leading ``"type"``) that are keepalives, not progress, even though
    they carry ``data``. The defaults: ``keepalive`` on Responses, ``ping``
    elsewhere (Anthropic's): a model that only keeps alive has stalled. Give
    a mapping of wire to names (the wires left out keep their defaults), or
    one collection of names for every wire in place of the defaults (an
    empty one makes every data event output). Stored as a read-only mapping
    of every wire to a frozenset; ``heartbeats_for(wire)`` reads it.

    A finite budget is at most ``MAX_SECONDS`` (a year); anything longer is a
    ``ValueError`` naming the field, like zero, negative, NaN or non-numeric
    ones (``SAME_AS_STALE`` is refused for ``stale_timeout`` itself).

    Limits: the budgets are wall-clock seconds checked by one watcher thread
    (async code: the event loop's timers), so a stall is reported a few
    milliseconds after its deadline, never before. Sync only: DNS resolution
    cannot be cut short; its time counts against the first-event budget, and a
    stall that falls during it is raised when it ends (async cancels it).
    """

    #: ``first_event_timeout``'s default: the first event gets ``stale_timeout``.
    SAME_AS_STALE: ClassVar[Literal[_SameAsStale.SAME_AS_STALE]] = SAME_AS_STALE

    stale_timeout: float | None = DEFAULT_STALE_TIMEOUT
    first_event_timeout: float | Literal[_SameAsStale.SAME_AS_STALE] | None = SAME_AS_STALE
    retries: int = 2
    resumes: int = 3
    cancel_on_interrupt: bool = True
    checkpoint_interval: float | None = 1.0
    budget_rules: BudgetRules | None = DEFAULT_BUDGET_RULES
    heartbeat_events: Collection[str] | Mapping[Wire, Collection[str]] = field(
        default=DEFAULT_HEARTBEAT_EVENTS
    )
    # Which budgets are the defaults (the rules may change those): compared, so
    # that a policy given 180 s is not equal to one left at the default.
    _defaults: frozenset[str] = field(init=False, repr=False, default=frozenset())

    def __post_init__(self) -> None:
        stale: object = self.stale_timeout  # any object, until checked
        if stale is SAME_AS_STALE:
            raise ValueError(
                "stale_timeout cannot be StreamPolicy.SAME_AS_STALE (that is for"
                " first_event_timeout); give seconds, or None for no stall watch"
            )
        object.__setattr__(
            self, "stale_timeout", check_seconds("stale_timeout", self.stale_timeout)
        )
        if self.first_event_timeout is not SAME_AS_STALE:
            object.__setattr__(
                self,
                "first_event_timeout",
                check_seconds(
                    "first_event_timeout",
                    self.first_event_timeout,
                    also=", or StreamPolicy.SAME_AS_STALE",
                ),
            )
        for name in ("retries", "resumes"):
            count = getattr(self, name)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"{name} must be an int >= 0, got {count!r}")
        if not isinstance(self.cancel_on_interrupt, bool):
            raise ValueError(
                f"cancel_on_interrupt must be True or False, got {self.cancel_on_interrupt!r}"
            )
        interval = check_seconds("checkpoint_interval", self.checkpoint_interval)
        object.__setattr__(self, "checkpoint_interval", interval)
        if self.budget_rules is not None and not isinstance(self.budget_rules, BudgetRules):
            raise ValueError(
                "budget_rules must be a BudgetRules or None,"
                f" got {reprlib.repr(self.budget_rules)}"
            )
        object.__setattr__(self, "heartbeat_events", per_wire(self.heartbeat_events))
        defaults = frozenset(
            name
            for name in ("stale_timeout", "first_event_timeout")
            if isinstance(getattr(self, name), DefaultSeconds)
        )
        object.__setattr__(self, "_defaults", _DEFAULTS.setdefault(defaults, defaults))

    def heartbeats_for(self, wire: Wire) -> frozenset[str]:
        """The event types that are keepalives on ``wire``."""
        events: WireEvents = self.heartbeat_events  # type: ignore[assignment]
        return events[wire]

    @property
    def first_event_budget(self) -> float | None:
        """Seconds allowed until the first progress event, or ``None`` for no bound."""
        budget = self.first_event_timeout
        return self.stale_timeout if budget is SAME_AS_STALE else budget

    @property
    def stale_budget(self) -> float | None:
        """Seconds allowed between progress events, or ``None`` for no bound."""
        return self.stale_timeout

    def budgets_for(
        self,
        model: str | None = None,
        body_size: int | None = None,
        *,
        mcp: bool = False,
        tool: str | None = None,
    ) -> CallBudgets:
        """The budgets of a call to ``model`` whose request body is ``body_size`` bytes.

        The policy's own budgets, changed by ``budget_rules`` where no one set
        them; ``None`` for either argument: unknown (no rule of that kind applies).
        ``mcp``: an MCP request instead, with MCP's defaults (first event 300 s, stale
        120 s) and the tool rule matching ``tool`` (what a ``tools/call`` names).
        """
        tokens = None if body_size is None else estimate_tokens(body_size)
        first, stale, rules = self.first_event_budget, self.stale_timeout, self.budget_rules
        return derive(first, stale, rules, model, tokens, mcp=mcp, tool=tool)

    @property
    def longest_budget(self) -> float:
        """The longest finite budget a call can get under this policy (0: none): its own,
        and the rules' for the budgets no one set."""
        first, stale = self.first_event_budget, self.stale_timeout
        values = [b for b in (first, stale) if b is not None]
        if self.budget_rules is not None:
            values.append(
                self.budget_rules.longest(
                    first_event=isinstance(first, DefaultSeconds),
                    stale=isinstance(stale, DefaultSeconds),
                )
            )
        return max(values, default=0.0)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> StreamPolicy:
        """Build a policy from the environment, then apply keyword ``overrides``.

        Reads ``HERMES_STREAM_STALE_TIMEOUT`` and
        ``HERMES_STREAM_FIRST_EVENT_TIMEOUT`` (seconds, or ``off`` for no
        bound: ``None``, for either alike), ``HERMES_STREAM_RETRIES`` and
        ``HERMES_STREAM_RESUMES`` (ints >= 0), ``HERMES_STREAM_BUDGET_RULES``
        (``off``: no budget rules; ``on``: the defaults) and
        ``HERMES_STREAM_HEARTBEAT_EVENTS`` (event type names separated by
        commas, or ``off`` for none, for every wire; or per wire,
        ``responses=keepalive;messages=ping,off``-style groups separated by
        ``;``, the wires not named keeping their defaults). Unset or empty variables
        keep the defaults (so an unset first-event variable follows the stale
        one). ``environ`` defaults to ``os.environ``. A malformed value (a
        budget above ``MAX_SECONDS`` included) raises ``ValueError`` naming
        the variable.
        """
        if environ is None and not overrides:
            # A transport built without a policy reads the environment: a caller who builds
            # a client per call builds one each time. Frozen, the policy is shared.
            key = (cls, *map(os.environ.get, ENV_VARIABLES))
            policy = _FROM_ENVIRONMENT.get(key)
            if policy is None:
                policy = cls._read_env(os.environ, {})
                _FROM_ENVIRONMENT.clear()  # the environment seen last: one entry
                _FROM_ENVIRONMENT[key] = policy
            return policy
        return cls._read_env(os.environ if environ is None else environ, overrides)

    @classmethod
    def _read_env(cls, env: Mapping[str, str], overrides: dict[str, Any]) -> StreamPolicy:
        known = {f.name for f in fields(cls) if f.init}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise TypeError(
                f"StreamPolicy.from_env() got unknown field(s) {', '.join(unknown)};"
                f" fields are {', '.join(sorted(known))}"
            )
        values = env_values(env)
        values.update(overrides)
        return replace(cls(), **values)


#: ``from_env()``'s policy for the environment it read last (by class and values).
_FROM_ENVIRONMENT: dict[tuple[Any, ...], StreamPolicy] = {}
#: One frozenset of each kind for the policies' ``_defaults`` (at most four kinds).
_DEFAULTS: dict[frozenset[str], frozenset[str]] = {}
