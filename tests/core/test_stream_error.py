"""stream_error finds the library's error however a client wrapped it."""

from __future__ import annotations

import sys

import httpx
import pytest

from hermes_transport import StreamInterrupted, StreamStalled, stream_error
from hermes_transport._core.errors import Handoff

pytestmark = pytest.mark.once


def _stalled() -> StreamStalled:
    request = httpx.Request("POST", "https://api.example.com/v1/chat/completions")
    return StreamStalled(
        "stream stalled: no progress event for 1 s",
        request=request,
        stage="mid_stream",
        budget=1.0,
        elapsed=1.0,
        attempts=1,
    )


class SdkTimeout(Exception):
    """Stands in for openai.APITimeoutError."""


class FrameworkError(Exception):
    """Stands in for a framework's own error class."""


def _raised_from(inner: BaseException, outer: BaseException) -> BaseException:
    """``outer`` raised ``from inner``, as it would be caught."""
    try:
        raise outer from inner
    except BaseException as exc:
        return exc


def _raised_during(inner: BaseException, outer: BaseException) -> BaseException:
    """``outer`` raised while handling ``inner``, without ``from`` (only ``__context__``)."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 -- the shape litellm gives
    except BaseException as exc:
        return exc


def test_the_error_itself_is_found() -> None:
    """A bare StreamStalled or StreamInterrupted is its own answer."""
    stalled, interrupted = _stalled(), StreamInterrupted("user pressed stop")
    assert stream_error(stalled) is stalled
    assert stream_error(interrupted) is interrupted


def test_langchain_and_pydantic_ai_shapes_two_causes_deep() -> None:
    """A framework error caused by the SDK's error caused by ours is found."""
    ours = _stalled()
    sdk = _raised_from(ours, SdkTimeout("Request timed out."))
    outer = _raised_from(sdk, FrameworkError("model request failed"))
    assert stream_error(outer) is ours


def test_the_litellm_shape_only_context() -> None:
    """An error raised during the handling of ours, without from, still leads to ours."""
    ours = StreamInterrupted("user pressed stop")
    outer = _raised_during(ours, FrameworkError("MidStreamFallbackError: 503"))
    assert outer.__cause__ is None
    assert stream_error(outer) is ours


def test_the_nearest_one_wins() -> None:
    """With two of ours in the chain, the one nearest the top is returned."""
    deep, near = _stalled(), StreamInterrupted("stop")
    chained = _raised_from(_raised_from(deep, near), FrameworkError("wrapped"))
    assert stream_error(chained) is near


def test_a_handoff_gives_the_error_it_carries() -> None:
    """The runner's internal carrier is looked through."""
    ours = _stalled()
    assert stream_error(Handoff(ours)) is ours


@pytest.mark.skipif(sys.version_info < (3, 11), reason="ExceptionGroup is 3.11+")
def test_an_exception_group_member_is_found() -> None:
    """A task group's ExceptionGroup holding ours (under a wrapper) is searched."""
    ours = StreamInterrupted("stop")
    group = BaseExceptionGroup("tasks", [ValueError("other"), _raised_from(ours, SdkTimeout())])  # noqa: F821
    assert stream_error(_raised_from(group, FrameworkError("run failed"))) is ours


def test_a_cycle_ends_the_search() -> None:
    """A chain that loops back on itself is searched once, and gives None without ours."""
    first, second = FrameworkError("a"), SdkTimeout("b")
    first.__context__, second.__context__ = second, first
    assert stream_error(first) is None


@pytest.mark.parametrize(
    "exc", [None, ValueError("unrelated"), _raised_from(KeyError("k"), FrameworkError("f"))]
)
def test_none_when_ours_is_not_there(exc: BaseException | None) -> None:
    """Errors with no stall or interrupt in their chain give None."""
    assert stream_error(exc) is None
