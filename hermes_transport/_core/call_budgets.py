"""What a call got: its budgets, decided once from its policy, the rules and the request.

``derive`` is the one place where a call's budgets are decided; ``CallBudgets`` is the
result, a value to print, log and test. The policy (``policy``) calls ``derive``.

Precedence, per budget: a value the user set (an argument, or a ``HERMES_STREAM_*``
variable) wins over every rule, in both directions; then the first model rule that
matches (for an MCP tool call, the first tool rule); then the default: the policy's,
or for an MCP request ``MCP_FIRST_EVENT`` and ``MCP_STALE``. The prompt-size floors
raise a first-event budget that no user set. A first-event budget left to follow the
stale one (``SAME_AS_STALE``) follows a stale budget the user set as it is, rules and
floors aside: that user asked for that bound. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import EllipsisType
from typing import Final

from .budgets import BudgetRules, DefaultSeconds, ModelBudget

__all__ = ["MCP_FIRST_EVENT", "MCP_STALE", "CallBudgets", "derive"]

#: An MCP request's budgets where no one set them: a tool may work a while before its
#: first progress, and between two (first event 300 s, then no gap over 120 s).
MCP_FIRST_EVENT: Final = DefaultSeconds(300.0)
MCP_STALE: Final = DefaultSeconds(120.0)


@dataclass(frozen=True)
class CallBudgets:
    """The budgets one call got, and why.

    ``first_event`` and ``stale``: seconds, or ``None`` for no bound.
    ``model`` and ``prompt_tokens``: what the request said (``None``:
    unknown). ``source``: what set them beyond the defaults and the
    user's own values, in words (``""``: nothing did), as the call's log
    lines and errors show it.
    """

    first_event: float | None
    stale: float | None
    model: str | None = None
    prompt_tokens: int | None = None
    source: str = ""

    def __str__(self) -> str:
        def text(budget: float | None) -> str:
            return "off" if budget is None else f"{budget:g} s"

        words = f"first event {text(self.first_event)}, stale {text(self.stale)}"
        return f"{words} ({self.source})" if self.source else words


def derive(
    first_event: float | None,
    stale: float | None,
    rules: BudgetRules | None,
    model: str | None,
    prompt_tokens: int | None,
    *,
    mcp: bool = False,
    tool: str | None = None,
) -> CallBudgets:
    """A call's budgets from its policy's (``DefaultSeconds`` where no one set them).

    ``first_event`` is the policy's first-event budget, already following
    ``stale`` where it was left to (a ``DefaultSeconds`` then only if the stale
    one is). ``mcp``: an MCP request, whose defaults are MCP's and whose rule is the
    tool rule matching ``tool`` (model rules and prompt floors do not apply). See the
    module docstring for the precedence.
    """
    stale_free = isinstance(stale, DefaultSeconds)
    first_free = isinstance(first_event, DefaultSeconds)
    why: list[str] = []
    if mcp:
        first_event = MCP_FIRST_EVENT if first_free else first_event
        stale = MCP_STALE if stale_free else stale
    rule: ModelBudget | None = None
    if rules is not None:
        rule = rules.tool_rule(tool) if mcp else rules.model_rule(model)
    if rule is not None:
        touched = []
        if first_free and not isinstance(rule.first_event, EllipsisType):
            first_event = rule.first_event
            touched.append("first event")
        if stale_free and not isinstance(rule.stale, EllipsisType):
            stale = rule.stale
            touched.append("stale")
        if touched:
            named = f"tool {tool!r}" if mcp else f"model {model!r}"
            why.append(f"{named} matched rule {rule.pattern!r}")
    floors = rules is not None and not mcp and first_free
    if floors and prompt_tokens is not None and first_event is not None:
        assert rules is not None
        floor = rules.prompt_floor(prompt_tokens)
        if floor is not None and floor[1] > first_event:
            first_event = floor[1]
            why.append(f"prompt of ~{prompt_tokens:,} tokens: first event at least {floor[1]:g} s")
    return CallBudgets(
        None if first_event is None else float(first_event),
        None if stale is None else float(stale),
        model,
        prompt_tokens,
        "; ".join(why),
    )
