"""Tests for ``StreamPolicy``: defaults, validation, budgets and ``from_env``."""

from __future__ import annotations

import copy
import dataclasses
import math
import pickle
import sys
import threading
import time
from typing import Any

import pytest

from hermes_transport import BudgetRules, DefaultSeconds, StreamStalled
from hermes_transport._core.budgets import MAX_SECONDS
from hermes_transport._core.policy import StreamPolicy
from hermes_transport._core.wires import WIRES
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, chat_body

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

STALE = "HERMES_STREAM_STALE_TIMEOUT"
FIRST = "HERMES_STREAM_FIRST_EVENT_TIMEOUT"
RETRIES = "HERMES_STREAM_RETRIES"
HEARTBEATS = "HERMES_STREAM_HEARTBEAT_EVENTS"
ALL_VARS = (STALE, FIRST, RETRIES, HEARTBEATS)
TIMEOUT_FIELDS = ("stale_timeout", "first_event_timeout")
# Each timeout field, the variable that sets it and the budget property it bounds.
BUDGETS = [
    pytest.param("stale_timeout", STALE, "stale_budget", id="stale"),
    pytest.param("first_event_timeout", FIRST, "first_event_budget", id="first_event"),
]
SAME = StreamPolicy.SAME_AS_STALE


def _build(**fields: Any) -> StreamPolicy:
    """A policy from fields of any type: the validation, not the type checker, is under test."""
    return StreamPolicy(**fields)


# --------------------------------------------------------------------------- defaults & frozen


def test_defaults() -> None:
    """The default policy is a 180 s stall budget, first event inheriting it, and 2 re-sends."""
    policy = StreamPolicy()
    assert (policy.stale_timeout, policy.first_event_timeout, policy.retries) == (180.0, SAME, 2)
    assert policy.first_event_timeout is StreamPolicy.SAME_AS_STALE
    assert (policy.stale_budget, policy.first_event_budget) == (180.0, 180.0)
    assert policy.heartbeat_events == {
        "chat_completions": {"ping"},
        "responses": {"keepalive"},
        "messages": {"ping"},
        "gemini": set(),
        "mcp": set(),
        "generic": {"ping"},
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [("stale_timeout", 5.0), ("first_event_timeout", 5.0), ("retries", 0), ("extra", 1)],
)
def test_policy_is_frozen(field: str, value: Any) -> None:
    """Assigning to any attribute of a policy raises ``FrozenInstanceError``."""
    policy = StreamPolicy()
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(policy, field, value)


def test_policies_compare_and_hash_by_value() -> None:
    """Equal settings make equal, equally hashed policies (ints normalised to floats)."""
    a = StreamPolicy(stale_timeout=30, first_event_timeout=60, retries=1)
    b = StreamPolicy(stale_timeout=30.0, first_event_timeout=60.0, retries=1)
    assert a == b
    assert hash(a) == hash(b)
    assert a != StreamPolicy()


# --------------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    ("stale", "first", "stale_budget", "first_budget"),
    [
        (180.0, SAME, 180.0, 180.0),
        (30.0, SAME, 30.0, 30.0),
        (30.0, 600.0, 30.0, 600.0),
        (30.0, 5.0, 30.0, 5.0),
        (30.0, None, 30.0, None),
        (30.0, math.inf, 30.0, None),
        (None, SAME, None, None),
        (None, None, None, None),
        (None, 60.0, None, 60.0),
        (None, math.inf, None, None),
        (math.inf, SAME, None, None),
        (math.inf, None, None, None),
        (math.inf, 10.0, None, 10.0),
        (math.inf, math.inf, None, None),
        (0.001, SAME, 0.001, 0.001),
    ],
    ids=repr,
)
def test_budgets(
    stale: float | None,
    first: Any,
    stale_budget: float | None,
    first_budget: float | None,
) -> None:
    """``SAME_AS_STALE`` inherits the stale timeout, and ``None`` or ``math.inf`` mean no bound for either."""
    policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first)
    assert policy.stale_budget == stale_budget
    assert policy.first_event_budget == first_budget


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
@pytest.mark.parametrize(
    "value",
    [
        0,
        0.0,
        -0.0,
        -1,
        -1.5,
        -math.inf,
        math.nan,
        True,
        False,
        "30",
        "off",
        "inf",
        "same as stale",
        "SAME_AS_STALE",
        b"30",
        [30],
        object(),
    ],
    ids=lambda value: "object()" if type(value) is object else repr(value),  # stable for xdist
)
def test_invalid_timeouts_raise_naming_the_field(field: str, value: object) -> None:
    """Zero, negative, NaN, bool and non-numeric timeouts (strings such as "off" included) raise ``ValueError`` naming the field and saying None turns it off."""
    with pytest.raises(ValueError, match=rf"^{field} .*None for no bound"):
        _build(**{field: value})


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
def test_only_the_first_event_field_names_the_sentinel_in_its_message(field: str) -> None:
    """A refused first_event_timeout suggests ``StreamPolicy.SAME_AS_STALE``; a refused stale_timeout does not."""
    with pytest.raises(ValueError, match=field) as info:
        _build(**{field: -1})
    assert ("StreamPolicy.SAME_AS_STALE" in str(info.value)) == (field == "first_event_timeout")


def test_the_sentinel_is_refused_for_the_stale_timeout() -> None:
    """``stale_timeout=SAME_AS_STALE`` (a budget that would follow itself) raises ``ValueError`` naming ``stale_timeout``."""
    with pytest.raises(ValueError, match=r"^stale_timeout cannot be StreamPolicy\.SAME_AS_STALE"):
        _build(stale_timeout=StreamPolicy.SAME_AS_STALE)


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
@pytest.mark.parametrize(
    ("value", "stored"),
    [(1, 1.0), (30, 30.0), (0.5, 0.5), (1e-9, 1e-9), (10**6, 1e6)],
    ids=repr,
)
def test_valid_timeouts_are_stored_as_float(field: str, value: float, stored: float) -> None:
    """Positive ints and floats are accepted and stored as ``float``."""
    got = getattr(_build(**{field: value}), field)
    assert got == stored
    assert type(got) is float


@pytest.mark.parametrize(("field", "var", "budget"), BUDGETS)
@pytest.mark.parametrize("off", [None, math.inf, float("inf")], ids=repr)
def test_none_or_infinity_turns_either_budget_off(
    field: str, var: str, budget: str, off: float | None
) -> None:
    """``None`` turns either budget off, and ``math.inf`` is the same thing, stored as ``None``."""
    policy = _build(**{field: off})
    assert getattr(policy, field) is None
    assert getattr(policy, budget) is None
    assert policy == _build(**{field: None})
    assert hash(policy) == hash(_build(**{field: None}))


@pytest.mark.parametrize("off", [None, math.inf], ids=repr)
def test_first_event_bound_off_keeps_the_stall_watch(off: float | None) -> None:
    """An off first-event bound (``None``, or its synonym ``math.inf``) leaves the stale budget in force."""
    policy = StreamPolicy(stale_timeout=30, first_event_timeout=off)
    assert (policy.stale_budget, policy.first_event_budget) == (30.0, None)


def test_none_for_the_first_event_is_off_not_the_default() -> None:
    """``first_event_timeout=None`` turns the first-event bound off: a policy of its own, not the default that follows the stale timeout."""
    assert StreamPolicy(first_event_timeout=None) != StreamPolicy()
    assert StreamPolicy(first_event_timeout=None).first_event_budget is None


@pytest.mark.parametrize(
    ("first", "stale", "budget"),
    [(SAME, 30.0, 30.0), (SAME, None, None), (SAME, math.inf, None), (10.0, None, 10.0)],
    ids=repr,
)
def test_off_stale_timeout_turns_an_inheriting_first_event_bound_off(
    first: Any, stale: float | None, budget: float | None
) -> None:
    """A first event bound that inherits the stale timeout follows it, off included; an explicit one does not."""
    assert (
        StreamPolicy(stale_timeout=stale, first_event_timeout=first).first_event_budget == budget
    )


# --------------------------------------------------------------------------- the sentinel


def test_the_sentinel_reprs_as_its_public_name() -> None:
    """``SAME_AS_STALE`` shows as ``StreamPolicy.SAME_AS_STALE``, alone and in a policy's repr."""
    assert repr(StreamPolicy.SAME_AS_STALE) == "StreamPolicy.SAME_AS_STALE"
    assert str(StreamPolicy.SAME_AS_STALE) == "StreamPolicy.SAME_AS_STALE"
    assert "first_event_timeout=StreamPolicy.SAME_AS_STALE," in repr(StreamPolicy())


def test_a_policy_repr_evaluates_back_to_an_equal_policy() -> None:
    """The repr of a policy, default or not, is an expression for an equal policy."""
    for policy in (
        StreamPolicy(),
        StreamPolicy(stale_timeout=None, first_event_timeout=5.0, retries=0),
        StreamPolicy(stale_timeout=30.0, first_event_timeout=None, heartbeat_events=frozenset()),
    ):
        names = {"StreamPolicy": StreamPolicy, "DefaultSeconds": DefaultSeconds}
        assert eval(repr(policy), {**names, "BudgetRules": BudgetRules}) == policy


def test_the_sentinel_is_one_object_reachable_from_class_and_instances() -> None:
    """The class attribute, an instance's attribute and a default policy's field are the same object."""
    policy = StreamPolicy(first_event_timeout=5.0)
    assert policy.SAME_AS_STALE is StreamPolicy.SAME_AS_STALE
    assert StreamPolicy().first_event_timeout is StreamPolicy.SAME_AS_STALE
    assert "SAME_AS_STALE" not in {f.name for f in dataclasses.fields(StreamPolicy)}


def _pickled(value: Any, protocol: int) -> Any:
    return pickle.loads(pickle.dumps(value, protocol=protocol))


COPIES = [
    pytest.param(copy.copy, id="copy"),
    pytest.param(copy.deepcopy, id="deepcopy"),
    *[
        pytest.param(lambda v, p=protocol: _pickled(v, p), id=f"pickle-{protocol}")
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1)
    ],
]


@pytest.mark.parametrize("clone", COPIES)
def test_the_sentinel_keeps_its_identity_when_copied_or_pickled(clone: Any) -> None:
    """``copy``, ``deepcopy`` and every pickle protocol give back the very same sentinel, alone or in a policy."""
    assert clone(StreamPolicy.SAME_AS_STALE) is StreamPolicy.SAME_AS_STALE
    policy = clone(StreamPolicy(stale_timeout=30.0))
    assert policy.first_event_timeout is StreamPolicy.SAME_AS_STALE
    assert policy.first_event_budget == 30.0


@pytest.mark.parametrize("clone", COPIES)
@pytest.mark.parametrize(
    "policy",
    [
        StreamPolicy(),
        StreamPolicy(first_event_timeout=None),
        StreamPolicy(stale_timeout=None),
        StreamPolicy(stale_timeout=None, first_event_timeout=None, retries=0),
        StreamPolicy(stale_timeout=5.0, first_event_timeout=60.0, heartbeat_events=frozenset()),
    ],
    ids=repr,
)
def test_copied_and_pickled_policies_are_equal_with_equal_hashes(
    clone: Any, policy: StreamPolicy
) -> None:
    """A copied or unpickled policy equals the original, hashes the same and has the same budgets."""
    got = clone(policy)
    assert got == policy
    assert hash(got) == hash(policy)
    assert (got.stale_budget, got.first_event_budget) == (
        policy.stale_budget,
        policy.first_event_budget,
    )


@pytest.mark.parametrize(
    ("policy", "changes", "first", "first_budget"),
    [
        (StreamPolicy(), {"stale_timeout": 30.0}, SAME, 30.0),
        (StreamPolicy(), {"stale_timeout": None}, SAME, None),
        (StreamPolicy(), {"retries": 0}, SAME, 180.0),
        (StreamPolicy(first_event_timeout=5.0), {"first_event_timeout": SAME}, SAME, 180.0),
        (StreamPolicy(first_event_timeout=None), {"stale_timeout": 30.0}, None, None),
        (StreamPolicy(), {"first_event_timeout": None}, None, None),
        (StreamPolicy(), {"first_event_timeout": math.inf}, None, None),
    ],
    ids=repr,
)
def test_replace_keeps_or_sets_the_sentinel(
    policy: StreamPolicy, changes: dict[str, Any], first: Any, first_budget: float | None
) -> None:
    """``dataclasses.replace`` keeps ``SAME_AS_STALE`` (which then follows a new stale timeout) unless told otherwise."""
    got = dataclasses.replace(policy, **changes)
    assert got.first_event_timeout is first
    assert got.first_event_budget == first_budget


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ({}, {"first_event_timeout": SAME}),
        ({"stale_timeout": 30}, {"stale_timeout": 30.0, "first_event_timeout": SAME}),
        ({"first_event_timeout": None}, {"first_event_timeout": math.inf}),
        ({"stale_timeout": None}, {"stale_timeout": math.inf}),
    ],
    ids=repr,
)
def test_the_same_settings_spelled_differently_are_equal(
    a: dict[str, Any], b: dict[str, Any]
) -> None:
    """Default and explicit ``SAME_AS_STALE``, or ``None`` and ``math.inf``, make equal, equally hashed policies."""
    assert _build(**a) == _build(**b)
    assert hash(_build(**a)) == hash(_build(**b))
    assert len({_build(**a), _build(**b)}) == 1


def test_following_the_stale_timeout_differs_from_copying_its_value() -> None:
    """``SAME_AS_STALE``, off and an explicit 180 s are three different first-event settings, though two share a budget."""
    policies = {
        StreamPolicy(),
        StreamPolicy(first_event_timeout=None),
        StreamPolicy(first_event_timeout=180.0),
    }
    assert len(policies) == 3


@pytest.mark.parametrize("value", [-1, -100, True, False, 1.0, 2.5, "2", None, math.nan], ids=repr)
def test_invalid_retries_raise_naming_the_field(value: object) -> None:
    """Negative, bool, float, string and ``None`` retries raise ``ValueError`` naming ``retries``."""
    with pytest.raises(ValueError, match="retries"):
        StreamPolicy(retries=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [0, 1, 2, 10, 10**6])
def test_valid_retries(value: int) -> None:
    """Any non-negative int is a valid retry count."""
    assert StreamPolicy(retries=value).retries == value


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"stale_timeout": 0}, "stale_timeout"),
        ({"first_event_timeout": -1}, "first_event_timeout"),
        ({"retries": -1}, "retries"),
    ],
)
def test_replace_revalidates(changes: dict[str, Any], field: str) -> None:
    """``dataclasses.replace`` runs the same validation as the constructor."""
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(StreamPolicy(), **changes)


# --------------------------------------------------------------------------- the maximum

# Above a year: up to where threading.Condition.wait overflows, and far past it.
HUGE = [
    MAX_SECONDS + 1,
    MAX_SECONDS * (1 + 1e-12),
    1e10,
    threading.TIMEOUT_MAX,
    float(sys.maxsize),
    sys.maxsize,
    1e300,
    sys.float_info.max,
    10**400,  # an int no float can hold: refused, not an OverflowError
]


def test_the_maximum_is_a_year() -> None:
    """The documented maximum budget is one (365-day) year, far below threading.TIMEOUT_MAX."""
    assert MAX_SECONDS == 365 * 24 * 3600
    assert MAX_SECONDS < threading.TIMEOUT_MAX / 100


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
@pytest.mark.parametrize("value", HUGE, ids=lambda v: "10**400" if v == 10**400 else repr(v))
def test_budgets_above_the_maximum_raise_naming_the_field(field: str, value: float) -> None:
    """A finite budget above MAX_SECONDS is a ValueError naming the field and the maximum."""
    with pytest.raises(ValueError, match=rf"{field} .*at most 31536000") as info:
        _build(**{field: value})
    assert len(str(info.value)) < 200, "a huge int is not spelled out in full"


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
@pytest.mark.parametrize("value", [MAX_SECONDS, int(MAX_SECONDS), MAX_SECONDS - 0.5])
def test_the_maximum_itself_is_accepted(field: str, value: float) -> None:
    """A budget of exactly MAX_SECONDS (or just below it) is accepted and stored as float."""
    assert getattr(_build(**{field: value}), field) == float(value)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"stale_timeout": 1e10}, "stale_timeout"),
        ({"first_event_timeout": 1e300}, "first_event_timeout"),
    ],
)
def test_replace_refuses_huge_budgets(changes: dict[str, Any], field: str) -> None:
    """``dataclasses.replace`` refuses a budget above the maximum as the constructor does."""
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(StreamPolicy(), **changes)


@pytest.mark.parametrize(("field", "var", "budget"), BUDGETS)
@pytest.mark.parametrize("off", [None, math.inf], ids=repr)
def test_infinity_and_none_are_not_budgets_above_the_maximum(
    field: str, var: str, budget: str, off: float | None
) -> None:
    """``math.inf`` and ``None`` are not budgets above the maximum: either turns either bound off."""
    assert getattr(_build(**{field: off}), budget) is None


@pytest.mark.parametrize("var", [STALE, FIRST])
@pytest.mark.parametrize(
    "raw", ["31536001", "1e10", "9223372036854775807", "1e300", "1e400", "1E999", "-1e400"]
)
def test_from_env_budgets_above_the_maximum_raise_naming_variable(var: str, raw: str) -> None:
    """A budget above MAX_SECONDS in the environment, or one that only overflows to infinity, raises ValueError naming the variable."""
    with pytest.raises(ValueError, match=rf"{var} .*at most 31536000"):
        StreamPolicy.from_env({var: raw})


@pytest.mark.parametrize(("field", "var", "budget"), BUDGETS)
@pytest.mark.parametrize("raw", ["inf", "Infinity", "+inf", "INF", " inf "])
def test_from_env_a_spelled_out_infinity_is_no_bound(
    field: str, var: str, budget: str, raw: str
) -> None:
    """An explicit ``inf`` in either variable means no bound, stored as ``None`` exactly as ``off`` is."""
    policy = StreamPolicy.from_env({var: raw})
    assert getattr(policy, field) is None
    assert getattr(policy, budget) is None
    assert policy == StreamPolicy.from_env({var: "off"})


def test_from_env_the_maximum_itself_is_accepted() -> None:
    """A variable set to exactly MAX_SECONDS is accepted."""
    assert StreamPolicy.from_env({STALE: "31536000"}).stale_timeout == MAX_SECONDS


# --------------------------------------------------------------------------- from_env


def test_from_env_empty_mapping_gives_defaults() -> None:
    """An environment without the variables yields the default policy."""
    assert StreamPolicy.from_env({}) == StreamPolicy()


def test_from_env_ignores_unrelated_variables() -> None:
    """Only the three ``HERMES_STREAM_*`` variables are read."""
    env = {"HERMES_STREAM_TIMEOUT": "x", "RETRIES": "-1", "stale_timeout": "0"}
    assert StreamPolicy.from_env(env) == StreamPolicy()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({STALE: "30"}, StreamPolicy(stale_timeout=30.0)),
        ({STALE: "2.5"}, StreamPolicy(stale_timeout=2.5)),
        ({STALE: " 45 "}, StreamPolicy(stale_timeout=45.0)),
        ({STALE: "1e3"}, StreamPolicy(stale_timeout=1000.0)),
        ({STALE: "inf"}, StreamPolicy(stale_timeout=math.inf)),
        ({STALE: "off"}, StreamPolicy(stale_timeout=None)),
        ({FIRST: "600"}, StreamPolicy(first_event_timeout=600.0)),
        ({FIRST: "off"}, StreamPolicy(first_event_timeout=None)),
        ({FIRST: "inf"}, StreamPolicy(first_event_timeout=None)),
        ({FIRST: "\t0.25\n"}, StreamPolicy(first_event_timeout=0.25)),
        ({RETRIES: "0"}, StreamPolicy(retries=0)),
        ({RETRIES: "5"}, StreamPolicy(retries=5)),
        ({RETRIES: " 7 "}, StreamPolicy(retries=7)),
        (
            {STALE: "20", FIRST: "90", RETRIES: "1"},
            StreamPolicy(stale_timeout=20.0, first_event_timeout=90.0, retries=1),
        ),
    ],
    ids=repr,
)
def test_from_env_parses_each_variable(env: dict[str, str], expected: StreamPolicy) -> None:
    """Each variable is parsed (surrounding whitespace allowed) into its field."""
    assert StreamPolicy.from_env(env) == expected


@pytest.mark.parametrize(("field", "var", "budget"), BUDGETS)
@pytest.mark.parametrize("raw", ["off", "OFF", "Off", "oFf", " off ", "\toff\n"], ids=repr)
def test_from_env_off_means_none_for_either_variable(
    field: str, var: str, budget: str, raw: str
) -> None:
    """``off`` (any case, padded) in either variable stores ``None`` in its field, as the constructor's ``None`` does."""
    policy = StreamPolicy.from_env({var: raw})
    assert getattr(policy, field) is None
    assert getattr(policy, budget) is None
    assert policy == _build(**{field: None})


def test_from_env_off_turns_the_stall_watch_off_and_an_unset_first_event_bound_follows() -> None:
    """With only the stale variable ``off``, no stall watch and no first-event bound (it follows the stale one)."""
    policy = StreamPolicy.from_env({STALE: "off"})
    assert policy.first_event_timeout is StreamPolicy.SAME_AS_STALE
    assert (policy.stale_budget, policy.first_event_budget) == (None, None)


def test_from_env_off_turns_the_first_event_bound_off_and_keeps_the_stall_watch() -> None:
    """With the first-event variable ``off``, the first event is unbounded and the stale budget still applies."""
    policy = StreamPolicy.from_env({FIRST: "off", STALE: "30"})
    assert policy == StreamPolicy(stale_timeout=30.0, first_event_timeout=None)
    assert (policy.stale_budget, policy.first_event_budget) == (30.0, None)


@pytest.mark.parametrize(
    ("env", "stale_budget", "first_budget"),
    [
        ({}, 180.0, 180.0),
        ({STALE: "30"}, 30.0, 30.0),
        ({STALE: "off"}, None, None),
        ({STALE: "30", FIRST: ""}, 30.0, 30.0),
        ({STALE: "30", FIRST: "off"}, 30.0, None),
        ({STALE: "off", FIRST: "60"}, None, 60.0),
        ({STALE: "off", FIRST: "off"}, None, None),
    ],
    ids=repr,
)
def test_from_env_budgets(
    env: dict[str, str], stale_budget: float | None, first_budget: float | None
) -> None:
    """An unset or empty first-event variable follows the stale one; ``off`` turns off only the bound it names."""
    policy = StreamPolicy.from_env(env)
    assert (policy.stale_budget, policy.first_event_budget) == (stale_budget, first_budget)


@pytest.mark.parametrize("var", ALL_VARS)
@pytest.mark.parametrize("raw", ["", " ", "\t\n"], ids=repr)
def test_from_env_empty_value_keeps_default(var: str, raw: str) -> None:
    """An empty or blank variable is the same as an unset one."""
    assert StreamPolicy.from_env({var: raw}) == StreamPolicy()


@pytest.mark.parametrize("var", [STALE, FIRST])
@pytest.mark.parametrize(
    "raw",
    [
        "0",
        "0.0",
        "-0",
        "-1",
        "-inf",
        "nan",
        "NaN",
        "abc",
        "30s",
        "1,5",
        "of",
        "offf",
        "o ff",
        "none",
        "None",
        "null",
        "stale",
        "same",
        "same_as_stale",
        "SAME_AS_STALE",
        "default",
    ],
)
def test_from_env_malformed_seconds_raise_naming_variable(var: str, raw: str) -> None:
    """A zero, negative, NaN or unparsable timeout (``None`` or a name for the sentinel included) raises ``ValueError`` naming the variable and the value."""
    with pytest.raises(ValueError, match=rf"^{var} .*or 'off'") as info:
        StreamPolicy.from_env({var: raw})
    assert repr(raw) in str(info.value)


@pytest.mark.parametrize("raw", ["-1", "-10", "1.5", "2.0", "1e2", "abc", "off", "two", "inf"])
def test_from_env_malformed_retries_raise_naming_variable(raw: str) -> None:
    """A negative, non-integer or unparsable retry count raises ``ValueError`` naming the variable."""
    with pytest.raises(ValueError, match=RETRIES):
        StreamPolicy.from_env({RETRIES: raw})


@pytest.mark.parametrize(
    ("env", "overrides", "expected"),
    [
        ({STALE: "10"}, {"stale_timeout": 5}, StreamPolicy(stale_timeout=5.0)),
        ({STALE: "10"}, {"stale_timeout": None}, StreamPolicy(stale_timeout=None)),
        ({STALE: "off"}, {"stale_timeout": 60}, StreamPolicy(stale_timeout=60.0)),
        ({FIRST: "off"}, {"first_event_timeout": SAME}, StreamPolicy()),
        ({FIRST: "10"}, {"first_event_timeout": SAME}, StreamPolicy()),
        ({FIRST: "10"}, {"first_event_timeout": None}, StreamPolicy(first_event_timeout=None)),
        ({}, {"first_event_timeout": None}, StreamPolicy(first_event_timeout=None)),
        ({RETRIES: "5"}, {"retries": 0}, StreamPolicy(retries=0)),
        (
            {STALE: "10", FIRST: "20", RETRIES: "3"},
            {"retries": 1},
            StreamPolicy(stale_timeout=10.0, first_event_timeout=20.0, retries=1),
        ),
        ({}, {"first_event_timeout": math.inf}, StreamPolicy(first_event_timeout=None)),
    ],
    ids=repr,
)
def test_from_env_overrides_win(
    env: dict[str, str], overrides: dict[str, Any], expected: StreamPolicy
) -> None:
    """Keyword overrides replace whatever the environment said."""
    assert StreamPolicy.from_env(env, **overrides) == expected


def test_from_env_malformed_variable_raises_despite_override() -> None:
    """A malformed variable is reported even when an override for its field is given."""
    with pytest.raises(ValueError, match=STALE):
        StreamPolicy.from_env({STALE: "bogus"}, stale_timeout=5)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"stale_timeout": 0}, "stale_timeout"),
        ({"first_event_timeout": "30"}, "first_event_timeout"),
        ({"first_event_timeout": "off"}, "first_event_timeout"),
        ({"stale_timeout": SAME}, "stale_timeout"),
        ({"retries": -1}, "retries"),
        ({"retries": True}, "retries"),
    ],
)
def test_from_env_overrides_are_validated(overrides: dict[str, Any], field: str) -> None:
    """Invalid override values raise ``ValueError`` naming the field, as the constructor does."""
    with pytest.raises(ValueError, match=field):
        StreamPolicy.from_env({}, **overrides)


@pytest.mark.parametrize(
    "names",
    [("bogus",), ("stale",), ("timeout", "retry"), ("stale_timeout_s",)],
    ids=repr,
)
def test_from_env_unknown_override_raises_type_error_naming_it(names: tuple[str, ...]) -> None:
    """Unknown override names raise ``TypeError`` that names every one of them."""
    overrides = dict.fromkeys(names, 1)
    with pytest.raises(TypeError) as excinfo:
        StreamPolicy.from_env({}, **overrides)
    for name in names:
        assert name in str(excinfo.value)


def test_from_env_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no mapping given, ``from_env`` reads ``os.environ``."""
    monkeypatch.setenv(STALE, "12")
    monkeypatch.setenv(FIRST, "off")
    monkeypatch.setenv(RETRIES, "4")
    expected = StreamPolicy(stale_timeout=12.0, first_event_timeout=None, retries=4)
    assert StreamPolicy.from_env() == expected
    assert StreamPolicy.from_env(None) == expected


@pytest.mark.parametrize(
    ("variable", "changed", "malformed"),
    [
        (STALE, "off", "soon"),
        (FIRST, "7", "-1"),
        (RETRIES, "5", "-1"),
        ("HERMES_STREAM_RESUMES", "0", "x"),
        ("HERMES_STREAM_BUDGET_RULES", "off", "maybe"),
        (HEARTBEATS, "ping,beat", "nowire=ping"),
    ],
)
def test_from_env_shares_its_policy_until_a_variable_changes(
    monkeypatch: pytest.MonkeyPatch, variable: str, changed: str, malformed: str
) -> None:
    """``os.environ`` unchanged gives the same frozen policy again; a change to any variable is read, a malformed one raises each time."""
    for name in (*ALL_VARS, "HERMES_STREAM_RESUMES", "HERMES_STREAM_BUDGET_RULES"):
        monkeypatch.delenv(name, raising=False)
    first = StreamPolicy.from_env()
    assert StreamPolicy.from_env() is first
    monkeypatch.setenv(variable, changed)
    policy = StreamPolicy.from_env()
    assert policy != first
    assert policy == StreamPolicy.from_env({variable: changed})
    monkeypatch.setenv(variable, malformed)
    for _ in range(2):
        with pytest.raises(ValueError, match=variable):
            StreamPolicy.from_env()


def test_from_env_shared_policies_are_per_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """A subclass's ``from_env()`` never returns the base class's shared policy, nor the reverse."""

    @dataclasses.dataclass(frozen=True)
    class Custom(StreamPolicy):
        pass

    monkeypatch.setenv(RETRIES, "3")
    assert type(StreamPolicy.from_env()) is StreamPolicy
    assert type(Custom.from_env()) is Custom
    assert type(StreamPolicy.from_env()) is StreamPolicy


def test_from_env_explicit_mapping_ignores_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """An explicit mapping is the whole environment: ``os.environ`` is not consulted."""
    monkeypatch.setenv(STALE, "12")
    assert StreamPolicy.from_env({}) == StreamPolicy()


def test_from_env_on_a_subclass_returns_the_subclass() -> None:
    """``from_env`` is a classmethod that builds the class it is called on."""

    @dataclasses.dataclass(frozen=True)
    class Custom(StreamPolicy):
        pass

    policy = Custom.from_env({RETRIES: "1"})
    assert type(policy) is Custom
    assert policy.retries == 1


# --------------------------------------------------------------------------- heartbeat events


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ({"ping"}, ("ping",)),
        (["ping", "keepalive", "ping"], ("keepalive", "ping")),
        (("x" * 56,), ("x" * 56,)),
        ((), ()),
        (frozenset({"héartbeat"}), ("héartbeat",)),
    ],
    ids=repr,
)
def test_heartbeat_events_are_stored_as_a_frozenset(given: Any, stored: tuple[str, ...]) -> None:
    """One collection of event type names is kept as a hashable frozenset for every wire."""
    policy = StreamPolicy(heartbeat_events=given)
    assert policy.heartbeat_events == dict.fromkeys(WIRES, frozenset(stored))
    assert all(isinstance(policy.heartbeats_for(wire), frozenset) for wire in WIRES)
    assert hash(policy) == hash(StreamPolicy(heartbeat_events=frozenset(stored)))


def test_a_mapping_of_heartbeat_events_sets_its_wires_and_keeps_the_others() -> None:
    """Wires named in a mapping get exactly those names; the wires left out keep their defaults."""
    policy = StreamPolicy(heartbeat_events={"responses": ["keepalive", "tick"], "messages": ()})
    assert policy.heartbeats_for("responses") == {"keepalive", "tick"}
    assert policy.heartbeats_for("messages") == frozenset()
    assert policy.heartbeats_for("chat_completions") == {"ping"}
    assert policy.heartbeats_for("generic") == {"ping"}
    again = StreamPolicy(heartbeat_events=dict(policy.heartbeat_events))  # type: ignore[arg-type]
    assert again == policy
    assert hash(again) == hash(policy)
    assert pickle.loads(pickle.dumps(policy)) == policy
    assert copy.deepcopy(policy) == policy
    assert repr(policy.heartbeat_events).startswith("{'chat_completions': frozenset({'ping'})")


@pytest.mark.parametrize(
    ("value", "culprit"),
    [
        ({"respones": ["keepalive"]}, "unknown wire 'respones'"),
        ({"responses": "keepalive"}, "collection of event type names"),
        ({"messages": [""]}, "1 to 56 bytes"),
    ],
    ids=repr,
)
def test_a_bad_mapping_of_heartbeat_events_is_refused_naming_the_culprit(
    value: object, culprit: str
) -> None:
    """An unknown wire, or bad names for a wire, raise ValueError naming the field and the culprit."""
    with pytest.raises(ValueError, match="heartbeat_events") as info:
        _build(heartbeat_events=value)
    assert culprit in str(info.value)


@pytest.mark.parametrize(
    "value",
    ["ping", b"ping", None, 5, [""], ["a\nb"], ["a\rb"], ["x" * 57], [b"ping"], [1]],
    ids=repr,
)
def test_invalid_heartbeat_events_raise_naming_the_field(value: object) -> None:
    """A str (not a collection of names), an empty, too long or multi-line name is refused by name."""
    with pytest.raises(ValueError, match="heartbeat_events"):
        StreamPolicy(heartbeat_events=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("ping", ("ping",)),
        ("ping,keepalive", ("keepalive", "ping")),
        (" ping , keepalive ", ("keepalive", "ping")),
        ("off", ()),
        (" OFF ", ()),
    ],
    ids=repr,
)
def test_from_env_parses_heartbeat_events(raw: str, expected: tuple[str, ...]) -> None:
    """HERMES_STREAM_HEARTBEAT_EVENTS is a comma-separated list of names (or off) for every wire."""
    policy = StreamPolicy.from_env({HEARTBEATS: raw})
    assert policy.heartbeat_events == dict.fromkeys(WIRES, frozenset(expected))


@pytest.mark.parametrize(
    ("raw", "responses", "messages"),
    [
        ("responses=keepalive,tick", {"keepalive", "tick"}, {"ping"}),
        ("responses=off; messages = ping , hb ;", set(), {"ping", "hb"}),
        ("messages=off", {"keepalive"}, set()),
    ],
    ids=["one-wire", "two-wires-spaced", "off"],
)
def test_from_env_parses_heartbeat_events_per_wire(
    raw: str, responses: set[str], messages: set[str]
) -> None:
    """'wire=names' groups separated by ';' set those wires; the others keep their defaults."""
    policy = StreamPolicy.from_env({HEARTBEATS: raw})
    assert policy.heartbeats_for("responses") == responses
    assert policy.heartbeats_for("messages") == messages
    assert policy.heartbeats_for("chat_completions") == {"ping"}


@pytest.mark.parametrize(
    "raw",
    ["ping,,keepalive", ",", "ping,", "x" * 57, "responses=ping;keepalive", "chat=ping"],
    ids=repr,
)
def test_from_env_malformed_heartbeat_events_raise_naming_variable(raw: str) -> None:
    """An empty or too long name in the variable is refused, naming the variable and its value."""
    with pytest.raises(ValueError, match=HEARTBEATS) as info:
        StreamPolicy.from_env({HEARTBEATS: raw})
    assert repr(raw) in str(info.value)


# --------------------------------------------------------------------------- on a live stream

STALL = 0.3  # seconds: the stale budget of the live tests below
SLOW_BYTE = 0.004  # seconds between bytes: the 200-odd bytes of the first event take ~0.9 s


def _read_stream(client: Any, url: str, body: bytearray) -> None:
    """Stream a chat request to the end into ``body``."""
    with client.stream("POST", url, json=chat_body()) as response:
        for chunk in response.iter_raw():
            body += chunk


@pytest.mark.parametrize(
    ("first", "stage"),
    [(None, "mid_stream"), (math.inf, "mid_stream"), (SAME, "first_event")],
    ids=repr,
)
def test_a_stream_without_a_first_event_bound_waits_for_it_then_is_watched(
    flavor: Flavor, server: FaultServer, first: Any, stage: str
) -> None:
    """With the first-event bound off a first event slower than the stale budget is not cut and a stall after it still is; with SAME_AS_STALE the first event is cut on the stale budget."""
    server.scenario = Scenario(stall_after_events=1, byte_by_byte=True, byte_delay=SLOW_BYTE)
    policy = StreamPolicy(stale_timeout=STALL, first_event_timeout=first, retries=0)
    transport = flavor.WatchdogTransport(policy=policy)
    body = bytearray()
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        started = time.monotonic()
        with pytest.raises(StreamStalled) as info:
            _read_stream(client, server.base_url + "/chat/completions", body)
        elapsed = time.monotonic() - started
    assert info.value.stage == stage
    assert info.value.budget == STALL
    if stage == "mid_stream":
        # The server's pauses alone make the first event take longer than STALL.
        assert len(body) * SLOW_BYTE > 2 * STALL
        assert body.startswith(b"data: ")
        assert body.endswith(b"\n\n"), "the whole first event reached the caller"
        assert body.count(b"\n\n") == 1
        assert elapsed > (len(body) - 1) * SLOW_BYTE + STALL
        assert elapsed < server.scenario.hold, "cut by the watchdog, not by the server hanging up"
    else:
        assert body == b""
