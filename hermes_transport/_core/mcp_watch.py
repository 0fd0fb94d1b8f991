"""An MCP request's stream: its budget waits while the server waits for the client.

``McpWatch`` is the ``ResumingWatch`` the sync and async streams are. On an MCP
request's stream (tracked: ``meter.scanner.asks``) it passes whole events up as soon as
they come, and when the server asks its client something (an elicitation, a sampling,
the roots: ``mcp.SERVER_REQUESTS``) it ends the hold at once (the client must have the
request to answer it) and suspends the stream's budget until the client's answer has been
sent (``mcp_asks.WaitingAsks``, which the shell of the same transport tells). It also
says what is written in the server's place when the watch ends a request answered in
band (``_in_band``). On any other stream none of this runs. No I/O.

Limits: a compressed MCP stream is not passed up event by event, so its budget is not
suspended for an ask; an ask whose id is not a string or an integer waits for nothing.
"""

from __future__ import annotations

from dataclasses import replace

from .clock import monotonic
from .errors import in_band_answer
from .progress import ProgressMeter
from .resume import WholeEvents
from .resuming import ResumingWatch

__all__ = ["McpWatch"]


class McpWatch(ResumingWatch):
    """A resuming watch that, on MCP, suspends its budget while an ask waits."""

    def _begin(self, meter: ProgressMeter | None) -> None:
        # MCP: the ids of the server's requests the scanner saw (``None``: another wire).
        self._asks = meter.scanner.asks if meter is not None and meter.tracks else None
        if self._asks is not None:
            self._asks_seen = 0
            self._waiting: set[str | int] = set()  # asks whose answer is not sent yet
            if self._whole is None and meter is not None and meter.identity:
                self._whole = WholeEvents()  # an ask is passed up as soon as it is whole

    def _hold(self, chunk: bytes) -> bool:
        """As ``BodyWatch._hold``; and a request of the server's ends the hold: the client
        must have it to answer it."""
        held = super()._hold(chunk)
        asks = self._asks
        if asks is not None and len(asks) != self._asks_seen:
            self._suspend()
            return True
        return held

    def _suspend(self) -> None:
        """While a request of the server's waits for the client's answer, the budget is
        suspended (progress meanwhile does not restart it); ``_answer_sent`` restarts it.
        An ask without a usable id cannot be matched to its answer, and waits for nothing."""
        asks = self._asks
        assert asks is not None
        waiting, exchange = self._waiting, self._exchange
        registry = exchange.asks
        if registry is not None:
            for ask in asks[self._asks_seen :]:
                if ask is not None:
                    waiting.add(ask)
                    registry.wait(exchange.session, ask, self._answer_sent)
        self._asks_seen = len(asks)
        if waiting:
            self._guard.deadline = None  # the watchdog lets go of it
            self._armed = False

    def _answer_sent(self, ask: str | int) -> None:
        """The client's answer to ``ask`` has been sent (on whichever thread sent it): with
        no other ask waiting, the budget restarts, the first event's until the first
        output, then the stale one."""
        waiting, guard = self._waiting, self._guard
        waiting.discard(ask)
        if waiting or self._forgotten or guard.fired is not None:
            return
        budget = self._resume_budget()
        if budget is None:
            return
        guard.deadline = monotonic() + budget
        self._arm(guard)
        meter = self._meter
        self._armed = meter is not None and meter.events > 0  # else the first output arms

    def _report(self) -> None:
        """As ``BodyWatch._report``; an MCP request's statistics get its stream's counts."""
        record, scanner = self._exchange.record, self._scanner
        if record.mcp is not None and self._asks is not None and scanner is not None:
            progress, logs, asks = scanner.progress_notes, scanner.logs, len(self._asks)
            record.mcp = replace(record.mcp, progress=progress, logs=logs, asks=asks)
        super()._report()

    def _drop(self) -> None:
        if self._asks is not None:
            exchange = self._exchange
            registry = exchange.asks
            if registry is not None:
                for ask in self._waiting:
                    registry.forget(exchange.session, ask)
            self._waiting.clear()
        super()._drop()

    def _in_band(self, error: BaseException, cause: BaseException | None) -> bytes | None:
        """What to pass up in the server's place when ``error`` (caused by ``cause``) ends
        an MCP request answered in band (``errors.in_band_answer``), after a blank line
        that ends whatever event was pending; ``None``: raise ``error``."""
        event = in_band_answer(self._exchange.in_band, error)
        if event is None:
            return None
        error.__cause__ = cause  # as raising it from its cause would (``stream_error``)
        return b"\n\n" + event

    def _pass(self, chunk: bytes) -> bytes:
        """As ``ResumingWatch._pass``; and while an ask waits, the budget stays suspended."""
        whole = super()._pass(chunk)
        asks = self._asks
        if whole and asks is not None and (self._waiting or len(asks) != self._asks_seen):
            self._suspend()
        return whole

    def _resumed(self) -> None:
        """As ``ResumingWatch._resumed``; a resume that comes while an ask waits waits too."""
        super()._resumed()
        if self._asks is not None and self._waiting:
            self._guard.deadline = None
