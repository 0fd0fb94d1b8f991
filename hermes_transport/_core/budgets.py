"""Budgets that fit the call: rules by model, tool and prompt size, as values.

``BudgetRules`` is configuration as a value: model rules (``ModelBudget``,
glob patterns with the budgets of the models they match), MCP tool rules
(``ToolBudget``, the same for the tools a ``tools/call`` names) and prompt-size
floors for the first-event budget. ``call_budgets.derive`` is the one place where a
call's budgets are decided from its policy's settings, these rules and what the
request says. Nothing here reads the environment or does I/O.
"""

from __future__ import annotations

import fnmatch
import math
import re
import reprlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import EllipsisType
from typing import Any, Final

__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_BUDGET_RULES",
    "MAX_SECONDS",
    "REASONING_MODELS",
    "BudgetRules",
    "DefaultSeconds",
    "ModelBudget",
    "ToolBudget",
    "check_seconds",
    "estimate_tokens",
    "in_range",
    "model_of",
]

#: Bytes of a request body per prompt token, for the estimate: about four
#: characters of English or JSON per token. An estimate, not a count.
BYTES_PER_TOKEN: Final = 4


class DefaultSeconds(float):
    """A budget no one set: the policy's default, which the rules may change.

    A ``float`` like any budget (it compares, formats and computes as its
    value); only its type says that it was not given. A budget the user
    gives, from an argument or the environment, is a plain ``float``; give a
    ``DefaultSeconds`` to set a default of your own that the rules may still
    change.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"DefaultSeconds({float(self)!r})"

    def __reduce__(self) -> tuple[type[DefaultSeconds], tuple[float]]:
        return (DefaultSeconds, (float(self),))


#: The longest finite budget, in seconds: a year. Longer ones are refused
#: (``None`` turns a bound off) rather than handed to timers that cannot hold
#: them (``threading.TIMEOUT_MAX``, an event loop's millisecond clock).
MAX_SECONDS = 365 * 24 * 3600.0


def check_seconds(name: str, value: object, *, also: str = "") -> float | None:
    """``value`` as float seconds; ``None`` (or its synonym ``math.inf``) as ``None``;
    a default (``DefaultSeconds``) as itself. Anything else is a ``ValueError``
    naming ``name`` (``also``: what else it may be)."""
    if isinstance(value, DefaultSeconds):
        return value
    if value is None or (isinstance(value, float) and value == math.inf):
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        # Compared before any float(): an int too large for a float is refused, not raised on.
        or not in_range(value)
    ):
        raise ValueError(
            f"{name} must be a number of seconds > 0 and at most {MAX_SECONDS:.0f} (a year),"
            f" or None for no bound{also}; got {reprlib.repr(value)}"
        )
    return float(value)


def in_range(value: float) -> bool:
    """``0 < value <= MAX_SECONDS``, or ``+inf``; NaN is out (every comparison fails)."""
    return value == math.inf or 0 < value <= MAX_SECONDS


@dataclass(frozen=True)
class ModelBudget:
    """The budgets of the calls whose model matches ``pattern``.

    ``pattern`` is a case-insensitive glob (``fnmatch``: ``*``, ``?``,
    ``[...]``) matched against the request's ``"model"``, and against the part
    after its last ``/`` (``openai/o3`` through a router is ``o3``).
    ``first_event`` and ``stale`` are seconds (``None``: no bound), or
    ``...`` to leave that budget to the next rule down (the default); a rule
    may shorten a budget as well as lengthen it.
    """

    pattern: str
    first_event: float | EllipsisType | None = ...
    stale: float | EllipsisType | None = ...

    def __post_init__(self) -> None:
        kind = type(self).__name__
        if not isinstance(self.pattern, str) or not self.pattern.strip():
            raise ValueError(f"{kind} pattern must be a non-empty str, got {self.pattern!r}")
        for name in ("first_event", "stale"):
            value = getattr(self, name)
            if value is not ...:
                object.__setattr__(self, name, check_seconds(f"{kind}.{name}", value))
        object.__setattr__(self, "_compiled", re.compile(fnmatch.translate(self.pattern.lower())))

    def matches(self, model: str) -> bool:
        """Whether ``model`` (or its part after the last ``/``) matches the pattern."""
        name = model.lower()
        compiled: re.Pattern[str] = self._compiled  # type: ignore[attr-defined]
        short = name.rpartition("/")[2]
        return compiled.match(name) is not None or compiled.match(short) is not None


@dataclass(frozen=True)
class ToolBudget(ModelBudget):
    """The budgets of the MCP tool calls whose tool matches ``pattern``.

    ``pattern`` is a case-insensitive glob matched against the whole name a
    ``tools/call`` request gives (``params.name``); ``first_event`` and ``stale``
    as ``ModelBudget``'s.
    """

    def matches(self, model: str) -> bool:
        """Whether the tool named ``model`` (a tool's name) matches the pattern."""
        compiled: re.Pattern[str] = self._compiled  # type: ignore[attr-defined]
        return compiled.match(model.lower()) is not None


#: Reasoning-class models: they may think silently for minutes before their
#: first output, and pause between reasoning and answer. Their floors: the
#: first event within 600 s, then no gap longer than 300 s.
REASONING_MODELS: Final[tuple[str, ...]] = (
    "o1*",
    "o3*",
    "o4*",
    "gpt-5*",
    "*codex*",
    "deepseek-reasoner*",
    "deepseek-r1*",
    "qwq*",
    "*thinking*",
    "grok-4*",
    "gemini-*pro*",
    "gemini-3*",
)
_REASONING_FIRST_EVENT = 600.0
_REASONING_STALE = 300.0
_DEFAULT_MODELS: Final = tuple(
    ModelBudget(pattern, _REASONING_FIRST_EVENT, _REASONING_STALE) for pattern in REASONING_MODELS
)
#: Long prompts take long to read before the first token: over 50,000 tokens
#: the first event gets at least 240 s, over 100,000 at least 300 s.
_DEFAULT_FLOORS: Final = ((50_000, 240.0), (100_000, 300.0))


@dataclass(frozen=True, repr=False)
class BudgetRules:
    """How a call's budgets follow its model and prompt size, as a value.

    ``models``: ``ModelBudget`` rules, tried in order; the first that
    matches the request's model sets the budgets it names. ``prompt_floors``:
    ``(tokens, seconds)`` pairs: a prompt estimated at more than ``tokens``
    tokens (the request body's length over ``BYTES_PER_TOKEN``) gets a
    first-event budget of at least ``seconds``, the largest floor it passes
    applying. ``tools``: ``ToolBudget`` rules for MCP tool calls, tried in order.
    None touches a budget the user set (see ``call_budgets.derive``).

    Limits: the prompt size is an estimate from bytes, not a token count; a
    body that is not JSON, or has no ``"model"``, matches no model rule.
    """

    models: Sequence[ModelBudget] = field(default=_DEFAULT_MODELS)
    prompt_floors: Sequence[tuple[int, float]] = _DEFAULT_FLOORS
    tools: Sequence[ToolBudget] = ()

    def __post_init__(self) -> None:
        models, tools = tuple(self.models), tuple(self.tools)
        for name, rules, kind in (("models", models, ModelBudget), ("tools", tools, ToolBudget)):
            for rule in rules:
                if type(rule) is not kind:
                    raise ValueError(
                        f"BudgetRules.{name} must hold {kind.__name__} rules, got {rule!r}"
                    )
        floors: list[tuple[int, float]] = []
        for pair in self.prompt_floors:
            try:
                tokens, seconds = pair
            except (TypeError, ValueError):
                raise ValueError(
                    f"BudgetRules.prompt_floors must be (tokens, seconds) pairs, got {pair!r}"
                ) from None
            if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
                raise ValueError(
                    f"BudgetRules.prompt_floors: tokens must be an int >= 0, got {tokens!r}"
                )
            checked = check_seconds("BudgetRules.prompt_floors seconds", seconds)
            if checked is None:
                raise ValueError("BudgetRules.prompt_floors: seconds must be finite")
            floors.append((tokens, checked))
        object.__setattr__(self, "models", models)
        object.__setattr__(self, "tools", tools)
        object.__setattr__(self, "prompt_floors", tuple(sorted(floors)))
        # Each model's rule, found once (matching every pattern on every request
        # was most of the cost of starting one); bounded, and not part of the value.
        object.__setattr__(self, "_rule_of", {})

    def __repr__(self) -> str:
        defaults = (self.models, self.prompt_floors) == (_DEFAULT_MODELS, _DEFAULT_FLOORS)
        if defaults and not self.tools:
            return "BudgetRules()"  # the defaults: the table in the README
        tools = f", tools={self.tools!r}" if self.tools else ""
        return f"BudgetRules(models={self.models!r}, prompt_floors={self.prompt_floors!r}{tools})"

    def model_rule(self, model: str | None) -> ModelBudget | None:
        """The first rule matching ``model``, if any."""
        if not model:
            return None
        known: dict[str, ModelBudget | None] = self.__dict__["_rule_of"]
        if model in known:
            return known[model]
        rule = next((rule for rule in self.models if rule.matches(model)), None)
        if len(known) >= _RULES_KEPT:
            known.clear()
        known[model] = rule
        return rule

    def tool_rule(self, tool: str | None) -> ToolBudget | None:
        """The first tool rule matching ``tool``, if any."""
        if not tool:
            return None
        return next((rule for rule in self.tools if rule.matches(tool)), None)

    def prompt_floor(self, tokens: int) -> tuple[int, float] | None:
        """The largest ``(tokens, seconds)`` floor a prompt of ``tokens`` passes, if any."""
        passed = [floor for floor in self.prompt_floors if tokens > floor[0]]
        return max(passed, key=lambda floor: floor[1]) if passed else None

    def longest(self, *, first_event: bool, stale: bool) -> float:
        """The longest finite budget the rules give to the first event and/or the stale
        budget, as asked (0 if none)."""
        values: list[float] = [s for _, s in self.prompt_floors] if first_event else []
        for rule in (*self.models, *self.tools):
            for wanted, value in ((first_event, rule.first_event), (stale, rule.stale)):
                if wanted and isinstance(value, float):
                    values.append(value)
        return max(values, default=0.0)


#: Models whose rule a ``BudgetRules`` keeps, found (then it starts afresh).
_RULES_KEPT = 256

#: The rules a ``StreamPolicy`` has unless told otherwise.
DEFAULT_BUDGET_RULES: Final = BudgetRules()


def model_of(payload: Mapping[str, Any] | None) -> str | None:
    """The ``"model"`` a request's top-level JSON object names (``progress.stream_asked``
    parses it), if it is one that does."""
    model = payload.get("model") if payload is not None else None
    return model if isinstance(model, str) and model else None


def estimate_tokens(body_size: int) -> int:
    """A prompt's token estimate from its request body's size in bytes."""
    return body_size // BYTES_PER_TOKEN
