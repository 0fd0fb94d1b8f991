"""Stream statistics through the SDK: the factories' on_stats, one report per call."""

from __future__ import annotations

import threading

import anyio
import pytest

from hermes_transport import (
    StreamPolicy,
    StreamStalled,
    StreamStats,
    astream_response,
    async_openai_client_for,
    openai_client_for,
    stream_chat_completion,
    stream_response,
)
from hermes_transport.testing import FaultServer, Scenario

from _support import Flavor

MESSAGES = [{"role": "user", "content": "hi"}]


def test_a_factory_client_reports_one_completed_stream_per_call(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """openai_client_for(on_stats=...) reports each streamed call once, completed, on the caller's thread."""
    seen: list[tuple[StreamStats, int]] = []
    client = openai_client_for(
        "cron",
        base_url=server.base_url,
        api_key="x",
        flavor=sdk_flavor.name,
        on_stats=lambda stats: seen.append((stats, threading.get_ident())),
    )
    with client:
        completion = stream_chat_completion(client, model="o3", messages=MESSAGES)
        stream_response(client, model="gpt-4o", input="hi")
    assert completion.choices[0].message.content == "hello world"
    assert [(stats.wire, stats.outcome) for stats, _ in seen] == [
        ("chat_completions", "completed"),
        ("responses", "completed"),
    ]
    chat, thread = seen[0]
    assert thread == threading.get_ident()
    assert (chat.model, chat.status, chat.attempts) == ("o3", 200, 1)
    assert chat.events is not None
    assert chat.events >= 3
    assert (chat.budgets.first_event, chat.budgets.stale) == (600.0, 300.0)
    assert chat.url == server.base_url + "/chat/completions"  # no query: it may hold a key


def test_a_stall_the_sdk_sees_is_reported_as_a_stall(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """A call whose every attempt stalled before its first event reports one stalled stream."""
    server.scenario = Scenario.stall_first(5)
    seen: list[StreamStats] = []
    policy = StreamPolicy(stale_timeout=0.3, retries=1)
    client = openai_client_for(
        "cron",
        base_url=server.base_url,
        api_key="x",
        flavor=sdk_flavor.name,
        policy=policy,
        on_stats=seen.append,
    )
    with client, pytest.raises(StreamStalled):
        stream_chat_completion(client, model="m", messages=MESSAGES)
    assert [(s.outcome, s.attempts, s.resends) for s in seen] == [("stalled", 2, 1)]


def test_async_factory_clients_report_too(server: FaultServer, sdk_flavor: Flavor) -> None:
    """async_openai_client_for(on_stats=...) reports a streamed response once, completed."""
    seen: list[StreamStats] = []

    async def main() -> None:
        client = async_openai_client_for(
            "cron",
            base_url=server.base_url,
            api_key="x",
            flavor=sdk_flavor.name,
            on_stats=seen.append,
        )
        async with client:
            await astream_response(client, model="gpt-4o", input="hi")

    anyio.run(main)
    assert [(s.wire, s.outcome) for s in seen] == [("responses", "completed")]


def test_on_stats_with_a_given_http_client_is_refused(
    server: FaultServer, sdk_flavor: Flavor
) -> None:
    """on_stats configures a transport the factory builds: with an http_client it is a TypeError."""
    with sdk_flavor.http_client_for("cron") as http_client:
        with pytest.raises(TypeError, match="on_stats together with an http_client"):
            openai_client_for("cron", api_key="x", http_client=http_client, on_stats=print)


@pytest.mark.parametrize("on_stats", [7, "log", object()])
def test_a_callback_that_is_not_callable_names_itself(
    sdk_flavor: Flavor, on_stats: object
) -> None:
    """on_stats must be callable or None; anything else is a TypeError naming it."""
    with pytest.raises(TypeError, match="on_stats must be a callable taking a StreamStats"):
        sdk_flavor.WatchdogTransport(on_stats=on_stats)
