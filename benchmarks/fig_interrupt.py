"""Figure 2: interrupt latency, from ``interrupt()`` to the exception in the reading thread.

Three stages, each a stream through the openai SDK (2a-2c; through google-genai on the
fault server's gemini wire, 2d-2f, watchdog only) that the server leaves hanging:

* ``new``: before the headers, on a new connection (the server never answers);
* ``reused``: the same, on a pooled connection (a complete request goes first; the
  server's connection count proves the reuse);
* ``mid``: mid-stream, after the first chunk (the server goes silent).

A trial waits until its reader is at the stage (the server has the request, or the first
chunk has arrived), lets 2 ms pass so that the reader is blocked in ``recv``, then takes
the clock and interrupts from the benchmark's thread; the reader takes the clock in its
``except``. Watchdog trials run one at a time. The seed's monitor looks at its interrupt
flag every 0.3 s, so when /stop is pressed within that period decides its latency: its
trials press it at a uniformly random moment and, to fit the run time, run in parallel
lanes (one server each), which costs them well under a millisecond against 300. The plain
client (the run's HTTP library alone) has no interrupt.
"""

from __future__ import annotations

import contextlib
import math
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, genai_client_for
from hermes_transport.testing import Scenario

from . import seed_model, variants
from .flavor import FLAVOR, http
from .measure import causes, distribution, fmt_ms, fmt_s, gc_seconds
from .progress import say
from .report import Row
from .server import ServerProcess

__all__ = ["run"]

Stage = Literal["new", "reused", "mid"]
STAGES: tuple[Stage, ...] = ("new", "reused", "mid")
TITLES = {
    "new": "before headers, new connection",
    "reused": "before headers, reused connection",
    "mid": "mid-stream",
}
KEYS: dict[Stage, str] = {"new": "2a", "reused": "2b", "mid": "2c"}
GEMINI_KEYS: dict[Stage, str] = {"new": "2d", "reused": "2e", "mid": "2f"}
GEMINI_MODEL = "bench"
TARGET_P99 = 0.005
SETTLE = 0.002  # after the stage is reached: the reader is then blocked in recv
WARMUP = 2  # untimed trials first: the first error of a kind imports and builds things
#: Budgets far beyond any trial: only the interrupt ends a stream.
POLICY = StreamPolicy(stale_timeout=60.0, first_event_timeout=60.0, retries=0)
SEED_STALE = 60.0
SEED_LANES = 8
SEED_REUSED_TRIALS = 3
SEED_READ_TIMEOUT = 1.0
HEALTHY = Scenario.healthy()
HANGING: dict[Stage, Scenario] = {
    "new": Scenario(stall_before_headers=True, hold=30.0),
    "reused": Scenario(stall_before_headers=True, hold=30.0),
    "mid": Scenario(stall_after_events=1, hold=30.0),
}
PLAIN = "n/a: no interrupt (waits for the read timeout)"


@dataclass
class Outcome:
    """One trial: latency, the error the reader got, whether the stage was right, and the
    seconds the process spent collecting garbage meanwhile."""

    latency: float
    error: BaseException | None
    at_stage: bool
    gc: float = 0.0


@dataclass
class Trials:
    """The trials of one client at one stage; ``wanted`` is the error an interrupt raises."""

    wanted: type[BaseException]
    outcomes: list[Outcome] = field(default_factory=list)

    def latencies(self) -> list[float]:
        return [o.latency for o in self.outcomes if self._interrupted(o.error)]

    def failures(self) -> int:
        return sum(not self._interrupted(o.error) for o in self.outcomes)

    def _interrupted(self, error: BaseException | None) -> bool:
        return error is not None and any(isinstance(e, self.wanted) for e in causes(error))

    def at_stage(self) -> int:
        return sum(o.at_stage for o in self.outcomes)

    def collected(self) -> list[float]:
        """Garbage-collection seconds of the trials that had some inside their window."""
        return [o.gc for o in self.outcomes if o.gc > 0]


class _Reader(threading.Thread):
    """A reading thread that notes the clock when its read ends (raises, normally)."""

    def __init__(self, read: Callable[[_Reader], object]) -> None:
        super().__init__(name="bench-reader", daemon=True)
        self._read = read
        self.first_chunk = threading.Event()
        self.ended = math.nan
        self.gc_at_end = 0.0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._read(self)
        except BaseException as exc:  # the outcome under measurement
            self.ended = time.perf_counter()
            self.error = exc
        else:
            self.ended = time.perf_counter()
        self.gc_at_end = gc_seconds()


def _fire(reader: _Reader, fire: Callable[[], None], delay: float) -> tuple[float, float]:
    """Wait ``delay``, then ``fire()``: (seconds until the reader's exception, of them
    seconds of garbage collection)."""
    time.sleep(delay)
    gc_before = gc_seconds()
    started = time.perf_counter()
    fire()
    reader.join(10.0)
    return reader.ended - started, reader.gc_at_end - gc_before


@dataclass(frozen=True)
class Caller:
    """How the watchdog's trials reach the server: an SDK's client and its two calls."""

    title: str
    keys: dict[Stage, str]
    client: Callable[[str], contextlib.AbstractContextManager[Any]]  # from the server's URL
    stream: Callable[[Any], Iterator[object]]  # a streaming call's chunks
    complete: Callable[[Any], object]  # a whole call, which leaves its connection pooled


def _openai_client(url: str) -> contextlib.AbstractContextManager[Any]:
    return variants.openai_client("watchdog", url, policy=POLICY)


@contextlib.contextmanager
def _gemini_client(url: str) -> Iterator[Any]:
    from google.genai import types

    options = types.HttpOptions(base_url=url.removesuffix("/v1"), timeout=600_000)
    client = genai_client_for(
        None, flavor=FLAVOR, policy=POLICY, api_key="b", http_options=options
    )
    try:
        yield client
    finally:
        client.close()


def _gemini_stream(client: Any) -> Iterator[object]:
    return iter(client.models.generate_content_stream(model=GEMINI_MODEL, contents="hi"))


def _gemini_complete(client: Any) -> object:
    return list(_gemini_stream(client))


OPENAI = Caller("openai", KEYS, _openai_client, variants.open_stream, variants.complete)
GEMINI = Caller(
    "google-genai (gemini wire)", GEMINI_KEYS, _gemini_client, _gemini_stream, _gemini_complete
)


def _watchdog_trials(server: ServerProcess, stage: Stage, n: int, caller: Caller) -> Trials:
    token = Interrupt()
    trials = Trials(StreamInterrupted)

    def read(reader: _Reader) -> None:
        with token.bind():
            for _chunk in caller.stream(client):
                reader.first_chunk.set()

    with caller.client(server.url()) as client:
        for number in range(WARMUP + n):
            token.reset()
            if stage == "reused":
                server.set_scenario(HEALTHY)
                caller.complete(client)  # leaves its connection in the pool
            server.set_scenario(HANGING[stage])
            connections, requests = server.connections_opened(), server.request_count()
            reader = _Reader(read)
            reader.start()
            if stage == "mid":
                ready = reader.first_chunk.wait(5.0)
            else:
                ready = server.wait_for_requests(requests + 1)
            latency, collected = _fire(reader, lambda: token.interrupt("benchmark"), SETTLE)
            opened = server.connections_opened() - connections
            at_stage = ready and opened == (0 if stage == "reused" else 1)
            if number >= WARMUP:
                trials.outcomes.append(Outcome(latency, reader.error, at_stage, collected))
    return trials


def _seed_lane(server: ServerProcess, index: int, stage: Stage, n: int, trials: Trials) -> None:
    rng = random.Random(index)
    with variants.openai_client("seed", server.url(index)) as client:
        for _ in range(n):
            call = seed_model.SeedCall(SEED_STALE)
            connections = server.connections_opened(index)

            def read(reader: _Reader, call: seed_model.SeedCall = call) -> None:
                def first(_chunk: object) -> None:
                    reader.first_chunk.set()

                seed_model.seed_stream_chat(client, call, on_chunk=first, **variants.CHAT)

            reader = _Reader(read)
            reader.start()
            ready = (reader.first_chunk if stage == "mid" else call.socket_found).wait(5.0)
            # /stop pressed anywhere within the monitor's 0.3 s period.
            delay = SETTLE + rng.uniform(0.0, seed_model.POLL_INTERVAL)
            latency, collected = _fire(reader, call.interrupt.set, delay)
            at_stage = ready and server.connections_opened(index) - connections == 1
            trials.outcomes.append(Outcome(latency, reader.error, at_stage, collected))


def _seed_trials(server: ServerProcess, stage: Stage, n: int) -> Trials:
    lanes = [Trials(InterruptedError) for _ in range(SEED_LANES)]
    share = math.ceil(n / SEED_LANES)
    threads = [
        threading.Thread(target=_seed_lane, args=(server, 1 + i, stage, share, lanes[i]))
        for i in range(SEED_LANES)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return Trials(InterruptedError, [o for lane in lanes for o in lane.outcomes][:n])


def _seed_reused(server: ServerProcess) -> tuple[int, int]:
    """(trials that waited for the read timeout, trials that reused the connection)."""
    timeout = http.Timeout(10.0, read=SEED_READ_TIMEOUT)
    waited = reused = 0
    with variants.openai_client("seed", server.url(1), timeout=timeout) as client:
        for _ in range(SEED_REUSED_TRIALS):
            server.set_scenario(HEALTHY, index=1)
            variants.complete(client)
            server.set_scenario(HANGING["reused"], index=1)
            connections, requests = server.connections_opened(1), server.request_count(1)
            call = seed_model.SeedCall(SEED_STALE)

            def read(_reader: _Reader, call: seed_model.SeedCall = call) -> None:
                seed_model.seed_stream_chat(client, call, **variants.CHAT)

            reader = _Reader(read)
            reader.start()
            server.wait_for_requests(requests + 1, index=1)
            latency, _collected = _fire(reader, call.interrupt.set, SETTLE)
            timed_out = reader.error is not None and any(
                isinstance(e, http.ReadTimeout) for e in causes(reader.error)
            )
            waited += timed_out and latency > SEED_READ_TIMEOUT / 2
            reused += server.connections_opened(1) == connections
    return waited, reused


def _cell(trials: Trials) -> str:
    d = distribution(trials.latencies())
    if not d["n"]:
        return f"no trial interrupted ({len(trials.outcomes)} tried)"
    text = f"{fmt_ms(d['p50'])} / {fmt_ms(d['p99'])} / {fmt_ms(d['max'])} ms (n={d['n']})"
    if trials.failures():
        text += f"; {trials.failures()} not interrupted"
    return text


def _row(
    stage: Stage, watchdog: Trials, seed: Trials | None, seed_reused: str, caller: Caller = OPENAI
) -> Row:
    d = distribution(watchdog.latencies())
    n = len(watchdog.outcomes)
    passed = d["n"] == n and d["p99"] < TARGET_P99 and watchdog.at_stage() == n
    where = "reused the pooled connection" if stage == "reused" else "opened a new connection"
    notes = [f"watchdog: {watchdog.at_stage()}/{n} trials {where} and reached the stage"]
    if collected := watchdog.collected():
        notes.append(
            f"watchdog: {len(collected)} trial(s) had a garbage collection inside the measured"
            f" time (at most {fmt_ms(max(collected))} ms)"
        )
    if seed is not None:
        notes.append(f"seed: {seed.at_stage()}/{len(seed.outcomes)} trials at the stage")
    through = "" if caller is OPENAI else f" through {caller.title}"
    return Row(
        key=caller.keys[stage],
        figure=f"interrupt{through}, {TITLES[stage]}: interrupt() to exception, p50 / p99 / max",
        cells={
            "watchdog": _cell(watchdog),
            "plain": PLAIN,
            "seed": _cell(seed) if seed is not None else seed_reused,
        },
        target=f"p99 < {TARGET_P99 * 1e3:g} ms",
        verdict="PASS" if passed else "MISS",
        data={
            "watchdog": {
                **distribution(watchdog.latencies()),
                "samples_s": watchdog.latencies(),
                "failures": watchdog.failures(),
                "at_stage": watchdog.at_stage(),
                "gc_s": watchdog.collected(),
            },
            "seed": None
            if seed is None
            else {**distribution(seed.latencies()), "samples_s": seed.latencies()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Every stage for the watchdog, then for the seed model; one row per stage. Then every
    stage through google-genai, watchdog only (the seed model is openai's)."""
    n = 30 if quick else 200
    rows = []
    with ServerProcess(HEALTHY, count=1 + SEED_LANES) as server:
        for stage in STAGES:
            watchdog = _watchdog_trials(server, stage, n, OPENAI)
            say(f"interrupt {stage}: watchdog done")
            seed: Trials | None = None
            seed_reused = ""
            if stage == "reused":
                waited, reused = _seed_reused(server)
                seed_reused = (
                    "n/a: no socket before headers on a pooled connection;"
                    f" {waited}/{SEED_REUSED_TRIALS} trials waited for the read timeout"
                    f" ({fmt_s(SEED_READ_TIMEOUT)}; {reused} reused the connection)"
                )
            else:
                for index in range(1, 1 + SEED_LANES):
                    server.set_scenario(HANGING[stage], index=index)
                seed = _seed_trials(server, stage, n)
            say(f"interrupt {stage}: seed done")
            rows.append(_row(stage, watchdog, seed, seed_reused))
        for stage in STAGES:
            watchdog = _watchdog_trials(server, stage, n, GEMINI)
            say(f"interrupt {stage} through google-genai: watchdog done")
            rows.append(_row(stage, watchdog, None, "n/a: the seed model is openai's", GEMINI))
    return rows
