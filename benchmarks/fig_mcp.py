"""Figures 2g-2i: interrupt latency of an MCP tool call, through the ``mcp`` SDK.

Figure 2's measure (``fig_interrupt``) for MCP: a ``tools/call`` made with the official
``mcp`` SDK (``streamable_http_client`` and ``ClientSession``) on the client of
``mcp_http_client_for`` (the token given to it as ``interrupt=``), against the fault
server's MCP endpoint, which leaves the call hanging at one of three stages:

* ``headers``: the server has the request and sends nothing, not even a status line;
* ``first_event``: the headers came, the server thinks before its first event;
* ``mid_stream``: after the first event (a progress notification), the server goes silent.

The SDK is async only: the caller is an asyncio loop on the benchmark's main thread, and
each trial's interrupt comes from a thread of its own, which waits until the call is at
the stage (the server has the request, or the progress callback ran; the watch holds a
tool call's headers until its first event, so they cannot be seen from above it, and a
trial whose client had not read them yet counts as not at the stage), lets 2 ms pass, then
takes the clock and calls ``token.interrupt()``; the caller takes the clock in its
``except MCPError`` (the SDK fails that call alone, code -32001; ``stream_error`` finds our
``StreamInterrupted``, whose ``stage`` must be the trial's). One session per stage serves
all its trials, as an agent keeps its session across calls (what is measured is one
call's end, not the session's set-up): the token is reset after each call, the
``notifications/cancelled`` that the interrupt sends is awaited on the server before the
next trial, so that it cannot count as the next call's arrival, and ``tools/list`` must
still work on the session. MCP runs on httpx2 only (the SDK's library), whatever the run's
flavor. Neither baseline has an interrupt: the SDK's own client waits for its read
timeout, and the seed model is openai's.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from hermes_transport import Interrupt, StreamInterrupted, mcp_http_client_for, stream_error
from hermes_transport.testing import MCP_TOOL_NAME, Scenario

from .fig_interrupt import POLICY, SETTLE, TARGET_P99, WARMUP, Outcome, Trials, _cell
from .measure import distribution, fmt_ms, gc_seconds
from .progress import say
from .report import Row
from .server import ServerProcess

if TYPE_CHECKING:
    from mcp import ClientSession

__all__ = ["run"]

#: The stages by the names ``StreamInterrupted.stage`` gives them.
Stage = Literal["headers", "first_event", "mid_stream"]
STAGES: tuple[Stage, ...] = ("headers", "first_event", "mid_stream")
KEYS: dict[Stage, str] = {"headers": "2g", "first_event": "2h", "mid_stream": "2i"}
TITLES: dict[Stage, str] = {
    "headers": "waiting for headers",
    "first_event": "before the first event",
    "mid_stream": "mid-stream",
}
HANGING: dict[Stage, Scenario] = {
    "headers": Scenario(stall_before_headers=True, hold=30.0),
    "first_event": Scenario(think=30.0, content=("a",)),
    "mid_stream": Scenario(content=("a", "b"), stall_after_events=1, hold=30.0),
}
#: What the interrupt sends after the call (POLICY keeps ``cancel_on_interrupt``): one.
CANCELS_PER_TRIAL = 1
CANCEL_WAIT = 5.0
PLAIN = "n/a: no interrupt (the SDK's own httpx2 client waits for its 300 s read timeout)"


@dataclass
class _Firing:
    """What the interrupting thread saw: whether the call was at the stage, the clock
    when it fired, and the garbage-collection seconds until then."""

    ready: bool = False
    started: float = math.nan
    gc_before: float = 0.0


def _interrupter(
    server: ServerProcess,
    stage: Stage,
    requests: int,
    first_event: threading.Event,
    token: Interrupt,
    firing: _Firing,
) -> None:
    if stage == "mid_stream":
        firing.ready = first_event.wait(5.0)
    else:
        firing.ready = server.wait_for_requests(requests + 1)
    time.sleep(SETTLE)
    firing.gc_before = gc_seconds()
    firing.started = time.perf_counter()
    token.interrupt("benchmark")


async def _trial(
    session: ClientSession,
    server: ServerProcess,
    stage: Stage,
    token: Interrupt,
) -> tuple[Outcome, bool]:
    """One call interrupted at ``stage``: its outcome, and whether the server then heard
    the call's cancel."""
    from mcp import MCPError

    server.set_scenario(HANGING[stage])
    requests = server.request_count()
    first_event = threading.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        first_event.set()

    firing = _Firing()
    thread = threading.Thread(
        target=_interrupter,
        args=(server, stage, requests, first_event, token, firing),
        name="bench-interrupter",
        daemon=True,
    )
    thread.start()
    error: BaseException | None = None
    try:
        await session.call_tool(MCP_TOOL_NAME, {}, progress_callback=on_progress)
    except MCPError as exc:  # the outcome under measurement
        ended = time.perf_counter()
        error = stream_error(exc) or exc
    else:
        ended = time.perf_counter()
    gc_at_end = gc_seconds()
    await asyncio.to_thread(thread.join, 10.0)
    token.reset()
    at_stage = firing.ready and isinstance(error, StreamInterrupted) and error.stage == stage
    expected = requests + 1 + CANCELS_PER_TRIAL
    cancelled = await asyncio.to_thread(server.wait_for_requests, expected, CANCEL_WAIT)
    await session.list_tools()  # the session goes on
    outcome = Outcome(ended - firing.started, error, at_stage, gc_at_end - firing.gc_before)
    return outcome, cancelled


async def _stage_trials(server: ServerProcess, stage: Stage, n: int) -> tuple[Trials, int]:
    """``n`` timed trials (after ``WARMUP`` untimed) on one session; and the count of them
    whose cancel reached the server."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    token = Interrupt()
    url = server.url().removesuffix("/v1") + "/mcp"
    http = mcp_http_client_for(None, policy=POLICY, interrupt=token)
    trials, cancels = Trials(StreamInterrupted), 0
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        await session.list_tools()
        for number in range(WARMUP + n):
            outcome, cancelled = await _trial(session, server, stage, token)
            if number >= WARMUP:
                trials.outcomes.append(outcome)
                cancels += cancelled
    return trials, cancels


def _row(stage: Stage, trials: Trials, cancels: int) -> Row:
    d = distribution(trials.latencies())
    n = len(trials.outcomes)
    passed = d["n"] == n and d["p99"] < TARGET_P99 and trials.at_stage() == n
    notes = [
        f"watchdog: {trials.at_stage()}/{n} trials reached the stage and were interrupted"
        f" there (StreamInterrupted.stage {stage!r})",
        f"watchdog: the server heard the call's notifications/cancelled after {cancels}/{n}"
        " trials; the session answered tools/list after each",
    ]
    if collected := trials.collected():
        notes.append(
            f"watchdog: {len(collected)} trial(s) had a garbage collection inside the measured"
            f" time (at most {fmt_ms(max(collected))} ms)"
        )
    return Row(
        key=KEYS[stage],
        figure=(
            f"interrupt through the mcp SDK (tools/call, httpx2), {TITLES[stage]}:"
            " interrupt() to MCPError, p50 / p99 / max"
        ),
        cells={"watchdog": _cell(trials), "plain": PLAIN, "seed": "n/a: the seed is openai's"},
        target=f"p99 < {TARGET_P99 * 1e3:g} ms",
        verdict="PASS" if passed else "MISS",
        data={
            "watchdog": {
                **d,
                "samples_s": trials.latencies(),
                "failures": trials.failures(),
                "at_stage": trials.at_stage(),
                "cancels_heard": cancels,
                "gc_s": collected,
            }
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Every stage, watchdog only, one session each; one row per stage."""
    n = 30 if quick else 200
    rows = []
    with ServerProcess(Scenario.healthy()) as server:
        for stage in STAGES:
            trials, cancels = asyncio.run(_stage_trials(server, stage, n))
            say(f"mcp interrupt {stage}: done")
            rows.append(_row(stage, trials, cancels))
    return rows
