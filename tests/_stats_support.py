"""What the statistics tests share: the fault server's record, read and checked against.

The sync (``tests/transports/test_stats.py``) and async (``test_stats_async.py``) tests
check ``StreamStats`` against the same record the same way.
"""

from __future__ import annotations

import time
import zlib

from hermes_transport import StreamInterrupted, StreamPolicy, StreamStalled, StreamStats
from hermes_transport.testing import FaultServer, Scenario, SentResponse

CHAT = "/chat/completions"
# Upper bounds only, this far past what the server's record allows (2 busy cores).
SLACK = 1.0
POLICY = StreamPolicy(stale_timeout=1.0)
THINKING = StreamPolicy(stale_timeout=1.0, first_event_timeout=2.0)  # past the thinking

REASON = "user pressed stop"
# How a stream that reached its caller ends: (scenario, stale budget, what the read raises,
# outcome, stage, error, status, events).
SILENT = Scenario.silent_after(1)
ENDINGS: dict[str, tuple[Scenario, float, type[Exception] | None, tuple[object, ...]]] = {
    "stalled": (SILENT, 0.3, StreamStalled, ("stalled", "mid_stream", None, 200, 1)),
    "interrupted": (
        SILENT,
        10.0,
        StreamInterrupted,
        ("interrupted", "mid_stream", REASON, 200, 1),
    ),
    "error-status": (Scenario.error(500), 1.0, None, ("error", None, "HTTP 500", 500, 0)),
    "closed-early": (Scenario(event_interval=0.5), 1.0, None, ("closed", None, None, 200, 1)),
}


def ended(server: FaultServer) -> SentResponse:
    """The latest request's record, once the server is done with it."""
    deadline = time.monotonic() + 5.0
    while (sent := server.sent[-1]).ended_at is None and time.monotonic() < deadline:
        time.sleep(0.005)
    return sent


def fields(stats: StreamStats, names: str) -> tuple[object, ...]:
    """The values of the fields ``names`` (space-separated) of ``stats``."""
    return tuple(getattr(stats, name) for name in names.split())


def known(*values: float | None) -> list[float]:
    """``values``, each asserted not None."""
    assert None not in values
    return [value for value in values if value is not None]


def body_of(sent: SentResponse, gzip: bool = False) -> bytes:
    """The body the server wrote, decompressed if it was gzipped."""
    data = b"".join(data for _, data in sent.writes)
    return zlib.decompress(data, wbits=31) if gzip else data


def data_events(body: bytes) -> int:
    """How many data lines ``body`` has (each event here has one)."""
    return sum(line.startswith(b"data:") for line in body.splitlines())


def assert_timed_by(stats: StreamStats, sent: SentResponse, before: float, after: float) -> None:
    """Ordered; never before the server sent each part (the request started no later than the
    server read it); and at most SLACK later than the server's record allows."""
    arrived = sent.request.time
    first_data = next(at for at, data in sent.writes if not data.startswith(b":"))
    (headers_at,) = known(sent.headers_at)
    headers, first_event, first_output = known(
        stats.headers, stats.first_event, stats.first_output
    )
    assert 0 <= headers <= first_event <= first_output <= stats.duration
    assert headers_at - arrived <= headers <= headers_at - before + SLACK
    assert first_data - arrived <= first_output <= first_data - before + SLACK
    assert sent.writes[-1][0] - arrived <= stats.duration <= after - before
