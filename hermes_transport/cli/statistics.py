"""The probe's statistics: the transport's ``StreamStats``, as text lines and as JSON.

The probe (``probe``) asks for them through ``on_stats``, the callback an
application uses, so that its numbers and the application's mean the same.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from .._core.stats import StreamStats
from .redact import Redactor

__all__ = ["statistics_lines", "stats_json"]


def stats_json(stats: StreamStats | None) -> dict[str, Any] | None:
    """Every ``StreamStats`` field, ``budgets`` nested; times rounded as the report's are."""
    if stats is None:
        return None
    fields = asdict(stats)
    for name, value in fields.items():
        if isinstance(value, float):
            fields[name] = round(value, 4)
    return fields


def statistics_lines(stats: StreamStats | None, redact: Redactor, error_limit: int) -> list[str]:
    """The statistics block: the transport's ``StreamStats``, field by field; ``-`` for none."""
    if stats is None:
        return ["statistics: none reported by the transport"]

    def text(value: object) -> str:
        return "-" if value is None else str(value)

    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f} s"

    error = "-" if stats.error is None else redact.clip(redact(stats.error), error_limit)
    if stats.events is None:
        counts = f"  counts: events not counted one by one, {stats.bytes} byte(s)"
    else:
        counts = (
            f"  counts: {stats.events} event(s), {stats.heartbeats} heartbeat(s),"
            f" {stats.comment_bytes} comment byte(s), {stats.bytes} byte(s)"
        )
    return [
        "statistics (the transport's StreamStats, as on_stats reports them):",
        f"  call: {stats.wire}, model {text(stats.model)}, {stats.method} {stats.url},"
        f" server {stats.server_address}",
        f"  outcome: {stats.outcome}, stage {text(stats.stage)}, status {text(stats.status)},"
        f" error {error}",
        f"  attempts: {stats.attempts}, resends {stats.resends}, resumes {stats.resumes}",
        f"  times: connect {seconds(stats.connect)}, TLS {seconds(stats.tls)},"
        f" headers {seconds(stats.headers)}, first event {seconds(stats.first_event)},"
        f" first output {seconds(stats.first_output)}, duration {seconds(stats.duration)}",
        counts,
        f"  gaps: {stats.gap_count}, largest {seconds(stats.largest_gap)},"
        f" p50 {seconds(stats.gap_p50)}, p90 {seconds(stats.gap_p90)},"
        f" p99 {seconds(stats.gap_p99)}",
        f"  budgets: {stats.budgets}",
    ]
