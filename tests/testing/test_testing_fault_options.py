"""The fault server's options for resume tests: a late cancel, a clean early end, numbered keepalives, Retry-After."""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import replace
from typing import Any

import httpx
import pytest

from hermes_transport.testing import RESPONSES_PATH, FaultServer, Scenario

BODY: dict[str, Any] = {"model": "m", "input": "hi", "stream": True, "background": True}
ID = "resp_hermes0"

pytestmark = pytest.mark.once  # no SDK: the same under every openai major


def _events(text: str) -> list[tuple[str, int]]:
    """``(type, sequence_number)`` of each event of a Responses body."""
    payloads = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    return [(p["type"], p["sequence_number"]) for p in payloads]


# --- cancel_delay ----------------------------------------------------------------------------


def test_a_late_cancel_takes_effect_at_once_and_is_answered_after_its_delay() -> None:
    """With cancel_delay, a cancel marks the response cancelled as it arrives (a retrieve meanwhile says so) and its own answer comes that many seconds later."""
    with FaultServer(cancel_delay=0.6) as server, httpx.Client(timeout=10.0) as client:
        client.post(server.base_url + "/responses", json=BODY).read()
        answered: list[float] = []

        def cancel() -> None:
            client.post(f"{server.base_url}/responses/{ID}/cancel")
            answered.append(time.monotonic())

        thread = threading.Thread(target=cancel)
        started = time.monotonic()
        thread.start()
        assert server.wait_for_requests(2)
        assert client.get(f"{server.base_url}/responses/{ID}").json()["status"] == "cancelled"
        assert answered == []
        thread.join(10.0)
    assert answered[0] - started >= 0.6 * 0.95
    assert server.cancel_delay == 0.6


def test_a_cancel_delayed_for_ever_is_never_answered() -> None:
    """cancel_delay=math.inf reads the cancel and answers nothing until the server stops."""
    with FaultServer(cancel_delay=math.inf) as server, httpx.Client(timeout=10.0) as client:
        client.post(server.base_url + "/responses", json=BODY).read()
        with pytest.raises(httpx.ReadTimeout):
            client.post(f"{server.base_url}/responses/{ID}/cancel", timeout=0.3)
        assert [r.path for r in server.requests][-1] == f"{RESPONSES_PATH}/{ID}/cancel"


@pytest.mark.parametrize("delay", [-1.0, math.nan, "1", None, True])
def test_cancel_delay_must_be_a_number_of_at_least_zero(delay: Any) -> None:
    """FaultServer(cancel_delay=...) refuses anything but a number >= 0, naming the argument."""
    with pytest.raises(ValueError, match="cancel_delay"):
        FaultServer(cancel_delay=delay)


# --- end_after_events ------------------------------------------------------------------------


@pytest.mark.parametrize("events", [0, 3, 7])
def test_end_after_events_ends_the_body_cleanly_there(events: int) -> None:
    """Scenario(end_after_events=N) sends N events and ends the body with its terminating chunk: a client reads it without error, without response.completed."""
    with FaultServer(Scenario(end_after_events=events)) as server:
        answer = httpx.post(server.base_url + "/responses", json=BODY, timeout=10.0)
    seen = _events(answer.text)
    assert answer.status_code == 200
    assert [number for _, number in seen] == list(range(events))
    assert ("response.completed", 10) not in seen


def test_end_after_events_is_a_fault_of_its_own() -> None:
    """end_after_events cannot be combined with another fault, and must not be negative."""
    with pytest.raises(ValueError, match="end_after_events cannot be combined"):
        Scenario(stall_after_events=1, end_after_events=2)
    with pytest.raises(ValueError, match="end_after_events must be >= 0"):
        Scenario(end_after_events=-1)


# --- keepalive_numbers -----------------------------------------------------------------------


def test_numbered_keepalives_take_the_free_numbers_and_then_repeat() -> None:
    """With keepalive_numbers=2, a background stream's first two keepalives while it thinks take 5 and 6, later ones repeat 6, and the first output is numbered 7: the kept events skip the free numbers."""
    thinking = replace(Scenario.thinking(0.45, keepalive_interval=0.1), keepalive_numbers=2)
    with FaultServer(thinking) as server:
        answer = httpx.post(server.base_url + "/responses", json=BODY, timeout=10.0)
    seen = _events(answer.text)
    keepalives = [number for kind, number in seen if kind == "keepalive"]
    assert len(keepalives) >= 3
    assert keepalives[:2] == [5, 6]
    assert set(keepalives[2:]) == {6}
    others = [number for kind, number in seen if kind != "keepalive"]
    assert others == [0, 1, 2, 3, 4, *range(7, 13)]


@pytest.mark.parametrize("stream", [True, False])
def test_a_resume_after_a_numbered_keepalive_streams_from_the_first_output(stream: bool) -> None:
    """A resume after a number a keepalive took delivers the kept events after it: the first output on (streamed or not, the kept numbering is the same)."""
    scenario = Scenario(keepalive_numbers=20)
    with FaultServer(scenario) as server, httpx.Client(timeout=10.0) as client:
        client.post(server.base_url + "/responses", json={**BODY, "stream": stream}).read()
        url = f"{server.base_url}/responses/{ID}?stream=true&starting_after=12"
        resumed = _events(client.get(url).text)
    assert [number for _, number in resumed] == list(range(25, 31))
    assert resumed[0][0] == "response.output_text.delta"


# --- retry_after -----------------------------------------------------------------------------


def test_an_error_answer_carries_retry_after_when_set() -> None:
    """Scenario.error(429) with retry_after sends Retry-After in seconds; without it, none."""
    with FaultServer(replace(Scenario.error(429), retry_after=2.5)) as server:
        answer = httpx.post(server.base_url + "/responses", json=BODY, timeout=10.0)
        assert (answer.status_code, answer.headers["retry-after"]) == (429, "2.5")
        server.scenario = Scenario.error(429)
        answer = httpx.post(server.base_url + "/responses", json=BODY, timeout=10.0)
        assert "retry-after" not in answer.headers


def test_retry_after_must_not_be_negative() -> None:
    """A negative retry_after is refused, naming the field."""
    with pytest.raises(ValueError, match="retry_after must be >= 0"):
        Scenario(status=429, retry_after=-1.0)
