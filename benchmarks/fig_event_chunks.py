"""Figure 1c: raw SSE with one event per HTTP chunk, with and without the watchdog.

The read is figure 1a's: a long Chat Completions stream of small events (about 200 bytes)
read as raw bytes through the run's HTTP library (``iter_raw``), plain transport,
``WatchdogTransport`` (180 s stale budget) and the seed model (which stamps each chunk,
as in 1a). Only the server differs: ``Scenario(write_size=0)`` makes the fault server
write every event on its own, and its chunked framing makes each write one HTTP chunk, so
``iter_raw`` yields one event at a time (two pieces where a socket read ends inside a
chunk): this is what the watch costs per chunk, where 1a shows what it costs per byte.

The fault server, in Python, writing one event at a time, sends slower than any of the
clients reads (7-20 MB/s here), and while it sends it takes CPU the reader may need. So
each round first waits, untimed, until every stream's socket has stopped filling for
0.2 s: a stream of 25,000 events (5 MB) fits in its socket's 4 MiB receive buffer (which
the kernel doubles; it clamps it to ``net.core.rmem_max``), so the server is then done and
idle, and the whole stream is in the client (the socket's bytes end with the body's last
chunk). Then every turn reads 2,500 chunks, timed, wall clock and CPU. Where a stream
does not fit (a lower ``rmem_max``), its turns are gated as figure 7's (``gated_reads``)
until it does: each waits, untimed, until the socket holds 1 MiB or stops filling, then
reads no more than that minus 4 KiB, counting each chunk's framing (its size line and
CRLFs) with its bytes, so no timed read waits for the server. Otherwise the discipline is
figure 1's: each round opens one stream per client and takes each to its first chunk
untimed, the turns of the clients alternate on this one thread, the order of the clients
turns by one from round to round (six rounds: each order twice), and the figure is the
ratio of the medians over the rounds; the target must hold for wall time and for CPU
time. POSIX only (``FIONREAD``).
"""

from __future__ import annotations

import gc
import math
import socket
import statistics
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import seed_model, variants
from .flavor import FLAVOR
from .gated_reads import (
    EVENT_END,
    PLATEAU,
    RCVBUF,
    WANT,
    GatedStream,
    Sample,
    Turns,
    _queued,
    samples_of,
    timed_turn,
)
from .measure import fmt_s
from .progress import say
from .report import Row, Verdict
from .server import ServerProcess
from .variants import VARIANTS, Variant

__all__ = ["run"]

POLICY = StreamPolicy(stale_timeout=180.0)
SEED_STALE = 180.0
BODY = {**variants.CHAT, "stream": True}
PATH = "/chat/completions"
#: watchdog/plain, for wall time and for CPU time (#26; 1.05 before).
TARGET = 1.15
#: Requests the server answers before the measured ones, so that every measured stream
#: carries ids of the same number of digits (as in figures 1a and 7).
SETTLE_REQUESTS = 10
WARMUP_EVENTS = 2_000
#: The most one read unit of these streams takes on the wire (one event of about 200
#: bytes and its framing, with room to spare): a gated turn reads at most what the socket
#: holds minus this, so that its last read still finds bytes there.
UNIT_MAX = 4 * 1024
#: How the server's chunked body ends (the last chunk's CRLF, then the zero-size chunk):
#: a socket whose bytes end so holds all the rest of its stream.
BODY_END = b"\r\n0\r\n\r\n"
#: Chunks a turn reads once its stream is all in the client (ungated: no read can wait).
SLICE = 2_500
#: Before the first timed turn, how long every socket must have stopped filling: the
#: server is then done (each stream fits in its socket's receive buffer, ``RCVBUF``, if
#: the kernel allows that size), or blocked on full sockets, and no longer runs.
SETTLED = 0.2


@dataclass(frozen=True)
class Sizes:
    events: int
    rounds: int


#: About 4 s a round here (the server writes the three streams in about 2 s); 25,000
#: events (5 MB) fit in a socket's receive buffer (``RCVBUF``).
FULL = Sizes(events=25_000, rounds=6)
QUICK = Sizes(events=5_000, rounds=3)


def _framed(size: int) -> int:
    """The bytes on the wire of a chunk of ``size`` bytes: its size line, data and CRLF.

    A chunk that arrives in two pieces is counted twice over its framing: an upper bound,
    so that a gated turn stops early rather than late.
    """
    return len(b"%x" % size) + 4 + size


@dataclass
class _ChunkStream(GatedStream):
    """A gated stream whose units are the bytes each chunk took on the wire, framing
    included (to compare with the bytes in the socket); the seed model stamps each chunk as
    it arrives. ``served``: the server has written all of it (it is in the client)."""

    served: bool = False
    whole: bool = False  # served before the first timed turn

    def _read(self) -> Iterator[int]:
        with (
            variants.http_client(self.variant, policy=self.policy) as client,
            client.stream("POST", self.url, json=dict(self.body)) as response,
        ):
            if response.status_code != 200:
                raise RuntimeError(f"{self.url}: HTTP {response.status_code}")
            sock = response.extensions["network_stream"].get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)
            self.sock = sock
            if self.variant == "seed":
                with seed_model.SeedCall(SEED_STALE).running() as call:
                    call.attach_response(response)
                    yield from self._chunks(response.iter_raw(), call)
            else:
                yield from self._chunks(response.iter_raw(), None)

    def _chunks(self, chunks: Iterator[bytes], call: seed_model.SeedCall | None) -> Iterator[int]:
        first = next(chunks)  # in the untimed first step
        if call is not None:
            call.progressed()
        self.first_events, self.first_bytes = first.count(EVENT_END), len(first)
        yield _framed(len(first))
        for chunk in chunks:
            if call is not None:
                call.progressed()
            self.bytes += len(chunk)
            self.chunks += 1
            yield _framed(len(chunk))
        yield -1  # before closing anything, so that closing is not timed


def _gate(stream: _ChunkStream, want: float = WANT, plateau: float = PLATEAU) -> int | None:
    """Wait until ``stream``'s socket holds ``want`` bytes or stops filling for ``plateau``
    seconds; the bytes it holds, or None once the server has written the whole stream
    (then it is all in the socket and the client's buffer: no read can wait for it)."""
    if stream.served:
        return None
    assert stream.sock is not None
    sock = stream.sock
    held, since = _queued(sock), time.perf_counter()
    while held < want:
        time.sleep(0.001)
        now = _queued(sock)
        if now > held:
            held, since = now, time.perf_counter()
        elif time.perf_counter() - since > plateau:
            break
    if held < want and held and sock.recv(held, socket.MSG_PEEK).endswith(BODY_END):
        stream.served = True
        return None
    return held


def _read_round(
    streams: Mapping[Variant, _ChunkStream], order: tuple[Variant, ...], events: int
) -> dict[Variant, Sample]:
    """Read ``streams`` (not yet started) in turns, in ``order``, each turn gated (at most
    what the socket holds, minus ``UNIT_MAX``) until its stream is all in the client, then
    ``SLICE`` chunks; ``events``: how many the whole stream holds. As
    ``gated_reads.read_round``, whose margin of a 64 KiB read would leave a turn a single
    chunk of these once the socket holds less than that."""
    gc.collect()
    for stream in streams.values():
        next(stream.units)  # open, and wait for the first chunk: untimed
    for stream in streams.values():  # until the server is done, or blocked on full sockets
        _gate(stream, math.inf, SETTLED)
        stream.whole = stream.served
    turns = Turns(order)
    reading = list(order)
    while reading:
        for variant in list(reading):
            stream = streams[variant]
            held = _gate(stream)
            limit = held - UNIT_MAX if held is not None else None
            if limit is None:  # all in the client: a turn is SLICE chunks
                counted = (1 if size >= 0 else size for size in stream.units)
                ended = timed_turn(counted, SLICE, variant, turns)
            else:
                ended = timed_turn(stream.units, limit, variant, turns)
            if ended:
                reading.remove(variant)
    return samples_of(streams, turns, events)


def _scenario(events: int) -> Scenario:
    return Scenario(content=("x",) * events, write_size=0, usage=False)


def _prepare(server: ServerProcess, sizes: Sizes) -> int:
    """Warm every client up until the server's ids have two digits; then read one stream of
    the measured size, plain and untimed, and return how many events it holds."""
    url = server.url() + PATH
    server.set_scenario(_scenario(WARMUP_EVENTS))
    while server.request_count() < SETTLE_REQUESTS:
        for variant in VARIANTS:
            for _ in _ChunkStream(variant, url, BODY, POLICY).units:
                pass
    server.set_scenario(_scenario(sizes.events))
    with (
        variants.http_client("plain") as client,
        client.stream("POST", url, json=BODY) as response,
    ):
        return b"".join(response.iter_raw()).count(EVENT_END)


def _measure(
    server: ServerProcess, sizes: Sizes, events: int
) -> tuple[dict[Variant, list[Sample]], int]:
    """The samples of every round, and how many streams were whole before timing."""
    samples: dict[Variant, list[Sample]] = {v: [] for v in VARIANTS}
    whole = 0
    for number in range(sizes.rounds):
        shift = number % len(VARIANTS)
        order = VARIANTS[shift:] + VARIANTS[:shift]
        streams = {v: _ChunkStream(v, server.url() + PATH, BODY, POLICY) for v in order}
        for variant, sample in _read_round(streams, order, events).items():
            samples[variant].append(sample)
        whole += sum(stream.whole for stream in streams.values())
        say(f"event chunks round {number + 1}/{sizes.rounds}")
    return samples, whole


def _row(sizes: Sizes, samples: dict[Variant, list[Sample]], whole: int) -> Row:
    def med(v: Variant, name: str) -> float:
        return float(statistics.median(getattr(s, name) for s in samples[v]))

    wall = {v: med(v, "wall") for v in VARIANTS}
    cpu = {v: med(v, "cpu") for v in VARIANTS}
    chunks = {v: med(v, "chunks") for v in VARIANTS}
    ratio = {v: wall[v] / wall["plain"] for v in VARIANTS}
    cpu_ratio = {v: cpu[v] / cpu["plain"] for v in VARIANTS}

    def added(times: dict[Variant, float], v: Variant) -> float:
        """Microseconds ``v`` adds per chunk (each client's time over its own count)."""
        return (times[v] / chunks[v] - times["plain"] / chunks["plain"]) * 1e6

    def cell(v: Variant) -> str:
        if v == "plain":
            per = wall[v] / chunks[v] * 1e6
            return f"{fmt_s(wall[v])}; CPU {fmt_s(cpu[v])}; {per:.2f} µs/chunk"
        return (
            f"{fmt_s(wall[v])} ({ratio[v]:.3f}x); CPU {fmt_s(cpu[v])} ({cpu_ratio[v]:.3f}x);"
            f" adds {added(wall, v):.2f} µs/chunk (CPU {added(cpu, v):.2f})"
        )

    totals = sorted({s.total for runs in samples.values() for s in runs})
    worst = max(ratio["watchdog"], cpu_ratio["watchdog"])
    verdict: Verdict = "PASS" if worst <= TARGET and len(totals) == 1 else "MISS"

    def rounds(name: str) -> str:
        pairs = zip(samples["watchdog"], samples["plain"], strict=True)
        return ", ".join(f"{getattr(w, name) / getattr(p, name):.3f}" for w, p in pairs)

    plain = samples["plain"][0]
    turns = statistics.median(s.turns for runs in samples.values() for s in runs)
    switches = {
        v: " / ".join(f"{sum(getattr(s, k) for s in samples[v])}" for k in ("waits", "preempted"))
        for v in VARIANTS
    }
    notes = [
        f"watchdog/plain, round by round: wall {rounds('wall')}; CPU {rounds('cpu')}",
        f"{plain.chunks:,} chunks ({plain.events:,} events) of {plain.bytes / plain.chunks:.0f}"
        f" bytes on average after the first, read in {turns:.0f} turns",
        "context switches of the reading thread inside the timed turns, voluntary (a wait)"
        " / involuntary (preempted), all rounds: "
        + ", ".join(f"{v} {switches[v]}" for v in VARIANTS),
        f"streams all in the client before their first timed turn: {whole} of"
        f" {sizes.rounds * len(VARIANTS)}"
        + ("" if whole == sizes.rounds * len(VARIANTS) else " (the others' turns were gated)"),
    ]
    if len(totals) != 1:
        notes.append(f"the clients read different amounts: {totals}")
    return Row(
        key="1c",
        figure=f"raw SSE through {FLAVOR} (iter_raw), one event per HTTP chunk:"
        f" {sizes.events:,} events ({plain.total / 1e6:.0f} MB) after the first chunk,"
        f" median of {sizes.rounds} (x plain)",
        cells={v: cell(v) for v in VARIANTS},
        target=f"watchdog/plain <= {TARGET:.2f}x",
        verdict=verdict,
        data={
            "ratio": ratio,
            "cpu_ratio": cpu_ratio,
            "median_wall_s": wall,
            "median_cpu_s": cpu,
            "median_chunks": chunks,
            "added_us_per_chunk": {
                v: {"wall": added(wall, v), "cpu": added(cpu, v)} for v in VARIANTS
            },
            "samples": {v: [s.__dict__ for s in runs] for v, runs in samples.items()},
        },
        notes=notes,
    )


def run(quick: bool) -> list[Row]:
    """Measure figure 1c; one row."""
    sizes = QUICK if quick else FULL
    with ServerProcess(_scenario(WARMUP_EVENTS)) as server:
        events = _prepare(server, sizes)
        samples, whole = _measure(server, sizes, events)
    return [_row(sizes, samples, whole)]
