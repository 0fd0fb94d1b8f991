"""The package's layers: each imports only the layers below it, with no cycle and no big module.

Read from the source with ``ast``, so a lazy import inside a function counts as
much as one at the top; only imports under ``if TYPE_CHECKING:`` are exempt
(they never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

import hermes_transport

# The package's source and names, not the SDK: the same under every openai major, so
# run with the newest only.
pytestmark = pytest.mark.once

PACKAGE = Path(hermes_transport.__file__).parent
NAME = "hermes_transport"

# Bottom to top. A module may import from its own layer and the layers below.
LAYERS = ("_core", "_io", "_transports", "_flavors", "_sdk", "cli")
PUBLIC_FACES = (NAME, f"{NAME}.__main__", f"{NAME}.httpx2", f"{NAME}.testing")
# What "pure" means for _core: no sockets, event loops or network libraries.
IMPURE = (
    "socket",
    "ssl",
    "select",
    "selectors",
    "asyncio",
    "anyio",
    "trio",
    "sniffio",
    "httpcore",
)
MAX_LINES = 350


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If) and _is_type_checking(child):
            for orelse in child.orelse:
                yield from _import_nodes(orelse)
            continue
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            yield child
        yield from _import_nodes(child)


def _imports(module: str, path: Path) -> set[str]:
    """The absolute names of the modules ``module`` imports (outside TYPE_CHECKING)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - node.level + 1]
            prefix = ".".join(base)
            target = f"{prefix}.{node.module}" if node.module else prefix
        else:
            target = node.module or ""
        found.add(target)
        # `from . import x` and `from pkg import submodule` import submodules too.
        for alias in node.names:
            found.add(f"{target}.{alias.name}")
    modules = _modules()
    return {name for name in found if name in modules or not name.startswith(NAME)}


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


GRAPH = {module: _imports(module, path) for module, path in _modules().items()}
OURS = sorted(m for m in GRAPH if _layer(m) is not None)


@pytest.mark.parametrize("module", OURS)
def test_a_layer_imports_only_its_own_and_lower_layers(module: str) -> None:
    """No module imports a layer above its own, or a public face (which only re-exports)."""
    layer = _layer(module)
    assert layer is not None
    rank = LAYERS.index(layer)
    for target in sorted(GRAPH[module]):
        if not target.startswith(NAME):
            continue
        assert target not in PUBLIC_FACES or (target == f"{NAME}.testing" and layer == "cli"), (
            f"{module} imports the public face {target}"
        )
        target_layer = _layer(target)
        if target_layer is not None:
            assert LAYERS.index(target_layer) <= rank, f"{module} imports {target} (upward)"


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if _layer(m) == "_core"))
def test_core_is_pure(module: str) -> None:
    """_core imports no sockets, event loops or network libraries."""
    impure = {t for t in GRAPH[module] if t.split(".")[0] in IMPURE}
    assert not impure, f"{module} imports {sorted(impure)}"


def test_testing_imports_nothing_of_the_library() -> None:
    """The public fault server is stdlib only: it imports no other part of hermes_transport."""
    for module in (m for m in GRAPH if m.startswith(f"{NAME}.testing")):
        outside = {
            t for t in GRAPH[module] if t.startswith(NAME) and not t.startswith(f"{NAME}.testing")
        }
        assert not outside, f"{module} imports {sorted(outside)}"


def test_there_is_no_import_cycle() -> None:
    """The import graph of the package (TYPE_CHECKING aside, lazy imports included) is acyclic."""
    ours = {m: {t for t in targets if t in GRAPH and t != m} for m, targets in GRAPH.items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        path.append(module)
        for target in sorted(ours[module]):
            if state.get(target) == 1:
                cycle = [*path[path.index(target) :], target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target)
        path.pop()
        state[module] = 2

    for module in sorted(ours):
        if module not in state:
            visit(module)


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_module_is_big(module: str) -> None:
    """Every module of the package is at most MAX_LINES lines: one thing per module."""
    lines = len(_modules()[module].read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines"


@pytest.mark.parametrize("module", PUBLIC_FACES)
def test_public_faces_only_re_export(module: str) -> None:
    """The public modules define no function or class of their own: the code lives in layers."""
    tree = ast.parse(_modules()[module].read_text())
    defined = [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    assert not defined, f"{module} defines {defined}"
