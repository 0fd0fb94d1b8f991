"""``python -m hermes_transport docs``: the site served from the clone, or what is missing said."""

from __future__ import annotations

import importlib.util
import io
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from hermes_transport.cli import docs
from hermes_transport.cli.main import main

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent.parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _get(url: str, until: float) -> tuple[int, str]:
    """GET ``url``, retried while the server is still starting, until ``until``."""
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, response.read().decode("utf-8")
        except OSError:
            if time.monotonic() > until:
                raise
            time.sleep(0.25)


def test_the_site_is_served_from_the_clone_until_stopped() -> None:
    """The command serves the built site on its port: Home and a guide, until interrupted."""
    pytest.importorskip("mkdocs", reason="the documentation tools are not installed here")
    port = _free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "hermes_transport", "docs", "--port", str(port)]
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as server:
        try:
            until = time.monotonic() + 120  # the first build renders the API reference
            status, home = _get(f"http://127.0.0.1:{port}/", until)
            assert status == 200
            assert "hermes-transport" in home
            status, guide = _get(f"http://127.0.0.1:{port}/guides/interrupts/", until)
            assert status == 200
            assert "Interrupt from any thread" in guide
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()
                raise
        output = server.stdout.read() if server.stdout else ""
    assert f"http://127.0.0.1:{port}/" in output


def test_outside_a_clone_it_says_the_site_needs_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """An installed package without the repository beside it is told to clone it, exit 2."""
    monkeypatch.setattr(docs, "site_root", lambda: None)
    stderr = io.StringIO()
    assert docs.serve_docs(8000, stderr) == 2
    assert "clone of the repository" in stderr.getvalue()


def test_without_the_tools_it_names_the_requirements_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without mkdocs, the message gives the command that installs the pinned tools, exit 2."""
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "mkdocs" else real(name, *args),
    )
    stderr = io.StringIO()
    assert docs.serve_docs(8000, stderr) == 2
    assert "pip install -r" in stderr.getvalue()
    assert docs.DOCS_REQUIREMENTS in stderr.getvalue()


@pytest.mark.parametrize("port", ["0", "65536", "eighty", "-1"])
def test_a_bad_port_is_a_usage_error_naming_the_option(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A port that is no TCP port exits 2 before anything runs, naming --port."""
    with pytest.raises(SystemExit) as exited:
        main(["docs", "--port", port])
    assert exited.value.code == 2
    assert "--port" in capsys.readouterr().err
