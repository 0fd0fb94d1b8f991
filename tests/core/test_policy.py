"""Tests for ``StreamPolicy``: defaults, validation, budgets and ``from_env``."""

from __future__ import annotations

import dataclasses
import math
import sys
import threading
from typing import Any

import pytest

from hermes_transport._core.policy import MAX_SECONDS, StreamPolicy

STALE = "HERMES_STREAM_STALE_TIMEOUT"
FIRST = "HERMES_STREAM_FIRST_EVENT_TIMEOUT"
RETRIES = "HERMES_STREAM_RETRIES"
HEARTBEATS = "HERMES_STREAM_HEARTBEAT_EVENTS"
ALL_VARS = (STALE, FIRST, RETRIES, HEARTBEATS)
TIMEOUT_FIELDS = ("stale_timeout", "first_event_timeout")


def _build(**fields: Any) -> StreamPolicy:
    """A policy from fields of any type: the validation, not the type checker, is under test."""
    return StreamPolicy(**fields)


# --------------------------------------------------------------------------- defaults & frozen


def test_defaults() -> None:
    """The default policy is a 180 s stall budget, first event inheriting it, and 2 re-sends."""
    policy = StreamPolicy()
    assert (policy.stale_timeout, policy.first_event_timeout, policy.retries) == (180.0, None, 2)
    assert (policy.stale_budget, policy.first_event_budget) == (180.0, 180.0)
    assert policy.heartbeat_events == frozenset({"ping"})


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
        (180.0, None, 180.0, 180.0),
        (30.0, None, 30.0, 30.0),
        (30.0, 600.0, 30.0, 600.0),
        (30.0, 5.0, 30.0, 5.0),
        (30.0, math.inf, 30.0, None),
        (None, None, None, None),
        (None, 60.0, None, 60.0),
        (None, math.inf, None, None),
        (math.inf, None, None, None),
        (math.inf, 10.0, None, 10.0),
        (math.inf, math.inf, None, None),
        (0.001, None, 0.001, 0.001),
    ],
)
def test_budgets(
    stale: float | None,
    first: float | None,
    stale_budget: float | None,
    first_budget: float | None,
) -> None:
    """``first_event_timeout=None`` inherits the stale timeout and ``math.inf`` means no bound."""
    policy = StreamPolicy(stale_timeout=stale, first_event_timeout=first)
    assert policy.stale_budget == stale_budget
    assert policy.first_event_budget == first_budget


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
@pytest.mark.parametrize(
    "value",
    [0, 0.0, -0.0, -1, -1.5, -math.inf, math.nan, True, False, "30", "off", b"30", [30], object()],
    ids=lambda value: "object()" if type(value) is object else repr(value),  # stable for xdist
)
def test_invalid_timeouts_raise_naming_the_field(field: str, value: object) -> None:
    """Zero, negative, NaN, bool and non-numeric timeouts raise ``ValueError`` naming the field."""
    with pytest.raises(ValueError, match=field):
        _build(**{field: value})


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
@pytest.mark.parametrize(
    ("value", "stored"),
    [(1, 1.0), (30, 30.0), (0.5, 0.5), (1e-9, 1e-9), (10**6, 1e6), (math.inf, math.inf)],
    ids=repr,
)
def test_valid_timeouts_are_stored_as_float(field: str, value: float, stored: float) -> None:
    """Positive ints and floats are accepted and stored as ``float``."""
    got = getattr(_build(**{field: value}), field)
    assert got == stored
    assert type(got) is float


@pytest.mark.parametrize("field", TIMEOUT_FIELDS)
def test_none_timeouts_are_accepted(field: str) -> None:
    """``None`` is a valid value for either timeout."""
    assert getattr(_build(**{field: None}), field) is None


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


def test_infinity_and_none_keep_their_meanings() -> None:
    """``math.inf`` and ``None`` are not budgets above the maximum: they turn bounds off as before."""
    assert StreamPolicy(stale_timeout=math.inf).stale_budget is None
    assert StreamPolicy(first_event_timeout=math.inf).first_event_budget is None
    assert StreamPolicy(stale_timeout=None, first_event_timeout=None).first_event_budget is None


@pytest.mark.parametrize("var", [STALE, FIRST])
@pytest.mark.parametrize(
    "raw", ["31536001", "1e10", "9223372036854775807", "1e300", "1e400", "1E999", "-1e400"]
)
def test_from_env_budgets_above_the_maximum_raise_naming_variable(var: str, raw: str) -> None:
    """A budget above MAX_SECONDS in the environment, or one that only overflows to infinity, raises ValueError naming the variable."""
    with pytest.raises(ValueError, match=rf"{var} .*at most 31536000"):
        StreamPolicy.from_env({var: raw})


@pytest.mark.parametrize("raw", ["inf", "Infinity", "+inf", "INF", " inf "])
def test_from_env_a_spelled_out_infinity_is_no_bound(raw: str) -> None:
    """An explicit ``inf`` in the environment still means no bound, as ``off`` does for the first event."""
    assert StreamPolicy.from_env({STALE: raw}).stale_budget is None
    assert StreamPolicy.from_env({FIRST: raw}).first_event_budget is None


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
        ({FIRST: "600"}, StreamPolicy(first_event_timeout=600.0)),
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


@pytest.mark.parametrize("raw", ["off", "OFF", "Off", "oFf", " off ", "\toff\n"], ids=repr)
def test_from_env_off_turns_stall_watch_off(raw: str) -> None:
    """``off`` for the stale timeout (any case, padded) means ``None``: no stall watch at all."""
    policy = StreamPolicy.from_env({STALE: raw})
    assert policy.stale_timeout is None
    assert (policy.stale_budget, policy.first_event_budget) == (None, None)


@pytest.mark.parametrize("raw", ["off", "OFF", "Off", " off ", "\toff\n"], ids=repr)
def test_from_env_off_turns_first_event_bound_off(raw: str) -> None:
    """``off`` for the first-event timeout means ``math.inf``: no first-event bound, stall watch on."""
    policy = StreamPolicy.from_env({FIRST: raw, STALE: "30"})
    assert policy.first_event_timeout == math.inf
    assert (policy.stale_budget, policy.first_event_budget) == (30.0, None)


@pytest.mark.parametrize("var", ALL_VARS)
@pytest.mark.parametrize("raw", ["", " ", "\t\n"], ids=repr)
def test_from_env_empty_value_keeps_default(var: str, raw: str) -> None:
    """An empty or blank variable is the same as an unset one."""
    assert StreamPolicy.from_env({var: raw}) == StreamPolicy()


@pytest.mark.parametrize("var", [STALE, FIRST])
@pytest.mark.parametrize(
    "raw",
    ["0", "0.0", "-0", "-1", "-inf", "nan", "NaN", "abc", "30s", "1,5", "of", "offf", "none"],
)
def test_from_env_malformed_seconds_raise_naming_variable(var: str, raw: str) -> None:
    """A zero, negative, NaN or unparsable timeout raises ``ValueError`` naming the variable."""
    with pytest.raises(ValueError, match=var):
        StreamPolicy.from_env({var: raw})


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
        ({FIRST: "off"}, {"first_event_timeout": None}, StreamPolicy()),
        ({RETRIES: "5"}, {"retries": 0}, StreamPolicy(retries=0)),
        (
            {STALE: "10", FIRST: "20", RETRIES: "3"},
            {"retries": 1},
            StreamPolicy(stale_timeout=10.0, first_event_timeout=20.0, retries=1),
        ),
        ({}, {"first_event_timeout": math.inf}, StreamPolicy(first_event_timeout=math.inf)),
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
    expected = StreamPolicy(stale_timeout=12.0, first_event_timeout=math.inf, retries=4)
    assert StreamPolicy.from_env() == expected
    assert StreamPolicy.from_env(None) == expected


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
    """Any collection of event type names is accepted and kept as a hashable frozenset."""
    policy = StreamPolicy(heartbeat_events=given)
    assert policy.heartbeat_events == frozenset(stored)
    assert isinstance(policy.heartbeat_events, frozenset)
    assert hash(policy) == hash(StreamPolicy(heartbeat_events=frozenset(stored)))


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
    """HERMES_STREAM_HEARTBEAT_EVENTS is a comma-separated list of names, or off for none."""
    assert StreamPolicy.from_env({HEARTBEATS: raw}).heartbeat_events == frozenset(expected)


@pytest.mark.parametrize("raw", ["ping,,keepalive", ",", "ping,", "x" * 57], ids=repr)
def test_from_env_malformed_heartbeat_events_raise_naming_variable(raw: str) -> None:
    """An empty or too long name in the variable is refused, naming the variable and its value."""
    with pytest.raises(ValueError, match=HEARTBEATS) as info:
        StreamPolicy.from_env({HEARTBEATS: raw})
    assert repr(raw) in str(info.value)
