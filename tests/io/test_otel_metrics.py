"""OpenTelemetryMetrics: each stream's statistics, recorded as OpenTelemetry metrics.

Read back with the SDK's in-memory reader, from a provider of the test's own (never
the global one), through real transports against the fault server.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
    NumberDataPoint,
)

import hermes_transport
from hermes_transport import OpenTelemetryMetrics, StreamPolicy, StreamStats, mcp_http_client_for
from hermes_transport.testing import MCP_TOOL_NAME, FaultServer, Scenario

from _support import Flavor, chat_body, run_bounded

# No SDK of an LLM: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once

MODEL = "gpt-4o-mini"
# Histogram name -> the StreamStats field it records (skipped when None).
HISTOGRAMS: dict[str, Callable[[StreamStats], float | None]] = {
    "gen_ai.client.operation.duration": lambda s: s.duration,
    "gen_ai.client.operation.time_to_first_chunk": lambda s: s.first_output,
    "gen_ai.client.operation.time_per_output_chunk": lambda s: s.gap_p50,
    "hermes.stream.time_to_headers": lambda s: s.headers,
    "hermes.stream.time_to_first_event": lambda s: s.first_event,
    "hermes.stream.largest_gap": lambda s: s.largest_gap,
    "hermes.stream.connect_time": lambda s: s.connect,
    "hermes.stream.tls_time": lambda s: s.tls,
}
# Counter name -> (unit, what one stream adds).
COUNTERS: dict[str, tuple[str, Callable[[StreamStats], int | None]]] = {
    "hermes.stream.resends": ("{resend}", lambda s: s.resends),
    "hermes.stream.resumes": ("{resume}", lambda s: s.resumes),
    "hermes.stream.heartbeats": ("{event}", lambda s: s.heartbeats),
    "hermes.stream.events": ("{event}", lambda s: s.events),
    "hermes.stream.bytes": ("By", lambda s: s.bytes),
    "hermes.stream.outcomes": ("{stream}", lambda s: 1),
}
# Output events 50 ms apart: each arrives in a read of its own, so the stream has gaps.
SPACED = replace(Scenario.healthy(content=("a", "b", "c", "d")), event_interval=0.05)


class Recorder:
    """An ``on_stats`` that records metrics to its own provider and keeps each StreamStats."""

    def __init__(self) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(metric_readers=[self.reader])
        self.metrics = OpenTelemetryMetrics(meter_provider=self.provider)
        self.seen: list[StreamStats] = []

    def __call__(self, stats: StreamStats) -> None:
        self.seen.append(stats)
        self.metrics(stats)

    def collect(self) -> dict[str, Metric]:
        """Our scope's metrics, by name, as the reader collects them now."""
        data = self.reader.get_metrics_data()
        assert data is not None
        found: dict[str, Metric] = {}
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                assert scope.scope.name == "hermes_transport"
                assert scope.scope.version == hermes_transport.__version__
                found.update((metric.name, metric) for metric in scope.metrics)
        return found


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    made = Recorder()
    yield made
    made.provider.shutdown()


def _point(metric: Metric) -> Any:
    """The metric's only data point (one stream, one set of attributes)."""
    points = list(metric.data.data_points)
    assert len(points) == 1, points
    return points[0]


def _expected_attributes(stats: StreamStats) -> dict[str, str]:
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": MODEL,
        "server.address": "127.0.0.1",
        "hermes.stream.wire": "chat_completions",
        "hermes.stream.outcome": stats.outcome,
    }
    if stats.outcome != "completed":
        expected["error.type"] = stats.outcome
    if stats.stage is not None:
        expected["hermes.stream.stage"] = stats.stage
    return expected


def _assert_recorded(recorder: Recorder) -> StreamStats:
    """The metrics are exactly those of the one StreamStats the callback got."""
    assert len(recorder.seen) == 1
    stats = recorder.seen[0]
    metrics = recorder.collect()
    expected_names = set(COUNTERS) | {
        n for n, field in HISTOGRAMS.items() if field(stats) is not None
    }
    assert set(metrics) == expected_names
    attributes = _expected_attributes(stats)
    for name, field in HISTOGRAMS.items():
        value = field(stats)
        if value is None:
            continue
        point = _point(metrics[name])
        assert isinstance(point, HistogramDataPoint)
        assert metrics[name].unit == "s"
        assert dict(point.attributes or {}) == attributes, name
        assert (point.count, point.sum, point.min, point.max) == (1, value, value, value), name
    for name, (unit, count) in COUNTERS.items():
        point = _point(metrics[name])
        assert isinstance(point, NumberDataPoint)
        assert metrics[name].unit == unit
        assert dict(point.attributes or {}) == attributes, name
        assert point.value == count(stats), name
    return stats


def test_a_healthy_stream_records_its_times_counts_and_attributes(
    flavor: Flavor, server: FaultServer, recorder: Recorder
) -> None:
    """A completed stream records every time it has (first chunk = StreamStats.first_output), its counts, and no error.type."""
    server.scenario = SPACED
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0), on_stats=recorder)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        body = chat_body(model=MODEL)
        with client.stream("POST", server.base_url + "/chat/completions", json=body) as response:
            assert response.read().count(b"data:") > 4
    stats = _assert_recorded(recorder)
    assert stats.outcome == "completed"
    assert stats.first_output is not None
    assert stats.gap_count > 0
    metrics = recorder.collect()
    first = _point(metrics["gen_ai.client.operation.time_to_first_chunk"])
    assert first.sum == stats.first_output
    assert _point(metrics["gen_ai.client.operation.time_per_output_chunk"]).sum == stats.gap_p50
    assert stats.events is not None
    assert _point(metrics["hermes.stream.events"]).value == stats.events >= 4
    assert _point(metrics["hermes.stream.bytes"]).value == stats.bytes > 0
    assert "error.type" not in _point(metrics["hermes.stream.outcomes"]).attributes


def test_a_stall_after_the_first_event_records_the_outcome_as_the_error(
    flavor: Flavor, server: FaultServer, recorder: Recorder
) -> None:
    """A stream cut mid-stream records outcome and error.type "stalled" with its stage, once."""
    server.scenario = replace(Scenario.silent_after(1), hold=5.0)
    policy = StreamPolicy(stale_timeout=0.3, retries=0)
    transport = flavor.WatchdogTransport(policy=policy, on_stats=recorder)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        body = chat_body(model=MODEL)
        with (
            client.stream("POST", server.base_url + "/chat/completions", json=body) as response,
            pytest.raises(flavor.StreamStalled),
        ):
            response.read()
    stats = _assert_recorded(recorder)
    assert (stats.outcome, stats.stage) == ("stalled", "mid_stream")
    attributes = _point(recorder.collect()["hermes.stream.outcomes"]).attributes
    assert attributes["error.type"] == "stalled"
    assert attributes["hermes.stream.stage"] == "mid_stream"
    assert stats.first_output is not None
    assert stats.duration >= 0.3


@pytest.mark.anyio
async def test_the_async_transport_records_the_same_metrics(
    flavor: Flavor, server: FaultServer, recorder: Recorder
) -> None:
    """On an event loop, a completed stream records the same metrics from its StreamStats."""
    server.scenario = SPACED
    policy = StreamPolicy(stale_timeout=5.0)
    transport = flavor.AsyncWatchdogTransport(policy=policy, on_stats=recorder)
    async with flavor.http.AsyncClient(transport=transport, timeout=30.0) as client:
        body = chat_body(model=MODEL)
        async with client.stream(
            "POST", server.base_url + "/chat/completions", json=body
        ) as response:
            await response.aread()
    assert _assert_recorded(recorder).outcome == "completed"


def test_streams_add_up_under_their_attributes(
    flavor: Flavor, server: FaultServer, recorder: Recorder
) -> None:
    """Two completed streams count two outcomes and two durations under the same attributes."""
    server.scenario = Scenario.healthy()
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0), on_stats=recorder)
    with flavor.http.Client(transport=transport, timeout=30.0) as client:
        for _ in range(2):
            body = chat_body(model=MODEL)
            with client.stream("POST", server.base_url + "/chat/completions", json=body) as r:
                r.read()
    metrics = recorder.collect()
    assert _point(metrics["hermes.stream.outcomes"]).value == 2
    duration = _point(metrics["gen_ai.client.operation.duration"])
    assert duration.count == 2
    assert duration.sum == pytest.approx(sum(stats.duration for stats in recorder.seen))


def test_a_request_without_a_model_has_no_model_attribute(
    flavor: Flavor, server: FaultServer, recorder: Recorder
) -> None:
    """A body that names no model records no gen_ai.request.model."""
    server.scenario = Scenario.healthy()
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0), on_stats=recorder)
    body = {k: v for k, v in chat_body().items() if k != "model"}
    with (
        flavor.http.Client(transport=transport, timeout=30.0) as client,
        client.stream("POST", server.base_url + "/chat/completions", json=body) as response,
    ):
        response.read()
    assert recorder.seen[0].model is None
    attributes = _point(recorder.collect()["hermes.stream.outcomes"]).attributes
    assert "gen_ai.request.model" not in attributes
    assert attributes["server.address"] == "127.0.0.1"


def test_a_stream_on_no_llm_wire_is_not_called_a_genai_operation(
    flavor: Flavor, server: FaultServer, recorder: Recorder
) -> None:
    """A generic event stream's records carry no gen_ai.operation.name: it may be no LLM call."""
    server.scenario = Scenario.healthy()
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0), on_stats=recorder)
    with (
        flavor.http.Client(transport=transport, timeout=30.0) as client,
        client.stream("POST", server.base_url + "/events", json=chat_body()) as response,
    ):
        response.read()
    assert recorder.seen[0].wire == "generic"
    attributes = _point(recorder.collect()["hermes.stream.outcomes"]).attributes
    assert "gen_ai.operation.name" not in attributes
    assert attributes["hermes.stream.wire"] == "generic"


def test_importing_the_package_does_not_import_opentelemetry() -> None:
    """`import hermes_transport` (OpenTelemetryMetrics included) leaves opentelemetry unimported."""
    code = (
        "import sys, hermes_transport; hermes_transport.OpenTelemetryMetrics;"
        " print(sorted(n for n in sys.modules if n.split('.')[0] == 'opentelemetry'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_without_opentelemetry_making_one_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where opentelemetry cannot be imported, OpenTelemetryMetrics() raises an ImportError naming the extra."""
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    monkeypatch.setitem(sys.modules, "opentelemetry.metrics", None)
    with pytest.raises(
        ImportError, match=r"opentelemetry-api.*pip install 'hermes-transport\[otel\]'"
    ):
        OpenTelemetryMetrics()


@pytest.mark.parametrize(
    ("path", "provider"),
    [
        ("/v1beta/models/gemini-2.5-pro:streamGenerateContent", "gcp.gemini"),
        (
            "/v1beta1/projects/p/locations/us-central1/publishers/google/models/"
            "gemini-2.5-pro:streamGenerateContent",
            "gcp.vertex_ai",
        ),
    ],
    ids=["gemini-api", "vertex-ai"],
)
def test_a_gemini_stream_records_its_provider_and_the_model_of_its_path(
    flavor: Flavor, server: FaultServer, recorder: Recorder, path: str, provider: str
) -> None:
    """A Gemini stream's records name the gemini wire, its provider (Gemini API or Vertex AI) and the model its path names."""
    server.scenario = Scenario.healthy()
    transport = flavor.WatchdogTransport(policy=StreamPolicy(stale_timeout=5.0), on_stats=recorder)
    url = server.base_url.removesuffix("/v1") + path
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with (
        flavor.http.Client(transport=transport, timeout=30.0) as client,
        client.stream("POST", url, params={"alt": "sse"}, json=body) as response,
    ):
        response.read()
    assert (recorder.seen[0].wire, recorder.seen[0].model) == ("gemini", "gemini-2.5-pro")
    attributes = _point(recorder.collect()["hermes.stream.outcomes"]).attributes
    assert attributes["gen_ai.provider.name"] == provider
    assert attributes["gen_ai.request.model"] == "gemini-2.5-pro"
    assert attributes["gen_ai.operation.name"] == "chat"


def test_an_mcp_request_records_its_method_and_tool_but_never_its_session(
    server: FaultServer, recorder: Recorder
) -> None:
    """An MCP tool call's records name its method, its tool and the execute_tool operation, another request only its method, and none the session (one series per session); its McpStats names the session cut short."""
    server.scenario = Scenario(content=("a", "b"))
    url = server.base_url.removesuffix("/v1") + "/mcp"

    async def main() -> None:
        async with (
            mcp_http_client_for(None, on_stats=recorder) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            await session.call_tool(MCP_TOOL_NAME, {})

    run_bounded(main)
    metric = recorder.collect()["hermes.stream.outcomes"]
    points = [dict(point.attributes or {}) for point in metric.data.data_points]
    by_method = {p.get("mcp.method.name"): p for p in points}
    call = by_method["tools/call"]
    assert call["gen_ai.tool.name"] == MCP_TOOL_NAME
    assert call["gen_ai.operation.name"] == "execute_tool"
    assert "gen_ai.operation.name" not in by_method["tools/list"]
    assert "gen_ai.tool.name" not in by_method["tools/list"]
    assert all("mcp.session.id" not in p for p in points)
    (stats,) = [s for s in recorder.seen if s.mcp is not None and s.mcp.method == "tools/call"]
    assert stats.mcp is not None
    named = stats.mcp.attributes
    assert named["mcp.method.name"] == "tools/call"
    assert named["gen_ai.tool.name"] == MCP_TOOL_NAME
    assert named["jsonrpc.request.id"] == str(stats.mcp.request_id)
    (tool_call,) = [r for r in server.requests if r.attempt == 0]
    session = tool_call.headers["mcp-session-id"]
    assert named["mcp.session.id"] == session[:8] + "…" != session
    assert (stats.mcp.progress, stats.mcp.logs) == (0, 2)  # no progress token: log messages
