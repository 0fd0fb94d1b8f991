"""The public face: one package namespace, a sorted __all__, the documented signatures."""

from __future__ import annotations

import inspect
import subprocess
import sys

import httpx
import pytest

import hermes_transport
from hermes_transport import StreamInterrupted, StreamStalled

from _support import OPENAI_MAJOR

try:
    import httpx2

    from hermes_transport import httpx2 as ht2
except ImportError:  # Python 3.10: httpx2 needs 3.11
    httpx2 = ht2 = None  # type: ignore[assignment]

needs_httpx2 = pytest.mark.skipif(httpx2 is None, reason="httpx2 is not installed")


@pytest.mark.parametrize(
    ("module", "modules"),
    [
        (hermes_transport, {"testing", "httpx2", "cli"}),  # cli: the command line's own
        pytest.param(ht2, {"httpcore2", "httpx2"}, marks=needs_httpx2),
    ],
    ids=["hermes_transport", "hermes_transport.httpx2"],
)
def test_all_is_sorted_and_complete(module: object, modules: set[str]) -> None:
    """__all__ is sorted, names only real attributes, and hides every private module."""
    names = module.__all__  # type: ignore[attr-defined]
    assert names == sorted(names)
    for name in names:
        assert hasattr(module, name), name
    public = {n for n in vars(module) if not n.startswith("_")}
    assert public - set(names) <= {"annotations", "logging", "Any", *modules}


@needs_httpx2
def test_the_httpx2_flavor_names_the_same_public_classes() -> None:
    """hermes_transport.httpx2 offers the transports, factories and error of the package, on httpx2."""
    assert set(ht2.__all__) <= set(hermes_transport.__all__)
    assert issubclass(ht2.WatchdogTransport, httpx2.BaseTransport)
    assert issubclass(ht2.AsyncWatchdogTransport, httpx2.AsyncBaseTransport)
    assert not issubclass(ht2.WatchdogTransport, httpx.BaseTransport)


def test_errors_subclass_what_existing_handlers_catch() -> None:
    """A stall is an httpx read timeout and protocol error; an interrupt is an InterruptedError."""
    assert issubclass(StreamStalled, httpx.ReadTimeout)
    assert issubclass(StreamStalled, httpx.RemoteProtocolError)
    assert issubclass(StreamStalled, httpx.TransportError)
    assert issubclass(StreamInterrupted, InterruptedError)
    assert StreamInterrupted("why").reason == "why"


@needs_httpx2
@pytest.mark.parametrize(
    "base",
    [StreamStalled, httpx.ReadTimeout, httpx.RemoteProtocolError]
    + ([httpx2.ReadTimeout, httpx2.RemoteProtocolError, httpx2.TransportError] if httpx2 else []),
)
def test_an_httpx2_stall_is_caught_by_handlers_of_either_library(base: type) -> None:
    """The httpx2 StreamStalled is also hermes' StreamStalled, so httpx and httpx2 handlers catch it."""
    assert issubclass(ht2.StreamStalled, base)
    request = httpx2.Request("POST", "http://127.0.0.1/v1/chat/completions")
    # The class inherits hermes_transport.StreamStalled's signature and `request`
    # attribute, typed with httpx's Request; at run time it carries httpx2's.
    stall = ht2.StreamStalled(
        "stalled",
        request=request,  # type: ignore[arg-type]
        stage="mid_stream",
        budget=1.0,
        elapsed=1.5,
        attempts=1,
    )
    assert isinstance(stall, base)
    assert stall.request is request  # type: ignore[comparison-overlap]
    assert (str(stall), stall.stage, stall.budget, stall.elapsed, stall.attempts) == (
        "stalled",
        "mid_stream",
        1.0,
        1.5,
        1,
    )


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            hermes_transport.StreamPolicy,
            "(*, stale_timeout=DefaultSeconds(180.0), first_event_timeout=StreamPolicy.SAME_AS_STALE,"
            " retries=2, resumes=3, cancel_on_interrupt=True, checkpoint_interval=1.0,"
            " budget_rules=BudgetRules(),"
            " heartbeat_events={'chat_completions': frozenset({'ping'}),"
            " 'responses': frozenset({'keepalive'}), 'messages': frozenset({'ping'}),"
            " 'gemini': frozenset(), 'mcp': frozenset(), 'generic': frozenset({'ping'})})",
        ),
        *[
            (
                transport,
                "(inner=None, *, policy=None, interrupt=None, on_stats=None,"
                " on_checkpoint=None, **http_transport_kwargs)",
            )
            for transport in (
                hermes_transport.WatchdogTransport,
                hermes_transport.AsyncWatchdogTransport,
                *((ht2.WatchdogTransport, ht2.AsyncWatchdogTransport) if ht2 else ()),
            )
        ],
        *[
            (
                factory,
                "(platform, *, api_mode='chat_completions', provider=None, policy=None,"
                f" interrupt=None, on_stats=None, on_checkpoint=None, **{kwargs})",
            )
            for factory, kwargs in (
                (hermes_transport.http_client_for, "httpx_client_kwargs"),
                (hermes_transport.async_http_client_for, "httpx_async_client_kwargs"),
                *(
                    (
                        (ht2.http_client_for, "httpx_client_kwargs"),
                        (ht2.async_http_client_for, "httpx_async_client_kwargs"),
                    )
                    if ht2
                    else ()
                ),
            )
        ],
        *[
            (
                factory,
                "(platform, *, api_mode='chat_completions', provider=None, policy=None,"
                " interrupt=None, flavor=None, on_stats=None, on_checkpoint=None,"
                " **openai_kwargs)",
            )
            for factory in (
                hermes_transport.openai_client_for,
                hermes_transport.async_openai_client_for,
            )
        ],
        (
            hermes_transport.genai_client_for,
            "(context, *, flavor=None, policy=None, interrupt=None, on_stats=None,"
            " **client_kwargs)",
        ),
        *[
            (watch, "(connection, *, policy=None, interrupt=None, on_stats=None)")
            for watch in (hermes_transport.watch_connection, hermes_transport.awatch_connection)
        ],
        (
            hermes_transport.awatch_websocket,
            "(websocket, *, policy=None, interrupt=None, on_stats=None, reopen=None)",
        ),
        (
            hermes_transport.mcp_http_client_for,
            "(context, *, policy=None, interrupt=None, on_stats=None, **client_kwargs)",
        ),
        (
            hermes_transport.stream_content,
            "(client, *, inline=None, interrupt=None, on_chunk=None, **generate_kwargs)",
        ),
        (
            hermes_transport.astream_content,
            "(client, *, interrupt=None, on_chunk=None, **generate_kwargs)",
        ),
        (
            hermes_transport.astream_chat_completion,
            "(client, *, interrupt=None, on_delta=None, **create_kwargs)",
        ),
        (
            hermes_transport.stream_chat_completion,
            "(client, *, inline=None, interrupt=None, on_delta=None, **create_kwargs)",
        ),
        (
            hermes_transport.stream_message,
            "(client, *, inline=None, interrupt=None, on_event=None, **create_kwargs)",
        ),
        (
            hermes_transport.astream_message,
            "(client, *, interrupt=None, on_event=None, **create_kwargs)",
        ),
        (
            hermes_transport.stream_response,
            "(client, *, inline=None, interrupt=None, on_event=None, on_checkpoint=None,"
            " **create_kwargs)",
        ),
        (
            hermes_transport.astream_response,
            "(client, *, interrupt=None, on_event=None, on_checkpoint=None, **create_kwargs)",
        ),
        (
            hermes_transport.resume_response,
            "(client, checkpoint, *, inline=None, interrupt=None, on_event=None)",
        ),
        (
            hermes_transport.aresume_response,
            "(client, checkpoint, *, interrupt=None, on_event=None)",
        ),
        (
            hermes_transport.ResumeCheckpoint,
            "(response_id, sequence_number, model=None, created_at=None)",
        ),
    ],
)
def test_signatures_are_the_documented_ones(obj: object, expected: str) -> None:
    """Constructor signatures match the ones other code depends on."""
    signature = inspect.signature(obj)  # type: ignore[arg-type]
    plain = signature.replace(
        parameters=[
            p.replace(annotation=inspect.Parameter.empty) for p in signature.parameters.values()
        ],
        return_annotation=inspect.Signature.empty,
    )
    assert str(plain) == expected


def test_importing_the_package_does_not_import_the_sdk() -> None:
    """The transport costs no openai, anthropic or httpx2 import: only the factories and runners need an SDK."""
    code = (
        "import sys, hermes_transport;"
        " print(*(name in sys.modules for name in ('openai', 'anthropic', 'httpx2')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False False"


# Run in a fresh interpreter where `import httpx2` fails, as it does where it is not installed.
_WITHOUT_HTTPX2 = """
import sys
sys.modules["httpx2"] = None
import httpx, hermes_transport
from hermes_transport import StreamPolicy, WatchdogTransport, http_client_for
from hermes_transport.testing import FaultServer
with FaultServer() as server, http_client_for("cron", policy=StreamPolicy(stale_timeout=5)) as c:
    body = {"model": "m", "messages": [], "stream": True}
    with c.stream("POST", server.base_url + "/chat/completions", json=body) as r:
        print(type(c).__module__, r.read().count(b"data:"))
try:
    import hermes_transport.httpx2
except ImportError as exc:
    print("ImportError:", exc)
try:
    import openai  # openai 3.x needs httpx2 itself
except ImportError:
    print("no openai")
else:
    try:
        hermes_transport.openai_client_for("cron", api_key="k", flavor="httpx2")
    except ImportError as exc:
        print("ImportError:", exc)
"""


def test_without_httpx2_everything_else_imports_and_works() -> None:
    """Without httpx2 the package streams on httpx, and asking for httpx2 says how to install it."""
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_HTTPX2], capture_output=True, text=True, check=True
    )
    lines = out.stdout.splitlines()
    assert lines[0] == "httpx 4"  # three chunks and [DONE]
    hint = "ImportError: hermes_transport.httpx2 needs the httpx2 package; install it with:"
    assert lines[1].startswith(hint)
    assert "hermes-transport[httpx2]" in lines[1]
    assert lines[2] == ("no openai" if OPENAI_MAJOR >= 3 else lines[1])
