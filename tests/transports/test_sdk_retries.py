"""How a stall whose re-sends are spent ends, by who sent it, and an interrupt between retries.

openai 2.x and 3.x retry a ``StreamStalled`` raised before the response (an httpx
``ReadTimeout``) after their back-off sleeps, each retry failing at once, offline; for a
request their ``User-Agent`` names, the transport raises the ``openai.APITimeoutError``
they would end with, which they let through at once. Every other sender gets the stall
itself. An SDK retry (``x-stainless-retry-count`` above zero) of a spent call raises the
interrupt that fired during the back-off, not the earlier stall. Plain clients of each
flavor, the headers set by hand as the SDKs set them.
"""

from __future__ import annotations

import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor, chat_body

POLICY = StreamPolicy(stale_timeout=0.2, retries=0)


@pytest.mark.once  # the SDK is only named in the headers: the same under every major
@pytest.mark.parametrize(
    ("user_agent", "sdk_error"),
    [
        ("OpenAI/Python 2.54.0", True),
        ("AsyncOpenAI/Python 3.57.0", True),
        ("AzureOpenAI/Python 3.1.0", True),
        ("OpenAI/Python 1.109.1", False),  # 1.x retries every exception: the stall as it is
        ("Anthropic/Python 2.15.0", False),  # anthropic retries its own APITimeoutError
        ("python-httpx/0.28.1", False),
    ],
)
def test_a_spent_stall_ends_as_the_sdk_that_sent_it_would_end_it(
    flavor: Flavor, server: FaultServer, user_agent: str, sdk_error: bool
) -> None:
    """openai 2.x and 3.x get their own APITimeoutError caused by the stall; every other sender the stall."""
    server.scenario = Scenario.silent_before_headers()
    transport = flavor.WatchdogTransport(policy=POLICY)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        with pytest.raises(Exception) as info:  # noqa: PT011  (which one is the test)
            client.post(
                server.base_url + "/chat/completions",
                json=chat_body(),
                headers={"user-agent": user_agent},
            )
    if sdk_error:
        assert type(info.value) is openai.APITimeoutError
        stall = info.value.__cause__
    else:
        stall = info.value
    assert isinstance(stall, flavor.StreamStalled)
    assert (stall.stage, stall.attempts) == ("first_event", 1)
    assert isinstance(stall.__cause__, flavor.http.HTTPError)  # the attempt killed under it
    assert len(server.requests) == 1


@pytest.mark.once
def test_an_interrupt_during_the_sdks_back_off_ends_its_retry(
    flavor: Flavor, server: FaultServer
) -> None:
    """An SDK retry of a spent call raises the interrupt fired while the SDK slept, offline, not the earlier stall."""
    server.scenario = Scenario.silent_before_headers()
    stop = Interrupt()
    headers = {"user-agent": "OpenAI/Python 1.109.1"}  # a major that retries a stall
    transport = flavor.WatchdogTransport(policy=POLICY)
    url = server.base_url + "/chat/completions"
    with flavor.http.Client(transport=transport, timeout=30.0) as client, stop.bind():
        with pytest.raises(StreamStalled):
            client.post(url, json=chat_body(), headers={**headers, "x-stainless-retry-count": "0"})
        stop.interrupt("user pressed stop")  # as if during the back-off before the retry
        with pytest.raises(StreamInterrupted) as info:
            client.post(url, json=chat_body(), headers={**headers, "x-stainless-retry-count": "1"})
    assert (info.value.reason, info.value.stage) == ("user pressed stop", "before_sending")
    assert len(server.requests) == 1  # the retry never went out


@pytest.mark.once
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("user_agent", "sdk_error"),
    [("AsyncOpenAI/Python 3.57.0", True), ("AsyncOpenAI/Python 1.109.1", False)],
)
async def test_on_an_event_loop_a_spent_stall_ends_as_the_sdk_would_end_it(
    flavor: Flavor, server: FaultServer, user_agent: str, sdk_error: bool
) -> None:
    """The async transport ends a spent stall as the sync one: openai 2.x and 3.x get their own APITimeoutError, 1.x the stall."""
    server.scenario = Scenario.silent_before_headers()
    transport = flavor.AsyncWatchdogTransport(policy=POLICY)
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        with pytest.raises(Exception) as info:  # noqa: PT011  (which one is the test)
            await client.post(
                server.base_url + "/chat/completions",
                json=chat_body(),
                headers={"user-agent": user_agent},
            )
    stall = info.value.__cause__ if sdk_error else info.value
    assert (type(info.value) is openai.APITimeoutError) == sdk_error
    assert isinstance(stall, flavor.StreamStalled)
    assert (stall.stage, stall.attempts) == ("first_event", 1)
    assert len(server.requests) == 1
