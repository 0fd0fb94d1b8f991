"""`python -m hermes_transport demo`: the main job on an embedded default."""

from __future__ import annotations

import importlib.util
import io
import subprocess
import sys
import time

import pytest

from hermes_transport.__main__ import main
from hermes_transport.cli import demo as _demo
from hermes_transport.cli import demo_crash as _demo_crash
from hermes_transport.cli import demo_mcp as _demo_mcp
from hermes_transport.testing import Scenario


def test_demo_runs_every_scenario_and_exits_zero() -> None:
    """The demo prints one line per scenario, with both clients, the Gemini stream's where google-genai is installed and the MCP tool calls' where mcp is, and a crashed answer finished by the next process, and exits 0 in under 45 s."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "hermes_transport", "demo"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    took = time.monotonic() - started
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for case in _demo.CASES:
        (line,) = [line for line in lines if line.startswith(case.title)]
        assert case.expected in line
        assert " in " in line
    assert (
        f"{len(_demo.CASES)} of {len(_demo.CASES)} watchdog outcomes as expected" in result.stdout
    )
    assert result.stderr == ""
    assert took < 45 * 2  # the target is 45 s; shared machines get slack
    gemini = [line for line in lines if line.startswith(_demo.GEMINI_TITLE)]
    if importlib.util.find_spec("google.genai") is None:
        assert gemini == []
        assert "google-genai is not installed" in result.stdout
    else:  # the watchdog re-sends the silent first attempt; the plain client gets no answer
        (line,) = gemini
        assert "ok 'hello world', 2 attempts" in line
        assert "(no answer)" in line
    hung = [line for line in lines if line.startswith(_demo_mcp.HUNG_TITLE)]
    resumed = [line for line in lines if line.startswith(_demo_mcp.RESUMED_TITLE)]
    if importlib.util.find_spec("mcp") is None:
        assert hung == resumed == []
        assert "the mcp SDK is not installed" in result.stdout
    else:  # the watchdog cuts the hung call and resumes the other; the SDK's client waits
        (line,) = hung
        assert "StreamStalled (the call fails alone)" in line
        assert "hung until the server hung up" in line
        assert "then cancelled: notifications/cancelled for request" in result.stdout
        (line,) = resumed
        assert line.split(" in ")[0].endswith("ok 'hello world'")
        assert "resumed: GET with Last-Event-ID" in result.stdout
    # A process killed mid-answer; the demo's own finishes it from the kept checkpoint.
    (line,) = [line for line in lines if line.startswith(_demo_crash.CRASH_TITLE)]
    assert "whole, nothing lost or repeated" in line


def test_demo_exits_non_zero_when_an_outcome_is_unexpected(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A watchdog outcome other than the expected one fails the demo."""
    wrong = _demo.Case("healthy, wrongly expected to stall", Scenario.healthy(), _demo.MID_STREAM)
    monkeypatch.setattr(_demo, "CASES", (wrong,))
    out = io.StringIO()
    assert _demo.run_demo(out) == 1
    assert "<-- expected StreamStalled mid-stream" in out.getvalue()


def test_unknown_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown command exits 2 with a usage message."""
    with pytest.raises(SystemExit) as info:
        main(["nonsense"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err
