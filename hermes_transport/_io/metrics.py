"""OpenTelemetry metrics from each stream's statistics: an ``on_stats`` callback.

``opentelemetry-api`` is optional (the ``otel`` extra): it is imported when an
``OpenTelemetryMetrics`` is made, never by importing the package.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from .._core.wire_paths import gemini_provider

if TYPE_CHECKING:
    from opentelemetry.metrics import Counter, Histogram, MeterProvider

    from .._core.stats import StreamStats

__all__ = ["OpenTelemetryMetrics"]

# The MCP attributes a metric record carries (see ``OpenTelemetryMetrics``).
_MCP_KEPT = frozenset({"mcp.method.name", "gen_ai.tool.name"})

# hermes_transport.__version__: a layer module may not import the package's face
# (tests/test_layers.py); tests/io/test_otel_metrics.py checks the two agree.
_SCOPE, _SCOPE_VERSION = "hermes_transport", "0.1.0"
_MISSING = (
    "OpenTelemetryMetrics needs the opentelemetry-api package, which is not installed:"
    " pip install 'hermes-transport[otel]'"
)
# Seconds: the GenAI semantic conventions' advisory boundaries (10 ms doubling to
# 81.92 s), doubled on to about 22 minutes, as long as a reasoning model's stream may run.
_SECONDS = tuple(round(0.01 * 2**n, 2) for n in range(18))


class OpenTelemetryMetrics:
    """Records each stream's ``StreamStats`` as OpenTelemetry metrics; pass it as ``on_stats``.

    ::

        transport = WatchdogTransport(on_stats=OpenTelemetryMetrics())

    The meter is ``hermes_transport`` (with the package's version), from
    ``meter_provider`` or, by default, the global provider
    (``opentelemetry.metrics.get_meter``); the instruments are made once, here.
    What the metrics cost is this object's: the package imports no
    opentelemetry and records nothing unless one is made and passed as
    ``on_stats``; with no SDK configured, the API's instruments are no-ops.
    Without ``opentelemetry-api`` installed, making one raises ``ImportError``
    (``pip install 'hermes-transport[otel]'``).

    One call per stream records these, in seconds (unit ``s``) unless said
    otherwise, each from the ``StreamStats`` field named; a histogram is
    skipped when its field is ``None`` (the stream has no such time):

    - histograms, GenAI semantic-convention names:
      ``gen_ai.client.operation.duration`` (``duration``: the request's start
      to the stream's end), ``gen_ai.client.operation.time_to_first_chunk``
      (``first_output``), ``gen_ai.client.operation.time_per_output_chunk``
      (``gap_p50``: see the limits);
    - histograms, our names: ``hermes.stream.time_to_headers`` (``headers``),
      ``hermes.stream.time_to_first_event`` (``first_event``),
      ``hermes.stream.largest_gap`` (``largest_gap``),
      ``hermes.stream.connect_time`` (``connect``), ``hermes.stream.tls_time``
      (``tls``);
    - counters: ``hermes.stream.resends``, ``hermes.stream.resumes``,
      ``hermes.stream.heartbeats``, ``hermes.stream.events`` (progress events),
      ``hermes.stream.bytes`` (unit ``By``) and ``hermes.stream.outcomes`` (1
      per stream).

    Every record has the attributes ``gen_ai.operation.name`` (``"chat"``, on
    the Chat Completions, Responses, Messages and Gemini wires; ``"execute_tool"`` for
    an MCP ``tools/call``), on MCP ``mcp.method.name`` and ``gen_ai.tool.name`` (not
    ``mcp.session.id``: one series per session; ``StreamStats.mcp.attributes`` has it,
    cut, for spans),
    ``gen_ai.provider.name`` (on Gemini: ``gcp.vertex_ai`` for a Vertex AI path,
    else ``gcp.gemini``), ``gen_ai.request.model`` (when the request named one,
    in its body or, on Gemini, its path), ``server.address``,
    ``hermes.stream.wire``, ``hermes.stream.outcome``, ``error.type`` (the
    outcome, when it is not ``"completed"``) and ``hermes.stream.stage`` (when
    the stream stalled or was interrupted at a stage).

    Limits: ``time_per_output_chunk`` is the stream's median gap between
    output chunks, one record per stream (not one per chunk: ``StreamStats``
    keeps a summary of the gaps, not the gaps), and that median is within 12.5 %
    of the true one; a stream with fewer than two output
    chunks has none. Times are those of the attempt the caller got (see
    ``StreamStats``). The response's model and token usage, which the transport does not
    parse, are not recorded. The GenAI semantic conventions are still in
    development; their names may change.
    """

    def __init__(self, meter_provider: MeterProvider | None = None) -> None:
        try:
            from opentelemetry import metrics
        except ImportError as exc:
            raise ImportError(_MISSING, name="opentelemetry") from exc
        meter = metrics.get_meter(_SCOPE, _SCOPE_VERSION, meter_provider=meter_provider)

        def histogram(name: str, description: str) -> Histogram:
            return meter.create_histogram(
                name, "s", description, explicit_bucket_boundaries_advisory=_SECONDS
            )

        def counter(name: str, unit: str, description: str) -> Counter:
            return meter.create_counter(name, unit, description)

        self._duration = histogram(
            "gen_ai.client.operation.duration", "Streaming request, from its start to its end."
        )
        self._first_chunk = histogram(
            "gen_ai.client.operation.time_to_first_chunk",
            "From the request's start to its first output event.",
        )
        self._per_chunk = histogram(
            "gen_ai.client.operation.time_per_output_chunk",
            "The stream's median gap between output chunks (one record per stream).",
        )
        self._headers = histogram(
            "hermes.stream.time_to_headers", "From the request's start to the response headers."
        )
        self._first_event = histogram(
            "hermes.stream.time_to_first_event",
            "From the request's start to its first SSE event (keepalives included).",
        )
        self._largest_gap = histogram(
            "hermes.stream.largest_gap", "The stream's largest gap between output chunks."
        )
        self._connect = histogram(
            "hermes.stream.connect_time", "Opening the stream's new connection."
        )
        self._tls = histogram("hermes.stream.tls_time", "The TLS handshake of that connection.")
        self._resends = counter(
            "hermes.stream.resends",
            "{resend}",
            "Re-sends of requests that stalled before their first event.",
        )
        self._resumes = counter(
            "hermes.stream.resumes", "{resume}", "Resumes of stalled or dropped resumable streams."
        )
        self._heartbeats = counter(
            "hermes.stream.heartbeats", "{event}", "Keepalive events (not progress)."
        )
        self._events = counter("hermes.stream.events", "{event}", "Progress events.")
        self._bytes = counter("hermes.stream.bytes", "By", "Response body bytes, as received.")
        self._outcomes = counter("hermes.stream.outcomes", "{stream}", "Streams, by outcome.")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __call__(self, stats: StreamStats) -> None:
        """Record one stream's statistics."""
        attributes: dict[str, str] = {
            "server.address": stats.server_address,
            "hermes.stream.wire": stats.wire,
            "hermes.stream.outcome": stats.outcome,
        }
        mcp = stats.mcp
        if mcp is not None:  # per session values would make a series per session: not kept
            attributes.update({k: v for k, v in mcp.attributes.items() if k in _MCP_KEPT})
            if mcp.method == "tools/call":
                attributes["gen_ai.operation.name"] = "execute_tool"
        elif stats.wire not in ("generic", "mcp"):  # an LLM wire; any other may not be one
            attributes["gen_ai.operation.name"] = "chat"
        if stats.wire == "gemini":
            attributes["gen_ai.provider.name"] = gemini_provider(urlsplit(stats.url).path)
        if stats.model is not None:
            attributes["gen_ai.request.model"] = stats.model
        if stats.outcome != "completed":
            attributes["error.type"] = stats.outcome
        if stats.stage is not None:
            attributes["hermes.stream.stage"] = stats.stage
        self._duration.record(stats.duration, attributes)
        for histogram, value in (
            (self._first_chunk, stats.first_output),
            (self._per_chunk, stats.gap_p50),
            (self._headers, stats.headers),
            (self._first_event, stats.first_event),
            (self._largest_gap, stats.largest_gap),
            (self._connect, stats.connect),
            (self._tls, stats.tls),
        ):
            if value is not None:
                histogram.record(value, attributes)
        for counter, count in (
            (self._resends, stats.resends),
            (self._resumes, stats.resumes),
            (self._heartbeats, stats.heartbeats),
            (self._events, stats.events),
            (self._bytes, stats.bytes),
            (self._outcomes, 1),
        ):
            if count is not None:  # not known exactly: not added at all
                counter.add(count, attributes)
