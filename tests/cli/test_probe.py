"""`python -m hermes_transport probe`: one streamed chat completion, its timeline and verdict."""

from __future__ import annotations

import argparse
import contextlib
import http.server
import io
import json
import os
import signal
import ssl
import string
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_transport import Interrupt, StreamPolicy
from hermes_transport.__main__ import main
from hermes_transport._core.progress import ProgressMeter
from hermes_transport.cli import console as _console
from hermes_transport.cli.console import CtrlC
from hermes_transport.cli.options import DEFAULT_GAP, ProbeOptions, add_arguments, options_from
from hermes_transport.cli.probe import probe
from hermes_transport.cli.redact import MASK, Redactor
from hermes_transport.cli.timeline import Timeline
from hermes_transport.testing import FaultServer, Scenario

from _support import black_hole

# No SDK here: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

KEY = "sk-probe-SECRET-0123456789"
KEY_VAR = "HERMES_PROBE_TEST_KEY"
# Generous bounds: a shared 2-core machine may be slow; budgets are never undercut.
SLACK = 3.0

Output = tuple[int, str, str]


def _probe_cli(capsys: pytest.CaptureFixture[str], *args: str) -> Output:
    """Run `probe ARGS` in-process: (exit code, stdout, stderr)."""
    code = main(["probe", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _probe_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code, out, err = _probe_cli(capsys, *args, "--json")
    assert err == ""
    assert out.count("\n") == 1, out  # one object, one line
    report: dict[str, Any] = json.loads(out)
    assert report["exit_code"] == code
    return code, report


def _kinds(report: dict[str, Any]) -> list[str]:
    return [mark["kind"] for mark in report["timeline"]]


def _usage_error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(["probe", *args])
    assert info.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "usage:" in captured.err
    return captured.err


@pytest.fixture
def server() -> Iterator[FaultServer]:
    with FaultServer(Scenario.healthy()) as fault_server:
        yield fault_server


def _probe_threads() -> list[str]:
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith(("hermes-probe", "FaultServer")) and t.is_alive()
    ]


# --- verdicts on the embedded server -----------------------------------------------------


def test_healthy_embedded_stream_prints_its_timeline_and_exits_zero(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without --base-url the probe streams the embedded healthy scenario and reports connect, headers, first event, [DONE] and a healthy verdict with exit 0."""
    code, out, err = _probe_cli(capsys)
    assert code == 0, out
    assert err == ""
    lines = out.splitlines()
    assert "embedded fault server, healthy" in lines[0]
    for text in ("connected (TCP)", "headers: HTTP 200, text/event-stream", "first event"):
        assert any(line.endswith(f" s  {text}") for line in lines), text
    assert any(line.endswith(" s  [DONE]") for line in lines)
    assert "verdict: healthy: 7 event(s), the first at 0.0" in out
    assert "summary: first event at 0.0" in out
    assert " 7 event(s), 0 comment(s), largest gap 0.2" in out


@pytest.mark.parametrize(
    ("scenario", "stage", "waiting_for"),
    [
        ("silent", "mid_stream", "event 3"),
        ("keepalive", "mid_stream", "event 3"),
        ("no-headers", "first_event", "headers"),
    ],
)
def test_a_stall_is_reported_with_its_stage_and_budget_and_exits_one(
    capsys: pytest.CaptureFixture[str], scenario: str, stage: str, waiting_for: str
) -> None:
    """A silent, keepalive-only or header-less embedded stream ends with verdict stalled, its stage, what it waited for and the budget, no sooner than the budget, and exit 1."""
    code, report = _probe_json(capsys, "--scenario", scenario, "--stale", "0.5")
    assert code == 1
    assert report["verdict"] == "stalled"
    stall = report["stall"]
    assert stall["stage"] == stage
    assert stall["waiting_for"] == waiting_for
    assert stall["budget"] == 0.5
    assert 0.5 <= report["total"] < 0.5 + SLACK
    assert _kinds(report)[-1] == "stalled"
    if stage == "mid_stream":
        assert report["events"] == 2
        assert report["largest_gap"]["after_event"] == 2
        assert report["largest_gap"]["seconds"] >= 0.45  # the open gap the stall closed
    else:
        assert report["events"] == 0
        assert "headers" not in _kinds(report)


def test_plain_stall_output_says_stalled_at_when(capsys: pytest.CaptureFixture[str]) -> None:
    """In plain output a stall reads "stalled at T s, mid-stream" with the budget, and the timeline shows where."""
    code, out, _ = _probe_cli(capsys, "--scenario", "silent", "--stale", "0.5")
    assert code == 1
    assert "verdict: stalled at " in out
    assert ", mid-stream: no data event for 0.5 s after event 2" in out
    assert " s  stalled: no data event for 0.5 s after event 2" in out


def test_first_event_budget_is_separate_from_the_stale_budget(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--first-event bounds the wait for the first event on its own, whatever --stale says."""
    code, report = _probe_json(
        capsys, "--scenario", "no-headers", "--stale", "30", "--first-event", "0.5"
    )
    assert code == 1
    assert report["budgets"]["first_event"] == 0.5
    assert report["budgets"]["stale"] == 30
    assert report["stall"]["budget"] == 0.5
    assert report["total"] < 0.5 + SLACK


def test_keepalive_comments_are_counted_and_reported_as_one_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Keepalive comments are counted, shown as one timeline line per run, and named in the stall verdict as not being progress."""
    code, out, _ = _probe_cli(capsys, "--scenario", "keepalive", "--stale", "1")
    assert code == 1
    (run,) = [line for line in out.splitlines() if "comment(s) (': keepalive')" in line]
    count = int(run.split(" s  ")[1].split()[0])
    assert count >= 2  # one every 0.25 s for 1 s
    assert f", 2 event(s), {count} comment(s)," in out
    assert out.index(run) < out.index(" s  stalled: ")  # the run is closed before the stall
    assert f"{count} comment(s) came meanwhile, and comments (keepalives) are not progress" in out


@pytest.mark.parametrize(("gap", "listed"), [("0.1", True), ("1", False)])
def test_only_gaps_longer_than_the_threshold_are_listed(
    capsys: pytest.CaptureFixture[str], gap: str, listed: bool
) -> None:
    """Gaps between data events (0.2 s in the healthy scenario) are listed when longer than --gap, and not otherwise."""
    code, report = _probe_json(capsys, "--gap", gap)
    assert code == 0
    gaps = [mark for mark in report["timeline"] if mark["kind"] == "gap"]
    if listed:
        assert [mark["before_event"] for mark in gaps] == [2, 3, 4, 5, 6, 7]
        assert all(mark["seconds"] > 0.1 for mark in gaps)
    else:
        assert gaps == []
    assert report["largest_gap"]["seconds"] >= 0.19


def test_json_report_has_every_field(capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one JSON object with the verdict, budgets, counts, largest gap, total and a time-ordered timeline."""
    code, report = _probe_json(capsys, "--stale", "5", "--gap", "0.1")
    assert code == 0
    assert report["verdict"] == "healthy"
    assert report["embedded"] is True
    assert report["scenario"] == "healthy"
    assert report["model"] == "probe"
    assert report["url"].endswith("/v1/chat/completions")
    assert report["budgets"] == {"first_event": 5.0, "stale": 5.0, "gap": 0.1}
    assert report["status"] == 200
    assert (report["events"], report["comments"], report["done"]) == (7, 0, True)
    assert report["stall"] is None
    assert 0 < report["first_event_at"] < report["total"]
    assert set(report["largest_gap"]) == {"seconds", "after_event", "until"}
    offsets = [mark["at"] for mark in report["timeline"]]
    assert offsets == sorted(offsets)
    assert _kinds(report)[:4] == ["connected", "sent", "headers", "first_event"]
    assert _kinds(report)[-2:] == ["done", "end"]


# --- a server of the user's -----------------------------------------------------------


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_base_url_sends_the_key_as_bearer_and_never_prints_it(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FaultServer,
    as_json: bool,
) -> None:
    """Against --base-url the probe POSTs a streaming chat completion for --model with the key from --api-key-env as a Bearer token, and the key appears nowhere in its output."""
    monkeypatch.setenv(KEY_VAR, KEY)
    args = ["--base-url", server.base_url, "--model", "m-1", "--api-key-env", KEY_VAR]
    code, out, err = _probe_cli(capsys, *args, *(["--json"] if as_json else []))
    assert code == 0, out
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.path == "/v1/chat/completions"
    assert request.stream is True
    assert isinstance(request.json, dict)
    assert request.json["model"] == "m-1"
    assert KEY not in out + err
    assert f"${KEY_VAR}" in out or f'"api_key_env": "{KEY_VAR}"' in out


def test_without_a_key_no_authorization_header_is_sent(
    capsys: pytest.CaptureFixture[str], server: FaultServer
) -> None:
    """Without --api-key-env the request carries no Authorization header, and the heading says so."""
    code, out, _ = _probe_cli(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 0
    assert "authorization" not in server.requests[0].headers
    assert "no API key" in out


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_a_key_echoed_by_the_server_is_masked(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    server: FaultServer,
    as_json: bool,
) -> None:
    """An error response that quotes the API key is reported as a failure (exit 1) with the key masked."""
    server.scenario = Scenario.error(401, message=f"Incorrect API key provided: {KEY}.")
    monkeypatch.setenv(KEY_VAR, KEY)
    args = ["--base-url", server.base_url, "--model", "m", "--api-key-env", KEY_VAR]
    code, out, err = _probe_cli(capsys, *args, *(["--json"] if as_json else []))
    assert code == 1
    assert KEY not in out + err
    assert f"HTTP 401: Incorrect API key provided: {MASK}." in out


def test_budgets_come_from_the_environment_against_a_base_url_and_options_win(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, server: FaultServer
) -> None:
    """Against --base-url the HERMES_STREAM_* variables set the budgets, as in the user's application, and --stale overrides them."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "0.5")
    monkeypatch.setenv("HERMES_STREAM_FIRST_EVENT_TIMEOUT", "off")
    base = ["--base-url", server.base_url, "--model", "m"]
    _, report = _probe_json(capsys, *base)
    assert report["budgets"]["stale"] == 0.5
    assert report["budgets"]["first_event"] is None
    _, report = _probe_json(capsys, *base, "--stale", "7")
    assert report["budgets"]["stale"] == 7


@pytest.mark.parametrize(
    ("scenario", "says"),
    [
        (Scenario.error(500), "HTTP 500: The server had an error"),
        (Scenario.truncated(1), "RemoteProtocolError"),
    ],
    ids=["status", "truncated"],
)
def test_other_failures_say_what_failed_and_exit_one(
    capsys: pytest.CaptureFixture[str], server: FaultServer, scenario: Scenario, says: str
) -> None:
    """An error status or a cut-off body gives verdict failed, naming what failed, and exit 1."""
    server.scenario = scenario
    code, report = _probe_json(capsys, "--base-url", server.base_url, "--model", "m")
    assert code == 1
    assert report["verdict"] == "failed"
    assert says in report["detail"]
    assert _kinds(report)[-1] == "error"


def test_a_refused_connection_is_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    """A server that refuses the connection gives verdict failed with the connect error, exit 1."""
    with FaultServer() as gone:
        url = gone.base_url
    code, report = _probe_json(capsys, "--base-url", url, "--model", "m")
    assert code == 1
    assert "ConnectError" in report["detail"]


def test_a_connect_that_hangs_stalls_before_the_first_event(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A connect that never completes is a first-event stall waiting for the connection, after the budget."""
    with black_hole() as url:
        code, report = _probe_json(capsys, "--base-url", url, "--model", "m", "--stale", "0.5")
    assert code == 1
    assert report["stall"]["waiting_for"] == "the connection"
    assert report["total"] < 0.5 + SLACK


def test_tls_handshake_time_is_shown(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Over https the timeline shows the TLS handshake between connecting and the headers."""
    ca = trustme.CA()
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(server_context)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    with FaultServer(ssl_context=server_context) as secure:
        code, report = _probe_json(capsys, "--base-url", secure.base_url, "--model", "m")
    assert code == 0, report["detail"]
    assert _kinds(report)[:3] == ["connected", "tls", "sent"]


# --- a server that echoes the key ---------------------------------------------------------

# As long as a real project key, so that cutting it (at 60, 200 or 2000 characters) leaves
# long pieces of it on either side of the cut.
LONG_KEY = ("sk-proj-" + (string.ascii_letters + string.digits) * 3)[:162]
_TOKEN_CHARACTERS = string.ascii_letters + string.digits + "-_"
# A key with none of these cannot run into the JSON syntax between two values.
_JSON_SYNTAX = set('"\\:,{}[] ')


def _runs_of(key: str, text: str) -> list[str]:
    """The runs of 8 consecutive characters of ``key`` that ``text`` shows."""
    return [key[i : i + 8] for i in range(len(key) - 7) if key[i : i + 8] in text]


def _http(status: int, content_type: str, body: bytes, reason: str = "Unauthorized") -> bytes:
    """A whole HTTP/1.1 response, the connection closed after it."""
    head = (
        f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _sse_with_comment(comment: str) -> bytes:
    body = f": {comment}\n\ndata: {{}}\n\ndata: [DONE]\n\n"
    return _http(200, "text/event-stream", body.encode(), "OK")


def _json_error(message: object) -> bytes:
    return _http(401, "application/json", json.dumps({"error": {"message": message}}).encode())


def _escaped_json_error(message: str) -> bytes:
    escaped = "".join(f"\\u{ord(c):04x}" for c in message)  # every character an escape
    return _http(401, "application/json", f'{{"error": {{"message": "{escaped}"}}}}'.encode())


# Where a server may put what it echoes: ``text`` becomes one whole raw response.
_ECHO_SHAPES: dict[str, Callable[[str], bytes]] = {
    "text body": lambda text: _http(401, "text/plain", text.encode()),
    "json message": _json_error,
    "escaped json message": _escaped_json_error,
    "json object message": lambda text: _json_error({"detail": text}),
    "json without message": lambda text: _http(
        401, "application/json", json.dumps([text]).encode()
    ),
    "reason phrase": lambda text: _http(401, "text/plain", b"", reason=text),
    "content type": lambda text: _http(200, f"text/{text}", b"{}", "OK"),
    "error content type": lambda text: _http(401, f"text/{text}", b""),
    "sse comment": _sse_with_comment,
    "bad header line": lambda text: f"HTTP/1.1 200 OK\r\n{text}\r\n\r\n".encode(),
    "bad status line": lambda text: f"HTTP/1.1 2x0 {text}\r\n\r\n".encode(),
}


class _EchoServer(http.server.ThreadingHTTPServer):
    """A loopback server answering every request with the raw bytes of ``response``.

    ``response`` is the bytes, or a list of pieces written one write each, where a
    number instead pauses that many seconds (so that the pieces arrive in separate reads).
    """

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _EchoHandler)
        self.response: bytes | list[bytes | float] = b""
        self.base_url = f"http://127.0.0.1:{self.server_address[1]}/v1"


class _EchoHandler(http.server.BaseHTTPRequestHandler):
    server: _EchoServer

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        response = self.server.response
        with contextlib.suppress(OSError):  # the probe hung up (it cut a stall)
            for piece in [response] if isinstance(response, bytes) else response:
                if isinstance(piece, bytes):
                    self.wfile.write(piece)
                    self.wfile.flush()
                else:
                    time.sleep(piece)
        self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests read the probe's output, not the server's log."""


@pytest.fixture(scope="module")
def echo() -> Iterator[_EchoServer]:
    """One echo server for the module: its ``response`` is set by each test."""
    server = _EchoServer()
    thread = threading.Thread(target=server.serve_forever, name="echo-server", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def _probe_echo(echo: _EchoServer, key: str, response: bytes, as_json: bool) -> Output:
    """Probe the echo server answering ``response`` with ``key``: (exit code, stdout, stderr)."""
    echo.response = response
    options = ProbeOptions(
        base_url=echo.base_url,
        model="m",
        prompt="p",
        policy=StreamPolicy(retries=0, stale_timeout=10.0),
        gap=DEFAULT_GAP,
        scenario=None,
        as_json=as_json,
        api_key_env=KEY_VAR,
        api_key=key,
    )
    out, err = io.StringIO(), io.StringIO()
    code = probe(options, out, err)
    return code, out.getvalue(), err.getvalue()


_CUT_KEYS = {
    # A key across the 200 characters shown of an error body that is not JSON.
    "long text body": (_http(401, "text/plain", ("x" * 120 + " " + LONG_KEY).encode()), 1),
    # The message is not a string, so the body is shown as text, cut at 200 characters.
    "json message not a string": (_json_error({"detail": "y" * 100 + LONG_KEY}), 1),
    # A key across the 60 characters shown of a comment.
    "long sse comment": (_sse_with_comment("keepalive " + LONG_KEY), 0),
}


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
@pytest.mark.parametrize("case", list(_CUT_KEYS))
def test_a_key_across_a_cut_is_masked_before_the_cut(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    echo: _EchoServer,
    case: str,
    as_json: bool,
) -> None:
    """A key echoed across the point where the probe cuts a text (a long error body, a JSON error whose message is not a string, a long comment) is masked whole, not cut and then missed."""
    echo.response, expected_code = _CUT_KEYS[case]
    monkeypatch.setenv(KEY_VAR, LONG_KEY)
    args = ["--base-url", echo.base_url, "--model", "m", "--api-key-env", KEY_VAR]
    code, out, err = _probe_cli(capsys, *args, *(["--json"] if as_json else []))
    assert code == expected_code, out
    assert _runs_of(LONG_KEY, out + err) == []
    assert MASK in out
    if as_json:
        json.loads(out)


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
@pytest.mark.parametrize(
    "echoed",
    [LONG_KEY[:40], LONG_KEY[100:], " ".join((LONG_KEY[:50], LONG_KEY[50:90], LONG_KEY[90:]))],
    ids=["truncated", "tail", "split"],
)
def test_a_key_echoed_in_pieces_is_masked_piece_by_piece(
    echo: _EchoServer, echoed: str, as_json: bool
) -> None:
    """A server that echoes only part of the key, or the key split by spaces, has every piece of 8 characters or more masked."""
    code, out, err = _probe_echo(echo, LONG_KEY, _json_error(f"bad key {echoed}."), as_json)
    assert code == 1
    assert _runs_of(LONG_KEY, out + err) == []
    message = json.loads(out)["detail"] if as_json else out
    assert f"bad key {MASK}" in message


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_a_key_the_server_escapes_in_json_is_masked_once_decoded(
    echo: _EchoServer, as_json: bool
) -> None:
    """A JSON error message that spells the key in \\u escapes is masked once decoded."""
    code, out, err = _probe_echo(echo, LONG_KEY, _escaped_json_error(LONG_KEY), as_json)
    assert code == 1
    assert _runs_of(LONG_KEY, out + err) == []
    assert f"HTTP 401: {MASK}" in out


def test_a_content_type_echoing_the_key_is_masked(echo: _EchoServer) -> None:
    """A content type that holds the key is masked before it is cut at its ";" or lower-cased, in the headers line and in the verdict."""
    response = _http(200, f"Text/{LONG_KEY}; charset={LONG_KEY}", b"{}", "OK")
    code, out, err = _probe_echo(echo, LONG_KEY, response, as_json=False)
    assert code == 1
    assert _runs_of(LONG_KEY, out + err) == []
    assert f"headers: HTTP 200, Text/{MASK}; charset={MASK}" in out
    assert f"answered Text/{MASK}, not an event stream" in out


@st.composite
def _echoes(draw: st.DrawFn, key: str) -> str:
    """What a server may echo of ``key``: whole, a piece of it, split, repeated; after padding."""
    start = draw(st.integers(0, len(key) - 8))
    piece = key[start : draw(st.integers(start + 8, len(key)))]
    cut = draw(st.integers(0, len(key)))
    echoed = draw(
        st.sampled_from(
            [key, piece, key[:cut] + " " + key[cut:], key[:cut] + "\n" + key[cut:], key + key]
        )
    )
    filler = draw(st.sampled_from(["x", " ", ".", key[:3]]))
    return filler * draw(st.sampled_from([0, 1, 13, 50, 59, 150, 199, 1990, 2100])) + echoed


_PRINTABLE_KEYS = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=8, max_size=180
).filter(lambda key: key == key.strip())
_TOKEN_KEYS = st.text(_TOKEN_CHARACTERS, min_size=8, max_size=180)


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    key=st.one_of(_TOKEN_KEYS, _PRINTABLE_KEYS),
    shape=st.sampled_from(list(_ECHO_SHAPES)),
    as_json=st.booleans(),
    data=st.data(),
)
def test_property_no_run_of_8_characters_of_the_key_is_ever_shown(
    echo: _EchoServer, key: str, shape: str, as_json: bool, data: st.DataObject
) -> None:
    """Whatever the key and wherever and however a server echoes it, no 8 consecutive characters of the key appear in the plain or --json output, and the JSON stays valid for a key without JSON syntax in it."""
    echoed = data.draw(_echoes(key), label="echoed")
    if shape in ("reason phrase", "content type", "error content type", "bad header line"):
        echoed = echoed.replace("\n", " ")  # a header line has no line break in it
    code, out, err = _probe_echo(echo, key, _ECHO_SHAPES[shape](echoed), as_json)
    assert code in (0, 1)
    assert _runs_of(key, out + err) == []
    if as_json and _JSON_SYNTAX.isdisjoint(key):
        assert json.loads(out)["exit_code"] == code


# --- the redactor that every output goes through -------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    key=st.one_of(_TOKEN_KEYS, _PRINTABLE_KEYS, st.sampled_from(["[api key]x", "]x[ y z]w"])),
    data=st.data(),
)
def test_property_the_redactor_leaves_no_run_of_the_key_in_any_text(
    key: str, data: st.DataObject
) -> None:
    """Redactor output, plain, clipped or JSON, holds no 8 consecutive characters of the key whatever the text, even a key that holds the mark's own characters."""
    pieces = data.draw(
        st.lists(
            st.one_of(
                st.text(max_size=20), _echoes(key), st.sampled_from(["\\", '"', "\x1b", "é"])
            ),
            max_size=6,
        )
    )
    text = "".join(pieces)
    redact = Redactor(key)
    assert _runs_of(key, redact(text)) == []
    limit = data.draw(st.integers(0, 300))
    clipped = redact.clip(text, limit)
    assert len(clipped) <= limit
    assert _runs_of(key, clipped) == []
    value = {"text": text, "list": [text, 1.5, None, True], "nested": {text: text}}
    written = redact(redact.json(value))  # as Console.write writes a JSON report
    assert _runs_of(key, written) == []
    if _JSON_SYNTAX.isdisjoint(key):
        assert redact.json(value) == written
        json.loads(written)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON_VALUES)
def test_property_without_a_key_the_redactor_changes_nothing(value: Any) -> None:
    """Without a key, or with one the text does not hold, the redactor writes text and JSON exactly as json.dumps would."""
    for redact in (Redactor(None), Redactor("\x00never-in-the-text\x00")):
        assert redact.json(value) == json.dumps(value)
        assert redact(json.dumps(value)) == json.dumps(value)


def test_a_mark_across_a_cut_is_left_out_whole() -> None:
    """A cut that would split the mark in two cuts before it instead."""
    redact = Redactor(LONG_KEY)
    assert redact.clip("x" * 195 + LONG_KEY, 200) == "x" * 195
    assert redact.clip("x" * 191 + LONG_KEY, 200) == "x" * 191 + MASK


def test_the_mark_is_one_the_key_cannot_run_into() -> None:
    """A key that holds the characters of "[api key]" is masked with another mark, still leaving no run of it."""
    key = "ab[api key]cdefgh"
    redact = Redactor(key)
    assert redact.mark != MASK
    assert _runs_of(key, redact(f"1{key}2 [api {key[:9]} key]")) == []


# --- counting events as the transport does -------------------------------------------------

PING = b"event: ping\ndata: {}\n\n"
SPLIT = 0.02  # seconds between pieces: each piece arrives in a read of its own


def _sse(*pieces: bytes | float, encoding: str = "") -> list[bytes | float]:
    """An event-stream response whose body is ``pieces`` (a number pauses), Content-Length framed."""
    body = b"".join(piece for piece in pieces if isinstance(piece, bytes))
    head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if encoding:
        head += f"Content-Encoding: {encoding}\r\n"
    head += f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    return [head.encode("latin-1"), *pieces]


def _transport_count(pieces: list[bytes | float]) -> int:
    """The progress events the transport's meter counts in ``pieces``, with the default policy."""
    meter = ProgressMeter(heartbeat_events=StreamPolicy().heartbeats_for("chat_completions"))
    for piece in pieces:
        if isinstance(piece, bytes):
            meter.feed(piece)
    return meter.events


def _probe_pieces(
    capsys: pytest.CaptureFixture[str], echo: _EchoServer, pieces: list[bytes | float], *args: str
) -> tuple[int, dict[str, Any]]:
    """Probe the echo server answering an event stream of ``pieces``: (exit code, JSON report)."""
    echo.response = _sse(*pieces)
    return _probe_json(capsys, "--base-url", echo.base_url, "--model", "m", *args)


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
def test_a_heartbeat_event_with_data_is_not_a_progress_event(
    capsys: pytest.CaptureFixture[str], echo: _EchoServer, as_json: bool
) -> None:
    """An `event: ping` carrying data followed by one data event is 1 event and 1 heartbeat for the probe, as for the transport's meter under the default policy."""
    pieces: list[bytes | float] = [PING, b'data: {"x":1}\n\n']
    assert _transport_count(pieces) == 1
    echo.response = _sse(*pieces)
    args = ["--base-url", echo.base_url, "--model", "m"]
    if as_json:
        code, report = _probe_json(capsys, *args)
        assert report["events"] == 1
        assert (report["heartbeats"], report["comments"]) == (1, 0)
    else:
        code, out, _ = _probe_cli(capsys, *args)
        assert "verdict: healthy: 1 event(s)" in out
        assert ", 1 event(s), 0 comment(s), 1 heartbeat event(s), largest gap" in out
        assert " s  1 heartbeat event(s) (event: ping) at " in out
    assert code == 0


# Each is a body in pieces, each piece a read of its own, and its progress events.
_TRICKY_BODIES: dict[str, tuple[list[bytes], int]] = {
    "heartbeat then data": ([PING + b'data: {"x":1}\n\n'], 1),
    "heartbeat, CRLF": ([b"event: ping\r\ndata: {}\r\n\r\ndata: 1\r\n\r\n"], 1),
    "heartbeat, no space after the colon": ([b"event:ping\ndata:\n\ndata: 1\n\n"], 1),
    "heartbeat, the last event field wins": (
        [b"event: delta\nevent: ping\ndata: 1\n\nevent: ping\nevent: delta\ndata: 2\n\n"],
        1,
    ),
    "heartbeat, its [DONE] is no [DONE]": ([b"data: 1\n\nevent: ping\ndata: [DONE]\n\n"], 1),
    "CRLF": ([b"data: 1\r\n\r\ndata: 2\r\n\r\n"], 2),
    "CR only": ([b"data: 1\r\rdata: 2\r\r"], 2),
    "CRLF split across reads": ([b"data: 1\r", b"\n\r", b"\ndata: 2\r\n", b"\r\n"], 2),
    "fields split across reads": (
        [b"da", b"ta: 1\n", b"\n", b"event: pi", b"ng\ndata: {}\n\n"],
        1,
    ),
    "comments": ([b": keepalive\n\n: x\ndata: 1\n: inside an event\n\n:\n\n"], 1),
    "events without data": ([b"event: delta\n\nid: 3\n\nretry: 5\n\ndata\n\n"], 1),
    "BOM": ([b"\xef\xbb\xbfdata: 1\n\n"], 1),
    "BOM split across reads": ([b"\xef\xbb", b"\xbfdata: 1\n\n"], 1),
    "BOM, then a heartbeat": ([b"\xef\xbb\xbf" + PING + b"data: 1\n\n"], 1),
    "form feed is no line break": ([b"data: 1\n\x0c\ndata: 2\n\n"], 1),
    "record separator is no line break": ([b"data: 1\n\x1e\ndata: 2\n\n"], 1),
    "unfinished last event": ([b"data: 1\n\ndata: 2\n"], 1),
}


@pytest.mark.parametrize("case", list(_TRICKY_BODIES))
def test_the_probe_counts_the_events_the_transport_counts(
    capsys: pytest.CaptureFixture[str], echo: _EchoServer, case: str
) -> None:
    """Whatever the line endings, read boundaries, comments, BOM, heartbeat types or events without data, the probe counts exactly the progress events the transport's meter counts."""
    reads, expected = _TRICKY_BODIES[case]
    pieces: list[bytes | float] = []
    for read in reads:
        pieces += [read, SPLIT]
    assert _transport_count(pieces) == expected
    code, report = _probe_pieces(capsys, echo, pieces)
    assert code == 0, report["detail"]
    assert report["events"] == expected
    assert _kinds(report).count("first_event") == 1


def test_the_first_event_is_the_first_progress_event_not_a_heartbeat(
    capsys: pytest.CaptureFixture[str], echo: _EchoServer
) -> None:
    """A stream that pings before its first data event marks "first event" when the data comes, after the heartbeat, as the transport's first-event budget sees it."""
    code, report = _probe_pieces(capsys, echo, [PING, 0.5, b"data: 1\n\ndata: [DONE]\n\n"])
    assert code == 0, report["detail"]
    assert (report["events"], report["done"]) == (2, True)
    headers = next(mark for mark in report["timeline"] if mark["kind"] == "headers")
    assert report["first_event_at"] - headers["at"] >= 0.25
    assert report["heartbeats"] == 1
    kinds = _kinds(report)
    assert kinds.index("heartbeats") < kinds.index("first_event")


def test_heartbeats_only_after_an_event_stall_and_are_named_as_keepalives(
    capsys: pytest.CaptureFixture[str], echo: _EchoServer
) -> None:
    """Heartbeat events every 0.1 s after the first data event do not keep the stream alive: the probe stalls mid-stream after event 1 and says how many heartbeats came, which are not progress."""
    pieces: list[bytes | float] = [b"data: 1\n\n"]
    for _ in range(40):
        pieces += [0.1, PING]
    code, report = _probe_pieces(capsys, echo, pieces, "--stale", "0.6")
    assert code == 1
    assert report["verdict"] == "stalled"
    assert report["stall"]["stage"] == "mid_stream"
    assert report["stall"]["waiting_for"] == "event 2"
    assert report["events"] == 1
    assert report["heartbeats"] >= 2
    assert (
        f"{report['heartbeats']} heartbeat event(s) came meanwhile,"
        " and heartbeat events (keepalives) are not progress"
    ) in report["detail"]


def test_comments_in_a_gzip_stream_are_still_read(
    capsys: pytest.CaptureFixture[str], server: FaultServer
) -> None:
    """A gzip-encoded stream of one event and then keepalive comments is decoded: 1 event, its comments counted and sampled, and a mid-stream stall."""
    server.scenario = Scenario.comments_after(1, interval=0.1, gzip=True)
    code, report = _probe_json(
        capsys, "--base-url", server.base_url, "--model", "m", "--stale", "0.5"
    )
    assert code == 1
    assert (report["events"], report["stall"]["stage"]) == (1, "mid_stream")
    assert report["comments"] >= 2
    (run,) = [mark for mark in report["timeline"] if mark["kind"] == "comments"]
    assert run["sample"] == ": keepalive"


def test_a_body_the_watchdog_cannot_decode_counts_every_chunk_as_the_watchdog_does(
    capsys: pytest.CaptureFixture[str], echo: _EchoServer
) -> None:
    """With a content-encoding the transport's meter cannot decode, the probe says so and counts every chunk as progress, as the watchdog does, so comments alone do not stall it."""
    pieces: list[bytes | float] = [b"data: 1\n\n"]
    for _ in range(8):
        pieces += [0.1, b": keepalive\n\n"]
    echo.response = _sse(*pieces, encoding="x-unknown")
    code, out, _ = _probe_cli(
        capsys, "--base-url", echo.base_url, "--model", "m", "--stale", "0.5", "--json"
    )
    report = json.loads(out)
    assert code == 0, report["detail"]
    assert report["events"] >= 2  # the first chunk, and then chunks of comments
    assert "blind" in _kinds(report)
    assert report["comments"] == 0  # not read as lines: the watchdog does not either


# --- bad arguments ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (None, "is not set or empty"),
        ("", "is not set or empty"),
        ("   ", "is not set or empty"),
        ("sk-\u2019quoted\u2019-SECRET", "is not printable ASCII"),
        ("sk-two\nlines-SECRET", "is not printable ASCII"),
    ],
    ids=["unset", "empty", "blank", "non-ascii", "newline"],
)
def test_a_missing_or_unusable_key_variable_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    value: str | None,
    says: str,
) -> None:
    """--api-key-env naming an unset, empty or unsendable variable exits 2 with a message naming the variable but not its value."""
    if value is None:
        monkeypatch.delenv(KEY_VAR, raising=False)
    else:
        monkeypatch.setenv(KEY_VAR, value)
    err = _usage_error(capsys, "--api-key-env", KEY_VAR)
    assert f"{KEY_VAR!r} {says}" in err
    assert "SECRET" not in err


@pytest.mark.parametrize("option", ["--stale", "--first-event", "--gap"])
@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf"])
def test_a_bad_number_exits_2_naming_the_option(
    capsys: pytest.CaptureFixture[str], option: str, value: str
) -> None:
    """A zero, negative, non-numeric or non-finite number of seconds exits 2 naming the option and the value."""
    err = _usage_error(capsys, f"{option}={value}")
    assert f"argument {option}: must be a number of seconds > 0, got {value!r}" in err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--base-url", "http://h/v1", "--model", "m", "--scenario", "silent"], "--scenario"),
        (["--base-url", "http://h/v1"], "--model is required with --base-url"),
        (["--base-url", "ftp://h/v1", "--model", "m"], "--base-url must be an http"),
        (["--base-url", "h/v1?key=SECRET", "--model", "m"], "--base-url must be an http"),
        (["--scenario", "nonsense"], "invalid choice"),
    ],
)
def test_inconsistent_arguments_exit_2_with_a_clear_message(
    capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    """--scenario with --base-url, --base-url without --model, a URL that is not http(s) or an unknown scenario exit 2 and say why, never echoing the URL."""
    err = _usage_error(capsys, *args)
    assert says in err
    assert "SECRET" not in err


def test_a_malformed_budget_variable_exits_2_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against --base-url a malformed HERMES_STREAM_* variable exits 2 naming the variable."""
    monkeypatch.setenv("HERMES_STREAM_STALE_TIMEOUT", "soon")
    err = _usage_error(capsys, "--base-url", "http://h/v1", "--model", "m")
    assert "HERMES_STREAM_STALE_TIMEOUT" in err


# --- the live line --------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_a_live_line_is_rewritten_in_place_and_cleared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With stderr on a terminal the waiting line with its budget is redrawn with a carriage return and erased before the probe returns."""
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    err = _Terminal()
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["probe", "--scenario", "silent", "--stale", "0.5"]) == 1
    drawn = err.getvalue()
    assert drawn.count("\rwaiting ") >= 2
    assert "for event 3 / budget 0.5 s (2 events, 0 comments)" in drawn
    assert drawn.endswith("\r\x1b[K")
    assert "\r" not in out.getvalue()


def test_off_a_terminal_plain_waiting_lines_and_no_carriage_return(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """When stderr is not a terminal the probe writes no carriage return anywhere and reports a long wait as plain "still waiting" lines."""
    monkeypatch.setattr(_console, "PLAIN_TICK", 0.3)
    code, out, err = _probe_cli(capsys, "--scenario", "silent", "--stale", "1")
    assert code == 1
    assert "\r" not in out + err
    assert err == ""
    still = [line for line in out.splitlines() if "  still waiting " in line]
    assert 2 <= len(still) <= 4  # every PLAIN_TICK, not at a terminal's redraw rate
    assert "for event 3 / budget 1 s" in still[0]


@pytest.mark.parametrize("terminal", [False, True], ids=["plain", "terminal"])
def test_nothing_the_probe_started_outlives_it(
    monkeypatch: pytest.MonkeyPatch, terminal: bool
) -> None:
    """When the probe returns, its live-line and Ctrl+C threads and the embedded server's threads are gone, and the SIGINT handler is the previous one."""
    slow_waiting = Timeline.waiting

    def waiting(timeline: Timeline, policy: StreamPolicy) -> str:
        time.sleep(0.25)  # the live line is busy drawing when the probe ends
        return slow_waiting(timeline, policy)

    monkeypatch.setattr(Timeline, "waiting", waiting)
    monkeypatch.setattr(_console, "PLAIN_TICK", 0.1)
    before = signal.getsignal(signal.SIGINT)
    err = _Terminal() if terminal else io.StringIO()
    assert probe(_options("--scenario", "silent", "--stale", "0.3"), io.StringIO(), err) == 1
    assert _probe_threads() == []
    assert signal.getsignal(signal.SIGINT) is before


def _options(*argv: str) -> ProbeOptions:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return options_from(parser.parse_args(argv), parser)


# --- Ctrl+C -------------------------------------------------------------------------------


def test_ctrl_c_sets_the_token_then_a_second_one_raises_keyboard_interrupt() -> None:
    """The first Ctrl+C interrupts the token (from a helper thread), a second raises KeyboardInterrupt at once."""
    token = Interrupt()
    with CtrlC(token) as ctrl_c:
        ctrl_c._handler(signal.SIGINT, None)
        assert token.wait(5.0)
        assert token.reason == "Ctrl+C"
        with pytest.raises(KeyboardInterrupt):
            ctrl_c._handler(signal.SIGINT, None)


def test_an_ignored_sigint_stays_ignored(request: pytest.FixtureRequest) -> None:
    """Where SIGINT is ignored (a background job) the probe leaves it ignored, during and after."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signal handlers live on the main thread")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    with CtrlC(Interrupt()):
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


def test_ctrl_c_in_process_prints_the_partial_timeline_and_exits_130(
    capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest
) -> None:
    """SIGINT during a keepalive-only stall stops the probe at once with the timeline so far, verdict interrupted and exit 130, and the handler is restored."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT is delivered to the main thread only")
    # A shell that starts pytest in the background ignores SIGINT; Ctrl+C must work here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    request.addfinalizer(lambda: signal.signal(signal.SIGINT, previous))
    pressed: list[float] = []

    def press() -> None:
        time.sleep(0.6)
        pressed.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=press, daemon=True).start()
    code, report = _probe_json(capsys, "--scenario", "keepalive", "--stale", "30")
    assert time.monotonic() - pressed[0] < 1.0 + SLACK
    assert code == 130
    assert report["verdict"] == "interrupted"
    assert report["events"] == 2
    assert report["comments"] >= 1
    interrupted = report["timeline"][-1]
    assert interrupted["kind"] == "interrupted"
    # Through the token, not a KeyboardInterrupt raised wherever the main thread was.
    assert (interrupted["reason"], interrupted["stage"]) == ("Ctrl+C", "mid_stream")
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _restore_default_sigint() -> None:
    """In the child before exec: undo a background shell's SIG_IGN, as a terminal would have it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_command_promptly_with_the_partial_timeline(
    server: FaultServer,
) -> None:
    """SIGINT to `python -m hermes_transport probe` stalled on a keepalive-only server ends it within a second or so with the timeline so far, verdict interrupted and exit 130."""
    server.scenario = Scenario.comments_after(1, interval=0.1)
    command = [sys.executable, "-m", "hermes_transport", "probe"]
    command += ["--base-url", server.base_url, "--model", "m", "--stale", "60"]
    child = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_restore_default_sigint,
    )
    try:
        assert server.wait_for_requests(1, timeout=30.0)
        time.sleep(0.5)
        pressed = time.monotonic()
        child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=30)
    finally:
        child.kill()
        child.wait()
    took = time.monotonic() - pressed
    assert child.returncode == 130, out + err
    assert took < 1.0 + SLACK
    assert " s  first event" in out
    assert " s  interrupted while reading the stream: Ctrl+C" in out
    assert "verdict: interrupted at " in out
    assert "Traceback" not in err


# --- the command ----------------------------------------------------------------------------


def test_python_m_probe_runs_on_a_fresh_machine_and_prints_json() -> None:
    """`python -m hermes_transport probe --json` needs nothing but the package: it probes the embedded server, prints one JSON object and exits 0."""
    result = subprocess.run(
        [sys.executable, "-m", "hermes_transport", "probe", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert json.loads(result.stdout)["verdict"] == "healthy"
    assert result.stderr == ""


def test_the_demo_command_is_still_there(capsys: pytest.CaptureFixture[str]) -> None:
    """`demo` stays a command next to `probe`."""
    with pytest.raises(SystemExit):
        main(["--help"])
    usage = capsys.readouterr().out
    assert "demo" in usage
    assert "probe" in usage
