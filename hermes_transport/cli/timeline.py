"""What the probe saw of one response: ``Mark`` (a timeline line) and ``Timeline``.

Owns the observation: the connection and header times (httpcore's trace hook),
the body's progress events, keepalives (comments and heartbeat events) and
gaps, and the live line's text (``waiting``). Progress is not judged here but
by the transport's own ``ProgressMeter``, built as the transport builds it (the
response's ``Content-Encoding``, the policy's ``heartbeat_events``) and fed
the same bytes, so the probe counts exactly the events the watchdog counts:
its "first event" is the watchdog's, and a heartbeat such as ``event: ping``
is a keepalive in both. The probe only splits the body into lines to find the
comments, which the meter does not report.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from .._core.call_budgets import CallBudgets
from .._core.policy import StreamPolicy
from .._core.progress import ProgressMeter
from .._core.sse import SSEScanner
from .console import Console

__all__ = ["COMMENT_SAMPLE", "Mark", "Timeline", "budget_text"]

COMMENT_SAMPLE = 60  # characters shown of the first comment of a run
_BOM = b"\xef\xbb\xbf"
_LINE_ENDS = (b"\n", b"\r")


@dataclass(frozen=True)
class Mark:
    """One line of the timeline: ``at`` seconds after the request started."""

    at: float
    kind: str
    text: str
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {"at": round(self.at, 4), "kind": self.kind, "text": self.text, **self.data}


class _Run:
    """Keepalives of one kind since the last event: shown as one line when it ends."""

    __slots__ = ("count", "first", "last", "sample")

    def __init__(self, at: float, sample: str) -> None:
        self.first = self.last = at
        self.count = 0
        self.sample = sample


class Timeline:
    """What the probe saw, in seconds since the request started.

    Written by the probing thread only; the live line reads a few fields
    without a lock (single attribute reads, so at worst one tick stale).
    ``events`` counts progress events as the transport's ``ProgressMeter``
    does; ``heartbeats`` the data events of a ``heartbeat_events`` type, which
    are keepalives like ``comments``. ``budgets`` are the call's (the
    policy's fitted to the request, ``StreamPolicy.budgets_for``): the live
    line waits against them, and against the policy's own when not given.
    ``event_times`` and ``keepalive_times`` are when each event and keepalive came,
    for the picture (``probe_svg``): 8 bytes each.
    """

    def __init__(
        self,
        gap: float,
        console: Console,
        heartbeat_events: Collection[str],
        budgets: CallBudgets | None = None,
    ) -> None:
        self.started = time.monotonic()
        self.budgets = budgets
        self._gap = gap
        self._console = console
        self.redact = console.redact
        self._heartbeat_events = frozenset(heartbeat_events)
        self.marks: list[Mark] = []
        self.events = 0
        self.comments = 0
        self.heartbeats = 0
        self.done = False
        self.blind = False  # the watchdog cannot decode the body: every chunk is progress
        self.status: int | None = None
        self.connected = False
        self.headers_at: float | None = None
        self.first_event_at: float | None = None
        self.last_event_at: float | None = None
        self.comments_since_event = 0
        self.heartbeats_since_event = 0
        self.largest_gap: dict[str, Any] | None = None
        self.event_times = array("d")
        self.keepalive_times = array("d")
        # The judge of progress (for decoded bytes; ``body`` swaps in the raw
        # bytes' meter when blind), and a scanner that counts every data event:
        # the difference is the heartbeat events.
        self._meter = ProgressMeter(heartbeat_events=self._heartbeat_events)
        self._every = SSEScanner()
        # The start of the line being read (enough for a comment's sample), and
        # the runs of keepalives since the last event.
        self._line = b""
        self._keep = 4 * (COMMENT_SAMPLE + self.redact.margin)  # UTF-8: at most 4 bytes each
        self._first_line = True
        self._runs: dict[str, _Run] = {}

    def now(self) -> float:
        return time.monotonic() - self.started

    def mark(self, kind: str, text: str, at: float | None = None, **data: Any) -> None:
        """Record and show one timeline line (at ``now()`` unless ``at`` is given), masked."""
        redact = self.redact
        data = {name: redact(v) if isinstance(v, str) else v for name, v in data.items()}
        mark = Mark(self.now() if at is None else at, kind, redact(text), data)
        self.marks.append(mark)
        self._console.line(f"{mark.at:9.3f} s  {mark.text}")

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: connection and header times, on the probing thread."""
        if name.endswith("connect_tcp.complete"):
            self.connected = True
            self.mark("connected", "connected (TCP)")
        elif name.endswith("start_tls.complete"):
            self.mark("tls", "TLS handshake done")
        elif name.endswith("send_request_body.complete"):
            self.mark("sent", "request sent")
        elif name.endswith("receive_response_headers.complete"):
            status = info["return_value"][1]
            self.headers(int(status), _content_type(info["return_value"][3]))

    def headers(self, status: int, content_type: str) -> None:
        self.status = status
        self.headers_at = self.now()
        self.mark(
            "headers",
            f"headers: HTTP {status}, {content_type or 'no content-type'}",
            status=status,
            content_type=content_type,
        )

    def body(self, content_encoding: str) -> None:
        """An event stream's body starts; ``blind`` says whether to ``feed`` it raw.

        The transport's meter for this ``Content-Encoding`` decodes the body
        itself; the probe feeds its meter the bytes httpx decoded instead,
        which is the same text, so that it can also read the comments. Only a
        coding the meter cannot decode differs: the watchdog then counts every
        chunk as progress, and so does the probe, fed the raw chunks.
        """
        meter = ProgressMeter(content_encoding, self._heartbeat_events)
        if meter.blind:
            self._meter, self.blind = meter, True
            self.mark(
                "blind",
                f"the watchdog cannot decode content-encoding {content_encoding!r}:"
                " every chunk counts as progress",
                content_encoding=content_encoding,
            )

    def feed(self, chunk: bytes) -> None:
        """Bytes of the body as read: decoded, or raw when ``blind``."""
        if self.blind:
            for _ in range(self._meter.feed(chunk)):
                self._event()
            return
        # Line by line, so that comments and events keep their order within a read.
        for piece in chunk.splitlines(keepends=True):
            progress = self._meter.feed(piece)
            heartbeats = self._every.feed(piece) - progress
            if len(self._line) < self._keep:
                self._line += piece[: self._keep - len(self._line)]
            if piece[-1:] in _LINE_ENDS:
                line, self._line = self._line, b""
                self._line_ended(line.rstrip(b"\r\n"))
            for _ in range(heartbeats):
                self._keepalive("heartbeats", "")
            for _ in range(progress):
                self._event()

    def _line_ended(self, line: bytes) -> None:
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if line[:1] == b":":
            self._keepalive("comments", line.decode("utf-8", "replace"))

    def _keepalive(self, kind: str, text: str) -> None:
        at = self.now()
        self.keepalive_times.append(at)
        if kind == "comments":
            self.comments += 1
            self.comments_since_event += 1
        else:
            self.heartbeats += 1
            self.heartbeats_since_event += 1
        run = self._runs.get(kind)
        if run is None:
            run = self._runs[kind] = _Run(at, self.redact.clip(text, COMMENT_SAMPLE))
        run.last = at
        run.count += 1

    def close_run(self) -> None:
        """Report each run of keepalives as one line: a keepalive every second is one fact."""
        runs, self._runs = self._runs, {}
        for kind, run in sorted(runs.items(), key=lambda item: item[1].first):
            first, last, count = run.first, run.last, run.count
            span = f"at {first:.3f} s" if count == 1 else f"from {first:.3f} s to {last:.3f} s"
            if kind == "comments":
                text = f"{count} comment(s) ({run.sample!r}) {span}"
                self.mark(
                    kind, text, at=first, count=count, until=round(last, 4), sample=run.sample
                )
            else:
                types = " or ".join(sorted(self._heartbeat_events))
                text = f"{count} heartbeat event(s) (event: {types}) {span}"
                self.mark(kind, text, at=first, count=count, until=round(last, 4))

    def _event(self) -> None:
        at = self.now()
        self.close_run()
        self.events += 1
        self.event_times.append(at)
        self.comments_since_event = self.heartbeats_since_event = 0
        if self.first_event_at is None:
            self.first_event_at = at
            self.mark("first_event", "first event", at=at)
        else:
            assert self.last_event_at is not None
            gap = at - self.last_event_at
            self._measure_gap(gap, self.events - 1, at)
            if gap > self._gap:
                self.mark(
                    "gap",
                    f"gap of {gap:.3f} s before event {self.events}",
                    at=at,
                    seconds=round(gap, 4),
                    before_event=self.events,
                )
        if self._meter.done and not self.done:
            self.done = True
            self.mark("done", "[DONE]", at=at)
        self.last_event_at = at

    def _measure_gap(self, gap: float, after_event: int, until: float) -> None:
        if self.largest_gap is None or gap > self.largest_gap["seconds"]:
            self.largest_gap = {
                "seconds": round(gap, 4),
                "after_event": after_event,
                "until": round(until, 4),
            }

    def ended(self, kind: str, text: str, **data: Any) -> float:
        """Mark how the stream ended, after any keepalives still being collected; the time."""
        self.close_run()
        at = self.now()
        self.mark(kind, text, at=at, **data)
        return at

    def finish(self) -> float:
        """Close the open keepalive runs and the silence after the last event; the total."""
        self.close_run()
        total = self.now()
        if self.last_event_at is not None and not self.done:
            # A stall is the largest gap of all: it must count, open as it is.
            self._measure_gap(total - self.last_event_at, self.events, total)
        return total

    def keepalives_note(self) -> str:
        """For a mid-stream stall: the keepalives since the last event, which are not progress."""
        comments, heartbeats = self.comments_since_event, self.heartbeats_since_event
        if not (comments or heartbeats):
            return ""
        if not heartbeats:
            counts, kinds = f"{comments} comment(s)", "comments (keepalives)"
        elif not comments:
            counts, kinds = f"{heartbeats} heartbeat event(s)", "heartbeat events (keepalives)"
        else:
            counts = f"{comments} comment(s) and {heartbeats} heartbeat event(s)"
            kinds = "keepalives"
        return f"; {counts} came meanwhile, and {kinds} are not progress"

    def waiting(self, policy: StreamPolicy) -> str:
        """The live line: how long this wait has lasted, against its budget (the call's)."""
        now = self.now()
        budgets = self.budgets
        if self.last_event_at is None:
            what, since = "first event", 0.0
            budget = policy.first_event_budget if budgets is None else budgets.first_event
        else:
            what, since = f"event {self.events + 1}", self.last_event_at
            budget = policy.stale_budget if budgets is None else budgets.stale
        heartbeats = f", {self.heartbeats} heartbeats" if self.heartbeats else ""
        return (
            f"waiting {now - since:.1f} s for {what} / budget {budget_text(budget)}"
            f" ({self.events} events, {self.comments} comments{heartbeats})"
        )


def _content_type(headers: list[tuple[bytes, bytes]]) -> str:
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.decode("latin-1")
    return ""


def budget_text(seconds: float | None) -> str:
    """A budget as the probe shows it: ``4 s``, or ``off`` for none."""
    return "off" if seconds is None else f"{seconds:g} s"
