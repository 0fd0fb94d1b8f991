"""Figure 3: stall-detection lateness, how long after the budget a stall surfaces.

The server sends five chat chunks, then either nothing (``silent``) or only ``: keepalive``
comments every 50 ms (``comments``). Lateness is ``error - arrival - budget``: ``error`` is
the clock in the reader's ``except``, ``arrival`` the clock when the bytes of the last data
event left the transport (a response hook wraps the body to note it: the same point for
every client, and where the watchdog counts progress from). A negative value is an early
kill. The caller itself sees the last chunk a little later, once the SDK has parsed it
(about 0.1 ms here), so its own view of the lateness is that much smaller; the JSON file
keeps both.

The seed's monitor wakes every 0.3 s; when the stall begins within that period decides its
lateness. So the chunks are spread over a random pause (uniform over 0-0.3 s, drawn per
trial, the same scenario for every client; each gap at most 75 ms, well below the budget),
and the trials run in parallel lanes, one server each, with the clients' trials shuffled
together. A trial in which the server itself paused longer than the budget between two
chunks (it happens when the machine is busy) is a real stall, not the scripted one: it is
run again, at most twice, and counted in the notes.

The plain client (the run's HTTP library alone) is given a read timeout equal to the
budget: it catches a silent server, and never a server that sends keep-alive comments
(each one restarts the read timeout).
"""

from __future__ import annotations

import itertools
import math
import queue
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, Literal

import openai

from hermes_transport import StreamPolicy, StreamStalled
from hermes_transport.testing import Scenario

from . import seed_model, variants
from .flavor import http
from .measure import causes, distribution, fmt_ms, fmt_s
from .progress import say
from .report import Row
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

Kind = Literal["silent", "comments"]
BUDGET = 0.2
TARGET_P99 = 0.020
LANES = 8
HOLD = 3.0  # the server gives up on a stall after this; far past every detector
PLAIN_COMMENT_TRIALS = 3
PLAIN_COMMENT_HOLD = 1.0
CONTENT = ("a", "b", "c", "d")
CHUNKS = len(CONTENT) + 1  # and the finish chunk; [DONE] never comes
ATTEMPTS = 3
STALLS: dict[Kind, Scenario] = {
    "silent": Scenario(content=CONTENT, stall_after_events=CHUNKS, hold=HOLD),
    "comments": Scenario(
        content=CONTENT, stall_after_events=CHUNKS, comment_interval=0.05, hold=HOLD
    ),
}
KEYS = {"silent": "3a", "comments": "3b"}
TITLES = {"silent": "silent server", "comments": "keep-alive comments only"}
POLICY = StreamPolicy(stale_timeout=BUDGET, first_event_timeout=5.0, retries=0)


Trial = tuple[Variant, Kind, int]  # and the attempt


@dataclass(frozen=True)
class Outcome:
    variant: Variant
    kind: Kind
    lateness: float  # from the last data event's arrival
    seen_lateness: float  # from the reader's last chunk
    chunks: int
    detected: bool  # the client's own stall error, after every chunk
    early: bool  # the client's own stall error, before the last chunk


class _Arrivals(http.SyncByteStream):
    """A response body passed through untouched, noting when data events go by."""

    def __init__(self, inner: http.SyncByteStream) -> None:
        self._inner = inner
        self.stamps: list[float] = []

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._inner:
            if b"data:" in chunk:  # comments (": keepalive") are not progress
                self.stamps.append(time.perf_counter())
            yield chunk

    def close(self) -> None:
        self._inner.close()


class _Watch:
    """A response hook that wraps each response body of one lane in ``_Arrivals``."""

    def __init__(self) -> None:
        self.arrivals: _Arrivals | None = None

    def hook(self, response: http.Response) -> None:
        assert isinstance(response.stream, http.SyncByteStream)
        self.arrivals = _Arrivals(response.stream)
        response.stream = self.arrivals

    def last(self) -> float:
        return self.arrivals.stamps[-1] if self.arrivals and self.arrivals.stamps else math.nan

    def longest_gap(self) -> float:
        """The longest pause between two data events (0 with fewer than two)."""
        stamps = self.arrivals.stamps if self.arrivals is not None else []
        return max((b - a for a, b in itertools.pairwise(stamps)), default=0.0)


def _detected(variant: Variant, error: BaseException | None) -> bool:
    if error is None:
        return False
    wanted: type[BaseException] = {
        "watchdog": StreamStalled,
        "seed": seed_model.SeedStalled,
        "plain": http.ReadTimeout,
    }[variant]
    return any(isinstance(e, wanted) for e in causes(error))


def _client(variant: Variant, url: str, watch: _Watch) -> openai.OpenAI:
    if variant == "plain":
        timeout = http.Timeout(10.0, read=BUDGET)
        return variants.openai_client("plain", url, timeout=timeout, response_hooks=[watch.hook])
    return variants.openai_client(variant, url, policy=POLICY, response_hooks=[watch.hook])


def _read(
    client: openai.OpenAI, variant: Variant, watch: _Watch
) -> tuple[float, float, int, BaseException | None]:
    """Read one stream to its error: seconds from arrival and from the reader's last chunk
    to the error, chunks read, the error."""
    watch.arrivals = None
    last = math.nan
    chunks = 0

    def took(_chunk: object) -> None:
        nonlocal last, chunks
        last = time.perf_counter()
        chunks += 1

    error: BaseException | None = None
    try:
        if variant == "seed":
            call = seed_model.SeedCall(BUDGET)
            seed_model.seed_stream_chat(client, call, on_chunk=took, **variants.CHAT)
        else:
            for chunk in variants.open_stream(client):
                took(chunk)
    except Exception as exc:  # the outcome under measurement
        error = exc
    ended = time.perf_counter()
    return ended - watch.last(), ended - last, chunks, error


def _lane(
    server: ServerProcess,
    index: int,
    todo: queue.Queue[Trial],
    out: list[Outcome],
    ready: threading.Barrier,
    rerun: list[Trial],
) -> None:
    rng = random.Random(index)
    watch = _Watch()
    clients = {v: _client(v, server.url(index), watch) for v in variants.VARIANTS}
    ready.wait()  # no lane builds clients (CPU, the GIL) while another one measures
    try:
        while True:
            try:
                variant, kind, attempt = todo.get_nowait()
            except queue.Empty:
                return
            pause = rng.uniform(0.0, seed_model.POLL_INTERVAL) / (CHUNKS - 1)
            server.set_scenario(replace(STALLS[kind], event_interval=pause), index=index)
            elapsed, seen, chunks, error = _read(clients[variant], variant, watch)
            if watch.longest_gap() >= BUDGET and attempt < ATTEMPTS:
                rerun.append((variant, kind, attempt))  # the server stalled before its time
                todo.put((variant, kind, attempt + 1))
                continue
            stalled = _detected(variant, error)
            out.append(
                Outcome(
                    variant,
                    kind,
                    lateness=elapsed - BUDGET,
                    seen_lateness=seen - BUDGET,
                    chunks=chunks,
                    detected=stalled and chunks == CHUNKS,
                    early=stalled and chunks < CHUNKS,
                )
            )
    finally:
        for client in clients.values():
            client.close()


def _warm_up(server: ServerProcess) -> None:
    """One stall per client and kind, untimed: the first one imports and builds (the SDK's
    models, say) for a while, holding the GIL that the other lanes' measurements need."""
    watch = _Watch()
    for kind, stall in STALLS.items():
        server.set_scenario(replace(stall, hold=0.5 + BUDGET))
        for variant in variants.VARIANTS:
            if variant == "plain" and kind == "comments":
                continue
            with _client(variant, server.url(), watch) as client:
                _read(client, variant, watch)


def _plain_comments(server: ServerProcess) -> tuple[int, float]:
    """The plain client against keep-alives: (streams run until the server hung up, mean s)."""
    server.set_scenario(replace(STALLS["comments"], hold=PLAIN_COMMENT_HOLD))
    ran = 0
    durations = []
    watch = _Watch()
    with _client("plain", server.url(), watch) as client:
        for _ in range(PLAIN_COMMENT_TRIALS):
            elapsed, _seen, chunks, error = _read(client, "plain", watch)
            durations.append(elapsed)
            # The server's hold starts as it sends the last chunk, just before it arrives.
            hung_up = elapsed >= PLAIN_COMMENT_HOLD * 0.9
            ran += chunks == CHUNKS and not _detected("plain", error) and hung_up
    return ran, sum(durations) / len(durations)


def _cell(outcomes: list[Outcome]) -> str:
    late = [o.lateness for o in outcomes if o.detected]
    d = distribution(late)
    if not d["n"]:
        return f"never detected ({len(outcomes)} tried)"
    text = (
        f"{fmt_ms(d['p50'])} / {fmt_ms(d['p99'])} / {fmt_ms(d['max'])} ms,"
        f" min {fmt_ms(d['min'])} (n={d['n']})"
    )
    early = sum(o.early for o in outcomes)
    missed = len(outcomes) - d["n"] - early
    text += f"; {early} killed before the last chunk" if early else ""
    return text + (f"; {missed} not detected" if missed else "")


def _row(kind: Kind, outcomes: list[Outcome], plain_comments: str, rerun: list[Trial]) -> Row:
    by: dict[Variant, list[Outcome]] = {
        v: [o for o in outcomes if o.variant == v and o.kind == kind] for v in variants.VARIANTS
    }
    watchdog = by["watchdog"]
    d = distribution([o.lateness for o in watchdog if o.detected])
    passed = d["n"] == len(watchdog) and d["p99"] < TARGET_P99 and d["min"] >= 0.0
    data: dict[str, Any] = {
        v: {
            **distribution([o.lateness for o in runs if o.detected]),
            "samples_s": [o.lateness for o in runs if o.detected],
            "seen_by_reader": distribution([o.seen_lateness for o in runs if o.detected]),
            "not_detected": sum(not o.detected for o in runs),
        }
        for v, runs in by.items()
        if runs
    }
    return Row(
        key=KEYS[kind],
        figure=(
            f"stall lateness, {TITLES[kind]}: error - (last event's arrival + {BUDGET:g} s),"
            " p50 / p99 / max, min"
        ),
        cells={
            "watchdog": _cell(watchdog),
            "plain": f"read timeout = budget: {_cell(by['plain'])}"
            if kind == "silent"
            else plain_comments,
            "seed": _cell(by["seed"]),
        },
        target=f"p99 < {TARGET_P99 * 1e3:g} ms, min >= 0",
        verdict="PASS" if passed else "MISS",
        data={**data, "rerun": [list(t) for t in rerun if t[1] == kind]},
        notes=[
            f"{v}: {k} trial(s) run again: the server paused >= {BUDGET:g} s between chunks"
            for v in variants.VARIANTS
            if (k := sum(t[0] == v and t[1] == kind for t in rerun))
        ],
    )


def run(quick: bool) -> list[Row]:
    """Every client on both stalls; one row per kind of stall."""
    n = 20 if quick else 100
    todo_list: list[Trial] = [
        (variant, kind, 1)
        for kind in STALLS
        for variant in variants.VARIANTS
        if not (variant == "plain" and kind == "comments")  # shown apart: it never ends
        for _ in range(n)
    ]
    random.Random(0).shuffle(todo_list)
    todo: queue.Queue[Trial] = queue.Queue()
    for item in todo_list:
        todo.put(item)
    outcomes: list[Outcome] = []
    rerun: list[Trial] = []
    with ServerProcess(STALLS["silent"], count=LANES) as server:
        _warm_up(server)
        ready = threading.Barrier(LANES)
        lanes = [
            threading.Thread(target=_lane, args=(server, i, todo, outcomes, ready, rerun))
            for i in range(LANES)
        ]
        for lane in lanes:
            lane.start()
        for lane in lanes:
            lane.join()
        say(f"stall: {len(outcomes)} trials done")
        ran, mean = _plain_comments(server)
    plain_comments = (
        f"never: {ran}/{PLAIN_COMMENT_TRIALS} streams ran until the server hung up"
        f" ({fmt_s(mean)} after the last chunk)"
    )
    return [_row(kind, outcomes, plain_comments, rerun) for kind in STALLS]
