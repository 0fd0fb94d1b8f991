"""MkDocs hook: pages made of the repository's own files, and their links.

A line ``--8<-- "PATH"`` in a page is replaced by that file of the repository (its
changelog, contributing guide, benchmark report); then links to the repository's files
that have a page point at the page (the files stay readable on their own, where those
links work), links to benchmark sources become their names, and links from benchmarks/ to
files under docs/ (its plots) point at the site's copy.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
_INCLUDE = re.compile(r'^--8<-- "([^"]+)"$', re.MULTILINE)
# A repository file (as linked from the root or from benchmarks/) and its page.
_PAGES = {
    "README.md": "index.md",
    "CHANGELOG.md": "changelog.md",
    "CONTRIBUTING.md": "contributing.md",
    "benchmarks/README.md": "benchmarks.md",
}
_SOURCE = re.compile(r"\[([^\]]+)\]\(([a-z_]+\.py)\)")
# A link from benchmarks/ to a file of the site (the plots under docs/images/): that file.
_SITE_FILE = re.compile(r"\]\(\.\./docs/([^)\s]+)\)")
_LINK = re.compile(r"\]\((" + "|".join(re.escape(name) for name in _PAGES) + r")(#[^)]*)?\)")


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    markdown = _INCLUDE.sub(lambda m: (_ROOT / m.group(1)).read_text(encoding="utf-8"), markdown)
    up = "../" * page.file.src_uri.count("/")
    markdown = _SOURCE.sub(r"\1 (`benchmarks/\2`)", markdown)
    markdown = _SITE_FILE.sub(lambda m: f"]({up}{m.group(1)})", markdown)
    return _LINK.sub(lambda m: f"]({up}{_PAGES[m.group(1)]}{m.group(2) or ''})", markdown)
