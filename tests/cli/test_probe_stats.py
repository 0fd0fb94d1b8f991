"""The probe's statistics: the transport's StreamStats, printed and in --json, and the budgets the call got."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import asdict, fields
from typing import Any

import pytest

from hermes_transport import CallBudgets, StreamPolicy, StreamStats
from hermes_transport.__main__ import main
from hermes_transport.cli.options import EMBEDDED_BUDGET
from hermes_transport.testing import FaultServer, Scenario

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

KEY = "sk-stats-SECRET-0123456789"
KEY_VAR = "HERMES_PROBE_STATS_TEST_KEY"
QUERY_SECRET = "QUERYSECRETvalue42"
STATS_FIELDS = {f.name for f in fields(StreamStats)}
BUDGET_FIELDS = {f.name for f in fields(CallBudgets)}
STATS_LINES = (
    "statistics (the transport's StreamStats, as on_stats reports them):",
    "  call: ",
    "  outcome: ",
    "  attempts: ",
    "  times: connect ",
    "  counts: ",
    "  gaps: ",
    "  budgets: ",
)


def _probe_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run `probe ARGS` in-process: (exit code, stdout, stderr)."""
    code = main(["probe", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _probe_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = _probe_cli(capsys, *args, "--json")
    assert err == ""
    report: dict[str, Any] = json.loads(out)
    assert report["exit_code"] == code
    return code, report


def _stats_block(out: str) -> list[str]:
    """The statistics block of a plain output: its heading and its indented lines."""
    lines = out.splitlines()
    start = lines.index(STATS_LINES[0])
    return lines[start : start + len(STATS_LINES)]


def _field(block: list[str], prefix: str) -> str:
    (line,) = [line for line in block if line.startswith(prefix)]
    return line.removeprefix(prefix)


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(Scenario.healthy()) as fault_server:
        yield fault_server


def _call_budgets(model: str, body: bytes, **policy: Any) -> CallBudgets:
    """The budgets a call gets under the probe's policy against a server of the user's."""
    return StreamPolicy.from_env(retries=0, **policy).budgets_for(model, len(body))


# --- --json ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "outcome", "stage", "code"),
    [
        ("healthy", "completed", None, 0),
        ("slow", "completed", None, 0),
        ("silent", "stalled", "mid_stream", 1),
        ("keepalive", "stalled", "mid_stream", 1),
        ("no-headers", "stalled", "headers", 1),
    ],
)
def test_json_stats_are_the_transports_stream_stats_with_every_field(
    capsys: pytest.CaptureFixture[str], scenario: str, outcome: str, stage: str | None, code: int
) -> None:
    """--json carries "stats" with every StreamStats field (budgets nested), the outcome and stage of the embedded scenario, and the events, heartbeats and status the timeline counted."""
    stale = "0.6" if code else str(EMBEDDED_BUDGET)
    exit_code, report = _probe_json(capsys, "--scenario", scenario, "--stale", stale)
    assert exit_code == code
    stats = report["stats"]
    assert set(stats) == STATS_FIELDS
    assert set(stats["budgets"]) == BUDGET_FIELDS
    assert (stats["outcome"], stats["stage"]) == (outcome, stage)
    assert stats["events"] == report["events"]
    assert stats["heartbeats"] == report["heartbeats"]
    assert stats["status"] == report["status"]
    assert (stats["wire"], stats["model"], stats["method"]) == (
        "chat_completions",
        "probe",
        "POST",
    )
    assert stats["url"] == report["url"]
    assert stats["attempts"] == 1
    assert 0 < stats["duration"] <= report["total"]
    expected = StreamPolicy(stale_timeout=float(stale), retries=0).budgets_for("probe")
    budgets = stats["budgets"]
    assert (budgets["first_event"], budgets["stale"], budgets["model"], budgets["source"]) == (
        expected.first_event,
        expected.stale,
        "probe",
        expected.source,
    )
    assert report["budgets"] == {
        "first_event": expected.first_event,
        "stale": expected.stale,
        "gap": 2.0,
    }


def test_healthy_stats_count_every_gap_between_events(capsys: pytest.CaptureFixture[str]) -> None:
    """The healthy scenario's 7 events, 0.2 s apart, give 6 gaps whose largest and percentiles are about 0.2 s, with no comments or heartbeats."""
    code, report = _probe_json(capsys, "--scenario", "healthy")
    assert code == 0
    stats = report["stats"]
    assert (stats["events"], stats["gap_count"]) == (7, 6)
    assert (stats["heartbeats"], stats["comment_bytes"]) == (0, 0)
    assert stats["bytes"] > 0
    for name in ("largest_gap", "gap_p50", "gap_p90", "gap_p99"):
        assert 0.15 <= stats[name] < 0.2 + 3.0, name
    assert stats["headers"] <= stats["first_event"] <= stats["first_output"] <= stats["duration"]
    assert stats["tls"] is None  # plain HTTP


@pytest.mark.parametrize(
    ("model", "options", "source"),
    [
        ("m", (), ""),
        ("o3", (), "o3*"),
        ("deepseek-reasoner", (), "deepseek-reasoner*"),
        ("o3", ("--stale", "7"), ""),
        ("o3", ("--first-event", "9"), "o3*"),
        ("m", ("--prompt", "x" * 210_000), "prompt"),
    ],
    ids=["plain", "o3", "deepseek", "o3-stale-set", "o3-first-event-set", "long-prompt"],
)
def test_the_budgets_shown_are_the_ones_the_call_got(
    capsys: pytest.CaptureFixture[str],
    server: FaultServer,
    model: str,
    options: tuple[str, ...],
    source: str,
) -> None:
    """The heading, the JSON budgets and the stats' budgets are StreamPolicy.budgets_for the model and body sent, rules and prompt floors included, and the options still win."""
    base = ["--base-url", server.base_url, "--model", model, *options]
    code, report = _probe_json(capsys, *base)
    assert code == 0, report["detail"]
    (request,) = server.requests
    policy: dict[str, Any] = {}
    if "--stale" in options:
        policy["stale_timeout"] = float(options[options.index("--stale") + 1])
    if "--first-event" in options:
        policy["first_event_timeout"] = float(options[options.index("--first-event") + 1])
    expected = _call_budgets(model, request.body, **policy)
    assert source in expected.source
    assert report["stats"]["budgets"] == asdict(expected)
    assert report["budgets"]["first_event"] == expected.first_event
    assert report["budgets"]["stale"] == expected.stale
    code, out, _ = _probe_cli(capsys, *base)
    assert code == 0
    heading = out.splitlines()[1]
    assert heading.startswith(f"budgets: {expected} | gaps over ")
    assert _field(_stats_block(out), "  budgets: ") == str(expected)


def test_a_reasoning_model_on_the_embedded_server_keeps_the_embedded_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """On the embedded server the short stale budget is set, so a reasoning model's rules do not lengthen it: the call's budgets are that budget, as the transport gives them."""
    code, report = _probe_json(capsys, "--model", "o3", "--scenario", "healthy")
    assert code == 0
    budgets = report["stats"]["budgets"]
    assert (budgets["first_event"], budgets["stale"]) == (EMBEDDED_BUDGET, EMBEDDED_BUDGET)
    assert budgets["model"] == "o3"


@pytest.mark.parametrize(
    ("scenario", "status"),
    [(Scenario.error(500), 500), (Scenario.truncated(1), 200)],
    ids=["status", "truncated"],
)
def test_a_failed_call_reports_its_stats_as_an_error(
    capsys: pytest.CaptureFixture[str], server: FaultServer, scenario: Scenario, status: int
) -> None:
    """An error status or a cut-off body has stats with outcome "error", the status the headers carried and the error the transport saw."""
    server.scenario = scenario
    code, report = _probe_json(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 1
    stats = report["stats"]
    assert stats["outcome"] == "error"
    assert stats["status"] == status
    assert stats["error"]
    assert stats["events"] == report["events"]


def test_a_refused_connection_has_stats_without_a_status(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A connection refused is an "error" outcome with no status and no times but the duration, shown as "-" in plain output."""
    base = ["--base-url", "http://127.0.0.1:9/v1", "--model", "m"]
    code, report = _probe_json(capsys, *base)
    assert code == 1
    stats = report["stats"]
    assert (stats["outcome"], stats["status"], stats["headers"], stats["events"]) == (
        "error",
        None,
        None,
        0,
    )
    code, out, _ = _probe_cli(capsys, *base)
    assert code == 1
    block = _stats_block(out)
    assert _field(block, "  outcome: ").startswith("error, stage -, status -, error ConnectError")
    assert "headers -, first event -, first output -," in _field(block, "  times: ")
    assert _field(block, "  gaps: ") == "0, largest -, p50 -, p90 -, p99 -"


# --- plain output ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scenario", "outcome"),
    [
        ("healthy", "completed, stage -, status 200, error -"),
        ("silent", "stalled, stage mid_stream"),
    ],
)
def test_plain_output_has_the_statistics_block_between_timeline_and_verdict(
    capsys: pytest.CaptureFixture[str], scenario: str, outcome: str
) -> None:
    """The plain output prints the statistics block after the timeline and before the verdict, with the outcome, the events the timeline counted, times in seconds and "-" for what is absent."""
    code, out, _ = _probe_cli(capsys, "--scenario", scenario, "--stale", "0.6")
    _, report = _probe_json(capsys, "--scenario", scenario, "--stale", "0.6")
    assert code == report["exit_code"]
    block = _stats_block(out)
    assert [line[: len(start)] for line, start in zip(block, STATS_LINES, strict=True)] == list(
        STATS_LINES
    )
    lines = out.splitlines()
    start = lines.index(STATS_LINES[0])
    assert lines[start - 1].endswith(
        (" s  stream ended after 7 event(s)", " s  stalled: no data event for 0.6 s after event 2")
    )
    assert lines[start + len(STATS_LINES)].startswith("verdict: ")
    assert _field(block, "  outcome: ").startswith(outcome)
    assert _field(block, "  attempts: ") == "1, resends 0, resumes 0"
    events = report["events"]
    assert _field(block, "  counts: ").startswith(f"{events} event(s), 0 heartbeat(s), ")
    times = _field(block, "  times: ")
    assert "TLS -," in times
    duration = times.rpartition("duration ")[2]
    assert re.fullmatch(r"\d+\.\d{3} s", duration), duration
    assert _field(block, "  budgets: ") == "first event 0.6 s, stale 0.6 s"


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_the_key_and_the_query_string_appear_nowhere_in_the_statistics(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FaultServer,
    as_json: bool,
) -> None:
    """A base URL with a query string and a key sent as a Bearer token: neither shows in the statistics or anywhere else, and the stats' URL is the path without the query."""
    monkeypatch.setenv(KEY_VAR, KEY)
    url = f"{server.base_url}?api-key={QUERY_SECRET}"
    args = ["--base-url", url, "--model", "m", "--api-key-env", KEY_VAR]
    code, out, err = _probe_cli(capsys, *args, *(["--json"] if as_json else []))
    assert code == 0, out
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    for secret in (KEY, QUERY_SECRET, "api-key="):
        assert secret not in out + err
    if as_json:
        assert json.loads(out)["stats"]["url"] == f"{server.base_url}/chat/completions"
    else:
        call = _field(_stats_block(out), "  call: ")
        assert f"POST {server.base_url}/chat/completions, server 127.0.0.1" in call
