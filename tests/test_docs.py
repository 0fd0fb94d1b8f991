"""The documentation: a README that fits a screen and links only to what exists, and a
site that builds strictly, whose pages link to pages that exist and can be searched."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urldefrag, urlsplit
from xml.etree import ElementTree

import pytest

pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def test_the_readme_is_a_landing_page_of_at_most_200_lines() -> None:
    """The README fits a screen's scroll: 200 lines at most, the two set-up commands first."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    first = re.search(r"```(\w*)\n(.*?)```", text, re.DOTALL)
    assert first is not None
    assert first.group(1) == "sh"
    assert first.group(2).splitlines() == [
        "python3 -m venv .venv && .venv/bin/pip install '.[gemini,mcp]'"
        " && .venv/bin/python -m hermes_transport demo",
        "python3 tools/run_tests.py",
    ]


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository() -> None:
    """A page moved or renamed under docs/ fails here, as GitHub would show it broken."""
    links = re.findall(r"\]\(([^)\s]+)\)", README.read_text(encoding="utf-8"))
    relative = [link for link in links if not urlsplit(link).scheme]
    assert relative
    missing = [link for link in relative if not (ROOT / urldefrag(link)[0]).is_file()]
    assert missing == []


class _Links(HTMLParser):
    """The hrefs of a page's anchors."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)
        source = dict(attrs).get("src")
        if tag == "img" and source:
            self.images.append(source)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built strictly (as the check gate builds it), where mkdocs is installed."""
    pytest.importorskip("mkdocs", reason="the documentation tools are not installed here")
    built = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(built)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return built


@pytest.mark.parametrize(
    "page", ["index.html", "guides/websocket/index.html", "reference/index.html"]
)
def test_a_built_page_links_only_to_pages_that_exist(site: Path, page: str) -> None:
    """Home, a guide and the reference: every link of theirs within the site (the navigation
    included) reaches a built file."""
    path = site / page
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    local = [h for h in parser.hrefs if not urlsplit(h).scheme and not h.startswith("#")]
    assert len(local) > 20  # the navigation is there
    missing = []
    for href in local:
        target = (path.parent / urldefrag(href)[0]).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            missing.append(href)
    assert missing == []


@pytest.mark.parametrize(
    ("page", "least"), [("concepts/index.html", 6), ("benchmarks/index.html", 4)]
)
def test_the_pictures_of_a_page_are_built_with_it(site: Path, page: str, least: int) -> None:
    """The stall timelines (Concepts) and the benchmark plots: each image is in the site, an
    SVG that parses."""
    path = site / page
    parser = _Links()
    parser.feed(path.read_text(encoding="utf-8"))
    pictures = [(path.parent / source).resolve() for source in parser.images]
    assert len(pictures) >= least
    for picture in pictures:
        assert picture.suffix == ".svg", picture
        assert picture.is_file(), picture
        assert ElementTree.parse(picture).getroot().tag.endswith("svg")


def test_the_site_can_be_searched_for_the_public_api(site: Path) -> None:
    """The search index holds the pages and the reference's public names."""
    index = json.loads((site / "search" / "search_index.json").read_text(encoding="utf-8"))
    text = " ".join(doc["text"] + doc["title"] for doc in index["docs"])
    for name in ("watch_connection", "StreamStalled", "Interrupt", "resume_response", "MCP"):
        assert name in text
