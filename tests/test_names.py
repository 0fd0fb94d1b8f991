"""Names that say what a thing is for: stages from one table, watchdogs that watch, no twins."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import typing
from pathlib import Path

import pytest

import hermes_transport
from hermes_transport._core.stages import STAGE_WORDS, Stage, words_for

# The package's source and names, not the SDK: the same under every openai major, so
# run with the newest only.
pytestmark = pytest.mark.once

PACKAGE = Path(hermes_transport.__file__).parent
# The flavor modules define the same names once per HTTP library, by design.
FLAVOR_TWINS = {
    "FLAVOR",
    "CLIENTS",
    "StreamStalled",
    "WatchdogTransport",
    "AsyncWatchdogTransport",
    "http_client_for",
    "async_http_client_for",
}


def _stage_literals() -> set[tuple[str, str]]:
    """Every string the package assigns to, compares with or passes as a ``stage``."""
    found: set[tuple[str, str]] = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if "testing" in path.parts:
            continue  # the fault server's own vocabulary
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text())):
            values: list[ast.expr] = []
            if isinstance(node, ast.keyword) and node.arg == "stage":
                values.append(node.value)
            elif isinstance(node, ast.Assign):
                if any(isinstance(t, ast.Attribute) and t.attr == "stage" for t in node.targets):
                    values.append(node.value)
            elif isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                if any(
                    isinstance(s, ast.Attribute) and s.attr in {"stage", "fired_stage"}
                    for s in sides
                ):
                    values.extend(sides)
            for value in values:
                for leaf in ast.walk(value):
                    if isinstance(leaf, ast.Constant) and isinstance(leaf.value, str):
                        found.add((leaf.value, where))
    return found


def test_the_stage_table_words_every_stage_and_nothing_else() -> None:
    """STAGE_WORDS has words for exactly the stages the Stage type names."""
    assert set(STAGE_WORDS) == set(typing.get_args(Stage))
    assert all(words and words == words.strip() for words in STAGE_WORDS.values())


@pytest.mark.parametrize(("stage", "where"), sorted(_stage_literals()))
def test_every_stage_the_package_names_is_in_the_table(stage: str, where: str) -> None:
    """A stage written anywhere in the package is one of Stage's (no stray spelling)."""
    assert stage in STAGE_WORDS, f"{where} names the stage {stage!r}"


def test_words_for_an_unknown_stage_is_the_stage_itself() -> None:
    """A stage the table does not know reads as itself; no stage at all reads as unknown."""
    assert words_for("mid_stream") == "reading the stream"
    assert words_for("elsewhere") == "elsewhere"
    assert words_for(None) == "unknown"


def _classes() -> list[type]:
    classes: list[type] = []
    for info in pkgutil.walk_packages(hermes_transport.__path__, "hermes_transport."):
        if info.name.endswith(("httpx2", "__main__")):
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # pragma: no cover - no httpx2 on this Python
                continue
        else:
            module = importlib.import_module(info.name)
        classes.extend(
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if obj.__module__ == info.name
        )
    return classes


def test_only_deadline_watchers_are_called_watchdog() -> None:
    """A class named ...Watchdog watches deadlines (it arms targets); shells are not so named."""
    for cls in _classes():
        if cls.__name__.endswith("Watchdog"):
            assert callable(getattr(cls, "arm", None)), f"{cls.__qualname__} arms nothing"


def test_no_two_modules_define_the_same_name() -> None:
    """A top-level class, function or constant is defined once in the package (flavors aside)."""
    seen: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            names: list[str] = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(node.name)
            elif isinstance(node, ast.Assign):
                names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.append(node.target.id)
            for name in names:
                if name.startswith("_") or name in {"logger"} | FLAVOR_TWINS:
                    continue
                seen.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice
