"""`demo --svg FILE`: the demo's cases as timelines, the same text; and the wires' pictures."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from hermes_transport.cli import demo as _demo

SVG = "{http://www.w3.org/2000/svg}"
ROOT = Path(__file__).resolve().parent.parent.parent
PICTURES = ROOT / "docs" / "images" / "timelines"
CASES = {case.title: case for case in _demo.CASES}
DRAWN = (
    "healthy stream",
    "silent before headers",
    "keepalives only after 1 event",
    "stalls once, then healthy",
)


def _groups(element: ET.Element, kind: str) -> list[ET.Element]:
    return [g for g in element.iter(f"{SVG}g") if g.get("class") == kind]


def _count(element: ET.Element, kind: str) -> int:
    return sum(int(g.get("data-count", "0")) for g in _groups(element, kind))


def _budgets(element: ET.Element) -> int:
    return sum(1 for e in element.iter() if e.get("class") == "budget")


def _rows(root: ET.Element) -> dict[str, list[ET.Element]]:
    """Each row's label and its lanes."""
    return {row.get("data-label", ""): _groups(row, "lane") for row in _groups(root, "row")}


def _demo_run(monkeypatch: pytest.MonkeyPatch, titles: tuple[str, ...], svg: Path | None) -> str:
    """The demo with only ``titles`` among its table's cases and its resumable part (the
    Gemini, MCP and crash parts left out: not drawn); what it printed. It must exit 0."""
    monkeypatch.setattr(_demo, "CASES", tuple(CASES[title] for title in titles))
    monkeypatch.setattr(_demo, "_gemini_part", lambda out, policy: True)
    monkeypatch.setattr(_demo, "mcp_part", lambda out, budget, hold: True)
    monkeypatch.setattr(_demo, "crash_part", lambda out: True)
    out, err = io.StringIO(), io.StringIO()
    assert _demo.run_demo(out, svg, err) == 0, out.getvalue() + err.getvalue()
    assert err.getvalue() == ""
    return out.getvalue()


def test_the_demo_draws_each_case_with_its_attempts_stalls_and_keepalives(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The picture has a row per case drawn (and the resumable stream's), each with the watched call's lane and the plain one's: the silent stream's two attempts both cut at their budget, the keepalive-only stream's one event and its keepalives cut by the watchdog while the plain client takes more of them, the stream that stalls once re-sent and ended, the background stream resumed."""
    path = tmp_path / "demo.svg"
    out = _demo_run(monkeypatch, DRAWN, path)
    for title in DRAWN:
        (line,) = [line for line in out.splitlines() if line.startswith(title)]
        assert CASES[title].expected in line
    rows = _rows(ET.fromstring(path.read_text(encoding="utf-8")))
    assert list(rows) == [*DRAWN, _demo.RESUME_TITLE]
    assert all(len(lanes) == 2 for lanes in rows.values())
    assert [lane.get("data-tone") for lane in rows["healthy stream"]] == ["ok", "plain"]

    watched, plain = rows["silent before headers"]
    spans = _groups(watched, "span")
    assert [s.get("data-ending") for s in spans] == ["cut", "cut"]
    assert [s.get("data-via") for s in spans] == [None, "re-send"]
    assert _budgets(watched) == 2
    assert _count(watched, "events") == 0
    assert [s.get("data-ending") for s in _groups(plain, "span")] == ["error"]

    watched, plain = rows["keepalives only after 1 event"]
    assert _count(watched, "events") == _count(plain, "events") == 1
    assert 3 <= _count(watched, "keepalives") < _count(plain, "keepalives")
    assert [s.get("data-ending") for s in _groups(watched, "span")] == ["cut"]
    assert _budgets(watched) == 1
    assert "cut mid-stream" in watched.get("data-outcome", "")

    healthy_events = _count(rows["healthy stream"][0], "events")
    watched, _ = rows["stalls once, then healthy"]
    spans = _groups(watched, "span")
    assert [s.get("data-ending") for s in spans] == ["cut", "done"]
    assert spans[1].get("data-via") == "re-send"
    assert _count(spans[1], "events") == healthy_events > 0
    assert watched.get("data-outcome", "").startswith("watchdog: ok after a re-send")

    watched, plain = rows[_demo.RESUME_TITLE]
    spans = _groups(watched, "span")
    assert [s.get("data-via") for s in spans] == [None, "resume"]
    assert _count(spans[0], "others") > 0  # the Responses preamble: not progress
    assert _count(spans[0], "events") == 1  # "hello"
    assert [s.get("data-ending") for s in _groups(plain, "span")] == ["error"]


def test_the_demo_prints_the_same_with_a_picture(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The demo's text is the same with --svg as without it, timings aside."""
    without = _demo_run(monkeypatch, ("healthy stream",), None)
    with_svg = _demo_run(monkeypatch, ("healthy stream",), tmp_path / "d.svg")
    assert re.sub(r"\d+\.\d+", "N", with_svg) == re.sub(r"\d+\.\d+", "N", without)
    assert (tmp_path / "d.svg").is_file()


@pytest.mark.once
def test_the_wires_script_draws_a_wire_from_real_runs(tmp_path: Path) -> None:
    """tools/timelines.py draws the Responses wire: its preamble not counted as progress, keepalives only cut at the stale budget, a silent first attempt re-sent, a background stream resumed."""
    script = str(ROOT / "tools" / "timelines.py")
    done = subprocess.run(
        [sys.executable, script, "--wire", "responses", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = _rows(ET.fromstring((tmp_path / "responses.svg").read_text(encoding="utf-8")))
    assert list(rows) == [
        "healthy",
        "thinking 0.5 s, keepalives meanwhile",
        "keepalives only after 2 outputs",
        "silent from the start, once",
        "background, stalled after 1 output",
    ]
    (healthy,) = rows["healthy"]
    assert _count(healthy, "others") == 4
    assert _count(healthy, "events") > 0
    (thinking,) = rows["thinking 0.5 s, keepalives meanwhile"]
    assert _count(thinking, "keepalives") >= 2
    assert [s.get("data-ending") for s in _groups(thinking, "span")] == ["done"]
    (quiet,) = rows["keepalives only after 2 outputs"]
    assert _count(quiet, "events") == 2
    assert [s.get("data-ending") for s in _groups(quiet, "span")] == ["cut"]
    (silent,) = rows["silent from the start, once"]
    assert [s.get("data-via") for s in _groups(silent, "span")] == [None, "re-send"]
    (background,) = rows["background, stalled after 1 output"]
    assert [s.get("data-via") for s in _groups(background, "span")] == [None, "resume"]


@pytest.mark.once
def test_the_concepts_page_shows_a_picture_of_each_wire() -> None:
    """The Concepts page embeds the committed picture of every wire, and each is an SVG with a row per case."""
    page = (ROOT / "docs" / "concepts.md").read_text(encoding="utf-8")
    shown = re.findall(r"\]\(images/timelines/(\w+)\.svg\)", page)
    assert shown == ["chat", "responses", "messages", "gemini", "mcp", "websocket"]
    for wire in shown:
        root = ET.fromstring((PICTURES / f"{wire}.svg").read_text(encoding="utf-8"))
        assert root.get("width") == "800"
        assert len(_rows(root)) >= 4
