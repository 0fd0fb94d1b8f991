"""Figure 7's reading: one stream per client, in turns that never wait for the server.

A turn first waits, untimed, until the client's socket holds ``WANT`` bytes (``FIONREAD``)
or stops filling, then reads, timed (wall clock and CPU), no more than those bytes minus
one read (``READ_MAX``), so that no timed read waits for the server: the fault server
builds some wires' events as it sends them, slower than either client reads. Each socket's
receive buffer is set to ``RCVBUF``. The turns of the clients alternate on this one
thread, as in figure 1. POSIX only (``FIONREAD``).
"""

from __future__ import annotations

import array
import fcntl
import gc
import resource
import socket
import sys
import termios
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from hermes_transport import StreamPolicy

from . import variants
from .variants import Variant

__all__ = ["EVENT_END", "GatedStream", "Sample", "read_round"]

#: Bytes a turn waits for in the socket before it is timed, and the most one read takes
#: (httpcore reads 64 KiB at a time): a turn reads at most WANT - READ_MAX bytes.
WANT = 1024 * 1024
READ_MAX = 64 * 1024
#: A socket that has not filled for this long is read as it is (its buffer is full, or
#: the server is done); the turn is only shorter, never blocked.
PLATEAU = 0.02
#: Every client socket's receive buffer, set as its stream opens: a fixed size (the kernel
#: may clamp it to ``net.core.rmem_max``) rather than the kernel's autotuning, which grew
#: or not from one stream to the next and so made the turns, and the reads, of one client
#: shorter than the other's.
RCVBUF = 4 * 1024 * 1024
#: How every event of these streams ends (LF line endings; JSON data has no blank line).
EVENT_END = b"\n\n"
#: Whose context switches the notes count: this thread's (Linux), else the process's.
RUSAGE = resource.RUSAGE_THREAD if sys.platform == "linux" else resource.RUSAGE_SELF


@dataclass(frozen=True)
class Sample:
    """One stream after its first chunk: seconds of reading, and what was read."""

    wall: float
    cpu: float
    bytes: int
    chunks: int
    events: int  # events of the whole stream minus those of the first chunk
    total: int  # bytes of the whole stream, the first chunk included
    turns: int
    waits: int  # voluntary context switches of this thread inside the timed turns
    preempted: int  # involuntary ones: the thread was runnable, not running


@dataclass
class GatedStream:
    """One client's stream: a generator of chunk sizes (-1 at the end), and its socket."""

    variant: Variant
    url: str  # the whole request URL
    body: Mapping[str, Any]
    policy: StreamPolicy
    bytes: int = 0
    chunks: int = 0
    first_events: int = 0
    first_bytes: int = 0
    sock: socket.socket | None = None
    units: Iterator[int] = field(init=False)

    def __post_init__(self) -> None:
        self.units = self._read()

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
            chunks = response.iter_raw()
            first = next(chunks)  # in the untimed first step
            self.first_events, self.first_bytes = first.count(EVENT_END), len(first)
            yield len(first)
            for chunk in chunks:
                self.bytes += len(chunk)
                self.chunks += 1
                yield len(chunk)
            yield -1  # before closing anything, so that closing is not timed


def _queued(sock: socket.socket) -> int:
    size = array.array("i", [0])
    fcntl.ioctl(sock.fileno(), termios.FIONREAD, size, True)
    return size[0]


def _gate(sock: socket.socket) -> int:
    """Wait until ``sock`` holds ``WANT`` bytes or stops filling; the bytes it holds."""
    held, since = _queued(sock), time.perf_counter()
    while held < WANT:
        time.sleep(0.001)
        now = _queued(sock)
        if now > held:
            held, since = now, time.perf_counter()
        elif time.perf_counter() - since > PLATEAU:
            break
    return held


class Turns:
    """What the timed turns of each client added up to: seconds, turns, context switches."""

    def __init__(self, order: tuple[Variant, ...]) -> None:
        self.wall = dict.fromkeys(order, 0.0)
        self.cpu = dict.fromkeys(order, 0.0)
        self.turns = dict.fromkeys(order, 0)
        self.waits = dict.fromkeys(order, 0)
        self.preempted = dict.fromkeys(order, 0)


def timed_turn(units: Iterator[int], limit: int, variant: Variant, turns: Turns) -> bool:
    """One timed turn: read ``units`` (sizes; negative at the end) until more than
    ``limit`` bytes (``units`` that count 1 a chunk: chunks); whether the stream ended
    (then it is closed, untimed)."""
    got, ended = 0, False
    before = resource.getrusage(RUSAGE)
    started, started_cpu = time.perf_counter(), time.process_time()
    for size in units:
        if size < 0:
            ended = True
            break
        got += size
        if got > limit:
            break
    turns.wall[variant] += time.perf_counter() - started
    turns.cpu[variant] += time.process_time() - started_cpu
    after = resource.getrusage(RUSAGE)
    turns.waits[variant] += after.ru_nvcsw - before.ru_nvcsw
    turns.preempted[variant] += after.ru_nivcsw - before.ru_nivcsw
    turns.turns[variant] += 1
    if ended:
        for _ in units:  # closes the stream and its client, untimed
            pass
    return ended


def samples_of(
    streams: Mapping[Variant, GatedStream], turns: Turns, events: int
) -> dict[Variant, Sample]:
    """Each client's sample from its stream and its turns; ``events``: the stream's."""
    return {
        v: Sample(
            turns.wall[v],
            turns.cpu[v],
            s.bytes,
            s.chunks,
            events - s.first_events,
            s.bytes + s.first_bytes,
            turns.turns[v],
            turns.waits[v],
            turns.preempted[v],
        )
        for v, s in streams.items()
    }


def read_round(
    streams: Mapping[Variant, GatedStream], order: tuple[Variant, ...], events: int
) -> dict[Variant, Sample]:
    """Read ``streams`` (not yet started) in gated turns, in ``order``; ``events``: how
    many the whole stream holds."""
    gc.collect()
    for stream in streams.values():
        next(stream.units)  # open, and wait for the first chunk: untimed
    turns = Turns(order)
    reading = list(order)
    while reading:
        for variant in list(reading):
            stream = streams[variant]
            assert stream.sock is not None
            limit = _gate(stream.sock) - READ_MAX
            if timed_turn(stream.units, limit, variant, turns):
                reading.remove(variant)
    return samples_of(streams, turns, events)
