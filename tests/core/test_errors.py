"""The public errors: they pickle and copy to equal errors, keep their public names, say the truth."""

from __future__ import annotations

import concurrent.futures
import copy
import importlib
import json
import multiprocessing
import pickle
import subprocess
import sys
import traceback
import typing
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest

import hermes_transport
from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._core.errors import interrupted_before_response
from hermes_transport._core.stages import Stage
from hermes_transport.testing import FaultServer, Scenario

from _support import FLAVORS, OPENAI_MAJOR, Flavor, chat_body, interrupt_when, load_flavor

PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def _pickled_at(protocol: int) -> Callable[[BaseException], BaseException]:
    def trip(error: BaseException) -> BaseException:
        copied: BaseException = pickle.loads(pickle.dumps(error, protocol))
        return copied

    return trip


#: Every way an error is copied across a boundary: pickle at each protocol, and copy.
ROUND_TRIPS: dict[str, Callable[[BaseException], BaseException]] = {
    **{f"pickle{p}": _pickled_at(p) for p in PROTOCOLS},
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}
#: The SDK base errors a mixed interrupt may carry.
SDK_ERRORS = (openai.OpenAIError, anthropic.AnthropicError)
FIELDS = ("stage", "budget", "elapsed", "attempts", "reason")


def _stall(flavor: Flavor, stage: Any = "mid_stream") -> StreamStalled:
    """A stall of ``flavor`` carrying that library's own request, as the transport builds it."""
    request = flavor.http.Request("POST", "http://127.0.0.1:9/v1/chat/completions", json={})
    return flavor.StreamStalled(
        "stream stalled: no progress event for 0.3 s after 2 event(s), 0.41 s into attempt 3",
        request=request,
        stage=stage,
        budget=0.3,
        elapsed=0.41,
        attempts=3,
    )


def _constructed() -> Iterator[Any]:
    for name in FLAVORS:
        yield pytest.param(lambda name=name: _stall(load_flavor(name)), id=f"stalled-{name}")
    yield pytest.param(lambda: StreamInterrupted("stop", stage="headers"), id="interrupted")
    yield pytest.param(lambda: StreamInterrupted("stop"), id="interrupted-no-stage")
    yield pytest.param(
        lambda: interrupted_before_response("stop", stage="headers"), id="interrupted-sdk-mixed"
    )


def assert_equal_errors(copied: BaseException, original: BaseException) -> None:
    """``copied`` is the same error as ``original``: class, args, text and attributes."""
    assert type(copied) is type(original)
    assert copied.args == original.args
    assert str(copied) == str(original)
    assert repr(copied) == repr(original)
    for name in FIELDS:
        assert getattr(copied, name, None) == getattr(original, name, None), name
    if isinstance(original, httpx.HTTPError):
        assert isinstance(copied, httpx.HTTPError)
        # Kept, as httpx's own errors keep theirs (without its body stream).
        assert type(copied.request) is type(original.request)
        assert copied.request.method == original.request.method
        assert copied.request.url == original.request.url
        assert copied.request.content == original.request.content
    assert copied is not original


@pytest.mark.parametrize("make", list(_constructed()))
@pytest.mark.parametrize("trip", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_every_error_survives_a_round_trip(
    make: Callable[[], BaseException], trip: Callable[[BaseException], BaseException]
) -> None:
    """Each public error pickles at every protocol, and copies, to an equal error."""
    original = make()
    assert_equal_errors(trip(original), original)


@pytest.mark.once  # no SDK: the same under every openai major
def test_a_round_trip_keeps_notes_and_attributes_set_later() -> None:
    """Notes and attributes added after the error was made come back too."""
    original = interrupted_before_response("stop", stage="sending")
    original.add_note("while streaming turn 3")
    original.turn = 3  # type: ignore[attr-defined]
    copied = pickle.loads(pickle.dumps(original))
    assert copied.__notes__ == ["while streaming turn 3"]
    assert copied.turn == 3


def test_a_pickled_sdk_mixed_interrupt_comes_back_as_the_same_class() -> None:
    """An interrupt mixed with the SDKs' base errors unpickles to that very class, still all of them."""
    original = interrupted_before_response("stop", stage="headers")
    assert all(isinstance(original, sdk_error) for sdk_error in SDK_ERRORS)
    copied = pickle.loads(pickle.dumps(original))
    assert type(copied) is type(original)
    assert isinstance(copied, StreamInterrupted)
    assert isinstance(copied, InterruptedError)
    for sdk_error in SDK_ERRORS:
        assert isinstance(copied, sdk_error)


@pytest.mark.parametrize(
    ("make", "public"),
    [
        (lambda: interrupted_before_response("stop", stage="headers"), "StreamInterrupted"),
        (lambda: StreamInterrupted("stop"), "StreamInterrupted"),
        (lambda: _stall(load_flavor("httpx")), "StreamStalled"),
    ],
    ids=["interrupted-sdk-mixed", "interrupted", "stalled"],
)
def test_errors_show_their_public_names(make: Callable[[], BaseException], public: str) -> None:
    """A traceback and the class's repr name hermes_transport's public class, never a private module."""
    error = make()
    shown = "".join(traceback.format_exception_only(error))
    assert shown.startswith(f"hermes_transport.{public}: "), shown
    assert repr(type(error)) == f"<class 'hermes_transport.{public}'>"
    assert type(error).__name__ == public


def test_the_httpx2_stall_shows_its_public_name_even_from_a_factory_alone() -> None:
    """Where only a factory loaded the httpx2 flavor, its stall still shows (and pickles as)
    hermes_transport.httpx2.StreamStalled."""
    pytest.importorskip("httpx2")
    code = (
        "import pickle, sys, traceback, hermes_transport\n"
        "client = hermes_transport.openai_client_for('cron', api_key='x', flavor='httpx2')\n"
        "assert 'hermes_transport.httpx2' not in sys.modules\n"
        "from hermes_transport._flavors import flavor_named\n"
        "cls = flavor_named('httpx2').stalled\n"
        "e = cls('stalled', stage='mid_stream', budget=1.0, elapsed=1.0, attempts=1)\n"
        "print(''.join(traceback.format_exception_only(e)).strip())\n"
        "print(type(pickle.loads(pickle.dumps(e))) is cls)\n"
    )
    if OPENAI_MAJOR < 3 and not hasattr(openai, "DefaultHttpx2Client"):
        pytest.skip("this openai does not accept httpx2 clients")
    shown, same = _run_python(code).splitlines()
    assert shown == "hermes_transport.httpx2.StreamStalled: stalled"
    assert same == "True"


def _run_python(code: str, stdin: bytes = b"") -> str:
    """Run ``code`` in a fresh interpreter (same environment); its standard output."""
    done = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


# --- across processes ------------------------------------------------------------------------

#: Raised in a worker process (where only openai is imported), sent back by the pool.
_IN_WORKER = {
    "stalled-httpx": (
        "import hermes_transport\n"
        "raise hermes_transport.StreamStalled('cut', stage='first_event', budget=2.0,"
        " elapsed=2.5, attempts=3)\n"
    ),
    "stalled-httpx2": (
        "from hermes_transport import httpx2\n"
        "raise httpx2.StreamStalled('cut', stage='mid_stream', budget=2.0, elapsed=2.5,"
        " attempts=1)\n"
    ),
    "interrupted-sdk-mixed": (
        "import openai\n"
        "from hermes_transport._core.errors import interrupted_before_response\n"
        "raise interrupted_before_response('stop', stage='connecting')\n"
    ),
}


@pytest.fixture
def worker_pool() -> Iterator[concurrent.futures.ProcessPoolExecutor]:
    """One spawned worker process (no fork under the test's threads)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=context) as pool:
        yield pool


@pytest.mark.parametrize("kind", _IN_WORKER)
def test_an_error_raised_in_a_worker_process_reaches_the_parent_whole(
    worker_pool: concurrent.futures.ProcessPoolExecutor, kind: str
) -> None:
    """A process pool re-raises a worker's error in the parent with its class and attributes."""
    if kind.endswith("httpx2"):
        pytest.importorskip("httpx2")
    future = worker_pool.submit(exec, _IN_WORKER[kind])
    error = future.exception(timeout=120)
    if kind.startswith("stalled"):
        expected: type[BaseException] = (
            hermes_transport.StreamStalled
            if kind == "stalled-httpx"
            else importlib.import_module("hermes_transport.httpx2").StreamStalled
        )
        assert type(error) is expected
        assert isinstance(error, StreamStalled)
        assert error.args == ("cut",)
        assert (error.budget, error.elapsed) == (2.0, 2.5)
        assert error.stage == ("first_event" if kind == "stalled-httpx" else "mid_stream")
    else:
        # The worker had loaded openai alone: the interrupt is openai's base error, not
        # anthropic's, though this process has both.
        assert isinstance(error, StreamInterrupted)
        assert type(error).__bases__ == (StreamInterrupted, openai.OpenAIError)
        assert not isinstance(error, anthropic.AnthropicError)
        assert (error.reason, error.stage) == ("stop", "connecting")
        assert type(error) is type(pickle.loads(pickle.dumps(error)))


def test_an_sdk_the_unpickling_process_cannot_import_is_left_out() -> None:
    """Unpickled where anthropic cannot be imported, a mixed interrupt is still a
    StreamInterrupted and openai's base error."""
    original = interrupted_before_response("stop", stage="headers")
    code = (
        "import json, pickle, sys\n"
        "sys.modules['anthropic'] = None  # not importable here\n"
        "error = pickle.loads(sys.stdin.buffer.read())\n"
        "print(json.dumps([f'{c.__module__}.{c.__qualname__}' for c in type(error).__bases__]"
        " + [error.reason, error.stage]))\n"
    )
    bases_and_fields = json.loads(_run_python(code, pickle.dumps(original)))
    assert bases_and_fields == [
        "hermes_transport.StreamInterrupted",
        "openai.OpenAIError",
        "stop",
        "headers",
    ]


# --- as the transport really raises them -----------------------------------------------------


def _ours(error: BaseException) -> BaseException:
    """The hermes-transport error in ``error``'s chain (openai 1.x wraps what it retried)."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, StreamStalled | StreamInterrupted):
            return seen
        seen = seen.__cause__ or seen.__context__
    raise AssertionError(f"no hermes-transport error in {error!r}")


@pytest.mark.parametrize("when", ["before_sending", "headers"])
def test_an_interrupt_the_openai_sdk_raised_survives_every_round_trip(
    sdk_flavor: Flavor, server: FaultServer, when: str
) -> None:
    """An interrupt raised through the openai SDK before the response pickles and copies whole."""
    server.scenario = Scenario.silent_before_headers()
    token = Interrupt()
    if when == "before_sending":
        token.interrupt("user pressed stop")
    else:
        interrupt_when(token, lambda: len(server.requests) == 1)
    transport = sdk_flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=30.0))
    with sdk_flavor.http.Client(transport=transport, timeout=30.0) as http_client:
        client = openai.OpenAI(
            base_url=server.base_url, api_key="x", http_client=http_client, max_retries=0
        )
        with token.bind(), pytest.raises((StreamInterrupted, openai.APIConnectionError)) as info:
            client.chat.completions.create(model="m", messages=[], stream=True)
    raised = _ours(info.value)
    assert isinstance(raised, StreamInterrupted)
    assert (raised.reason, raised.stage) == ("user pressed stop", when)
    assert isinstance(raised, openai.OpenAIError)  # mixed in, so the SDK did not retry it
    assert "".join(traceback.format_exception_only(raised)).startswith(
        "hermes_transport.StreamInterrupted: "
    )
    for trip in ROUND_TRIPS.values():
        assert_equal_errors(trip(raised), raised)


@pytest.mark.parametrize("stage", ["first_event", "mid_stream"])
@pytest.mark.once  # no SDK: the same under every openai major
def test_a_stall_the_transport_raised_survives_every_round_trip(
    flavor: Flavor, server: FaultServer, stage: str
) -> None:
    """A real stall, with the real request it carries, pickles and copies whole."""
    server.scenario = (
        Scenario.silent_before_headers() if stage == "first_event" else Scenario.silent_after(1)
    )
    policy = StreamPolicy(stale_timeout=0.2, retries=0)
    with flavor.http.Client(transport=flavor.WatchdogTransport(policy=policy)) as client:
        with pytest.raises(flavor.StreamStalled) as info:
            with client.stream(
                "POST", server.base_url + "/chat/completions", json=chat_body()
            ) as r:
                r.read()
    raised = info.value
    assert raised.stage == stage
    assert json.loads(raised.request.content) == chat_body()
    for trip in ROUND_TRIPS.values():
        assert_equal_errors(trip(raised), raised)


# --- what the errors say about themselves ----------------------------------------------------


@pytest.mark.once  # no SDK: the same under every openai major
def test_the_stages_are_typed_with_the_stage_vocabulary() -> None:
    """An interrupt's stage is any Stage (or None); a stall's is one of Stage's values."""
    interrupted = typing.get_type_hints(StreamInterrupted.__init__)["stage"]
    assert set(typing.get_args(interrupted)) == {Stage, type(None)}
    stalled = typing.get_type_hints(StreamStalled.__init__)["stage"]
    assert set(typing.get_args(stalled)) == {"first_event", "mid_stream"}
    assert set(typing.get_args(stalled)) <= set(typing.get_args(Stage))


def test_attempts_counts_every_send_of_the_call_sdk_retries_included(server: FaultServer) -> None:
    """After an SDK retry of a 500 and one transport re-send, the stall says attempts=3, as its
    documentation says: every layer's sends of the logical call count, not the transport's."""
    flavor = load_flavor("httpx")
    server.scenario = Scenario.stall_first(
        1, stall=Scenario.error(500), then=Scenario.silent_before_headers()
    )
    policy = StreamPolicy(stale_timeout=0.3, retries=1)
    transport = flavor.WatchdogTransport(policy=policy)
    with flavor.http.Client(transport=transport, timeout=30.0) as http_client:
        client = openai.OpenAI(
            base_url=server.base_url, api_key="x", http_client=http_client, max_retries=2
        )
        with pytest.raises((StreamStalled, openai.APIConnectionError)) as info:
            client.chat.completions.create(model="m", messages=[], stream=True)
    stall = _ours(info.value)
    assert isinstance(stall, StreamStalled)
    assert (stall.stage, stall.attempts) == ("first_event", 3)
    assert len(server.requests) == 3  # the 500, then two stalls; the SDK's last retry is offline
    doc = StreamStalled.__doc__ or ""
    assert all(layer in doc for layer in ("transport's own re-sends", "SDK's retries", "runners'"))
