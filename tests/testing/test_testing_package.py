"""The layout of hermes_transport.testing: stdlib only, no cycle, one public path per name.

Read from the source with ``ast``; unlike the package-wide layer tests, imports
under ``if TYPE_CHECKING:`` count here too, since the fault server must not lean
on the library it tests even for types.
"""

from __future__ import annotations

import ast
import pickle
import sys
from pathlib import Path

import pytest

import hermes_transport.testing
from hermes_transport.testing import FaultServer, RecordedRequest, Scenario

# The fault server's own layout, no SDK: the same under every openai major, so run with
# the newest only.
pytestmark = pytest.mark.once

NAME = "hermes_transport.testing"
PACKAGE = Path(hermes_transport.testing.__file__).parent
PUBLIC = {
    "CHAT_COMPLETIONS_PATH",
    "MCP_TOOL_NAME",
    "MESSAGES_PATH",
    "RESPONSES_PATH",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_NAME",
    "FaultServer",
    "RecordedRequest",
    "Scenario",
    "SentResponse",
    "gemini_model",
}


def _module_name(path: Path) -> str:
    return NAME if path.name == "__init__.py" else f"{NAME}.{path.stem}"


MODULES = {_module_name(path): path for path in sorted(PACKAGE.glob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(module: str, *, type_checking: bool) -> set[str]:
    """The absolute names ``module`` imports, those under TYPE_CHECKING only if asked."""
    package = NAME.split(".")
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child) and not type_checking:
                for orelse in child.orelse:
                    visit(orelse)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = ".".join(package[: len(package) - child.level + 1])
                    target = f"{base}.{child.module}" if child.module else base
                else:
                    target = child.module or ""
                found.add(target)
                found.update(f"{target}.{alias.name}" for alias in child.names)
            visit(child)

    path = MODULES[module]
    visit(ast.parse(path.read_text(), str(path)))
    return found


def test_the_package_has_the_expected_modules_each_with_a_docstring() -> None:
    """The fault server lives in one module per concern, each saying what it owns."""
    expected = {"", ".chat", ".handler", ".messages", ".responses", ".scenarios", ".server"}
    expected |= {".background", ".gemini", ".mcp", ".recording", ".store", ".stream"}
    expected |= {".websocket"}
    assert set(MODULES) == {NAME + suffix for suffix in expected}
    for module, path in MODULES.items():
        assert ast.get_docstring(ast.parse(path.read_text())), f"{module} has no docstring"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_a_module_imports_only_the_stdlib_and_its_own_package(module: str) -> None:
    """No module of the testing package imports the rest of hermes_transport or any third party, not even for types, but the WebSocket endpoint its optional websockets."""
    for target in sorted(_imports(module, type_checking=True)):
        top = target.split(".")[0]
        if top == "websockets" and module == NAME + ".websocket":
            continue  # the optional extra, imported only when the endpoint is used
        if top == "hermes_transport":
            assert target == NAME or target.startswith(NAME + "."), f"{module} imports {target}"
        else:
            assert top == "__future__" or top in sys.stdlib_module_names, (
                f"{module} imports {target}"
            )


def test_the_modules_import_one_another_without_a_cycle() -> None:
    """Outside TYPE_CHECKING, the imports between the package's modules form no cycle."""
    graph = {
        module: {t for t in _imports(module, type_checking=False) if t in MODULES} - {module}
        for module in MODULES
    }
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                pytest.fail("import cycle: " + " -> ".join([*path, module, target]))
            if target not in state:
                visit(target, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [])


@pytest.mark.parametrize("module", ["scenarios", "store", "stream"])
def test_the_modules_the_wires_build_on_import_no_other_module(module: str) -> None:
    """scenarios.py, store.py and stream.py, which the wires import, import no other module of the package."""
    inside = {
        t
        for t in _imports(f"{NAME}.{module}", type_checking=True)
        if t.startswith("hermes_transport")
    }
    assert not inside


def test_all_is_sorted_and_lists_exactly_the_public_names() -> None:
    """__all__ names exactly the public API, constants first, each group sorted, and each resolves."""
    names = hermes_transport.testing.__all__
    assert set(names) == PUBLIC
    assert len(names) == len(PUBLIC)
    constants = [n for n in names if n.isupper()]
    assert names == sorted(constants) + sorted(n for n in names if not n.isupper())
    for name in names:
        assert hasattr(hermes_transport.testing, name)


def test_the_package_face_defines_nothing_itself() -> None:
    """__init__.py only re-exports: it defines no class or function of its own."""
    tree = ast.parse(MODULES[NAME].read_text())
    defined = [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    ]
    assert not defined


@pytest.mark.parametrize("name", sorted(PUBLIC))
def test_public_classes_show_the_public_module(name: str) -> None:
    """Every class and function the package exports reports hermes_transport.testing as its module."""
    obj = getattr(hermes_transport.testing, name)
    if isinstance(obj, str):
        assert name.isupper()
    else:
        assert obj.__module__ == NAME


def test_scenarios_and_recorded_requests_pickle_under_the_public_path() -> None:
    """A pickled Scenario or RecordedRequest names hermes_transport.testing and loads back equal."""
    scenario = Scenario.stall_first(2, then=Scenario.silent_after(1, gzip=True))
    request = RecordedRequest(
        method="POST",
        path="/v1/chat/completions",
        headers={"host": "x"},
        body=b"{}",
        json={},
        stream=None,
        time=1.0,
        attempt=0,
    )
    for value in (scenario, request):
        data = pickle.dumps(value)
        assert b"hermes_transport.testing\x94" in data or b"hermes_transport.testing\n" in data
        assert b"scenarios" not in data
        assert pickle.loads(data) == value


def test_a_fault_server_repr_names_the_public_path() -> None:
    """The default repr of a FaultServer shows hermes_transport.testing.FaultServer."""
    assert repr(FaultServer()).startswith("<hermes_transport.testing.FaultServer object at ")
