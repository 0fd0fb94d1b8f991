"""Hostile environments: uvloop, huge budgets, frozen clocks, gevent, fork() and interpreter exit.

Each can leave a stall or an interrupt silently unnoticed: a socket the kill
cannot reach (uvloop's), a watcher thread killed by a timeout it cannot hold
(a huge budget, a frozen clock), a thread that does not exist in a forked
child, streams still open when the interpreter exits. What cannot be undone in
this process (gevent's monkey-patching) or must end a process (interpreter
exit) runs in a subprocess that imports this module and calls one of its
``*_child`` functions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import importlib
import json
import logging
import math
import os
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import openai
import pytest

import hermes_transport
from hermes_transport import Interrupt, StreamInterrupted, StreamPolicy, StreamStalled
from hermes_transport._core.clock import monotonic
from hermes_transport._io import sockets as _sockets
from hermes_transport._io.loop_watchdog import loop_watchdog
from hermes_transport._io.watchdog import watchdog
from hermes_transport.testing import FaultServer, Scenario

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

from _support import FLAVORS, SDK_FLAVORS, Flavor, black_hole, deaf_server, load_flavor

# A short budget, and how late a stall may surface beyond it (generous: a busy
# 2-core machine). A stalled server hangs up after HOLD, far later: an error
# arriving then means the kill never reached the socket.
BUDGET = 0.3
SLACK = 1.0
HOLD = 5.0
# The transport sets a deadline when it sees an event, a moment before the
# test does: a stall may look this much early from the test's side.
SEEN_LATER = 0.05
# An interrupt must land within this of being fired.
PROMPT = 1.0
# The first-event budget where a first-event stall is not the point: a busy machine
# (or a gevent hub starting thirty streams at once) may take more than BUDGET to connect.
FIRST_EVENT = 3.0

# A healthy stream that lasts longer than BUDGET, with every gap well inside it.
SLOW_HEALTHY = dataclasses.replace(Scenario.healthy(content=("x",) * 10), event_interval=0.05)
# A long healthy stream: an interrupt must stop it well before its end.
LONG_HEALTHY = dataclasses.replace(Scenario.healthy(content=("x",) * 40), event_interval=0.1)
SILENT_MID = dataclasses.replace(Scenario.silent_after(1), hold=HOLD)
SILENT_FIRST = dataclasses.replace(Scenario.silent_before_headers(), hold=HOLD)

# Every test here is bound by wall-clock time: run after the parallel pass, on their own.
pytestmark = pytest.mark.timing


_E = TypeVar("_E", bound=BaseException)
TESTS = Path(__file__).resolve().parent


def _now() -> float:
    """The system's monotonic clock, read past any tool that freezes time (and past the library)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _found(exc: BaseException | None, kind: type[_E]) -> _E | None:
    """``exc`` or the first exception in its cause chain that is a ``kind`` (SDKs wrap ours)."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, kind):
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


@dataclasses.dataclass
class Run:
    """What one streaming call did, in plain values (JSON-able for subprocesses)."""

    error: str | None = None  # "stalled", "interrupted", or the type of any other error
    stage: str | None = None
    events: int = 0
    done: bool = False  # the stream ended normally
    started: float = 0.0
    last_event: float = 0.0
    ended: float = 0.0
    interrupted_at: float | None = None

    @property
    def elapsed(self) -> float:
        return self.ended - self.started

    @property
    def quiet(self) -> float:
        """Seconds from the last event seen (or the start) to the end."""
        return self.ended - (self.last_event or self.started)

    @property
    def latency(self) -> float:
        assert self.interrupted_at is not None, "the interrupt never fired"
        return self.ended - self.interrupted_at

    def saw_event(self) -> None:
        self.events += 1
        self.last_event = _now()

    def failed(self, exc: BaseException) -> None:
        self.ended = _now()
        stall = _found(exc, StreamStalled)
        stop = _found(exc, StreamInterrupted)
        if stall is not None:
            self.error, self.stage = "stalled", stall.stage
        elif stop is not None:
            self.error, self.stage = "interrupted", stop.stage
        else:
            self.error = f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}"

    def finished(self) -> None:
        self.ended = _now()
        self.done = True

    def to_json(self) -> dict[str, Any]:
        return {
            **dataclasses.asdict(self),
            "elapsed": self.elapsed,
            "quiet": self.quiet,
            "latency": None if self.interrupted_at is None else self.latency,
        }


def _assert_stalled(run: Run, stage: str, *, seen_later: float = SEEN_LATER) -> None:
    """Cut on budget: never before it, and long before the server would hang up."""
    assert run.error == "stalled", run
    assert run.stage == stage, run
    waited = run.quiet if stage == "mid_stream" else run.elapsed
    low = BUDGET - seen_later if stage == "mid_stream" else BUDGET
    assert low <= waited < BUDGET + SLACK, f"cut after {waited:.3f} s (budget {BUDGET} s)"


def _assert_interrupted(run: Run, stage: str) -> None:
    assert run.error == "interrupted", run
    assert run.stage == stage, run
    assert run.latency < PROMPT, f"interrupt landed after {run.latency:.3f} s"


def _assert_healthy(run: Run) -> None:
    assert run.error is None, run
    assert run.done, run
    assert run.events >= 3, run


def _fire_later(
    token: Interrupt,
    run: Run,
    *,
    after_event: bool,
    delay: float = 0.2,
    spawn: Callable[[Callable[[], None]], object] | None = None,
    sleep: Callable[[float], object] = time.sleep,
) -> None:
    """Interrupt ``token`` ``delay`` s after its first attempt began, or after the first event,
    from another thread.

    ``spawn`` starts the interrupting thread (a greenlet, a native thread under
    gevent); a daemon ``threading.Thread`` by default.
    """

    def fire() -> None:
        give_up = _now() + 10
        while after_event and run.events == 0 and _now() < give_up:
            sleep(0.005)
        # Not before the request is on its way (a busy machine may take longer than
        # `delay` to get there): an attempt bound to the token exists.
        while not after_event and not token._guards and _now() < give_up:
            sleep(0.005)
        sleep(delay)
        run.interrupted_at = _now()
        token.interrupt("user pressed stop")

    if spawn is None:
        threading.Thread(target=fire, daemon=True).start()
    else:
        spawn(fire)


def _messages() -> list[ChatCompletionMessageParam]:
    return [{"role": "user", "content": "hi"}]


# --- streaming calls, sync and async, bare or through the openai SDK --------------------------


class SyncCall:
    """One streaming chat call through the sync transport, bare (``api="httpx"``) or the SDK.

    The clients are built first (that takes tens of milliseconds of CPU: TLS
    contexts), so that calls run side by side on one gevent hub start together.
    """

    def __init__(
        self,
        api: str,
        flavor: Flavor,
        base_url: str,
        *,
        policy: StreamPolicy,
        token: Interrupt | None = None,
    ) -> None:
        self._api, self._url, self._token = api, base_url, token
        transport = flavor.WatchdogTransport(policy=policy, interrupt=token)
        self._http = flavor.http.Client(transport=transport, timeout=30.0)
        self._sdk = (
            openai.OpenAI(base_url=base_url, api_key="x", max_retries=0, http_client=self._http)
            if api == "sdk"
            else None
        )

    def run(self, interrupt_after_event: bool | None = None, **fire: Any) -> Run:
        """Stream to the end or the first error; interrupt on the way if asked (see _fire_later)."""
        run = Run(started=_now())
        if self._token is not None and interrupt_after_event is not None:
            _fire_later(self._token, run, after_event=interrupt_after_event, **fire)
        try:
            if self._sdk is not None:
                chunks = self._sdk.chat.completions.create(
                    model="m",
                    messages=_messages(),
                    stream=True,
                )
                for _ in chunks:
                    run.saw_event()
            else:
                body = {"model": "m", "messages": _messages(), "stream": True}
                with self._http.stream("POST", self._url + "/chat/completions", json=body) as r:
                    for chunk in r.iter_raw():
                        if b"data:" in chunk:
                            run.saw_event()
            run.finished()
        except Exception as exc:
            run.failed(exc)
        finally:
            self._http.close()
        return run


def stream_sync(
    api: str,
    flavor: Flavor,
    base_url: str,
    *,
    policy: StreamPolicy,
    token: Interrupt | None = None,
    interrupt_after_event: bool | None = None,
    **fire: Any,
) -> Run:
    """One streaming chat call through the sync transport, built and run at once."""
    call = SyncCall(api, flavor, base_url, policy=policy, token=token)
    return call.run(interrupt_after_event, **fire)


async def stream_async(
    api: str,
    flavor: Flavor,
    base_url: str,
    *,
    policy: StreamPolicy,
    token: Interrupt | None = None,
    interrupt_after_event: bool | None = None,
    verify: Any = True,
) -> Run:
    """One streaming chat call through the async transport, bare (``api="httpx"``) or the SDK."""
    transport = flavor.AsyncWatchdogTransport(policy=policy, interrupt=token, verify=verify)
    http_client = flavor.http.AsyncClient(transport=transport, timeout=30.0)
    sdk = (
        openai.AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, http_client=http_client)
        if api == "sdk"
        else None
    )
    run = Run(started=_now())  # after building the clients: that is CPU work, not the call
    if token is not None and interrupt_after_event is not None:
        _fire_later(token, run, after_event=interrupt_after_event)
    try:
        if sdk is not None:
            stream = await sdk.chat.completions.create(
                model="m", messages=_messages(), stream=True
            )
            async for _ in stream:
                run.saw_event()
        else:
            body = {"model": "m", "messages": _messages(), "stream": True}
            async with http_client.stream(
                "POST", base_url + "/chat/completions", json=body
            ) as response:
                async for chunk in response.aiter_raw():
                    if b"data:" in chunk:
                        run.saw_event()
        run.finished()
    except Exception as exc:
        run.failed(exc)
    finally:
        await http_client.aclose()
    return run


def _policy(first: float = FIRST_EVENT) -> StreamPolicy:
    """Stall budget BUDGET; the first event gets ``first`` (BUDGET where that is the point)."""
    return StreamPolicy(stale_timeout=BUDGET, first_event_timeout=first, retries=0)


# ==============================================================================================
# uvloop: its transports' sockets are PseudoSockets, reachable only through their descriptor.
# ==============================================================================================


@pytest.fixture(params=["asyncio", "trio", "uvloop"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Async tests here run on asyncio, trio and uvloop (asyncio with uvloop's loop)."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return "asyncio", {"loop_factory": uvloop.new_event_loop}
    return request.param


_F = TypeVar("_F", bound=Callable[..., Any])


def _on_uvloop(test: _F) -> _F:
    """Run an async test on uvloop only."""
    on_uvloop: _F = pytest.mark.anyio(
        pytest.mark.parametrize("anyio_backend", ["uvloop"], indirect=True)(test)
    )
    return on_uvloop


#: (api, flavor name, secure): the bare async client on each flavor over TCP and TLS, and
#: the SDK (over TCP: the socket is the same) on each flavor the installed openai accepts.
CLIENTS = [("httpx", name, secure) for name in FLAVORS for secure in (False, True)] + [
    ("sdk", name, False) for name in SDK_FLAVORS
]


@dataclasses.dataclass
class Client:
    """How a test streams: the API, the flavor, and the server it streams from."""

    api: str
    flavor: Flavor
    server: FaultServer
    verify: Any


@pytest.fixture(
    params=CLIENTS,
    ids=[f"{api}-{name}-{'tls' if secure else 'tcp'}" for api, name, secure in CLIENTS],
)
def client(request: pytest.FixtureRequest, tls: Any) -> Iterator[Client]:
    """A bare httpx/httpx2 client or the openai SDK, and a fault server over TCP or TLS."""
    api, name, secure = request.param
    with FaultServer(ssl_context=tls[0] if secure else None) as server:
        yield Client(api, load_flavor(name), server, tls[1] if secure else True)


def _assert_on_uvloop() -> None:
    loop = asyncio.get_running_loop()
    assert type(loop).__module__.startswith("uvloop"), type(loop)


@_on_uvloop
@pytest.mark.parametrize(
    ("stage", "scenario"),
    [("first_event", SILENT_FIRST), ("mid_stream", SILENT_MID)],
    ids=["first-event", "mid-stream"],
)
async def test_uvloop_stalls_are_cut_on_budget(
    client: Client, stage: str, scenario: Scenario
) -> None:
    """On uvloop a stream stalled before or after its first event raises StreamStalled on budget, not when the server hangs up."""
    _assert_on_uvloop()
    client.server.scenario = scenario
    run = await stream_async(
        client.api,
        client.flavor,
        client.server.base_url,
        policy=_policy(BUDGET) if stage == "first_event" else _policy(),
        verify=client.verify,
    )
    _assert_stalled(run, stage)


@_on_uvloop
@pytest.mark.parametrize(
    ("stage", "scenario", "after_event"),
    [("headers", SILENT_FIRST, False), ("mid_stream", SILENT_MID, True)],
    ids=["headers", "mid-stream"],
)
async def test_uvloop_interrupts_land_at_once(
    client: Client, stage: str, scenario: Scenario, after_event: bool
) -> None:
    """On uvloop an interrupt from another thread, waiting for headers or mid-stream, raises StreamInterrupted at once."""
    _assert_on_uvloop()
    client.server.scenario = scenario
    run = await stream_async(
        client.api,
        client.flavor,
        client.server.base_url,
        policy=StreamPolicy(stale_timeout=60.0),
        token=Interrupt(),
        interrupt_after_event=after_event,
        verify=client.verify,
    )
    _assert_interrupted(run, stage)


@_on_uvloop
async def test_uvloop_an_interrupt_stops_a_flowing_body(client: Client) -> None:
    """On uvloop an interrupt stops a stream that is still sending: the rest of the body never arrives."""
    _assert_on_uvloop()
    client.server.scenario = LONG_HEALTHY
    run = await stream_async(
        client.api,
        client.flavor,
        client.server.base_url,
        policy=StreamPolicy(stale_timeout=60.0),
        token=Interrupt(),
        interrupt_after_event=True,
        verify=client.verify,
    )
    _assert_interrupted(run, "mid_stream")
    assert run.events < 20, f"{run.events} events arrived after the interrupt"


@_on_uvloop
@pytest.mark.parametrize("where", ["connecting", "tls"])
@pytest.mark.parametrize("fault", ["stall", "interrupt"])
async def test_uvloop_connecting_and_the_tls_handshake_are_guarded(
    flavor: Flavor, tls: Any, where: str, fault: str
) -> None:
    """On uvloop a connect or a TLS handshake that hangs is cut by the first-event budget and by an interrupt."""
    _assert_on_uvloop()
    token = Interrupt()
    stalled = fault == "stall"
    policy = _policy(first=BUDGET) if stalled else StreamPolicy(stale_timeout=60.0)
    with contextlib.ExitStack() as stack:
        if where == "connecting":
            base_url, verify = stack.enter_context(black_hole()), True
        else:
            base_url, _ = stack.enter_context(deaf_server(tls[0], handshake=False))
            verify = tls[1]
        run = await stream_async(
            "httpx",
            flavor,
            base_url,
            policy=policy,
            token=None if stalled else token,
            interrupt_after_event=None if stalled else False,
            verify=verify,
        )
    if stalled:
        _assert_stalled(run, "first_event")
    else:
        _assert_interrupted(run, "connecting")


@_on_uvloop
async def test_shutdown_socket_reaches_a_uvloop_pseudo_socket() -> None:
    """shutdown_socket reaches uvloop's PseudoSocket through its descriptor: the peer sees the end of the stream and the descriptor stays open."""
    _assert_on_uvloop()
    listener = socket.create_server(("127.0.0.1", 0))
    with listener:
        reader, writer = await asyncio.open_connection(*listener.getsockname())
        peer, _ = listener.accept()
        with peer:
            pseudo = writer.get_extra_info("socket")
            assert not isinstance(pseudo, socket.socket)
            fd = pseudo.fileno()
            assert _sockets.shutdown_socket(pseudo) is True
            assert await asyncio.wait_for(reader.read(1), 5.0) == b""  # our side: woken
            peer.settimeout(5.0)
            assert peer.recv(1) == b""  # the other side: the connection is shut down
            os.fstat(fd)  # the transport's descriptor was not closed under it
            writer.close()


# --- shutdown_socket on its own ------------------------------------------------------------------


class _FdOnly:
    """A socket-like object that exposes only ``fileno()``, as uvloop's PseudoSocket does."""

    def __init__(self, *fds: int) -> None:
        self._fds = list(fds)

    def fileno(self) -> int:
        # Each call returns the next descriptor given (the last one sticks).
        return self._fds.pop(0) if len(self._fds) > 1 else self._fds[0]

    def shutdown(self, how: int) -> None:
        raise TypeError("transport sockets do not support shutdown() method")


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    with a, b:
        b.settimeout(5.0)
        yield a, b


def _peer_sees_eof(peer: socket.socket) -> bool:
    ready, _, _ = select.select([peer], [], [], 0.2)
    return bool(ready) and peer.recv(1) == b""


def test_shutdown_socket_reaches_a_socket_known_only_by_its_descriptor(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    """An object with only fileno() is shut down through a duplicate, which is closed again."""
    ours, peer = pair
    before = len(os.listdir("/proc/self/fd"))
    assert _sockets.shutdown_socket(_FdOnly(ours.fileno())) is True
    assert _peer_sees_eof(peer)
    assert len(os.listdir("/proc/self/fd")) == before
    assert ours.fileno() >= 0  # shut down, not closed


@pytest.mark.parametrize("fds", [(-1,), (7, -1)], ids=["closed", "closed-while-duplicated"])
def test_shutdown_socket_leaves_a_descriptor_alone_once_its_owner_closed_it(
    pair: tuple[socket.socket, socket.socket], fds: tuple[int, ...]
) -> None:
    """A descriptor its owner closed (before or while it was duplicated) is never shut down: its number may be someone else's now."""
    ours, peer = pair
    fds = tuple(ours.fileno() if fd == 7 else fd for fd in fds)
    assert _sockets.shutdown_socket(_FdOnly(*fds)) is True
    assert not _peer_sees_eof(peer)


@pytest.mark.parametrize("kind", ["no-fileno", "none", "not-a-socket"])
def test_an_unreachable_socket_is_reported_once_per_type(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    """A socket object that cannot be reached makes shutdown_socket return False and log one warning naming its type."""
    monkeypatch.setattr(_sockets, "_warned", set())
    caplog.set_level(logging.WARNING, logger="hermes_transport")
    read_end, write_end = os.pipe()
    try:
        target: object = {"no-fileno": object(), "none": None, "not-a-socket": None}[kind]
        if kind == "not-a-socket":
            target = _FdOnly(read_end)
        assert _sockets.shutdown_socket(target) is False
        assert _sockets.shutdown_socket(target) is False
    finally:
        os.close(read_end)
        os.close(write_end)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert type(target).__qualname__ in warnings[0].getMessage()


# ==============================================================================================
# Huge budgets: refused by the policy; and a huge deadline armed anyway leaves watchers alive.
# ==============================================================================================

# 1e12 troubles a thread's Condition.wait, 1e300 an event loop's timers too; NaN
# compares false with everything (a heap's order). Infinity: see test_watchdog.
FAR = [1e12, 1e300, math.nan]


class _Far:
    """A watchdog target whose deadline is absurdly far (or not a number)."""

    def __init__(self, far: float) -> None:
        self.deadline: float | None = monotonic() + far
        self.expired = False

    def expire(self) -> None:
        self.expired = True


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("stale_timeout", 1e10),
        ("stale_timeout", float(sys.maxsize)),
        ("first_event_timeout", sys.maxsize),
        ("first_event_timeout", threading.TIMEOUT_MAX),
    ],
    ids=repr,
)
def test_a_huge_budget_is_refused(name: str, value: float) -> None:
    """A budget above the documented maximum is a ValueError naming the field, before any watcher sees it."""
    fields: dict[str, Any] = {name: value}
    with pytest.raises(ValueError, match=name):
        hermes_transport.WatchdogTransport(policy=StreamPolicy(**fields))


@pytest.mark.parametrize(
    "variable", ["HERMES_STREAM_STALE_TIMEOUT", "HERMES_STREAM_FIRST_EVENT_TIMEOUT"]
)
@pytest.mark.parametrize("raw", ["1e300", "1e10", "1e400"])
def test_a_huge_budget_in_the_environment_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable: str, raw: str
) -> None:
    """A transport built from an environment whose budget is above the maximum raises ValueError naming the variable."""
    monkeypatch.setenv(variable, raw)
    with pytest.raises(ValueError, match=variable):
        hermes_transport.WatchdogTransport()


@pytest.mark.parametrize("far", FAR, ids=repr)
def test_a_huge_deadline_leaves_the_watchdog_thread_alive(server: FaultServer, far: float) -> None:
    """After a target with a deadline far past threading.TIMEOUT_MAX was armed, the process watchdog still cuts a stall on budget."""
    target = _Far(far)
    watchdog.arm(target)
    try:
        time.sleep(0.05)  # the watcher now sleeps towards the far deadline
        server.scenario = SILENT_MID
        run = stream_sync("httpx", load_flavor("httpx"), server.base_url, policy=_policy())
    finally:
        target.deadline = None
    _assert_stalled(run, "mid_stream")
    assert watchdog.thread is not None
    assert watchdog.thread.is_alive()
    assert not target.expired


@pytest.mark.anyio
@pytest.mark.parametrize("far", FAR, ids=repr)
async def test_a_huge_deadline_leaves_the_loop_watcher_working(
    server: FaultServer, far: float
) -> None:
    """After a target with an absurd deadline was armed on the loop (asyncio, trio, uvloop), a stall on that loop is still cut on budget."""
    watcher = loop_watchdog()
    target = _Far(far)
    watcher.arm(target)
    try:
        await anyio.sleep(0.02)
        server.scenario = SILENT_MID
        run = await stream_async("httpx", load_flavor("httpx"), server.base_url, policy=_policy())
    finally:
        target.deadline = None
        watcher.release(target)
    _assert_stalled(run, "mid_stream")
    assert not target.expired


# ==============================================================================================
# Frozen and travelling clocks: freezegun and time-machine.
# ==============================================================================================

_UTC = dt.timezone.utc
#: name: (tool, moment, tick). freezegun patches time.monotonic (in the frozen
#: thread's frames only); time-machine leaves it alone but moves time.time.
CLOCKS: dict[str, tuple[str, dt.datetime, bool]] = {
    "freezegun-1970": ("freezegun", dt.datetime(1970, 1, 1, tzinfo=_UTC), False),
    "freezegun-2020": ("freezegun", dt.datetime(2020, 1, 1, tzinfo=_UTC), False),
    "freezegun-2300": ("freezegun", dt.datetime(2300, 1, 1, tzinfo=_UTC), False),
    "freezegun-2300-tick": ("freezegun", dt.datetime(2300, 1, 1, tzinfo=_UTC), True),
    "time-machine-2300": ("time_machine", dt.datetime(2300, 1, 1, tzinfo=_UTC), False),
    "time-machine-2300-tick": ("time_machine", dt.datetime(2300, 1, 1, tzinfo=_UTC), True),
}
#: The async matrix is smaller: each clock above, but the loop's timers decide.
ASYNC_CLOCKS = ["freezegun-2300", "freezegun-2300-tick", "time-machine-2300"]


def _frozen(name: str) -> contextlib.AbstractContextManager[object]:
    tool, moment, tick = CLOCKS[name]
    if tool == "freezegun":
        freezegun = pytest.importorskip("freezegun")
        manager: contextlib.AbstractContextManager[object] = freezegun.freeze_time(
            moment, tick=tick
        )
        return manager
    time_machine = pytest.importorskip("time_machine")
    travel: contextlib.AbstractContextManager[object] = time_machine.travel(moment, tick=tick)
    return travel


@pytest.mark.parametrize(
    ("clock", "api"),
    [(clock, "httpx") for clock in CLOCKS]
    # The SDK reads clocks of its own (retries, timeouts): once through it.
    + [("freezegun-2300", "sdk")],
)
def test_a_frozen_clock_neither_kills_healthy_streams_nor_hides_stalls(
    server: FaultServer, clock: str, api: str
) -> None:
    """Under freezegun or time-machine a healthy sync stream longer than its budget completes and a stalled one is cut at its real budget."""
    flavor = load_flavor("httpx")  # the clock is shared code: one flavor is enough
    with _frozen(clock):
        server.scenario = SLOW_HEALTHY
        healthy = stream_sync(api, flavor, server.base_url, policy=_policy())
        server.scenario = SILENT_MID
        stalled = stream_sync(api, flavor, server.base_url, policy=_policy())
    _assert_healthy(healthy)
    assert healthy.elapsed > BUDGET, "the healthy stream must outlast one budget"
    _assert_stalled(stalled, "mid_stream")
    assert watchdog.thread is not None
    assert watchdog.thread.is_alive()


def _run_on(loop: str, main: Callable[[], Any]) -> Any:
    """Run ``main`` on a new event loop of that kind (made inside any frozen clock)."""
    if loop == "trio":
        return pytest.importorskip("trio").run(main)
    if loop == "uvloop":
        uv = pytest.importorskip("uvloop").new_event_loop()
        try:
            return uv.run_until_complete(main())
        finally:
            uv.close()
    return asyncio.run(main())


async def _loop_timers_work() -> bool:
    """Whether a 50 ms sleep on the running loop ends within half a second of real time."""
    woke = anyio.Event()
    fired = False
    stop = threading.Event()
    try:
        loop: Any = asyncio.get_running_loop()
        wake = loop.call_soon_threadsafe
    except RuntimeError:  # trio
        wake = pytest.importorskip("trio").lowlevel.current_trio_token().run_sync_soon

    def backstop() -> None:
        if not stop.wait(0.5):  # a lock's timeout runs on real time, frozen or not
            with contextlib.suppress(Exception):  # the loop may be gone already
                wake(woke.set)

    async def sleeper() -> None:
        nonlocal fired
        await anyio.sleep(0.05)
        fired = True
        woke.set()

    threading.Thread(target=backstop, daemon=True).start()
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(sleeper)
        await woke.wait()
        tasks.cancel_scope.cancel()
    stop.set()
    return fired


@pytest.mark.parametrize("clock", ASYNC_CLOCKS)
@pytest.mark.parametrize("loop", ["asyncio", "trio", "uvloop"])
def test_a_frozen_clock_on_an_event_loop(server: FaultServer, clock: str, loop: str) -> None:
    """Under freezegun or time-machine, wherever the loop's own timers run, a healthy async stream completes and a stalled one is cut at its real budget."""
    flavor = load_flavor("httpx")
    server.scenario = SILENT_MID
    with FaultServer(SLOW_HEALTHY) as healthy_server, _frozen(clock):

        async def main() -> dict[str, Run] | None:
            if not await _loop_timers_work():
                return None
            results: dict[str, Run] = {}

            async def one(name: str, url: str) -> None:
                results[name] = await stream_async("httpx", flavor, url, policy=_policy())

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(one, "healthy", healthy_server.base_url)
                tasks.start_soon(one, "stalled", server.base_url)
            return results

        results = _run_on(loop, main)
    if results is None:
        # asyncio's and trio's clocks are time.monotonic and perf_counter, which a
        # non-ticking freezegun stops: no sleep or timeout on such a loop can ever
        # end, with or without this library. (uvloop's clock is libuv's own.)
        pytest.skip(f"{loop}'s own timers never fire under {clock}: its clock is frozen")
    _assert_healthy(results["healthy"])
    _assert_stalled(results["stalled"], "mid_stream")


# ==============================================================================================
# gevent: monkey-patched sockets, threads as greenlets. In a subprocess: patching is forever.
# ==============================================================================================


def gevent_child(config: str) -> None:
    """Subprocess entry (after ``gevent.monkey.patch_all()``): run the cases, print JSON results."""
    # Untyped (no stubs needed to check this module): used through Any.
    gevent: Any = importlib.import_module("gevent")
    monkey: Any = importlib.import_module("gevent.monkey")

    assert monkey.is_module_patched("socket")
    urls: dict[str, str] = json.loads(config)
    native_sleep = monkey.get_original("time", "sleep")
    native_start = monkey.get_original("_thread", "start_new_thread")
    spawners: dict[str, dict[str, Any]] = {
        "greenlet": {"spawn": gevent.spawn, "sleep": gevent.sleep},
        "native-thread": {"spawn": lambda f: native_start(f, ()), "sleep": native_sleep},
    }
    calls: dict[str, tuple[SyncCall, dict[str, Any]]] = {}

    def case(
        name: str,
        api: str,
        flavor: Flavor,
        url: str,
        policy: StreamPolicy,
        token: Interrupt | None = None,
        **fire: Any,
    ) -> None:
        calls[name] = SyncCall(api, flavor, urls[url], policy=policy, token=token), fire

    # The first call of each kind does a burst of CPU work on the hub (the SDK builds
    # its models lazily; half a second on openai 2.x): no greenlet, the watchdog's
    # included, runs meanwhile. An application that has warmed up does not pay it.
    for api, names in (("httpx", FLAVORS), ("sdk", SDK_FLAVORS)):
        for name in names:
            stream_sync(api, load_flavor(name), urls["quick"], policy=_policy())
    # Every case at once, each in its own greenlet: each must get its own verdict on time.
    for api, names in (("httpx", FLAVORS), ("sdk", SDK_FLAVORS)):
        for name in names:
            flavor, key = load_flavor(name), f"{api}-{name}"
            case(f"{key}:healthy", api, flavor, "healthy", policy=_policy())
            case(f"{key}:stall-first-event", api, flavor, "silent_first", policy=_policy(BUDGET))
            case(f"{key}:stall-mid-stream", api, flavor, "silent_mid", policy=_policy())
            for by, spawner in spawners.items():
                for where, url in (("headers", "silent_first"), ("mid-stream", "long")):
                    case(
                        f"{key}:interrupt-{where}-from-{by}",
                        api,
                        flavor,
                        url,
                        policy=StreamPolicy(stale_timeout=60.0),
                        token=Interrupt(),
                        interrupt_after_event=where == "mid-stream",
                        # Well after the request is out, even with every case starting at once.
                        delay=0.6 if where == "headers" else 0.2,
                        **spawner,
                    )
    jobs = {name: gevent.spawn(call.run, **fire) for name, (call, fire) in calls.items()}
    gevent.joinall(list(jobs.values()), timeout=30)
    results = {name: job.value.to_json() for name, job in jobs.items() if job.value is not None}
    print(json.dumps(results))


def _child_env() -> dict[str, str]:
    """The environment for a child that imports this module: the tests folder on its path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERMES_STREAM_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(TESTS), str(TESTS.parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


_GEVENT_CASES = [
    f"{api}-{name}:{case}"
    for api, names in (("httpx", FLAVORS), ("sdk", SDK_FLAVORS))
    for name in names
    for case in [
        "healthy",
        "stall-first-event",
        "stall-mid-stream",
        *(
            f"interrupt-{where}-from-{by}"
            for where in ("headers", "mid-stream")
            for by in ("greenlet", "native-thread")
        ),
    ]
]


@pytest.fixture(scope="module")
def gevent_results() -> dict[str, Any]:
    """Every gevent case, run once in a subprocess that did ``gevent.monkey.patch_all()``."""
    pytest.importorskip("gevent")
    scenarios = {
        "quick": Scenario.healthy(),
        "healthy": SLOW_HEALTHY,
        "silent_first": SILENT_FIRST,
        "silent_mid": SILENT_MID,
        "long": LONG_HEALTHY,
    }
    with contextlib.ExitStack() as stack:
        urls = {
            name: stack.enter_context(FaultServer(scenario)).base_url
            for name, scenario in scenarios.items()
        }
        code = (
            "from gevent import monkey; monkey.patch_all()\n"
            "import sys, test_environments\n"
            "test_environments.gevent_child(sys.argv[1])\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(urls)],
            capture_output=True,
            text=True,
            timeout=90,
            env=_child_env(),
            check=False,
        )
    assert done.returncode == 0, done.stderr
    results: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    results["stderr"] = done.stderr
    return results


def _from_json(data: dict[str, Any]) -> Run:
    fields = {f.name for f in dataclasses.fields(Run)}
    return Run(**{k: v for k, v in data.items() if k in fields})


@pytest.mark.parametrize("case", _GEVENT_CASES)
def test_under_gevent(gevent_results: dict[str, Any], case: str) -> None:
    """Under gevent's monkey-patching, sync streams (bare and through the SDK) complete, stalls are cut on budget and interrupts from a greenlet or a native thread land at once."""
    run = _from_json(gevent_results[case])
    kind = case.split(":")[1]
    if kind == "healthy":
        _assert_healthy(run)
    elif kind.startswith("stall-"):
        # Thirty greenlets share one hub: the test may see an event a hub turn after
        # the transport did (the never-early promise itself is test_watchdog's).
        stage = "first_event" if kind == "stall-first-event" else "mid_stream"
        _assert_stalled(run, stage, seen_later=0.2)
    else:
        _assert_interrupted(run, "headers" if "-headers-" in kind else "mid_stream")


def test_under_gevent_nothing_is_left_unfinished_or_printed(
    gevent_results: dict[str, Any],
) -> None:
    """Under gevent every case, all run side by side in greenlets, finished and nothing was printed to stderr."""
    assert set(_GEVENT_CASES) <= set(gevent_results)
    assert gevent_results["stderr"] == ""


# ==============================================================================================
# fork(): the watchdog thread does not survive into the child; a new one must start there.
# ==============================================================================================


def _after_fork_in_child(urls: dict[str, str], parent_client: Any) -> dict[str, Any]:
    """In a forked child: stream with the inherited client and a new one, sync and async."""
    flavor = load_flavor("httpx")
    inherited = watchdog.thread
    results: dict[str, Any] = {"pending": watchdog.pending(), "had_thread": inherited is not None}
    results["healthy"] = stream_sync("httpx", flavor, urls["healthy"], policy=_policy()).to_json()
    results["stalled"] = stream_sync("httpx", flavor, urls["silent"], policy=_policy()).to_json()
    body = {"model": "m", "messages": _messages(), "stream": True}
    with parent_client.stream("POST", urls["healthy"] + "/chat/completions", json=body) as r:
        results["inherited_client"] = b"[DONE]" in r.read()
    results["async_stalled"] = asyncio.run(
        stream_async("httpx", flavor, urls["silent"], policy=_policy())
    ).to_json()
    results["thread_alive"] = watchdog.thread is not None and watchdog.thread.is_alive()
    return results


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_watches_its_own_streams_and_the_parent_goes_on() -> None:
    """A child forked while the watchdog thread runs and a stream is open streams and cuts stalls itself; the parent's stream and watchdog go on."""
    parents = dataclasses.replace(LONG_HEALTHY, content=("x",) * 15)  # 1.5 s: outlives the child
    with (
        FaultServer(parents) as slow,
        FaultServer(SLOW_HEALTHY) as healthy,
        FaultServer(SILENT_MID) as silent,
    ):
        urls = {"healthy": healthy.base_url, "silent": silent.base_url}
        client = hermes_transport.http_client_for("cron", policy=_policy())
        with client:
            body = {"model": "m", "messages": _messages(), "stream": True}
            with client.stream("POST", slow.base_url + "/chat/completions", json=body) as open_:
                chunks = open_.iter_raw()
                assert b"data:" in next(chunks)
                assert watchdog.thread is not None
                assert watchdog.thread.is_alive()
                read_end, write_end = os.pipe()
                pid = os.fork()
                if pid == 0:  # the child: never return into pytest
                    status = 1
                    try:
                        os.close(read_end)
                        result = json.dumps(_after_fork_in_child(urls, client)).encode()
                        os.write(write_end, result)
                        status = 0
                    finally:
                        os._exit(status)
                os.close(write_end)
                rest = b"".join(chunks)  # the parent's stream goes on meanwhile
                with os.fdopen(read_end, "rb") as pipe:
                    output = pipe.read()
                _, status = os.waitpid(pid, 0)
            assert b"[DONE]" in rest
            parent_stall = stream_sync(
                "httpx", load_flavor("httpx"), silent.base_url, policy=_policy()
            )
    assert os.waitstatus_to_exitcode(status) == 0
    child = json.loads(output)
    assert child["pending"] == 0, "the parent's deadlines leaked into the child"
    assert not child["had_thread"], "the child believes it has the parent's thread"
    _assert_healthy(_from_json(child["healthy"]))
    _assert_stalled(_from_json(child["stalled"]), "mid_stream")
    _assert_stalled(_from_json(child["async_stalled"]), "mid_stream")
    assert child["inherited_client"]
    assert child["thread_alive"]
    _assert_stalled(parent_stall, "mid_stream")


# ==============================================================================================
# Interpreter exit with streams open: prompt, quiet, exit code 0.
# ==============================================================================================


def exit_child(mode: str, config: str) -> None:
    """Subprocess entry: open sync and async streams (stalled and healthy), then exit per ``mode``."""
    urls: dict[str, str] = json.loads(config)
    body = {"model": "m", "messages": _messages(), "stream": True}
    kept: list[object] = []  # never closed

    for url in urls.values():
        for stale in (0.2, 60.0):  # 0.2: some stalls are cut while the interpreter exits
            transport = hermes_transport.WatchdogTransport(
                policy=StreamPolicy(stale_timeout=stale)
            )
            http = load_flavor("httpx").http.Client(transport=transport)
            request = http.build_request("POST", url + "/chat/completions", json=body)
            response = http.send(request, stream=True)
            chunks = response.iter_raw()
            next(chunks)
            kept += [http, response, chunks]

    async def open_async() -> None:
        for url in urls.values():
            for stale in (0.2, 60.0):
                transport = hermes_transport.AsyncWatchdogTransport(
                    policy=StreamPolicy(stale_timeout=stale)
                )
                http = load_flavor("httpx").http.AsyncClient(transport=transport)
                request = http.build_request("POST", url + "/chat/completions", json=body)
                response = await http.send(request, stream=True)
                chunks = response.aiter_raw()
                await chunks.__anext__()
                kept.extend([http, response, chunks])

    asyncio.run(open_async())
    import trio

    trio.run(open_async)
    if mode in ("reader-thread", "loop-thread"):
        started = threading.Event()

        def read_forever() -> None:
            http = load_flavor("httpx").http.Client(
                transport=hermes_transport.WatchdogTransport(policy=StreamPolicy(stale_timeout=60))
            )
            with http.stream("POST", urls["silent"] + "/chat/completions", json=body) as r:
                started.set()
                for _ in r.iter_raw():
                    pass

        async def await_forever() -> None:
            started.set()
            policy = StreamPolicy(stale_timeout=60)
            await stream_async("httpx", load_flavor("httpx"), urls["silent"], policy=policy)

        target = read_forever if mode == "reader-thread" else lambda: asyncio.run(await_forever())
        threading.Thread(target=target, daemon=True).start()
        started.wait(10)
        time.sleep(0.1)
    # Compared by the parent with when it sees this process end (one clock for the machine).
    print(f"exiting {_now()}", flush=True)
    time.sleep(0.1)  # some 0.2 s stalls now fall due during the exit itself
    if mode == "sys.exit":
        sys.exit(0)


EXIT_MODES = ["sys.exit", "falls-off-the-end", "reader-thread", "loop-thread"]


@pytest.fixture(scope="module")
def exits() -> dict[str, tuple[int, str, str, float]]:
    """Each exit mode run once, side by side: (status, stdout, stderr, seconds the exit took)."""
    results: dict[str, tuple[int, str, str, float]] = {}
    with (
        FaultServer(dataclasses.replace(SILENT_MID, hold=30.0)) as silent,
        FaultServer(LONG_HEALTHY) as healthy,
    ):
        urls = json.dumps({"silent": silent.base_url, "healthy": healthy.base_url})
        code = "import sys, test_environments; test_environments.exit_child(*sys.argv[1:])"

        def run(mode: str) -> None:
            child = subprocess.Popen(
                [sys.executable, "-c", code, mode, urls],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=_child_env(),
            )
            try:
                stdout, stderr = child.communicate(timeout=60)
            finally:
                if child.poll() is None:
                    child.kill()
                    child.communicate()
            ended = _now()
            said = stdout.split()
            exiting = float(said[1]) if said[:1] == ["exiting"] else math.inf
            results[mode] = (child.returncode, stdout, stderr, ended - exiting)

        runners = [threading.Thread(target=run, args=(mode,)) for mode in EXIT_MODES]
        for runner in runners:
            runner.start()
        for runner in runners:
            runner.join()
    return results


@pytest.mark.parametrize("mode", EXIT_MODES)
def test_the_interpreter_exits_promptly_and_quietly_with_streams_open(
    exits: dict[str, tuple[int, str, str, float]], mode: str
) -> None:
    """A process that exits with sync and async streams open (stalled and healthy, some blocked in daemon threads) exits at once, with status 0 and nothing on stderr."""
    status, stdout, stderr, took = exits[mode]
    assert stdout.startswith("exiting "), stderr
    assert status == 0, stderr
    assert stderr == ""
    # Finalizing an interpreter that imported openai takes ~0.4 s alone, and four
    # exit at once on two cores; a hang would last a stall budget (60 s) or the hold.
    assert took < 5.0, f"the exit took {took:.2f} s"
