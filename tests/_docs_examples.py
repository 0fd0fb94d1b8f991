"""The documentation's Python examples, found and run: what ``test_docs_examples.py`` and the
frameworks' ``test_docs_recipes.py`` share.

Every fenced block whose language is Python (```` ```python ````, ```` ```py ````) in the
README and under ``docs/`` is an ``Example``. It runs as it is written, in a fresh
namespace, against a fault server: top-level ``await``, ``async with`` and ``async for``
run on a new event loop, as in an asyncio REPL. Tracebacks name the page and its line.

The examples assume a few names, which the docs' Home page lists (``GIVEN``, made by
``given_names``): ``BASE_URL`` and ``KEY`` (an OpenAI-compatible server), ``messages``,
``prompt``, ``MCP_URL`` (an MCP server's streamable HTTP endpoint) and ``client`` (an
``openai.OpenAI`` of that server). The SDKs' own environment variables point them at the
fault server too (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``
and their keys), so that an example written as a user writes it, with no base URL, runs.

An HTML comment on the line before a block changes how it runs, invisible on the page:

- ``<!-- example: skip WHY -->``: not run (say why: it needs a real key, a network);
- ``<!-- example: openai 2 3 -->``: run with these openai majors only (the text says so);
- ``<!-- example: continues -->``: run after the page's block before it, in its namespace;
- ``<!-- example: offline -->``: it sends nothing (it builds a client, or a policy).

Directives combine, separated by ``;`` (``<!-- example: openai 1 2; offline -->``).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import inspect
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import openai
import pytest
import respx

from hermes_transport.testing import FaultServer

ROOT = Path(__file__).resolve().parent.parent
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
GIVEN = ("BASE_URL", "KEY", "MCP_URL", "client", "messages", "prompt")
KEY = "sk-docs-example"
MAJOR = openai.__version__.split(".")[0]

_FENCE = re.compile(r"^```[ \t]*(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
_MARK = re.compile(r"<!--\s*example:\s*(.*?)\s*-->\s*\Z", re.DOTALL)
_PYTHON = frozenset({"python", "py"})
_KINDS = frozenset({"continues", "offline", "openai", "skip"})


@dataclass(frozen=True)
class Example:
    """One Python block of a page: where it is, its text and how it runs."""

    page: str  # relative to the repository's root
    line: int  # of the block's first line of code
    source: str
    skip: str | None = None
    majors: frozenset[str] | None = None
    continues: Example | None = None
    offline: bool = False  # it only builds or configures: it sends nothing

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"


def _marks(before: str, where: str) -> dict[str, str]:
    """The directives of the ``<!-- example: ...; ... -->`` comment ending ``before``."""
    found = _MARK.search(before.rstrip())
    if found is None:
        return {}
    marks: dict[str, str] = {}
    for directive in found.group(1).split(";"):
        kind, _, argument = directive.strip().partition(" ")
        if kind not in _KINDS:
            raise ValueError(f"{where}: unknown example mark {kind!r} (one of {sorted(_KINDS)})")
        if kind == "skip" and not argument.strip():
            raise ValueError(f"{where}: 'example: skip' needs a reason")
        marks[kind] = argument.strip()
    return marks


def examples_of(page: Path, root: Path = ROOT) -> list[Example]:
    """The Python blocks of ``page``, in order, with their marks (named from ``root``)."""
    text = page.read_text(encoding="utf-8")
    relative = page.relative_to(root).as_posix()
    found: list[Example] = []
    last_end = 0
    for fence in _FENCE.finditer(text):
        language = fence.group(1).lower()
        before = text[last_end : fence.start()]
        last_end = fence.end()
        if language not in _PYTHON:
            continue
        line = text.count("\n", 0, fence.start(2)) + 1
        marks = _marks(before, f"{relative}:{line}")
        if "continues" in marks and not found:
            raise ValueError(f"{relative}:{line}: 'continues', but no block comes before")
        majors = marks.get("openai")
        example = Example(
            relative,
            line,
            fence.group(2),
            skip=marks.get("skip"),
            majors=frozenset(majors.split()) if majors is not None else None,
            continues=found[-1] if "continues" in marks else None,
            offline="offline" in marks,
        )
        found.append(example)
    return found


def all_examples() -> list[Example]:
    """Every Python block of the README and the docs."""
    return [example for page in PAGES for example in examples_of(page)]


def python_fences(page: Path) -> int:
    """How many fences of ``page`` open a Python block, counted apart from ``examples_of``."""
    text = page.read_text(encoding="utf-8")
    return len(re.findall(r"^```[ \t]*(?:python|py)\b", text, re.MULTILINE | re.IGNORECASE))


def compiled(example: Example) -> Any:
    """The block's code, its line numbers the page's, top-level ``await`` allowed."""
    padded = "\n" * (example.line - 1) + example.source
    return compile(
        padded,
        str(ROOT / example.page),
        "exec",
        flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT,
        dont_inherit=True,
    )


def run(example: Example, names: dict[str, Any]) -> dict[str, Any]:
    """Run ``example`` (after the block it continues) in ``names``; its namespace after."""
    if example.skip is not None:
        pytest.skip(f"{example.name}: {example.skip}")
    if example.majors is not None and MAJOR not in example.majors:
        written = "/".join(f"{major}.x" for major in sorted(example.majors))
        pytest.skip(f"{example.name}: written for openai {written}, this is {openai.__version__}")
    if example.continues is not None:
        names = run(example.continues, names)
        # What it left, for close_clients: the block after it may rebind the names.
        names.setdefault(_KEPT, []).extend(names.values())
    code = compiled(example)
    if code.co_flags & inspect.CO_COROUTINE:
        asyncio.run(_then_close(eval(code, names), names))
    else:
        exec(code, names)
    return names


_KEPT = "__example_kept__"
_CLOSED = "__example_closed__"

#: The pytest fixtures an example's own tests may take, by name: their mocks, entered.
FIXTURES: dict[str, Callable[[], AbstractContextManager[Any]]] = {
    "respx_mock": lambda: respx.mock(),
    "httpx2_mock": lambda: respx.mock(using="httpcore2"),  # as pytest-httpx2's fixture
}


def run_its_tests(names: dict[str, Any]) -> None:
    """Call each ``test_*`` function an example defined, as pytest would.

    Its arguments are ``FIXTURES``, each entered around the call (an unknown one is an
    error naming it). A mock that asserts all its routes were called checks it on exit.
    """
    for name, value in list(names.items()):
        if not (name.startswith("test_") and inspect.isfunction(value)):
            continue
        wanted = list(inspect.signature(value).parameters)
        unknown = [parameter for parameter in wanted if parameter not in FIXTURES]
        if unknown:
            raise LookupError(f"{name}: no fixture for {unknown} (known: {sorted(FIXTURES)})")
        with contextlib.ExitStack() as stack:
            value(*(stack.enter_context(FIXTURES[parameter]()) for parameter in wanted))


#: Where the clients an example may leave open come from: closed after it, as a process's
#: exit would (a socket left to the garbage collector is a ResourceWarning, an error here).
_CLIENT_MODULES = ("openai", "anthropic", "httpx", "httpx2", "google.genai", "hermes_transport")


def _reachable(names: dict[str, Any], depth: int = 2) -> Iterator[Any]:
    """The objects in ``names``, and their attributes ``depth`` levels down (a framework's
    model holds the clients it was given, pydantic's private ones too), each once."""
    seen: set[int] = set()
    level = [*names.get(_KEPT, ()), *names.values()]
    for _ in range(depth + 1):
        below: list[Any] = []
        for value in level:
            if id(value) in seen or isinstance(value, type | ModuleType) or callable(value):
                continue
            seen.add(id(value))
            yield value
            for attributes in (getattr(value, "__dict__", None), _private(value)):
                if isinstance(attributes, dict):
                    below.extend(attributes.values())
        level = below


def _private(value: Any) -> object:
    try:
        return object.__getattribute__(value, "__pydantic_private__")
    except AttributeError:
        return None


def _closers(names: dict[str, Any]) -> list[tuple[int, Callable[[], Any]]]:
    """The ``close`` (or ``aclose``) of each client left in ``names`` and not closed yet,
    each once, with the client's ``id``."""
    closed: set[int] = names.setdefault(_CLOSED, set())
    found: dict[int, Callable[[], Any]] = {}
    for value in _reachable(names):
        module = type(value).__module__
        close = getattr(value, "close", None) or getattr(value, "aclose", None)
        if inspect.isclass(value) or not module.startswith(_CLIENT_MODULES) or close is None:
            continue
        if type(value).__name__ == "Response":  # its client's pool closes its connection
            continue
        if id(value) not in closed:
            found[id(value)] = close
    return list(found.items())


async def _then_close(body: Any, names: dict[str, Any]) -> None:
    """Await an async example, then close its async clients on its loop, which owns them
    (the sync ones are left to ``close_clients``)."""
    try:
        await body
    finally:
        for key, close in _closers(names):
            if inspect.iscoroutinefunction(close):
                await close()
                names[_CLOSED].add(key)


def close_clients(names: dict[str, Any], loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Close every client the example left in ``names``, an async one on ``loop`` (the one
    that used it; by default a new one); then collect, so that a socket it leaked anywhere
    else warns now, failing this example."""
    for _, close in _closers(names):
        if not inspect.iscoroutinefunction(close):
            close()
        elif loop is None:
            asyncio.run(close())
        else:
            loop.run_until_complete(close())
    names.clear()
    gc.collect()


def given_names(server: FaultServer) -> dict[str, Any]:
    """The names the examples assume, for ``server``: a fresh namespace of a module."""
    return {
        "__name__": "__example__",
        "BASE_URL": server.base_url,
        "KEY": KEY,
        "MCP_URL": server.base_url.removesuffix("/v1") + "/mcp",
        "client": openai.OpenAI(
            base_url=server.base_url,
            api_key=KEY,
            websocket_base_url=server.websocket_base_url,
        ),
        "messages": [{"role": "user", "content": "Say hello"}],
        "prompt": "Say hello",
    }


@contextlib.contextmanager
def logging_kept() -> Iterator[None]:
    """Meanwhile an example may configure logging (the Logging guide's does): put back after,
    so no test that follows sees its levels or handlers."""
    ours, root = logging.getLogger("hermes_transport"), logging.getLogger()
    level, root_level, handlers = ours.level, root.level, list(root.handlers)
    try:
        yield
    finally:
        ours.setLevel(level)
        root.setLevel(root_level)
        for handler in [h for h in root.handlers if h not in handlers]:
            root.removeHandler(handler)
            handler.close()


def environment(server: FaultServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDKs' variables, pointing at ``server``: an example that sets no URL reaches it."""
    root = server.base_url.removesuffix("/v1")
    for name in ("GEMINI_API_KEY", "GOOGLE_VERTEX_BASE_URL", "GOOGLE_CLOUD_PROJECT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": KEY,
        "ANTHROPIC_BASE_URL": root,
        "ANTHROPIC_API_KEY": KEY,
        "GOOGLE_GEMINI_BASE_URL": root,
        "GOOGLE_API_KEY": KEY,
    }.items():
        monkeypatch.setenv(name, value)


def example_params(examples: list[Example]) -> list[Any]:
    """``pytest.param`` per example, its id the page and line."""
    return [pytest.param(example, id=example.name) for example in examples]
