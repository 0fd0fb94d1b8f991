"""Soak: many callers share one small connection pool, with a random mix of faults on top.

One client with a 4-connection pool carries 16 threads (sync) or 64 tasks on one event
loop (async, asyncio and trio), on both flavors, and the openai SDK over the sync client.
The requests are a seeded random mix: healthy streams, slow-but-healthy streams (gaps
below the budget), non-streaming requests (fast, and slower than every budget), streams
silent before their headers, streams sending only keepalive comments before their first
event, streams going silent or keepalive-only after two events, and long streams. At
random moments other threads (and, on async, other tasks) interrupt calls: before the
call, while waiting for headers, mid-stream, or at any time (in a pool wait, after the
end); and close responses while their caller is reading them.

Each call is judged on its own (``_judge``): a healthy call that nothing stopped returns
its full content; a stall raises ``StreamStalled`` of the right stage, never before its
budget and at most ``SLACK`` after it, counted from when the attempt got its connection
(httpcore's ``trace`` extension says when: a wait in the pool is the client's, not the
server's); an interrupt or a foreign close ends its call within ``PROMPT``, unless the
call had already finished; no call outlives ``CALL_BOUND``. Afterwards no file
descriptor, thread or armed deadline is left behind.

A FaultServer answers every request with one scenario, so each behaviour has its own
server; they all share the client's pool, whose limit counts connections to every origin.

Knobs (environment): ``HERMES_SOAK_SCALE`` multiplies the requests of every soak (default
1; 10 makes a long run of a few minutes); ``HERMES_SOAK_SEED`` replays a mix (default: a
fresh seed, printed in every failure and in the summary each soak prints).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import json
import os
import queue
import random
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import anyio
import openai
import pytest

from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._io.loop_watchdog import loop_watchdog
from hermes_transport._io.watchdog import watchdog
from hermes_transport.testing import FaultServer, Scenario

from _support import FLAVORS, Flavor, FlavorName, chat_body, load_flavor, open_fds


def _scale() -> float:
    raw = os.environ.get("HERMES_SOAK_SCALE", "1")
    try:
        scale = float(raw)
    except ValueError:
        raise ValueError(f"HERMES_SOAK_SCALE must be a number, got {raw!r}") from None
    if not scale > 0:
        raise ValueError(f"HERMES_SOAK_SCALE must be > 0, got {raw!r}")
    return scale


SCALE = _scale()

STALE = 0.5  # seconds without progress after the first event
FIRST = 0.5  # seconds from getting a connection to the first event, per attempt
RETRIES = 1
POLICY = StreamPolicy(stale_timeout=STALE, first_event_timeout=FIRST, retries=RETRIES)
POOL = 4
THREADS = 16
TASKS = 64

GAP = 0.12  # between the events of a slow stream: a quarter of the budget
JSON_DELAY = 0.6  # a non-streaming answer slower than every budget: never cut
KEEPALIVE = 0.05  # between the comments of a keepalive-only stream
HOLD = 10.0  # a stall the client misses ends (as an error) after this

# Generous: a busy shared 2-core machine, 16 threads or 64 tasks, another soak beside.
SLACK = 2.0  # a stall is reported at most this late past its budget
PROMPT = 1.0  # an interrupt or a foreign close ends its call within this
EARLY = 0.05  # clock reads on two threads: the most a budget may seem to end early
RACE = 0.5  # an outcome settled this shortly after an interrupt may stand
CALL_BOUND = 30.0  # no call lasts longer, pool waits included
SOAK_BOUND = 60.0 + 20.0 * SCALE  # the whole soak, or it is reported as hung
REASON = "soak: stop"
ID_HEADER = "x-soak-id"

PIECES = ("soak", " through", " one pool")
LONG_PIECES = tuple(f" {n}" for n in range(16))  # 18 events, GAP apart: over 2 s

SERVERS: dict[str, Scenario] = {
    "healthy": Scenario.healthy(content=PIECES),
    "slow": replace(Scenario.healthy(content=PIECES), event_interval=GAP, json_delay=JSON_DELAY),
    "long": replace(Scenario.healthy(content=LONG_PIECES), event_interval=GAP),
    "silent": replace(Scenario.silent_before_headers(), hold=HOLD),
    "keepalive_first": replace(Scenario.comments_after(0, interval=KEEPALIVE), hold=HOLD),
    "silent_mid": replace(Scenario.silent_after(2), hold=HOLD),
    "keepalive_mid": replace(Scenario.comments_after(2, interval=KEEPALIVE), hold=HOLD),
}


@dataclass(frozen=True)
class Kind:
    """What a request is: the server answering it, and what it returns left alone."""

    name: str
    server: str
    stream: bool
    outcome: str  # "content", or the StreamStalled stage: "first_event" / "mid_stream"
    text: str = ""  # the content of a "content" outcome


KINDS = {
    kind.name: kind
    for kind in [
        Kind("healthy", "healthy", True, "content", "".join(PIECES)),
        Kind("json", "healthy", False, "content", "".join(PIECES)),
        Kind("slow", "slow", True, "content", "".join(PIECES)),
        Kind("slow_json", "slow", False, "content", "".join(PIECES)),
        Kind("long", "long", True, "content", "".join(LONG_PIECES)),
        Kind("stall_headers", "silent", True, "first_event"),
        Kind("keepalive_first", "keepalive_first", True, "first_event"),
        Kind("stall_mid", "silent_mid", True, "mid_stream"),
        Kind("keepalive_mid", "keepalive_mid", True, "mid_stream"),
    ]
}

# What else happens to a request, and when (random delays, drawn from the seed):
# none; pre: its token is interrupted before the call; headers: interrupted 0-0.4 budgets
# after the request was written (waiting for headers); mid: interrupted 0-0.4 budgets
# after the caller's first chunk; anytime: interrupted 0-1.2 s after the call began
# (a pool wait, connecting, reading, or after the end); close: another thread (async:
# task) closes the response 0-0.4 budgets after the caller's first chunk.
PLANS = ("none", "pre", "headers", "mid", "anytime", "close")

# (kind, plan, requests at scale 1): 42 requests, about 12 connection-seconds.
MIX: tuple[tuple[str, str, int], ...] = (
    ("healthy", "none", 10),
    ("healthy", "anytime", 2),
    ("healthy", "pre", 1),
    ("json", "none", 3),
    ("json", "anytime", 1),
    ("slow", "none", 3),
    ("slow", "mid", 1),
    ("slow", "anytime", 1),
    ("slow_json", "none", 2),
    ("slow_json", "headers", 1),
    ("long", "mid", 2),
    ("long", "anytime", 1),
    ("long", "close", 2),
    ("stall_headers", "none", 2),
    ("stall_headers", "headers", 2),
    ("keepalive_first", "none", 1),
    ("keepalive_first", "headers", 1),
    ("stall_mid", "none", 2),
    ("stall_mid", "mid", 1),
    ("keepalive_mid", "none", 2),
    ("keepalive_mid", "mid", 1),
)
# Async runs 64 tasks: cheap requests bring the mix up to about that many.
ASYNC_EXTRA: tuple[tuple[str, str, int], ...] = (
    ("healthy", "none", 12),
    ("json", "none", 6),
    ("healthy", "anytime", 2),
)


def _seed() -> int:
    raw = os.environ.get("HERMES_SOAK_SEED")
    return int(raw) if raw else random.SystemRandom().randrange(2**32)


# --- one call's record --------------------------------------------------------------------


@dataclass
class Call:
    """One request of the soak: its plan, and what happened to it, when (monotonic s)."""

    index: int
    kind: Kind
    plan: str
    delay: float  # of the plan's interrupt or close, from its trigger
    by_task: bool  # async: the interrupt comes from a task (else from a thread)
    token: Interrupt = field(default_factory=Interrupt)
    # Set by the harness: schedules fire() at a monotonic time.
    schedule: Callable[[float], None] | None = None
    closer: Callable[[], None] | None = None  # sync: closes the response
    response: Any = None
    started: float | None = None
    ended: float | None = None
    acquired: list[float] = field(default_factory=list)  # an attempt got a connection
    connecting: bool = False  # the attempt in progress opened a new connection
    waiting: float | None = None  # the request was written: waiting for headers
    first_chunk: float | None = None
    last_data: float | None = None  # the last chunk that carried data
    data: list[float] = field(default_factory=list)  # when each data-carrying chunk came
    complete: float | None = None  # the caller had the whole answer
    fired: float | None = None  # the interrupt or close was fired
    triggered: bool = False
    close_error: BaseException | None = None
    close_took: float | None = None
    raw: bytearray = field(default_factory=bytearray)
    text: str | None = None
    error: BaseException | None = None

    def trace(self, name: str, info: dict[str, Any]) -> None:
        """httpcore's ``trace`` extension: when the attempt got its connection, and wrote."""
        now = time.monotonic()
        if name.endswith("connect_tcp.started"):
            self.acquired.append(now)
            self.connecting = True
        elif name.endswith("send_request_headers.started"):
            if not self.connecting:  # a pooled connection, reused
                self.acquired.append(now)
            self.connecting = False
        elif name.endswith("receive_response_headers.started"):
            self.waiting = now
            if self.plan == "headers":
                self.trigger(now)

    async def atrace(self, name: str, info: dict[str, Any]) -> None:
        self.trace(name, info)

    def trigger(self, now: float) -> None:
        """Schedule the plan's interrupt or close, once, ``delay`` after ``now``."""
        if self.triggered or self.schedule is None:
            return
        self.triggered = True
        self.schedule(now + self.delay)

    def saw(self, chunk: bytes) -> None:
        """A chunk of a raw SSE body reached the caller."""
        now = time.monotonic()
        if self.first_chunk is None:
            self.first_chunk = now
            if self.plan in ("mid", "close"):
                self.trigger(now)
        if b"data:" in chunk:
            self.last_data = now
            self.data.append(now)
        self.raw += chunk

    def saw_piece(self, piece: str | None) -> None:
        """An SDK chunk (one data event) reached the caller."""
        now = time.monotonic()
        if self.first_chunk is None:
            self.first_chunk = now
            if self.plan in ("mid", "close"):
                self.trigger(now)
        self.last_data = now
        self.data.append(now)
        self.text = (self.text or "") + (piece or "")

    def fire(self) -> None:
        """The interrupt, or (sync) the close, from whichever thread runs it."""
        self.fired = time.monotonic()
        if self.plan != "close":
            self.token.interrupt(REASON)
            return
        assert self.closer is not None
        try:
            self.closer()
        except Exception as exc:
            self.close_error = exc
        self.close_took = time.monotonic() - self.fired

    async def afire(self) -> None:
        """The interrupt, or the close, from another task on the loop."""
        self.fired = time.monotonic()
        if self.plan != "close":
            self.token.interrupt(REASON)
            return
        try:
            await self.response.aclose()
        except Exception as exc:
            self.close_error = exc
        self.close_took = time.monotonic() - self.fired

    def begin(self) -> None:
        self.started = time.monotonic()
        if self.plan == "pre":
            self.fired = self.started
            self.token.interrupt(REASON)
        elif self.plan == "anytime":
            self.trigger(self.started)

    def end(self, error: BaseException | None) -> None:
        self.ended = time.monotonic()
        self.error = error
        if error is None and self.kind.stream and self.text is None:
            self.text = _sse_text(bytes(self.raw))


def _sse_text(raw: bytes) -> str | None:
    """The content of a chat-completions SSE body; None unless it reached ``[DONE]``."""
    pieces, done = [], False
    for line in raw.splitlines():
        if not line.startswith(b"data: "):
            continue
        payload = line[len(b"data: ") :]
        if payload == b"[DONE]":
            done = True
            continue
        for choice in json.loads(payload).get("choices", []):
            pieces.append(choice.get("delta", {}).get("content") or "")
    return "".join(pieces) if done else None


def _plan(seed: int, mix: tuple[tuple[str, str, int], ...], scale: float) -> list[Call]:
    """The calls of one soak, in a random order with random delays, all drawn from ``seed``."""
    rng = random.Random(seed)
    specs = [
        (kind, plan)
        for kind, plan, count in mix
        for _ in range(max(1, round(count * scale)) if count else 0)
    ]
    rng.shuffle(specs)
    calls = []
    for index, (kind, plan) in enumerate(specs):
        if plan == "anytime":
            delay = rng.uniform(0.0, 1.2)
        elif plan == "headers":
            delay = rng.uniform(0.0, 0.4 * FIRST)
        else:
            delay = rng.uniform(0.0, 0.4 * STALE)
        calls.append(Call(index, KINDS[kind], plan, delay, by_task=rng.random() < 0.5))
    return calls


# --- judging ---------------------------------------------------------------------------------


def _root(exc: BaseException, flavor: Flavor) -> BaseException:
    """The watchdog's error (or the library's StreamClosed) under the openai SDK's wrappers."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, StreamStalled | StreamInterrupted | flavor.http.StreamError):
            return seen
        seen = seen.__cause__ or seen.__context__
    return exc


@dataclass
class Verdict:
    """What became of a call, and what was wrong with it."""

    outcome: str  # content, first_event, mid_stream, interrupted, closed, or error:<type>
    problems: list[str]
    innocent: bool  # nothing stopped it and its natural outcome is its content
    late: float | None = None  # past its budget (stalls) or its interrupt/close
    stage: str | None = None  # of an interrupt


def _natural(call: Call, flavor: Flavor, sent: int) -> tuple[str, list[str], float | None]:
    """Whether the call ended as left alone it must: (outcome, problems, lateness)."""
    kind, error = call.kind, call.error
    assert call.started is not None
    assert call.ended is not None
    if kind.outcome == "content":
        if error is not None:
            return _name(error), [f"failed: {error!r}"], None
        problems = [] if call.text == kind.text else [f"content {call.text!r} != {kind.text!r}"]
        if sent != 1:
            problems.append(f"sent {sent} times")
        return "content", problems, None
    root = _root(error, flavor) if error is not None else None
    if not isinstance(root, StreamStalled):
        return _name(root), [f"expected StreamStalled ({kind.outcome}), got {root!r}"], None
    problems = []
    if type(root) is not flavor.StreamStalled:
        problems.append(f"{type(root).__module__}.{type(root).__name__} on {flavor}")
    if root.stage != kind.outcome:
        problems.append(f"stage {root.stage} != {kind.outcome}: {root}")
    if kind.outcome == "first_event":
        if root.budget != FIRST or root.attempts != RETRIES + 1 or sent != RETRIES + 1:
            problems.append(f"budget {root.budget}, attempts {root.attempts}, sent {sent}")
        if not call.acquired:
            return "first_event", [*problems, "no connection was traced"], None
        # Each attempt's budget runs from its connection: the last one, and all of them.
        late = call.ended - call.acquired[-1] - FIRST
        if late < -EARLY:
            problems.append(f"raised {-late:.3f} s before its last attempt's budget")
        if call.ended - call.started < (RETRIES + 1) * FIRST - EARLY:
            problems.append(f"raised before {RETRIES + 1} budgets")
    else:
        if root.budget != STALE or sent != 1:
            problems.append(f"budget {root.budget}, sent {sent}")
        if call.waiting is None or call.last_data is None:
            return "mid_stream", [*problems, "no headers or data were seen"], None
        # The transport saw the last event after the request was written, and the caller
        # after the transport: the budget is checked from the one, lateness from the other.
        if call.ended - call.waiting < STALE:
            problems.append(f"raised {call.ended - call.waiting:.3f} s after the request")
        late = call.ended - call.last_data - STALE
    if late > SLACK:
        problems.append(f"raised {late:.3f} s past its budget")
    return kind.outcome, problems, late


def _name(error: BaseException | None) -> str:
    return "error:" + type(error).__name__ if error is not None else "content"


def _where(call: Call) -> str:
    """The call's timeline, in seconds from its start, and its error chain: for reports."""
    if call.started is None or call.ended is None:
        return ""
    start = call.started

    def at(when: float | None) -> str:
        return "-" if when is None else f"{when - start:.3f}"

    data = [at(when) for when in call.data]
    if len(data) > 8:
        data = [*data[:3], "...", *data[-4:]]
    events = [
        f"connections {[at(when) for when in call.acquired]}",
        f"written {at(call.waiting)}",
        f"data {data}",
        f"{call.plan} {at(call.fired)}" if call.fired is not None else "",
        f"ended {at(call.ended)}",
    ]
    chain: list[str] = []
    seen = call.error
    while seen is not None and len(chain) < 4:
        extra = ""
        if isinstance(seen, StreamStalled):
            extra = f" [stage {seen.stage}, attempts {seen.attempts}, elapsed {seen.elapsed:.3f}]"
        chain.append(f"{type(seen).__name__}: {seen}{extra}")
        seen = seen.__cause__ or seen.__context__
    story = ", ".join(event for event in events if event)
    return f" ({story}{'; ' if chain else ''}{' <- '.join(chain)})"


def _judge(call: Call, flavor: Flavor, sent: int, sync: bool) -> Verdict:
    """The verdict on one call; ``sent``: how many times the server received it."""
    if call.started is None or call.ended is None:
        state = "never returned" if call.started is not None else "never began"
        return Verdict("hung", [state], call.kind.outcome == "content")
    problems = []
    took = call.ended - call.started
    if took > CALL_BOUND:
        problems.append(f"took {took:.1f} s")
    fired = call.fired
    if call.plan == "pre":
        root = _root(call.error, flavor) if call.error is not None else None
        if not isinstance(root, StreamInterrupted) or root.stage != "before_sending":
            problems.append(f"a call made interrupted: {root!r}")
        if took > PROMPT or sent or call.acquired:
            problems.append(f"sent {sent} times, {len(call.acquired)} connection(s), {took:.3f} s")
        return Verdict("interrupted", problems, False, took, "before_sending")
    if fired is None or fired >= call.ended:
        outcome, natural, late = _natural(call, flavor, sent)
        innocent = call.kind.outcome == "content"
        if call.close_error is not None:
            natural.append(f"close() from afar raised {call.close_error!r}")
        return Verdict(outcome, problems + natural, innocent, late)
    # Stopped while it ran. On sync, a pool wait cannot be interrupted: the call fails
    # once it has a connection, so the prompt clock starts there.
    ref = fired
    later = [when for when in call.acquired if when > fired]
    if sync and later and call.plan != "close":
        ref = later[0]
    root = _root(call.error, flavor) if call.error is not None else None
    expected: type[BaseException] = (
        StreamInterrupted if call.plan != "close" else flavor.http.StreamClosed
    )
    if call.close_error is not None:
        problems.append(f"close() from afar raised {call.close_error!r}")
    if call.close_took is not None and call.close_took > PROMPT:
        problems.append(f"close() from afar took {call.close_took:.3f} s")
    if isinstance(root, expected):
        late = call.ended - ref
        if late > PROMPT:
            problems.append(f"ended {late:.3f} s after the {call.plan}")
        before = len([when for when in call.acquired if when <= fired])
        if sent > before:
            problems.append(f"sent after the interrupt: {sent} sent, {before} connection(s)")
        stage = root.stage if isinstance(root, StreamInterrupted) else None
        outcome = "interrupted" if call.plan != "close" else "closed"
        return Verdict(outcome, problems, False, late, stage)
    # Its natural outcome may stand only if it was settled by the time it was stopped.
    outcome, natural, late = _natural(call, flavor, sent)
    settled = call.complete if call.kind.outcome == "content" else None
    if call.kind.outcome == "first_event" and call.acquired:
        settled = call.acquired[-1] + FIRST
    if call.kind.outcome == "mid_stream" and call.last_data is not None:
        settled = call.last_data + STALE
    if settled is None or settled > fired + RACE:
        natural.append(
            f"the {call.plan} at {fired - call.started:.3f} s did not stop it: {root!r}"
        )
    return Verdict(outcome, problems + natural, False, late)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Report:
    """The soak's figures, and every problem found, ready to print."""

    title: str
    seed: int
    calls: list[Call]
    verdicts: list[Verdict]
    wall: float
    before: tuple[int, int]
    after: tuple[int, int] = (0, 0)
    extra: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        found = []
        for call, verdict in zip(self.calls, self.verdicts, strict=True):
            name = f"#{call.index} {call.kind.name}/{call.plan}"
            found += [f"{name}: {problem}" for problem in verdict.problems]
            if verdict.problems:
                found.append(f"{name}: timeline{_where(call)}")
        return found + self.extra

    def text(self) -> str:
        outcomes = Counter(v.outcome for v in self.verdicts)
        stages = Counter(v.stage for v in self.verdicts if v.outcome == "interrupted")
        stopped = [c for c in self.calls if c.fired is not None and c.plan != "pre"]
        fired_in_time = [c for c in stopped if c.ended is not None and (c.fired or 0) < c.ended]
        innocent = [v for v in self.verdicts if v.innocent]
        innocent_failed = [v for v in innocent if v.problems]
        lines = [
            f"{self.title}: seed {self.seed} (HERMES_SOAK_SEED={self.seed} to replay),"
            f" scale {SCALE:g}, {len(self.calls)} requests in {self.wall:.1f} s",
            f"  outcomes: {dict(sorted(outcomes.items()))}",
            f"  interrupts/closes fired: {len(stopped)} ({len(fired_in_time)} before the"
            f" call ended); interrupted at: {dict(sorted((str(k), n) for k, n in stages.items()))}",
            f"  innocent: {len(innocent)}, failed: {len(innocent_failed)}",
        ]
        for outcome in ("first_event", "mid_stream", "interrupted", "closed"):
            late = [v.late for v in self.verdicts if v.outcome == outcome and v.late is not None]
            if late:
                lines.append(
                    f"  {outcome}: {len(late)}, past budget/stop: max {max(late):.3f} s,"
                    f" min {min(late):.3f} s"
                )
        for name in KINDS:
            took = [
                c.ended - c.started
                for c in self.calls
                if c.kind.name == name and c.started is not None and c.ended is not None
            ]
            if took:
                lines.append(
                    f"  {name}: {len(took)} calls, p50 {statistics.median(took):.3f} s,"
                    f" p99 {_percentile(took, 0.99):.3f} s, max {max(took):.3f} s"
                )
        lines.append(
            f"  fds {self.before[0]} -> {self.after[0]}, threads {self.before[1]} -> {self.after[1]}"
        )
        problems = self.problems
        lines += [f"  PROBLEM {p}" for p in problems[:40]]
        if len(problems) > 40:
            lines.append(f"  ... and {len(problems) - 40} more")
        return "\n".join(lines)


def _sent(servers: dict[str, FaultServer]) -> Counter[int]:
    """How many times each call reached a server, by call index."""
    return Counter(
        int(request.headers[ID_HEADER])
        for server in servers.values()
        for request in server.requests
        if ID_HEADER in request.headers
    )


def _verdicts(
    calls: list[Call], flavor: Flavor, servers: dict[str, FaultServer], *, sync: bool
) -> list[Verdict]:
    sent = _sent(servers)
    return [_judge(call, flavor, sent[call.index], sync) for call in calls]


# --- the harness: servers, the other threads, leak checks -----------------------------------


@contextlib.contextmanager
def _servers() -> Iterator[dict[str, FaultServer]]:
    with contextlib.ExitStack() as stack:
        yield {name: stack.enter_context(FaultServer(s)) for name, s in SERVERS.items()}


class Scheduler:
    """Another thread, running actions at given monotonic times: where interrupts come from."""

    def __init__(self, name: str) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()
        self._stopped = False
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def at(self, when: float, action: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (when, next(self._seq), action))
            self._cond.notify()

    def close(self) -> None:
        """Stop (actions not yet due are dropped) and join."""
        with self._cond:
            self._stopped = True
            self._cond.notify()
        self._thread.join(10.0)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and (
                    not self._heap or self._heap[0][0] > time.monotonic()
                ):
                    self._cond.wait(self._heap[0][0] - time.monotonic() if self._heap else None)
                if self._stopped:
                    return
                _, _, action = heapq.heappop(self._heap)
            try:
                action()
            except Exception as exc:
                self.errors.append(exc)


def _armed_entries() -> int:
    """Entries of the process-wide watchdog whose target is still armed."""
    with watchdog._cond:
        return sum(1 for _, _, target in watchdog._heap._heap if target.deadline is not None)


def _settle(check: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _threads() -> int:
    """``threading.active_count()`` but for trio's thread cache, which the test runner uses:
    anyio runs trio as a guest there, polling for I/O on a cached thread that idles on."""
    return threading.active_count() - sum(
        1 for thread in threading.enumerate() if thread.name.startswith("Trio thread ")
    )


def _leaks(
    before: tuple[int, int], watcher_was_running: bool
) -> tuple[tuple[int, int], list[str]]:
    """File descriptors and threads back to where they were (plus the watchdog's thread)."""
    threads = before[1] + (0 if watcher_was_running else 1)
    _settle(lambda: open_fds() <= before[0] and _threads() <= threads, 5.0)
    after = (open_fds(), _threads())
    problems = []
    if after[0] > before[0]:
        problems.append(f"file descriptors: {before[0]} before, {after[0]} after")
    if after[1] > threads:
        names = sorted(t.name for t in threading.enumerate())
        problems.append(f"threads: {before[1]} before, {after[1]} after: {names}")
    return after, problems


def _watcher_running() -> bool:
    thread = watchdog.thread
    return thread is not None and thread.is_alive()


def _finish(report: Report) -> None:
    print(report.text())
    assert not report.problems, report.text()


# --- sync: threads through one client ---------------------------------------------------------


def _sync_call(client: Any, urls: dict[str, str], call: Call) -> None:
    kind = call.kind
    request = client.build_request(
        "POST",
        urls[kind.server] + "/chat/completions",
        json=chat_body(stream=kind.stream),
        headers={ID_HEADER: str(call.index)},
        extensions={"trace": call.trace},
    )
    if not kind.stream:
        response = client.send(request)
        call.complete = time.monotonic()
        call.text = response.json()["choices"][0]["message"]["content"]
        return
    response = client.send(request, stream=True)
    call.response = response
    call.closer = response.close
    try:
        for chunk in response.iter_raw():
            call.saw(chunk)
        call.complete = time.monotonic()
    finally:
        response.close()


def _sdk_call(sdks: dict[str, openai.OpenAI], call: Call) -> None:
    kind, sdk = call.kind, sdks[call.kind.server]
    headers = {ID_HEADER: str(call.index)}
    if not kind.stream:
        completion = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], extra_headers=headers
        )
        call.complete = time.monotonic()
        call.text = completion.choices[0].message.content
        return
    stream = sdk.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True, extra_headers=headers
    )
    call.response = stream
    call.closer = stream.close
    try:
        for chunk in stream:
            call.saw_piece(chunk.choices[0].delta.content if chunk.choices else None)
        call.complete = time.monotonic()
        call.text = call.text or ""
    finally:
        stream.close()


def _run_threads(calls: list[Call], run: Callable[[Call], None]) -> list[str]:
    """Run every call on THREADS threads, each interrupt or close from one of two others."""
    schedulers = [Scheduler(f"soak-interrupter-{n}") for n in range(2)]
    for call in calls:
        scheduler = schedulers[call.index % 2]
        call.schedule = lambda when, call=call, scheduler=scheduler: scheduler.at(when, call.fire)
    pending: queue.SimpleQueue[Call] = queue.SimpleQueue()
    for call in calls:
        pending.put(call)

    def work() -> None:
        while True:
            try:
                call = pending.get_nowait()
            except queue.Empty:
                return
            call.begin()
            error: BaseException | None = None
            with call.token.bind():
                try:
                    run(call)
                except Exception as exc:
                    error = exc
            call.end(error)

    workers = [threading.Thread(target=work, name=f"soak-{n}") for n in range(THREADS)]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + SOAK_BOUND
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    problems = []
    if any(worker.is_alive() for worker in workers):
        hung = [f"#{c.index} {c.kind.name}/{c.plan}" for c in calls if c.ended is None]
        problems.append(f"hung after {SOAK_BOUND:.0f} s: {hung}")
    for scheduler in schedulers:
        scheduler.close()
        problems += [f"interrupter failed: {exc!r}" for exc in scheduler.errors]
    return problems


# Builds what runs one call: from the client, the servers and every call of the soak.
Runner = Callable[[Any, dict[str, FaultServer], list[Call]], Callable[[Call], None]]


def _sync_soak(title: str, flavor: Flavor, make: Runner) -> None:
    seed = _seed()
    calls = _plan(seed, MIX, SCALE)
    watcher_was_running = _watcher_running()
    before = (open_fds(), _threads())
    started = time.monotonic()
    with _servers() as servers:
        transport = flavor.WatchdogTransport(
            policy=POLICY, limits=flavor.http.Limits(max_connections=POOL)
        )
        client = flavor.http.Client(transport=transport, timeout=CALL_BOUND)
        try:
            problems = _run_threads(calls, make(client, servers, calls))
        finally:
            client.close()  # hung workers unwind once the servers stop, below
        wall = time.monotonic() - started
        verdicts = _verdicts(calls, flavor, servers, sync=True)
    report = Report(title, seed, calls, verdicts, wall, before, extra=problems)
    # Disarmed entries leave the heap at their old deadline; none may still be armed.
    _settle(lambda: watchdog.pending() == 0 or _armed_entries() == 0, STALE + FIRST + 1.0)
    if _armed_entries():
        report.extra.append(f"{_armed_entries()} watchdog entries still armed")
    report.after, leaks = _leaks(before, watcher_was_running)
    report.extra += leaks
    _finish(report)


@pytest.mark.timing
@pytest.mark.once  # no SDK: the same under every openai major
@pytest.mark.timeout(max(120.0, 2 * SOAK_BOUND))
def test_sync_soak_through_one_small_pool(flavor: Flavor) -> None:
    """Sixteen threads on one 4-connection client: every call ends as its kind and its interrupts say, on time, leaving nothing behind."""

    def make(
        client: Any, servers: dict[str, FaultServer], calls: list[Call]
    ) -> Callable[[Call], None]:
        urls = {name: server.base_url for name, server in servers.items()}
        return lambda call: _sync_call(client, urls, call)

    _sync_soak(f"sync soak [{flavor}]", flavor, make)


@pytest.mark.timing
@pytest.mark.timeout(max(120.0, 2 * SOAK_BOUND))
def test_openai_sdk_soak_through_one_small_pool(sdk_flavor: Flavor) -> None:
    """Sixteen threads calling openai.OpenAI (max_retries=0) over one 4-connection watchdog client get the same verdicts as raw calls."""

    def make(
        client: Any, servers: dict[str, FaultServer], calls: list[Call]
    ) -> Callable[[Call], None]:
        # The SDK sets no request extensions: a request hook lends each its trace.
        def lend_trace(request: Any) -> None:
            request.extensions["trace"] = calls[int(request.headers[ID_HEADER])].trace

        client.event_hooks = {"request": [lend_trace], "response": []}
        sdks = {
            name: openai.OpenAI(
                base_url=server.base_url, api_key="x", http_client=client, max_retries=0
            )
            for name, server in servers.items()
        }
        return lambda call: _sdk_call(sdks, call)

    _sync_soak(f"openai {openai.__version__} soak [{sdk_flavor}]", sdk_flavor, make)


# --- async: tasks on one loop through one client -----------------------------------------------


async def _async_call(client: Any, urls: dict[str, str], call: Call) -> None:
    kind = call.kind
    request = client.build_request(
        "POST",
        urls[kind.server] + "/chat/completions",
        json=chat_body(stream=kind.stream),
        headers={ID_HEADER: str(call.index)},
        extensions={"trace": call.atrace},
    )
    if not kind.stream:
        response = await client.send(request)
        call.complete = time.monotonic()
        call.text = response.json()["choices"][0]["message"]["content"]
        return
    response = await client.send(request, stream=True)
    call.response = response
    try:
        async for chunk in response.aiter_raw():
            call.saw(chunk)
        call.complete = time.monotonic()
    finally:
        await response.aclose()


async def _fire_at(call: Call, when: float) -> None:
    await anyio.sleep(max(0.0, when - time.monotonic()))
    await call.afire()


async def _run_tasks(
    flavor: Flavor, servers: dict[str, FaultServer], calls: list[Call], thread: Scheduler
) -> list[str]:
    """Run every call on TASKS tasks through one client; interrupts from tasks and ``thread``."""
    problems = []
    urls = {name: server.base_url for name, server in servers.items()}
    pending = iter(calls)
    transport = flavor.AsyncWatchdogTransport(
        policy=POLICY, limits=flavor.http.Limits(max_connections=POOL)
    )
    async with (
        flavor.http.AsyncClient(transport=transport, timeout=CALL_BOUND) as client,
        anyio.create_task_group() as others,
    ):

        def from_task(call: Call) -> Callable[[float], None]:
            def schedule(when: float) -> None:
                others.start_soon(_fire_at, call, when)

            return schedule

        for call in calls:
            if call.by_task or call.plan == "close":  # a close runs on the loop
                call.schedule = from_task(call)
            else:
                call.schedule = lambda when, call=call: thread.at(when, call.fire)

        async def work() -> None:
            for call in pending:
                call.begin()
                error: BaseException | None = None
                with call.token.bind():
                    try:
                        await _async_call(client, urls, call)
                    except Exception as exc:
                        error = exc
                call.end(error)

        with anyio.move_on_after(SOAK_BOUND) as bound:
            async with anyio.create_task_group() as workers:
                for _ in range(TASKS):
                    workers.start_soon(work)
        if bound.cancelled_caught:
            hung = [f"#{c.index} {c.kind.name}/{c.plan}" for c in calls if c.ended is None]
            problems.append(f"hung after {SOAK_BOUND:.0f} s: {hung}")
        others.cancel_scope.cancel()  # interrupts not yet due: their calls are over
    watcher = loop_watchdog()
    if watcher.live() or watcher.alarm_set:
        problems.append(f"loop watchdog: {watcher.live()} live, alarm set {watcher.alarm_set}")
    return problems


@pytest.mark.anyio
@pytest.mark.timing
@pytest.mark.once  # no SDK: the same under every openai major
@pytest.mark.timeout(max(120.0, 2 * SOAK_BOUND))
# Each loop once, each flavor once: every pairing soaks the same code again.
@pytest.mark.parametrize(
    ("anyio_backend", "flavor_name"),
    [("asyncio", "httpx"), ("trio", FLAVORS[-1])],
    ids=str,
)
async def test_async_soak_through_one_small_pool(flavor_name: FlavorName) -> None:
    """Sixty-four tasks on one loop and one 4-connection client: every call ends as its kind and its interrupts (from tasks and threads) say, on time, leaving nothing armed."""
    flavor = load_flavor(flavor_name)
    seed = _seed()
    calls = _plan(seed, MIX + ASYNC_EXTRA, SCALE)
    watcher_was_running = _watcher_running()
    before = (open_fds(), _threads())
    started = time.monotonic()
    problems: list[str] = []
    thread = Scheduler("soak-interrupter")
    try:
        with _servers() as servers:
            problems += await _run_tasks(flavor, servers, calls, thread)
            wall = time.monotonic() - started
            verdicts = _verdicts(calls, flavor, servers, sync=False)
    finally:
        thread.close()
    problems += [f"interrupter failed: {exc!r}" for exc in thread.errors]
    report = Report(f"async soak [{flavor}]", seed, calls, verdicts, wall, before, extra=problems)
    report.after, leaks = _leaks(before, watcher_was_running)
    report.extra += leaks
    _finish(report)


# --- the mix itself --------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1])
@pytest.mark.parametrize("scale", [1.0, 0.1, 10.0])
def test_the_mix_is_reproducible_and_holds_every_kind_and_plan(seed: int, scale: float) -> None:
    """A seed always draws the same calls, every kind and plan is among them, and the scale multiplies their number."""
    first, again = _plan(seed, MIX, scale), _plan(seed, MIX, scale)
    assert [(c.kind, c.plan, c.delay, c.by_task) for c in first] == [
        (c.kind, c.plan, c.delay, c.by_task) for c in again
    ]
    assert {c.kind.name for c in first} == set(KINDS)
    assert {c.plan for c in first} == set(PLANS)
    assert len(first) == sum(max(1, round(n * scale)) for _, _, n in MIX)
    assert [c.index for c in first] == list(range(len(first)))
    for call in first:
        if call.plan == "close" or call.plan == "mid":
            assert call.kind.stream
        assert 0 <= call.delay <= 1.2
