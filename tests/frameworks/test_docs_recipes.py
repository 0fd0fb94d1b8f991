"""The framework pages' examples (``docs/works-with/``) run, as written, against the fault server.

Each page needs its framework (``PAGES``): it runs in the frameworks environment that has
it, where the framework is required, and skips elsewhere. Nothing leaves loopback
(``loopback_only``). How an example runs and the names it may assume: ``_docs_examples``;
the pages of the project's own SDKs run in ``tests/test_docs_examples.py``.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from hermes_transport.testing import FaultServer, Scenario

from _docs_examples import (
    ROOT,
    Example,
    close_clients,
    environment,
    example_params,
    examples_of,
    given_names,
    logging_kept,
    run,
)
from _frameworks_support import framework, litellm_offline, loopback_only

# Read as litellm loads: else it fetches its model cost map from GitHub.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")


@dataclass(frozen=True)
class Page:
    """What a framework page's examples need: its frameworks, and how the server answers."""

    modules: tuple[str, ...]
    scenario: Scenario = field(default_factory=Scenario)
    #: Its sync calls run on the calling thread's event loop (``get_event_loop``): the
    #: thread gets one of its own, on which the async halves of its clients close.
    thread_loop: bool = False
    #: litellm's sync calls leave the main thread an event loop: ``litellm_offline`` closes
    #: it (and keeps litellm's callbacks and host names offline).
    litellm: bool = False


PAGES = {
    "docs/works-with/agents.md": Page(("agents", "mcp")),
    # JSON text that is the page's Item (create_partial) and holds two in "tasks"
    # (create_iterable reads the items of the first list it meets).
    "docs/works-with/instructor.md": Page(
        ("instructor",),
        Scenario(
            content=('{"city": "Paris", "tasks": [', '{"city": "Paris"}, ', '{"city": "Rome"}]}')
        ),
    ),
    "docs/works-with/langchain.md": Page(("langchain_openai", "langchain_google_genai")),
    "docs/works-with/litellm.md": Page(("litellm",), litellm=True),
    "docs/works-with/llamaindex.md": Page(("llama_index.llms.openai",)),
    "docs/works-with/pydantic-ai.md": Page(("pydantic_ai",), thread_loop=True),
}
EXAMPLES = [example for page in PAGES for example in examples_of(ROOT / page)]


@pytest.fixture
def recipe_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultServer]:
    """A fault server, the SDKs' variables pointing at it, and the frameworks kept on it."""
    with FaultServer() as server, logging_kept():
        environment(server, monkeypatch)
        # litellm's Gemini provider and LlamaIndex read their own; the Agents SDK's tracing
        # would export.
        root = server.base_url.removesuffix("/v1")
        monkeypatch.setenv("GEMINI_API_BASE", root + "/v1beta")
        monkeypatch.setenv("OPENAI_API_BASE", server.base_url)
        monkeypatch.setenv("OPENAI_AGENTS_DISABLE_TRACING", "1")
        yield server


def test_every_framework_page_is_listed() -> None:
    """A new page under docs/works-with/ with examples is given its frameworks here."""
    pages = sorted((ROOT / "docs" / "works-with").glob("*.md"))
    with_examples = {page.relative_to(ROOT).as_posix() for page in pages if examples_of(page)} - {
        "docs/works-with/anthropic.md",
        "docs/works-with/index.md",
    }
    assert with_examples == set(PAGES)


@pytest.mark.parametrize("example", example_params(EXAMPLES))
def test_the_recipe_runs_against_the_fault_server(
    example: Example, recipe_server: FaultServer
) -> None:
    """The page's block runs to its end as written, and sends what it says to the server."""
    page = PAGES[example.page]
    imported = [framework(module) for module in page.modules]
    recipe_server.scenario = page.scenario
    names = given_names(recipe_server)
    offline = litellm_offline(imported[0], lambda: None) if page.litellm else None
    loop = asyncio.new_event_loop() if page.thread_loop else None
    asyncio.set_event_loop(loop)
    try:
        with offline or loopback_only():
            run(example, names)
    finally:
        close_clients(names, loop)  # a genai client's aio half, on the loop that used it
        asyncio.set_event_loop(None)
        if loop is not None:
            loop.close()
    if not example.offline:
        assert recipe_server.requests, "it sent nothing: mark it offline if it should not"
