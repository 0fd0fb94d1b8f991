"""The public face: one package namespace, a sorted __all__, the documented signatures."""

from __future__ import annotations

import inspect
import subprocess
import sys

import httpx
import pytest

import hermes_transport
from hermes_transport import StreamInterrupted, StreamStalled


def test_all_is_sorted_and_complete() -> None:
    """__all__ is sorted, names only real attributes, and hides every private module."""
    names = hermes_transport.__all__
    assert names == sorted(names)
    for name in names:
        assert hasattr(hermes_transport, name), name
    public = {n for n in vars(hermes_transport) if not n.startswith("_")}
    assert public - set(names) <= {"annotations", "logging", "testing"}


def test_errors_subclass_what_existing_handlers_catch() -> None:
    """A stall is an httpx read timeout and protocol error; an interrupt is an InterruptedError."""
    assert issubclass(StreamStalled, httpx.ReadTimeout)
    assert issubclass(StreamStalled, httpx.RemoteProtocolError)
    assert issubclass(StreamStalled, httpx.TransportError)
    assert issubclass(StreamInterrupted, InterruptedError)
    assert StreamInterrupted("why").reason == "why"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            hermes_transport.StreamPolicy,
            "(*, stale_timeout=180.0, first_event_timeout=None, retries=2)",
        ),
        (
            hermes_transport.WatchdogTransport,
            "(inner=None, *, policy=None, interrupt=None, **http_transport_kwargs)",
        ),
        (
            hermes_transport.AsyncWatchdogTransport,
            "(inner=None, *, policy=None, interrupt=None, **http_transport_kwargs)",
        ),
        (
            hermes_transport.async_http_client_for,
            "(platform, *, api_mode='chat_completions', provider=None, policy=None,"
            " interrupt=None, **httpx_async_client_kwargs)",
        ),
        (
            hermes_transport.async_openai_client_for,
            "(platform, *, api_mode='chat_completions', provider=None, policy=None,"
            " interrupt=None, **openai_kwargs)",
        ),
        (
            hermes_transport.astream_chat_completion,
            "(client, *, interrupt=None, on_delta=None, **create_kwargs)",
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
    """The transport costs no openai import: only the factories and runner need the SDK."""
    code = "import sys, hermes_transport; print('openai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
