"""The documentation site in a real browser: headless Chromium renders Home with its
navigation, finds the public API with the site's own search, and follows a link to a guide.

Where no Chromium is installed these skip; ``test_docs.py`` checks the same pages with an
HTML parser (every link reaches a built page, the search index holds the public names).
Chromium is driven over its DevTools protocol with the ``websockets`` client the tests
already install: no browser driver to pin.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)
# As a sandboxed CI machine needs them: no sandbox for root, nothing fetched in the
# background (a closed network refuses it), a profile of its own.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


@pytest.fixture(scope="module")
def served_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site, built strictly and served on loopback: its base URL."""
    if CHROMIUM is None:
        pytest.skip("no Chromium here: test_docs.py checks the pages with an HTML parser")
    pytest.importorskip("mkdocs", reason="the documentation tools are not installed here")
    built = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet"]
    subprocess.run([*command, "--site-dir", str(built)], cwd=ROOT, env=env, check=True)
    handler = functools.partial(_QuietHandler, directory=str(built))
    with ThreadingHTTPServer(("127.0.0.1", 0), handler) as server:
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        yield f"http://127.0.0.1:{server.server_address[1]}/"
        server.shutdown()
        thread.join()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Silent: the test reports what matters."""


class _Page:
    """One tab of Chromium, over the DevTools protocol: navigate, and evaluate JavaScript."""

    def __init__(self, socket: Any) -> None:
        self._socket = socket
        self._ids = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self._ids += 1
        sent = self._ids
        await self._socket.send(json.dumps({"id": sent, "method": method, "params": params}))
        while True:
            message: dict[str, Any] = json.loads(await self._socket.recv())
            if message.get("id") == sent:
                assert "error" not in message, message
                return message

    async def js(self, expression: str) -> Any:
        answer = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return answer["result"]["result"].get("value")

    async def until(self, expression: str, seconds: float = 20.0) -> Any:
        """The expression's value once it is truthy, polled; fails after ``seconds``."""
        deadline = time.monotonic() + seconds
        while not (value := await self.js(expression)):
            assert time.monotonic() < deadline, f"never true: {expression}"
            await asyncio.sleep(0.1)
        return value


async def _in_chromium(url: str, steps: Any) -> Any:
    """Open ``url`` in a fresh headless Chromium and run ``steps(page)``: its result."""
    import websockets

    assert CHROMIUM is not None
    # Its helper processes may still be writing the profile as it ends.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = subprocess.Popen(
            [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", url],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 30
            while not port_file.is_file() or not port_file.read_text().strip():
                assert time.monotonic() < deadline, "Chromium did not open its DevTools port"
                await asyncio.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            tabs = await asyncio.to_thread(_tabs, port)
            tab = next(tab for tab in tabs if tab["type"] == "page")
            async with websockets.connect(tab["webSocketDebuggerUrl"], max_size=None) as ws:
                return await steps(_Page(ws))
        finally:
            browser.terminate()
            browser.wait(timeout=30)


def _tabs(port: int) -> list[dict[str, Any]]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json", timeout=10) as answer:
        tabs: list[dict[str, Any]] = json.load(answer)
        return tabs


def test_home_renders_with_its_navigation_and_follows_it_to_a_guide(served_site: str) -> None:
    """Home renders with the site's navigation; clicking a guide's entry opens that guide."""

    async def steps(page: _Page) -> tuple[int, str, str]:
        await page.until("document.readyState === 'complete'")
        links = await page.until("document.querySelectorAll('.md-nav__link').length")
        await page.js("document.querySelector('a[href$=\"guides/interrupts/\"]').click()")
        where = await page.until(
            "location.pathname.endsWith('/guides/interrupts/') && location.pathname"
        )
        heading = await page.until("document.querySelector('h1')?.textContent")
        return links, where, heading

    links, where, heading = asyncio.run(_in_chromium(served_site, steps))
    assert links > 20
    assert where == "/guides/interrupts/"
    assert heading.startswith("Interrupt from any thread")


@pytest.mark.parametrize("query", ["StreamStalled", "watch_connection", "mcp_http_client_for"])
def test_the_sites_search_finds_the_public_api(served_site: str, query: str) -> None:
    """Typed into the search box, a public name finds pages: the search runs in the page."""

    async def steps(page: _Page) -> str:
        await page.until("!!document.querySelector('.md-search__input')")
        await page.js(
            "(() => { const box = document.querySelector('.md-search__input'); box.focus();"
            f" box.value = {json.dumps(query)};"
            " box.dispatchEvent(new Event('input', {bubbles: true})); return true })()"
        )
        found: str = await page.until(
            "document.querySelectorAll('.md-search-result__item').length > 0"
            " && document.querySelector('.md-search-result__meta').textContent"
        )
        return found

    found = asyncio.run(_in_chromium(served_site, steps))
    assert "matching document" in found
