"""Every Python example of the README and the docs runs, as written, against the fault server.

The framework pages' examples (``docs/works-with/``, but Anthropic's) need their
frameworks: they run in the frameworks' environments (``tests/frameworks/
test_docs_recipes.py``). How an example runs, and the names it may assume:
``_docs_examples``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest

from hermes_transport.testing import FaultServer

from _docs_examples import (
    GIVEN,
    PAGES,
    ROOT,
    Example,
    all_examples,
    close_clients,
    environment,
    example_params,
    examples_of,
    given_names,
    logging_kept,
    python_fences,
    run,
    run_its_tests,
)

FRAMEWORK_PAGES = "docs/works-with/"
SDK_PAGES = ("docs/works-with/anthropic.md", "docs/works-with/index.md")
#: At most this many examples may be skipped: they are few, each named with its reason.
MOST_SKIPPED = 3


def _ours(example: Example) -> bool:
    return not example.page.startswith(FRAMEWORK_PAGES) or example.page in SDK_PAGES


@pytest.fixture
def example_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    """A healthy fault server, and the SDKs' variables pointing at it."""
    with FaultServer() as server, logging_kept():
        environment(server, monkeypatch)
        yield server


@pytest.mark.parametrize("example", example_params([e for e in all_examples() if _ours(e)]))
def test_the_example_runs_against_the_fault_server(
    example: Example, example_server: FaultServer
) -> None:
    """The block runs to its end as written, and sends what it says to the server."""
    names = given_names(example_server)
    try:
        run(example, names)
        run_its_tests(names)
    finally:
        close_clients(names)
    if not example.offline:
        assert example_server.requests, "it sent nothing: mark it offline if it should not"


@pytest.mark.once
def test_every_python_block_of_every_page_is_an_example() -> None:
    """No Python block escapes: each fence that opens one is found, on every page."""
    counted = {page.relative_to(ROOT).as_posix(): python_fences(page) for page in PAGES}
    found = {page.relative_to(ROOT).as_posix(): len(examples_of(page)) for page in PAGES}
    assert found == counted
    assert sum(found.values()) >= 30


@pytest.mark.once
def test_the_names_examples_assume_are_listed_on_the_home_page(
    example_server: FaultServer,
) -> None:
    """Each name an example may use without defining it is given, and named on Home."""
    names = given_names(example_server)
    assert sorted(name for name in names if not name.startswith("__")) == sorted(GIVEN)
    close_clients(names)
    home = (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert [name for name in GIVEN if f"`{name}`" not in home] == []


@pytest.mark.once
def test_skipped_examples_are_few_and_say_why() -> None:
    """A skipped example is the exception: a handful at most, each with its reason."""
    skipped = [example for example in all_examples() if example.skip is not None]
    assert len(skipped) <= MOST_SKIPPED, [example.name for example in skipped]
    assert all(example.skip for example in skipped)


@pytest.mark.once
@pytest.mark.parametrize(
    ("broken", "error"),
    [
        pytest.param(("openai_client_for(", "openai_client_fro("), NameError, id="renamed"),
        pytest.param(("policy=", "polcy="), TypeError, id="keyword"),
        pytest.param(("import StreamPolicy", "import StreamPolicyy"), ImportError, id="import"),
    ],
)
def test_an_example_broken_on_purpose_fails(
    broken: tuple[str, str], error: type[Exception], example_server: FaultServer
) -> None:
    """A renamed function, a changed signature or a removed name fails the example's run."""
    first = examples_of(ROOT / "README.md")[0]
    assert broken[0] in first.source
    wrong = dataclasses.replace(first, source=first.source.replace(*broken))
    for example in (first, wrong):
        names = given_names(example_server)
        try:
            if example is first:
                run(first, names)  # as written, it runs
            else:
                with pytest.raises(error):
                    run(wrong, names)
        finally:
            close_clients(names)


@pytest.mark.once
def test_a_traceback_names_the_page_and_its_line(example_server: FaultServer) -> None:
    """A failing example points at its page and the line there, not at a string."""
    first = examples_of(ROOT / "README.md")[0]
    wrong = dataclasses.replace(first, source="x = 1\nraise RuntimeError('here')\n")
    names = given_names(example_server)
    with pytest.raises(RuntimeError) as raised:
        run(wrong, names)
    close_clients(names)
    frame = raised.traceback[-1]
    assert str(frame.path).endswith("README.md")
    assert frame.lineno + 1 == first.line + 1  # 0-based: the block's second line


@pytest.mark.once
@pytest.mark.parametrize(
    ("page", "message"),
    [
        ("<!-- example: skip -->\n```python\npass\n```\n", "needs a reason"),
        ("<!-- example: sometimes -->\n```python\npass\n```\n", "unknown example mark"),
        ("<!-- example: continues -->\n```python\npass\n```\n", "no block comes before"),
    ],
)
def test_a_malformed_mark_is_an_error_naming_the_block(
    page: str, message: str, tmp_path: Path
) -> None:
    """A mark that cannot be obeyed fails the collection, naming the page and line."""
    folder = tmp_path
    path = folder / "page.md"
    path.write_text(page, encoding="utf-8")
    with pytest.raises(ValueError, match=message) as raised:
        examples_of(path, folder)
    assert "page.md:3" in str(raised.value)
