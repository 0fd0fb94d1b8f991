"""Figures 2j-2m and 9a-9b: Responses over a WebSocket, through openai's ``responses.connect()``.

What ``client.responses.connect()`` returns (``OpenAI``, sync; ``AsyncOpenAI``, async),
against the fault server's WebSocket endpoint (``FaultServer.websocket_base_url``, one text
frame per event), watched by ``watch_connection`` / ``awatch_connection``:

* **2j-2m, interrupt latency**: figure 2's measure (``fig_interrupt``, ``fig_mcp``) for a
  watched connection, at two stages of a turn: ``first_event`` (the server sends the
  turn's lifecycle events, then thinks: ``Scenario.thinking(30)``) and ``mid_stream``
  (after the first output delta, silence: ``Scenario.silent_after(6)``). The caller sends
  ``response.create`` and iterates the connection (``for event in conn`` / ``async for``);
  a thread of the trial's own waits until the turn is at the stage (the server has the
  create, or the caller has seen the first ``response.output_text.delta``), lets 2 ms
  pass (the caller is then blocked in ``recv``), takes the clock and calls
  ``token.interrupt()``; the caller takes the clock in its ``except StreamInterrupted``,
  whose ``stage`` must be the trial's. One watched connection per stage and mode serves
  all its trials, as an agent keeps its connection: an interrupt cuts the connection, the
  next trial's ``response.create`` opens a fresh one through the manager
  ``responses.connect()`` returned (untimed), and the token is reset after each trial.
  Each turn's statistics (``on_stats``) must say ``interrupted`` at the stage. The async
  caller is an asyncio loop on the benchmark's main thread; the interrupt comes from the
  other thread, as /stop would.
* **9a-9b, cost per event**: one long healthy turn (20,000 output deltas, one frame each;
  2,000 with ``--quick``) read with ``conn.recv()`` (the SDK parses each frame into its
  event model) to ``response.completed``, the plain SDK connection against the watched
  one, the same server. One connection per client serves all its turns. A sample is one turn: its
  ``response.create`` and first event untimed (after a ``gc.collect()``), then the rest
  timed, the process's CPU time (``time.process_time()``: the sync client's
  ``websockets`` reader thread included) and wall clock. The clients alternate turn by
  turn, the first turning each round (``measure.alternating``); the figure is the ratio
  of the medians of CPU time, with each client's CPU time an event (median and min) and
  what the watch adds an event. The server, in Python, sends about 60,000 frames a
  second here, four times what either client parses, so no timed read waits for it (the
  notes give each client's events a second, wall clock). Target: figure 1b's (the watch
  under an SDK), on CPU time.

The fault server runs in a child process (``ServerProcess``), its WebSocket endpoint
started there too. The WebSocket wire uses no HTTP library: these figures are the same
under either ``--flavor``. Neither baseline has an interrupt: the SDK's connection waits in
``recv`` until the server speaks or closes, and the seed model is HTTP's.
"""

from __future__ import annotations

import asyncio
import gc
import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

import openai

from hermes_transport import (
    Interrupt,
    StreamInterrupted,
    StreamPolicy,
    StreamStats,
    awatch_connection,
    watch_connection,
)
from hermes_transport.testing import FaultServer, Scenario

from .fig_interrupt import POLICY, TARGET_P99, WARMUP, Outcome, Trials, _cell
from .fig_mcp import _Firing, _interrupter
from .fig_throughput import TARGETS
from .measure import alternating, distribution, fmt_ms, fmt_s, gc_seconds
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess, _answer

__all__ = ["run"]

Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")
#: The stages by the names ``StreamInterrupted.stage`` gives them.
Stage = Literal["first_event", "mid_stream"]
STAGES: tuple[Stage, ...] = ("first_event", "mid_stream")
KEYS: dict[tuple[Mode, Stage], str] = {
    ("sync", "first_event"): "2j",
    ("sync", "mid_stream"): "2k",
    ("async", "first_event"): "2l",
    ("async", "mid_stream"): "2m",
}
TITLES: dict[Stage, str] = {
    "first_event": "before the first output (server thinking)",
    "mid_stream": "mid-stream (silent after the first output)",
}
HANGING: dict[Stage, Scenario] = {
    "first_event": Scenario.thinking(30.0),
    "mid_stream": Scenario.silent_after(6),  # events 0-4 lifecycle, 5 the first delta
}
COST_KEYS: dict[Mode, str] = {"sync": "9a", "async": "9b"}
Client = Literal["plain", "watchdog"]
CLIENTS: tuple[Client, Client] = ("plain", "watchdog")
#: The cost figure's budget: the library's default, as in figures 1 and 7.
COST_POLICY = StreamPolicy(stale_timeout=180.0)
#: Figure 1b's target, the watch under an SDK: watchdog/plain CPU.
TARGET = TARGETS["openai"]
MODEL = "bench"
FIRST_OUTPUT = "response.output_text.delta"
LAST = "response.completed"
#: The SDK connects through a proxy from the environment unless told not to.
OPTIONS: dict[str, Any] = {"proxy": None}
PLAIN = "n/a: no interrupt (the SDK's connection waits in recv until the server speaks or closes)"
SEED = "n/a: the seed model is HTTP's"
#: Turns the server answers before the measured ones (their ids then all have two digits,
#: as in figures 1 and 7), each of ``WARMUP_EVENTS`` deltas.
SETTLE_REQUESTS = 10
WARMUP_EVENTS = 2_000


@dataclass(frozen=True)
class Sizes:
    trials: int
    events: int
    rounds: int


#: About 15 s of interrupts and 15 s of turns each mode here.
FULL = Sizes(trials=200, events=20_000, rounds=9)
QUICK = Sizes(trials=30, events=2_000, rounds=2)


# -- the server, with its WebSocket endpoint ------------------------------------------


class _Servers(ServerProcess):
    """A ``ServerProcess`` of one FaultServer whose child also starts its WebSocket
    endpoint: ``websocket_url()`` is the server's ``websocket_base_url``."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child_conn, scenario), name="bench-fault-server"
        )
        self._websocket_url = ""

    def __enter__(self) -> _Servers:
        self._process.start()
        base_url, self._websocket_url = self._conn.recv()
        self._urls = [base_url]
        return self

    def websocket_url(self) -> str:
        """The server's ``websocket_base_url``."""
        return self._websocket_url


def _serve(conn: Connection, scenario: Scenario) -> None:
    """The child: ``server._serve`` for one server, its WebSocket endpoint started."""
    server = FaultServer(scenario).start()
    try:
        conn.send((server.base_url, server.websocket_base_url))
        while True:
            try:
                command, _index, argument = conn.recv()
            except EOFError:  # the parent died
                return
            if command == "stop":
                break
            conn.send(_answer(server, command, argument))
    finally:
        server.stop()
    conn.send(None)


def _client(server: _Servers, mode: Mode) -> Any:
    kind = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
    return kind(
        base_url=server.url(),
        websocket_base_url=server.websocket_url(),
        api_key="bench",
        max_retries=0,
    )


def _connect(client: Any) -> Any:
    """What ``responses.connect()`` returns: a manager, not yet entered."""
    return client.responses.connect(websocket_connection_options=OPTIONS)


# -- 2j-2m: interrupt latency -------------------------------------------------------


@dataclass
class _Stage:
    """A stage's trials, and the statistics of each turn (``on_stats``)."""

    trials: Trials
    stats: list[StreamStats]

    def turns_at_stage(self, stage: Stage) -> int:
        return sum(s.outcome == "interrupted" and s.stage == stage for s in self.stats)


def _firing(
    server: _Servers, stage: Stage, token: Interrupt
) -> tuple[threading.Event, _Firing, threading.Thread]:
    """The trial's interrupting thread, started: it waits until the turn is at ``stage``
    (the server has the create, or the event is set when the caller saw the first output),
    then 2 ms, then fires ``token``."""
    server.set_scenario(HANGING[stage])
    requests = server.request_count()
    first_output = threading.Event()
    firing = _Firing()
    thread = threading.Thread(
        target=_interrupter,
        args=(server, stage, requests, first_output, token, firing),
        name="bench-interrupter",
        daemon=True,
    )
    thread.start()
    return first_output, firing, thread


def _outcome(
    stage: Stage, firing: _Firing, ended: float, error: BaseException | None, gc_at_end: float
) -> Outcome:
    at_stage = firing.ready and isinstance(error, StreamInterrupted) and error.stage == stage
    return Outcome(ended - firing.started, error, at_stage, gc_at_end - firing.gc_before)


def _sync_trial(conn: Any, server: _Servers, stage: Stage, token: Interrupt) -> Outcome:
    first_output, firing, thread = _firing(server, stage, token)
    error: BaseException | None = None
    conn.response.create(model=MODEL, input="hi")
    try:
        for event in conn:
            if event.type == FIRST_OUTPUT:
                first_output.set()
            elif event.type == LAST:
                break
    except StreamInterrupted as exc:  # the outcome under measurement
        ended = time.perf_counter()
        error = exc
    except Exception as exc:  # anything else: a trial that failed
        ended = time.perf_counter()
        error = exc
    else:
        ended = time.perf_counter()
    gc_at_end = gc_seconds()
    thread.join(10.0)
    token.reset()
    return _outcome(stage, firing, ended, error, gc_at_end)


def _sync_stage(server: _Servers, stage: Stage, n: int) -> _Stage:
    """``n`` timed trials (after ``WARMUP`` untimed) on one watched connection."""
    token = Interrupt()
    result = _Stage(Trials(StreamInterrupted), [])
    client = _client(server, "sync")
    watched = watch_connection(
        _connect(client), policy=POLICY, interrupt=token, on_stats=result.stats.append
    )
    with client, watched as conn:
        for number in range(WARMUP + n):
            outcome = _sync_trial(conn, server, stage, token)
            if number >= WARMUP:
                result.trials.outcomes.append(outcome)
    del result.stats[:WARMUP]
    return result


async def _async_trial(conn: Any, server: _Servers, stage: Stage, token: Interrupt) -> Outcome:
    first_output, firing, thread = _firing(server, stage, token)
    error: BaseException | None = None
    await conn.response.create(model=MODEL, input="hi")
    try:
        async for event in conn:
            if event.type == FIRST_OUTPUT:
                first_output.set()
            elif event.type == LAST:
                break
    except StreamInterrupted as exc:  # the outcome under measurement
        ended = time.perf_counter()
        error = exc
    except Exception as exc:  # anything else: a trial that failed
        ended = time.perf_counter()
        error = exc
    else:
        ended = time.perf_counter()
    gc_at_end = gc_seconds()
    await asyncio.to_thread(thread.join, 10.0)
    token.reset()
    return _outcome(stage, firing, ended, error, gc_at_end)


async def _async_stage(server: _Servers, stage: Stage, n: int) -> _Stage:
    token = Interrupt()
    result = _Stage(Trials(StreamInterrupted), [])
    client = _client(server, "async")
    watched = awatch_connection(
        _connect(client), policy=POLICY, interrupt=token, on_stats=result.stats.append
    )
    async with client, watched as conn:
        for number in range(WARMUP + n):
            outcome = await _async_trial(conn, server, stage, token)
            if number >= WARMUP:
                result.trials.outcomes.append(outcome)
    del result.stats[:WARMUP]
    return result


def _interrupt_row(mode: Mode, stage: Stage, result: _Stage) -> Row:
    trials = result.trials
    d = distribution(trials.latencies())
    n = len(trials.outcomes)
    turns = result.turns_at_stage(stage)
    passed = d["n"] == n and d["p99"] < TARGET_P99 and trials.at_stage() == n and turns == n
    notes = [
        f"watchdog: {trials.at_stage()}/{n} trials reached the stage and were interrupted"
        f" there (StreamInterrupted.stage {stage!r}), on one watched connection (a fresh"
        " one opened by each next create)",
        f"watchdog: on_stats: {turns}/{len(result.stats)} turns ended interrupted at the stage",
    ]
    failed = [o.error for o in trials.outcomes if not o.at_stage]
    if failed:
        notes.append(f"watchdog: first failed trial: {failed[0]!r}")
    if collected := trials.collected():
        notes.append(
            f"watchdog: {len(collected)} trial(s) had a garbage collection inside the measured"
            f" time (at most {fmt_ms(max(collected))} ms)"
        )
    sdk = "OpenAI" if mode == "sync" else "AsyncOpenAI"
    return Row(
        key=KEYS[mode, stage],
        figure=(
            f"interrupt through openai's responses.connect() (WebSocket, {mode}, {sdk}),"
            f" {TITLES[stage]}: interrupt() to StreamInterrupted, p50 / p99 / max"
        ),
        cells={"watchdog": _cell(trials), "plain": PLAIN, "seed": SEED},
        target=f"p99 < {TARGET_P99 * 1e3:g} ms",
        verdict="PASS" if passed else "MISS",
        data={
            "watchdog": {
                **d,
                "samples_s": trials.latencies(),
                "failures": trials.failures(),
                "at_stage": trials.at_stage(),
                "turns_interrupted_at_stage": turns,
                "gc_s": collected,
            }
        },
        notes=notes,
    )


# -- 9a-9b: cost per event ----------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One turn after its first event: seconds of reading, and the events read."""

    wall: float
    cpu: float
    events: int


def _sync_turn(conn: Any) -> Sample:
    gc.collect()
    conn.response.create(model=MODEL, input="hi")
    conn.recv()  # the turn's first event: untimed
    events = 0
    started, started_cpu = time.perf_counter(), time.process_time()
    while True:
        event = conn.recv()
        events += 1
        if event.type == LAST:
            break
    return Sample(time.perf_counter() - started, time.process_time() - started_cpu, events)


async def _async_turn(conn: Any) -> Sample:
    gc.collect()
    await conn.response.create(model=MODEL, input="hi")
    await conn.recv()
    events = 0
    started, started_cpu = time.perf_counter(), time.process_time()
    while True:
        event = await conn.recv()
        events += 1
        if event.type == LAST:
            break
    return Sample(time.perf_counter() - started, time.process_time() - started_cpu, events)


def _said(mode: Mode) -> Callable[[int, Client, Sample], str]:
    def said(number: int, client: Client, sample: Sample) -> str:
        return (
            f"websocket cost {mode}: round {number + 1} {client}"
            f" {sample.cpu / sample.events * 1e6:.1f} µs/event CPU"
        )

    return said


def _settle(server: _Servers, turn: Callable[[], object]) -> None:
    """Warm-up turns, untimed, until the server has answered ``SETTLE_REQUESTS``."""
    server.set_scenario(Scenario(content=("x",) * WARMUP_EVENTS, usage=False))
    while server.request_count() < SETTLE_REQUESTS:
        turn()


def _sync_cost(server: _Servers, sizes: Sizes, scenario: Scenario) -> _Cost:
    stats: list[StreamStats] = []
    client = _client(server, "sync")
    with (
        client,
        _connect(client) as plain,
        watch_connection(_connect(client), policy=COST_POLICY, on_stats=stats.append) as watched,
    ):
        conns = {"plain": plain, "watchdog": watched}
        _settle(server, lambda: [_sync_turn(c) for c in conns.values()])
        server.set_scenario(scenario)
        stats.clear()
        samples = alternating(sizes.rounds, CLIENTS, lambda c: _sync_turn(conns[c]), _said("sync"))
    return _Cost(samples, stats)


async def _async_cost(server: _Servers, sizes: Sizes, scenario: Scenario) -> _Cost:
    stats: list[StreamStats] = []
    client = _client(server, "async")
    async with (
        client,
        _connect(client) as plain,
        awatch_connection(_connect(client), policy=COST_POLICY, on_stats=stats.append) as watched,
    ):
        conns = {"plain": plain, "watchdog": watched}
        server.set_scenario(Scenario(content=("x",) * WARMUP_EVENTS, usage=False))
        while server.request_count() < SETTLE_REQUESTS:
            for conn in conns.values():
                await _async_turn(conn)
        server.set_scenario(scenario)
        stats.clear()
        samples: dict[Client, list[Sample]] = {c: [] for c in CLIENTS}
        said = _said("async")
        for number in range(sizes.rounds):  # measure.alternating's order, awaited
            for name in CLIENTS if number % 2 == 0 else CLIENTS[::-1]:
                samples[name].append(one := await _async_turn(conns[name]))
                say(said(number, name, one))
    return _Cost(samples, stats)


@dataclass
class _Cost:
    samples: dict[Client, list[Sample]]
    stats: list[StreamStats]  # the watched turns'


def _cost_row(mode: Mode, cost: _Cost, sizes: Sizes) -> Row:
    samples = cost.samples
    per_event = {c: [s.cpu / s.events for s in runs] for c, runs in samples.items()}
    cpu = {c: statistics.median(s.cpu for s in runs) for c, runs in samples.items()}
    wall = {c: statistics.median(s.wall for s in runs) for c, runs in samples.items()}
    events = {s.events for runs in samples.values() for s in runs}
    n = max(events)
    ratio, wall_ratio = cpu["watchdog"] / cpu["plain"], wall["watchdog"] / wall["plain"]
    added = (cpu["watchdog"] - cpu["plain"]) / n
    per_round = [w.cpu / p.cpu for w, p in zip(samples["watchdog"], samples["plain"], strict=True)]
    counted = {s.events for s in cost.stats}
    outputs = {s.outcome for s in cost.stats}
    verdict: Verdict = "PASS" if ratio <= TARGET and len(events) == 1 else "MISS"

    def cell(c: Client) -> str:
        text = (
            f"CPU {statistics.median(per_event[c]) * 1e6:.1f} µs/event (min"
            f" {min(per_event[c]) * 1e6:.1f}), {fmt_s(cpu[c])} a turn"
        )
        if c == "plain":
            return f"{text}; wall {fmt_s(wall[c])}"
        return (
            f"{text} ({ratio:.3f}x), adds {added * 1e6:.2f} µs/event;"
            f" wall {fmt_s(wall[c])} ({wall_ratio:.3f}x)"
        )

    sdk = "OpenAI" if mode == "sync" else "AsyncOpenAI"
    rate = {c: n / wall[c] for c in CLIENTS}
    notes = [
        "watchdog/plain CPU, round by round: " + ", ".join(f"{r:.3f}" for r in per_round),
        f"events a second, wall clock: plain {rate['plain']:,.0f}, watchdog"
        f" {rate['watchdog']:,.0f}",
        f"on_stats of the watched turns: events {sorted(counted, key=str)}, outcomes"
        f" {sorted(outputs)}",
    ]
    if len(events) != 1:
        notes.append(f"the clients read different amounts: {sorted(events)}")
    return Row(
        key=COST_KEYS[mode],
        figure=(
            f"Responses over a WebSocket through openai ({sdk}, responses.connect(),"
            f" conn.recv()): {sizes.events:,} output deltas after the first event, CPU an"
            f" event, median of {sizes.rounds} (x plain)"
        ),
        cells={
            "watchdog": cell("watchdog"),
            "plain": cell("plain"),
            "seed": "n/a: the seed model is HTTP's",
        },
        target=f"watchdog/plain CPU <= {TARGET:.2f}x",
        verdict=verdict,
        data={
            "cpu_ratio": ratio,
            "wall_ratio": wall_ratio,
            "added_cpu_s_per_event": added,
            "median_cpu_s": cpu,
            "median_wall_s": wall,
            "cpu_s_per_event": per_event,
            "per_round_cpu_ratio": per_round,
            "samples": {c: [s.__dict__ for s in runs] for c, runs in samples.items()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Interrupts at each stage, sync then async (2j-2m); then the cost of a long turn,
    sync and async (9a, 9b), each on a fresh server."""
    sizes = QUICK if quick else FULL
    rows = []
    with _Servers(Scenario.healthy()) as server:
        for stage in STAGES:
            result = _sync_stage(server, stage, sizes.trials)
            say(f"websocket interrupt sync {stage}: done")
            rows.append(_interrupt_row("sync", stage, result))
        for stage in STAGES:
            result = asyncio.run(_async_stage(server, stage, sizes.trials))
            say(f"websocket interrupt async {stage}: done")
            rows.append(_interrupt_row("async", stage, result))
    scenario = Scenario(content=("x",) * sizes.events, usage=False)
    with _Servers(scenario) as server:
        rows.append(_cost_row("sync", _sync_cost(server, sizes, scenario), sizes))
    with _Servers(scenario) as server:
        rows.append(_cost_row("async", asyncio.run(_async_cost(server, sizes, scenario)), sizes))
    return rows
