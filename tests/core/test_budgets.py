"""Budgets that fit the call: model rules, prompt-size floors, and who wins."""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any
from unittest import mock

import pytest

from hermes_transport import (
    BudgetRules,
    CallBudgets,
    DefaultSeconds,
    ModelBudget,
    StreamPolicy,
    StreamStalled,
)
from hermes_transport._core.budgets import BYTES_PER_TOKEN, REASONING_MODELS, model_of
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, streaming_json

pytestmark = pytest.mark.once

BIG = 100_001 * BYTES_PER_TOKEN  # a body over the 100,000-token floor
MEDIUM = 50_001 * BYTES_PER_TOKEN


@pytest.mark.parametrize(
    ("model", "first_event", "stale"),
    [
        ("o3", 600.0, 300.0),
        ("o4-mini", 600.0, 300.0),
        ("O1-PREVIEW", 600.0, 300.0),
        ("gpt-5.1-codex", 600.0, 300.0),
        ("openai/o3-pro", 600.0, 300.0),
        ("deepseek-reasoner", 600.0, 300.0),
        ("kimi-k2-thinking", 600.0, 300.0),
        ("gpt-4o-mini", 180.0, 180.0),
        ("claude-sonnet-4-5", 180.0, 180.0),
        (None, 180.0, 180.0),
    ],
)
def test_reasoning_models_get_their_floors_out_of_the_box(
    model: str | None, first_event: float, stale: float
) -> None:
    """A default policy gives reasoning-class models 600 s to the first event and 300 s stale."""
    budgets = StreamPolicy().budgets_for(model, 1000)
    assert (budgets.first_event, budgets.stale) == (first_event, stale)
    assert bool(budgets.source) is (first_event != 180.0)


@pytest.mark.parametrize(
    ("size", "first_event"),
    [(1000, 180.0), (50_000 * BYTES_PER_TOKEN, 180.0), (MEDIUM, 240.0), (BIG, 300.0)],
)
def test_a_long_prompt_raises_the_first_event_budget_only(size: int, first_event: float) -> None:
    """Over 50,000 estimated tokens the first event gets 240 s, over 100,000 300 s; stale is unchanged."""
    budgets = StreamPolicy().budgets_for("gpt-4o", size)
    assert budgets.first_event == first_event
    assert budgets.stale == 180.0
    assert budgets.prompt_tokens == size // BYTES_PER_TOKEN


def test_a_floor_never_lowers_a_rules_longer_budget() -> None:
    """A reasoning model with a long prompt keeps its 600 s: floors only raise."""
    assert StreamPolicy().budgets_for("o3", BIG).first_event == 600.0


@pytest.mark.parametrize(
    ("kwargs", "first_event", "stale"),
    [
        ({"stale_timeout": 60.0}, 60.0, 60.0),  # shorter than the rule: the user's
        ({"stale_timeout": 900.0}, 900.0, 900.0),  # longer: the user's
        ({"stale_timeout": 180.0}, 180.0, 180.0),  # the default's value, but given
        ({"first_event_timeout": 30.0}, 30.0, 300.0),
        ({"first_event_timeout": None}, None, 300.0),
        ({"stale_timeout": None}, None, None),
        ({"stale_timeout": 60.0, "first_event_timeout": 1000.0}, 1000.0, 60.0),
    ],
)
def test_what_the_user_sets_wins_over_every_rule_in_both_directions(
    kwargs: dict[str, Any], first_event: float | None, stale: float | None
) -> None:
    """An explicit budget beats the model rule and the prompt floor, shorter or longer."""
    budgets = StreamPolicy(**kwargs).budgets_for("o3", BIG)
    assert (budgets.first_event, budgets.stale) == (first_event, stale)


@pytest.mark.parametrize(
    ("environ", "first_event", "stale"),
    [
        ({"HERMES_STREAM_STALE_TIMEOUT": "45"}, 45.0, 45.0),
        ({"HERMES_STREAM_STALE_TIMEOUT": "off"}, None, None),
        ({"HERMES_STREAM_FIRST_EVENT_TIMEOUT": "20"}, 20.0, 300.0),
        ({"HERMES_STREAM_BUDGET_RULES": "off"}, 180.0, 180.0),
        ({"HERMES_STREAM_BUDGET_RULES": "ON"}, 600.0, 300.0),
        ({}, 600.0, 300.0),
    ],
)
def test_the_environment_wins_over_every_rule(
    environ: dict[str, str], first_event: float | None, stale: float | None
) -> None:
    """A budget set in the environment beats the rules; HERMES_STREAM_BUDGET_RULES=off turns them off."""
    budgets = StreamPolicy.from_env(environ).budgets_for("o3", BIG)
    assert (budgets.first_event, budgets.stale) == (first_event, stale)


def test_an_argument_beats_the_environment_and_both_beat_the_rules() -> None:
    """from_env overrides win over the environment, which wins over the rules."""
    policy = StreamPolicy.from_env({"HERMES_STREAM_STALE_TIMEOUT": "45"}, stale_timeout=20.0)
    assert policy.budgets_for("o3").stale == 20.0


def test_a_malformed_rules_variable_names_itself() -> None:
    """HERMES_STREAM_BUDGET_RULES takes off or on, and says so."""
    with pytest.raises(ValueError, match="HERMES_STREAM_BUDGET_RULES must be 'off'"):
        StreamPolicy.from_env({"HERMES_STREAM_BUDGET_RULES": "sometimes"})


def test_rules_off_leave_the_policys_own_budgets() -> None:
    """With budget_rules=None every call gets the policy's budgets."""
    budgets = StreamPolicy(budget_rules=None).budgets_for("o3", BIG)
    assert budgets == CallBudgets(180.0, 180.0, "o3", BIG // BYTES_PER_TOKEN, "")


def test_a_users_rule_can_shorten_a_default_and_the_first_match_wins() -> None:
    """Rules are tried in order; a rule may shorten a budget; ... leaves it to the default."""
    rules = BudgetRules(
        models=(ModelBudget("gpt-4o-mini*", stale=30.0), ModelBudget("gpt-4o*", stale=90.0)),
        prompt_floors=(),
    )
    policy = StreamPolicy(budget_rules=rules)
    assert policy.budgets_for("gpt-4o-mini-2024").stale == 30.0
    assert policy.budgets_for("gpt-4o-mini-2024").first_event == 180.0
    assert policy.budgets_for("gpt-4o").stale == 90.0
    assert policy.budgets_for("o3").stale == 180.0  # the defaults' rules are replaced


def test_a_default_of_your_own_is_still_fitted_by_the_rules() -> None:
    """DefaultSeconds sets a default that the rules may change, unlike a plain number."""
    policy = StreamPolicy(stale_timeout=DefaultSeconds(60.0))
    assert policy.budgets_for("gpt-4o").stale == 60.0
    assert policy.budgets_for("o3").stale == 300.0
    assert policy.stale_timeout == 60.0


def test_a_default_policy_differs_from_one_given_the_same_numbers() -> None:
    """The defaults the rules may change are not equal to the same values given explicitly."""
    assert StreamPolicy() != StreamPolicy(stale_timeout=180.0)
    assert StreamPolicy() == StreamPolicy()
    assert StreamPolicy().stale_timeout == 180.0
    assert hash(StreamPolicy()) == hash(StreamPolicy())


@pytest.mark.parametrize(
    "copier", [copy.copy, copy.deepcopy, lambda p: pickle.loads(pickle.dumps(p))]
)
def test_a_default_survives_copies_and_pickles(copier: Any) -> None:
    """A copied or unpickled default policy still lets the rules fit its budgets."""
    policy = copier(StreamPolicy())
    assert policy == StreamPolicy()
    assert policy.budgets_for("o3").stale == 300.0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"pattern": ""}, "pattern must be a non-empty str"),
        ({"pattern": "x", "stale": 0}, "ModelBudget.stale must be a number of seconds > 0"),
        ({"pattern": "x", "first_event": "5"}, "ModelBudget.first_event"),
        ({"pattern": "x", "stale": 1e12}, r"ModelBudget.stale .* at most 31536000 \(a year\)"),
    ],
)
def test_a_malformed_model_rule_names_its_field(kwargs: dict[str, Any], match: str) -> None:
    """ModelBudget refuses empty patterns and bad seconds, naming the field."""
    with pytest.raises(ValueError, match=match):
        ModelBudget(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"models": ("o3*",)}, "must hold ModelBudget rules"),
        ({"prompt_floors": ((1, 2, 3),)}, r"\(tokens, seconds\) pairs"),
        ({"prompt_floors": ((-1, 5.0),)}, "tokens must be an int >= 0"),
        ({"prompt_floors": ((10, None),)}, "seconds must be finite"),
    ],
)
def test_malformed_rules_name_their_field(kwargs: dict[str, Any], match: str) -> None:
    """BudgetRules refuses what is not a rule or a (tokens, seconds) pair, naming the field."""
    with pytest.raises(ValueError, match=match):
        BudgetRules(**kwargs)


def test_a_policy_refuses_rules_that_are_not_rules() -> None:
    """budget_rules must be a BudgetRules or None."""
    with pytest.raises(ValueError, match="budget_rules must be a BudgetRules or None"):
        StreamPolicy(budget_rules={"o3": 600})  # type: ignore[arg-type]


def test_the_derived_budgets_print_what_set_them() -> None:
    """str(CallBudgets) says the budgets and which rule or floor set them."""
    assert str(StreamPolicy().budgets_for("o3")) == (
        "first event 600 s, stale 300 s (model 'o3' matched rule 'o3*')"
    )
    text = str(StreamPolicy().budgets_for("gpt-4o", BIG))
    assert text.startswith("first event 300 s, stale 180 s (prompt of ~100,001 tokens")
    assert str(StreamPolicy(stale_timeout=None).budgets_for()) == "first event off, stale off"


def test_every_reasoning_pattern_is_a_default_rule() -> None:
    """The documented table and the default rules are the same list."""
    assert [rule.pattern for rule in BudgetRules().models] == list(REASONING_MODELS)
    assert repr(BudgetRules()) == "BudgetRules()"


@pytest.mark.parametrize(
    ("body", "model"),
    [
        (b'{"model": "o3", "stream": true}', "o3"),
        (b'{"messages": [{"content": "\\"model\\": \\"x\\""}], "model": "m"}', "m"),
        (b'{"model": 5}', None),
        (b'not json, "model"', None),
        (b'["model"]', None),
        (None, None),
    ],
)
def test_the_model_is_read_from_the_top_level_of_a_json_body(
    body: bytes | None, model: str | None
) -> None:
    """Only a top-level string "model" names the call's model."""
    assert model_of(streaming_json(body)) == model


def test_the_longest_budget_covers_the_rules() -> None:
    """A policy's longest budget, which socket timeouts stay above, includes its rules'."""
    assert StreamPolicy().longest_budget == 600.0
    assert StreamPolicy(budget_rules=None).longest_budget == 180.0
    assert StreamPolicy(stale_timeout=None, budget_rules=None).longest_budget == 0.0
    # Only the rules for a budget no one set can lengthen it.
    assert StreamPolicy(stale_timeout=60.0).longest_budget == 60.0
    assert StreamPolicy(first_event_timeout=30.0).longest_budget == 300.0
    assert StreamPolicy(stale_timeout=60.0, first_event_timeout=None).longest_budget == 60.0


def test_a_rule_set_budget_is_what_the_transport_applies_and_its_error_says_why(
    flavor: Flavor, server: FaultServer
) -> None:
    """A stream whose model a rule matched is cut at that rule's budget, and the stall names the rule."""
    server.scenario = Scenario.stall_first(5)
    rules = BudgetRules(models=(ModelBudget("tiny-*", first_event=0.3),), prompt_floors=())
    policy = StreamPolicy(stale_timeout=DefaultSeconds(30.0), retries=0, budget_rules=rules)
    body = json.dumps({"model": "tiny-1", "stream": True, "messages": []})
    headers = {"content-type": "application/json"}
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=policy)) as client:
        with pytest.raises(StreamStalled) as info:
            with client.stream(
                "POST", server.base_url + "/chat/completions", content=body, headers=headers
            ) as response:
                response.read()
    assert info.value.budget == 0.3
    assert str(info.value).endswith("on attempt 1; budget: model 'tiny-1' matched rule 'tiny-*'")


def test_a_model_s_rule_is_found_once_and_the_memory_of_them_is_bounded() -> None:
    """Each model's rule is matched against the patterns once, not on every request, and at most a few hundred models are remembered."""
    rules = BudgetRules()
    calls: list[str] = []
    real = ModelBudget.matches

    def counting(self: ModelBudget, model: str) -> bool:
        calls.append(model)
        return real(self, model)

    with mock.patch.object(ModelBudget, "matches", counting):
        first = rules.model_rule("o3-mini")
        matched = len(calls)
        assert rules.model_rule("o3-mini") is first
        assert len(calls) == matched  # the second time: no pattern matched again
        for number in range(1000):
            rules.model_rule(f"model-{number}")
    assert first is not None
    assert first.pattern == "o3*"
    assert len(rules.__dict__["_rule_of"]) <= 256
    assert rules == BudgetRules()  # what it remembers is not part of its value
