"""instructor on the watchdog: from_openai over the factories' clients, streamed sync and async.

The recipe wraps ``openai_client_for``'s ``OpenAI`` (``async_openai_client_for``'s
``AsyncOpenAI``) with ``instructor.from_openai``. The fault server answers with JSON:
in ``Mode.JSON`` as scripted text, in ``Mode.TOOLS`` as its one tool call, whose
arguments fit ``_InsWeather`` (instructor does not check a streamed call's name).
``create_iterable``'s ``{"tasks": [...]}`` needs scripted text, so ``Mode.JSON``.

The trap: sync ``create_partial`` (and ``create(..., stream=True)`` with
``Partial[...]``), in every mode, reads the whole stream before its first partial, as
instructor's OpenAI handler returns ``list(generator)`` for a sync partial stream (to
re-ask on a validation error inside its retry loop), whatever the HTTP client. Async
``create_partial``, sync and async ``create_iterable``, and the sync workaround (the SDK's
stream parsed by ``Partial[Model].model_from_chunks``) truly stream. Errors: where the
request fails inside instructor's retry loop (any error before the response, and every
error of a sync ``create_partial``) it comes out as ``InstructorRetryException`` with ours
as ``__cause__``; while a streaming iterator is read, as our ``StreamStalled`` or
``StreamInterrupted`` itself. instructor re-asks only on a parse error: a stall is never
sent again by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import time
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam
from pydantic import BaseModel

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStalled,
    async_openai_client_for,
    openai_client_for,
    stream_error,
)
from hermes_transport.testing import FaultServer, Scenario

from _frameworks_support import framework
from _support import assert_prompt, interrupt_when

instructor = framework("instructor")

from instructor.core import InstructorRetryException

# instructor imports the anthropic SDK's types on its first call: not inside a timed test.
with contextlib.suppress(ImportError):
    importlib.import_module("anthropic.types")


class _InsWeather(BaseModel):
    city: str
    unit: str


_INS_POLICY = StreamPolicy(stale_timeout=0.5, first_event_timeout=1.0, retries=1)
_INS_MESSAGES: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Weather in Paris?"}
]
#: One _InsWeather as JSON text, in six events.
_INS_JSON = ('{"city": ', '"Par', 'is", ', '"unit": ', '"cel', 'sius"}')
#: create_iterable's JSON: two _InsWeather in "tasks".
_INS_TASKS = (
    '{"tasks": [',
    '{"city": "Paris", "unit": "c"}',
    ', {"city": "Rome",',
    ' "unit": "f"}]}',
)
_INS_CONTENT = {"create_partial": _INS_JSON, "create_iterable": _INS_TASKS}
_INS_FINAL = {
    "create_partial": [("Paris", "celsius")],
    "create_iterable": [("Paris", "c"), ("Rome", "f")],
}
_INS_APIS = pytest.mark.parametrize(
    ("api", "is_async"),
    [
        pytest.param("create_partial", False, id="create_partial-sync"),
        pytest.param("create_partial", True, id="create_partial-async"),
        pytest.param("create_iterable", False, id="create_iterable-sync"),
        pytest.param("create_iterable", True, id="create_iterable-async"),
    ],
)


def _ins_run(
    server: FaultServer,
    api: str,
    is_async: bool,
    into: list[Any],
    *,
    mode: Any = None,
    interrupt: Interrupt | None = None,
) -> None:
    """Run the recipe: `api` of instructor over the factory client, each item into `into` as it arrives."""
    mode = instructor.Mode.JSON if mode is None else mode
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": "x"}
    options.update(policy=_INS_POLICY, interrupt=interrupt)
    call = {"model": "m", "response_model": _InsWeather, "messages": _INS_MESSAGES}
    if not is_async:
        with openai_client_for("cli", **options) as sdk:
            client = instructor.from_openai(sdk, mode=mode)
            for item in getattr(client.chat.completions, api)(**call):
                into.append(item)
        return

    async def run() -> None:
        async with async_openai_client_for("cli", **options) as sdk:
            client = instructor.from_openai(sdk, mode=mode)
            async for item in getattr(client.chat.completions, api)(**call):
                into.append(item)

    asyncio.run(run())


def _ins_fields(items: Iterable[Any]) -> list[tuple[str, str]]:
    """Each item's (city, unit)."""
    return [(item.city, item.unit) for item in items]


@_INS_APIS
def test_instructor_streams_a_healthy_answer_whole(
    server: FaultServer, api: str, is_async: bool
) -> None:
    """A healthy stream gives the whole object (create_partial's last partial) or every object (create_iterable), in one request."""
    server.scenario = Scenario.healthy(content=_INS_CONTENT[api])
    items: list[Any] = []
    _ins_run(server, api, is_async, items)
    final = items[-1:] if api == "create_partial" else items
    assert _ins_fields(final) == _INS_FINAL[api]
    assert len(server.requests) == 1


@_INS_APIS
def test_instructor_a_stall_after_the_first_event_raises_ours_or_instructor_retry_exception(
    server: FaultServer, api: str, is_async: bool
) -> None:
    """A stream silent after its first events raises our StreamStalled itself while a streaming iterator is read, InstructorRetryException over it from sync create_partial, and is sent once."""
    server.scenario = replace(Scenario.healthy(content=_INS_CONTENT[api]), stall_after_events=3)
    items: list[Any] = []
    buffered = api == "create_partial" and not is_async
    expected = InstructorRetryException if buffered else StreamStalled
    with pytest.raises(expected) as info:
        _ins_run(server, api, is_async, items)
    stalled = stream_error(info.value)
    assert isinstance(stalled, StreamStalled)
    assert stalled.stage == "mid_stream"
    assert info.value is stalled or info.value.__cause__ is stalled
    assert bool(items) is not buffered  # sync create_partial delivered nothing at all
    assert len(server.requests) == 1


@_INS_APIS
def test_instructor_a_stall_before_the_first_event_is_re_sent_and_answers_whole(
    server: FaultServer, api: str, is_async: bool
) -> None:
    """A first attempt silent before its headers is re-sent by the transport: the caller gets the whole answer, the server saw two requests."""
    server.scenario = Scenario.stall_first(1, then=Scenario.healthy(content=_INS_CONTENT[api]))
    items: list[Any] = []
    _ins_run(server, api, is_async, items)
    final = items[-1:] if api == "create_partial" else items
    assert _ins_fields(final) == _INS_FINAL[api]
    assert [request.attempt for request in server.requests] == [0, 1]


@pytest.mark.timing
@_INS_APIS
@pytest.mark.parametrize("stage", ["headers", "mid_stream"])
def test_instructor_an_interrupt_from_another_thread_ends_the_call_promptly(
    server: FaultServer, api: str, is_async: bool, stage: str
) -> None:
    """An Interrupt from another thread, before the headers or mid-stream, ends the call within a second; before the response (and from sync create_partial) as InstructorRetryException over our StreamInterrupted, else as ours itself."""
    healthy = Scenario.healthy(content=_INS_CONTENT[api])
    if stage == "headers":
        server.scenario = replace(healthy, stall_before_headers=True, hold=5.0)
    else:
        server.scenario = replace(healthy, stall_after_events=3, hold=5.0)
    stop = Interrupt()

    def ready() -> bool:  # the request is in (headers), or its first events are out (mid-stream)
        sent = server.sent
        return bool(sent) and (stage == "headers" or len(sent[0].writes) >= 3)

    when = interrupt_when(stop, ready, delay=0.2)
    wrapped = stage == "headers" or (api == "create_partial" and not is_async)
    with pytest.raises(InstructorRetryException if wrapped else StreamInterrupted) as info:
        _ins_run(server, api, is_async, [], interrupt=stop)
    interrupted = stream_error(info.value)
    assert isinstance(interrupted, StreamInterrupted)
    assert_prompt(when, interrupted, stage)
    assert len(server.requests) == 1


_INS_STREAMING = pytest.mark.parametrize(
    ("how", "streams"),
    [
        ("create_partial sync JSON", False),
        ("create_partial sync TOOLS", False),
        ("create_partial async JSON", True),
        ("create_partial async TOOLS", True),
        ("create_iterable sync JSON", True),
        ("Partial.model_from_chunks sync JSON", True),
    ],
)


def _ins_model_from_chunks(server: FaultServer, into: list[Any]) -> None:
    """The sync workaround: the SDK's own JSON stream, parsed into partials by instructor's Partial."""
    options: dict[str, Any] = {"base_url": server.base_url, "api_key": "x", "policy": _INS_POLICY}
    with openai_client_for("cli", **options) as sdk:
        stream = sdk.chat.completions.create(
            model="m",
            messages=_INS_MESSAGES,  # with the schema in the prompt, as the user writes it
            stream=True,
            response_format={"type": "json_object"},
        )
        chunks = (chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        for partial in instructor.Partial[_InsWeather].model_from_chunks(chunks):
            into.append(partial)


@pytest.mark.timing
@_INS_STREAMING
def test_instructor_sync_create_partial_buffers_the_stream_the_others_stream_it(
    server: FaultServer, how: str, streams: bool
) -> None:
    """The trap: sync create_partial yields its first partial only once the server has sent the whole stream, in JSON and TOOLS modes alike; async create_partial, create_iterable and Partial.model_from_chunks yield theirs while it is still streaming."""
    api, kind, mode_name = how.split()
    mode = getattr(instructor.Mode, mode_name)
    if mode_name == "TOOLS":
        scenario = Scenario(content=(), tool_call=True)
    else:
        scenario = Scenario.healthy(content=_INS_TASKS if api == "create_iterable" else _INS_JSON)
    server.scenario = replace(scenario, event_interval=0.1)
    arrivals: list[float] = []

    class Timed(list[Any]):
        def append(self, item: Any) -> None:
            arrivals.append(time.monotonic())
            super().append(item)

    items = Timed()
    if api == "Partial.model_from_chunks":
        _ins_model_from_chunks(server, items)
    else:
        _ins_run(server, api, kind == "async", items, mode=mode)
    last_write = server.sent[-1].writes[-1][0]
    assert (arrivals[0] < last_write) is streams, f"first item {arrivals[0] - last_write:+.2f} s"
    final = items[-1:] if api != "create_iterable" else items
    assert _ins_fields(final)[0][0] == "Paris"
