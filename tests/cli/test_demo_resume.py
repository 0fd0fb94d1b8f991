"""The demo's resumable part: a background Responses stream that stalls after "hello".

The demo runs with its table of scenarios emptied (``CASES = ()``), so only the
warm-up and the resumable part run: the plain client of the HTTP library the
installed openai uses times out with half the text, the watchdog resumes the
response and reads all of it, and the demo prints the resume GET it sent.
"""

from __future__ import annotations

import io
import re

import pytest

from hermes_transport.cli import demo as _demo
from hermes_transport.testing import RESPONSES_PATH, Scenario

from _support import OPENAI_MAJOR

# The demo's row: title, the watchdog's column (58 wide), the plain client's column.
ROW = re.compile(
    rf"{re.escape(_demo.RESUME_TITLE)} +(?P<watched>.+?) in (?P<took>\d+\.\d\d) s +"
    r"(?P<plain>.+) in (?P<plain_took>\d+\.\d\d) s(?P<mark>   <-- expected .+)?$"
)
MARK = "   <-- expected ok 'hello world', resumed after event 5"
RESUME_LINE = re.compile(
    rf" {{32}}resumed: GET {RESPONSES_PATH}/resp_\w+\?stream=true&starting_after=(?P<after>\d+)$"
)
# What the plain client raises at its read timeout: openai 3.x wraps it, 1.x and 2.x do not.
PLAIN_TIMEOUT = "ReadTimeout (SDK: APITimeoutError)" if OPENAI_MAJOR >= 3 else "ReadTimeout"


def _resume_part_only(monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    """Run the demo with no table cases: (its exit status, its output lines)."""
    monkeypatch.setattr(_demo, "CASES", ())
    out = io.StringIO()
    status = _demo.run_demo(out)
    return status, out.getvalue().splitlines()


@pytest.fixture(scope="module")
def demo_run() -> tuple[int, list[str]]:
    """One run of the demo's resumable part, shared by the tests that only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _resume_part_only(monkeypatch)


def _row(lines: list[str]) -> re.Match[str]:
    (line,) = [line for line in lines if line.startswith(_demo.RESUME_TITLE)]
    match = ROW.fullmatch(line)
    assert match is not None, line
    return match


def test_the_watchdog_resumes_the_stream_the_plain_client_loses(
    demo_run: tuple[int, list[str]],
) -> None:
    """The watchdog's column reads "ok 'hello world'", the plain client's a read timeout after 'hello', and the demo exits 0."""
    status, lines = demo_run
    assert status == 0, "\n".join(lines)
    row = _row(lines)
    assert row["watched"] == "ok 'hello world'"
    assert row["plain"] == f"{PLAIN_TIMEOUT} after 'hello'"
    assert row["mark"] is None
    assert lines[-1].startswith(
        "0 of 0 watchdog outcomes as expected, the background stream resumed; "
    )


def test_the_demo_prints_the_one_resume_get_the_watchdog_sent(
    demo_run: tuple[int, list[str]],
) -> None:
    """Under the row, one line names the watchdog's resume: GET /v1/responses/<id>?stream=true&starting_after=5, the number of "hello"."""
    _, lines = demo_run
    at = next(i for i, line in enumerate(lines) if line.startswith(_demo.RESUME_TITLE))
    resumes = [match for line in lines if (match := RESUME_LINE.fullmatch(line))]
    assert len(resumes) == 1
    assert RESUME_LINE.fullmatch(lines[at + 1]) is not None
    assert resumes[0]["after"] == str(_demo.RESUMED_AFTER) == "5"


def test_the_part_has_a_heading_and_the_columns_of_the_table(
    demo_run: tuple[int, list[str]],
) -> None:
    """The part opens with a line naming background=True, and its row lines up with the table's columns (the watchdog's at 32, the plain client's at 91)."""
    _, lines = demo_run
    (header,) = [line for line in lines if line.startswith("scenario ")]
    at = next(i for i, line in enumerate(lines) if line.startswith(_demo.RESUME_TITLE))
    assert "background=True" in lines[at - 1]
    assert lines[at - 2] == ""
    row = _row(lines)
    assert row.start("watched") == header.index("WatchdogTransport") == 32
    assert row.start("plain") == header.index("plain ") == 91


@pytest.mark.timing
def test_the_watchdog_has_the_whole_text_before_the_plain_client_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The resumed stream ends before the plain client's read timeout fires: within one stale budget and the resume, not the plain timeout."""
    _, lines = _resume_part_only(monkeypatch)
    row = _row(lines)
    assert _demo.BUDGET <= float(row["took"]) < _demo.PLAIN_TIMEOUT <= float(row["plain_took"])


@pytest.mark.parametrize(
    ("scenario", "resume_lines"),
    [
        pytest.param(Scenario.healthy(), [], id="never-stalls"),
        pytest.param(
            Scenario.stall_first(1, stall=Scenario.silent_after(7), then=Scenario.healthy()),
            ["6"],
            id="resumed-after-another-event",
        ),
    ],
)
def test_the_demo_fails_when_the_stream_is_not_resumed_after_hello(
    monkeypatch: pytest.MonkeyPatch, scenario: Scenario, resume_lines: list[str]
) -> None:
    """A background stream that needs no resume, or is resumed after another event than "hello", marks the row and makes the demo exit 1."""
    monkeypatch.setattr(_demo, "RESUMABLE", scenario)
    status, lines = _resume_part_only(monkeypatch)
    assert status == 1
    row = _row(lines)
    assert row["mark"] == MARK
    assert [m["after"] for line in lines if (m := RESUME_LINE.fullmatch(line))] == resume_lines
    assert "the background stream NOT resumed" in lines[-1]
