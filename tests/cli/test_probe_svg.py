"""`probe --svg FILE`: the probe's timeline as an SVG picture, and the picture's writer."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from hermes_transport import StreamPolicy
from hermes_transport.__main__ import main
from hermes_transport.cli.figure import Figure, Lane, Row, Span
from hermes_transport.cli.options import DEFAULT_GAP, ProbeOptions
from hermes_transport.cli.probe import probe
from hermes_transport.cli.svg import render_svg, save_svg
from hermes_transport.cli.svg_marks import PLOT_LEFT, PLOT_RIGHT
from hermes_transport.testing import FaultServer, Scenario

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

SVG = "{http://www.w3.org/2000/svg}"
KEY = "sk-picture-SECRET-0123456789"


def _groups(element: ET.Element, kind: str) -> list[ET.Element]:
    """The ``<g class="kind">`` elements under ``element``, in document order."""
    return [g for g in element.iter(f"{SVG}g") if g.get("class") == kind]


def _count(element: ET.Element, kind: str) -> int:
    """How many marks of ``kind`` (events, others, keepalives) ``element`` stands for."""
    return sum(int(g.get("data-count", "0")) for g in _groups(element, kind))


def _texts(element: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in element.iter(f"{SVG}text")]


def _classes(element: ET.Element, kind: str) -> list[ET.Element]:
    return [e for e in element.iter() if e.get("class") == kind]


def _picture(path: Path) -> ET.Element:
    """The SVG file, parsed: it must be well-formed XML whose root is an 800 px wide svg."""
    root = ET.fromstring(path.read_text(encoding="utf-8"))
    assert root.tag == f"{SVG}svg"
    assert root.get("width") == "800"
    return root


def _probe(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["probe", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _masked(text: str) -> str:
    """Output with its numbers (times, the port) masked, to compare two runs."""
    return re.sub(r"\d+(\.\d+)?", "N", text)


# --- the probe's picture -----------------------------------------------------------------


def test_a_keepalive_stall_is_drawn_with_its_events_keepalives_budget_and_cut(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """With --svg and --json, the probe still prints one JSON object, and the picture has a tick per data event, a keepalive mark per comment, the stale budget's band from the last event and the stall, cut and labelled, as the report says."""
    path = tmp_path / "stall.svg"
    code, out, err = _probe(
        capsys, "--scenario", "keepalive", "--stale", "0.6", "--json", "--svg", str(path)
    )
    assert code == 1
    assert err == ""
    assert out.count("\n") == 1
    report: dict[str, Any] = json.loads(out)
    assert report["verdict"] == "stalled"
    root = _picture(path)
    (lane,) = _groups(root, "lane")
    assert _count(lane, "events") == report["events"] == 2
    assert _count(lane, "keepalives") == report["comments"] >= 1
    (span,) = _groups(lane, "span")
    assert span.get("data-ending") == "cut"
    assert len(_classes(span, "cut")) == 1
    (band,) = _classes(span, "budget")
    assert "0.6 s budget" in _texts(span)
    assert float(band.get("width", "0")) > 0
    assert lane.get("data-outcome", "").startswith("stalled at ")
    assert "mid-stream" in lane.get("data-outcome", "")
    assert "stalled" in _texts(lane)  # the note over the cut
    assert "keepalive (comment or heartbeat)" in _texts(root)  # the legend names the mark


def test_a_healthy_picture_has_every_event_and_the_probe_prints_what_it_printed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A healthy probe prints the same lines with --svg as without (numbers aside); its picture has a tick for each of its 7 events, labelled connection, headers, first event and [DONE] marks, an end dot and no budget band."""
    code, plain, _ = _probe(capsys)
    path = tmp_path / "healthy.svg"
    code_svg, out, err = _probe(capsys, "--svg", str(path))
    assert code == code_svg == 0
    assert err == ""
    assert _masked(out) == _masked(plain)
    root = _picture(path)
    (lane,) = _groups(root, "lane")
    assert _count(lane, "events") == 7
    (events,) = _groups(lane, "events")
    (ticks,) = events.iter(f"{SVG}path")
    assert ticks.get("d", "").count("M") == 7  # 0.2 s apart: none merged
    notes = [" ".join(_texts(note)) for note in _groups(lane, "note")]
    for words in ("connected", "headers: HTTP 200", "first event", "[DONE]"):
        assert words in notes
    assert len(_classes(lane, "done")) == 1
    assert _classes(lane, "budget") == []
    assert _count(lane, "keepalives") == 0
    assert _texts(root)[0] == "probe: the embedded fault server, scenario healthy"


def test_a_stall_before_the_headers_is_drawn_as_a_wait_cut_at_the_first_event_budget(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A stream silent before its headers is a dashed wait with no event, the first-event budget's band from the start, and a cut: "no first event"."""
    path = tmp_path / "silent.svg"
    code, _, _ = _probe(
        capsys, "--scenario", "no-headers", "--first-event", "0.5", "--svg", str(path)
    )
    assert code == 1
    (lane,) = _groups(_picture(path), "lane")
    assert _groups(lane, "events") == []
    assert len(_classes(lane, "waiting")) == 1
    (band,) = _classes(lane, "budget")
    assert band.get("x") == f"{PLOT_LEFT:g}"
    assert "no first event" in lane.get("data-outcome", "")
    assert len(_classes(lane, "cut")) == 1


def test_gaps_longer_than_the_threshold_are_bracketed(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Each gap the probe lists (over --gap) is a bracket on the picture, labelled with its length."""
    path = tmp_path / "slow.svg"
    code, out, _ = _probe(capsys, "--scenario", "slow", "--gap", "2", "--svg", str(path))
    assert code == 0
    listed = re.findall(r"gap of (\d+\.\d+) s", out)
    assert len(listed) == 2
    (lane,) = _groups(_picture(path), "lane")
    assert len(_classes(lane, "gap")) == len(listed)
    assert sum(1 for words in _texts(lane) if re.fullmatch(r"2\.5\d* s", words)) == 2


def test_the_picture_never_shows_the_key(tmp_path: Path) -> None:
    """A key in the base URL's path, which the title shows, is masked in the picture as in the output."""
    with FaultServer(Scenario.healthy()) as server:
        options = ProbeOptions(
            base_url=f"{server.base_url}/{KEY}",
            model="m",
            prompt="p",
            policy=StreamPolicy(retries=0, stale_timeout=5.0),
            gap=DEFAULT_GAP,
            scenario=None,
            as_json=False,
            api_key_env="HERMES_PICTURE_KEY",
            api_key=KEY,
            svg=tmp_path / "key.svg",
        )
        out, err = io.StringIO(), io.StringIO()
        code = probe(options, out, err)
    assert code == 1  # the fault server has no such path
    text = (tmp_path / "key.svg").read_text(encoding="utf-8")
    assert "SECRET" not in text
    assert "SECRET" not in out.getvalue()
    root = ET.fromstring(text)
    assert _texts(root)[0].startswith("probe: POST http://127.0.0.1:")
    (lane,) = _groups(root, "lane")
    assert lane.get("data-outcome", "").startswith("failed at ")


# --- the file option -----------------------------------------------------------------------


@pytest.mark.parametrize("command", ["probe", "demo"])
def test_an_svg_file_that_cannot_be_written_is_a_usage_error_naming_the_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str
) -> None:
    """--svg in a directory that does not exist, or naming a directory, exits 2 before anything runs, with a message naming --svg and the path, and creates nothing."""
    for value, says in (
        (str(tmp_path / "missing" / "t.svg"), "no directory"),
        (str(tmp_path), "is a directory"),
        ("", "needs a file name"),
    ):
        with pytest.raises(SystemExit) as info:
            main([command, "--svg", value])
        assert info.value.code == 2
        captured = capsys.readouterr()
        assert captured.out == ""
        assert "argument --svg:" in captured.err
        assert says in captured.err
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_written_at_the_end_fails_the_probe_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    """If the picture cannot be written when the probe ends (its path became a directory), the probe says so on stderr naming --svg, exits 1 though the stream was healthy, and leaves no file of its own behind."""
    target = tmp_path / "taken.svg"
    target.mkdir()
    (target / "inside").write_text("kept")
    options = ProbeOptions(
        base_url=None,
        model="probe",
        prompt="p",
        policy=StreamPolicy(retries=0, stale_timeout=5.0),
        gap=DEFAULT_GAP,
        scenario="healthy",
        as_json=False,
        svg=target,
    )
    out, err = io.StringIO(), io.StringIO()
    assert probe(options, out, err) == 1
    assert "verdict: healthy" in out.getvalue()
    assert err.getvalue().startswith(f"--svg: cannot write {str(target)!r}: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken.svg"]
    assert [p.name for p in target.iterdir()] == ["inside"]


def test_save_svg_replaces_a_file_whole_under_the_umask(tmp_path: Path) -> None:
    """Writing over an existing file replaces it with the whole picture, made with the umask's usual mode (not a private temporary file's), and leaves nothing beside it."""
    path = tmp_path / "t.svg"
    path.write_text("old")
    figure = Figure("t", (Row("r", (Lane((Span(0.0, 1.0),), "ok"),)),))
    assert save_svg(path, figure, io.StringIO())
    assert path.read_text(encoding="utf-8") == render_svg(figure)
    assert path.stat().st_mode & 0o044 == 0o044 & ~_umask()
    assert [p.name for p in tmp_path.iterdir()] == ["t.svg"]


def _umask() -> int:
    import os

    mask = os.umask(0)
    os.umask(mask)
    return mask


# --- the drawing ---------------------------------------------------------------------------


def _busy_figure(events: int) -> Figure:
    ticks = tuple(10.0 * i / events for i in range(events))
    span = Span(0.0, 10.0, "cut", 0.001, ticks, ticks[:100], ticks[::2], (9.0, 10.0))
    notes = tuple((i / 10, f"note {i} <&>") for i in range(50))
    return Figure('a "busy" <stream>', (Row("r & <r>", (Lane((span,), "cut", "bad", notes),)),))


def test_the_picture_is_deterministic_and_bounded_however_many_marks() -> None:
    """The same figure draws the same bytes (no clock, no random ids); 100,000 events draw at most one tick per pixel, in a picture of a few tens of kilobytes that still counts them all, and at most 10 notes."""
    figure = _busy_figure(100_000)
    text = render_svg(figure)
    assert text == render_svg(figure)
    assert " id=" not in text
    assert len(text.encode()) < 60_000
    root = ET.fromstring(text)
    assert _count(root, "events") == 100_000
    assert _count(root, "keepalives") == 50_000
    (events,) = _groups(root, "events")
    (ticks,) = events.iter(f"{SVG}path")
    assert ticks.get("d", "").count("M") <= PLOT_RIGHT - PLOT_LEFT + 1
    assert len(_groups(root, "note")) <= 10


def test_texts_are_escaped_and_every_span_is_drawn() -> None:
    """Titles, labels and notes with XML's special characters stay text; a lane of three attempts draws three spans, the later ones marked as sent again."""
    spans = (
        Span(0.0, 1.0, "cut", budget=(0.0, 1.0)),
        Span(1.0, 2.0, "cut", 1.1, (1.2,), budget=(1.2, 2.0), via="re-send"),
        Span(2.0, 2.5, "done", 2.1, (2.2, 2.3), via="resume"),
    )
    figure = replace(_busy_figure(10), rows=(Row("<three>", (Lane(spans, "ok & done"),)),))
    root = ET.fromstring(render_svg(figure))
    assert _texts(root)[0] == 'a "busy" <stream>'
    (row,) = _groups(root, "row")
    assert row.get("data-label") == "<three>"
    drawn = _groups(row, "span")
    assert [s.get("data-via") for s in drawn] == [None, "re-send", "resume"]
    assert [s.get("data-ending") for s in drawn] == ["cut", "cut", "done"]
    assert len(_classes(row, "attempt")) == 2
    assert len(_classes(row, "budget")) == 2
