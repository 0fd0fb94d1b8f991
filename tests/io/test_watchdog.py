"""The process-wide deadline watcher, on its own."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from typing import Any

import anyio
import pytest

import hermes_transport._io.loop_watchdog as loop_watchdog_module
from hermes_transport._core.deadlines import MAX_WAIT, DeadlineHeap, bounded_wait
from hermes_transport._io.loop_watchdog import loop_watchdog
from hermes_transport._io.watchdog import Watchdog

# No SDK: the same under every openai major, so run with the newest only.
pytestmark = pytest.mark.once


class Target:
    """A watchdog target that records when it expired."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.expired_at: float | None = None
        self.expired = threading.Event()
        self.calls = 0

    def expire(self) -> None:
        self.calls += 1
        self.expired_at = time.monotonic()
        self.deadline = None
        self.expired.set()


@pytest.fixture
def dog() -> Watchdog:
    return Watchdog()


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.05, 0.2])
def test_targets_expire_after_their_deadline_never_before(dog: Watchdog, delay: float) -> None:
    """A target expires once, at or after its deadline."""
    target = Target(time.monotonic() + delay)
    dog.arm(target)
    assert target.expired.wait(5.0)
    assert target.expired_at is not None
    assert target.deadline is None
    assert target.calls == 1


def test_never_early_over_many_targets(dog: Watchdog) -> None:
    """Of many interleaved deadlines, none expires before its own deadline."""
    deadlines = [time.monotonic() + 0.005 * (i % 40) for i in range(400)]
    targets = [Target(d) for d in deadlines]
    for target in targets:
        dog.arm(target)
    for target, deadline in zip(targets, deadlines, strict=True):
        assert target.expired.wait(5.0)
        assert target.expired_at is not None
        assert target.expired_at >= deadline


def test_moving_a_deadline_later_postpones_expiry_without_rearming(dog: Watchdog) -> None:
    """Lazy re-arming: writing a later deadline is enough; the watcher re-checks it."""
    target = Target(time.monotonic() + 0.05)
    dog.arm(target)
    for _ in range(5):
        time.sleep(0.03)
        target.deadline = time.monotonic() + 0.1
    final = target.deadline
    assert final is not None
    assert target.expired.wait(5.0)
    assert target.expired_at is not None
    assert target.expired_at >= final


def test_a_disarmed_target_never_expires(dog: Watchdog) -> None:
    """Setting the deadline to None disarms the target."""
    target = Target(time.monotonic() + 0.05)
    dog.arm(target)
    target.deadline = None
    assert not target.expired.wait(0.3)


def test_an_earlier_deadline_armed_later_wakes_the_watcher(dog: Watchdog) -> None:
    """A short deadline armed while the watcher sleeps on a long one is still served on time."""
    dog.arm(Target(time.monotonic() + 60))
    time.sleep(0.05)  # the watcher is now asleep until the far deadline
    short = Target(time.monotonic() + 0.05)
    dog.arm(short)
    assert short.expired.wait(2.0)


def test_one_lazy_thread_serves_every_target(dog: Watchdog) -> None:
    """No thread exists before the first target; one serves all later ones."""
    assert dog.thread is None
    targets = [Target(time.monotonic() + 0.01) for _ in range(50)]
    for target in targets:
        dog.arm(target)
    thread = dog.thread
    assert thread is not None
    assert thread.daemon
    assert all(t.expired.wait(5.0) for t in targets)
    dog.arm(Target(time.monotonic()))
    assert dog.thread is thread


def test_disarmed_entries_are_compacted_away(dog: Watchdog) -> None:
    """Many disarmed targets with far deadlines do not pile up in the heap."""
    for _ in range(20_000):
        target = Target(time.monotonic() + 3600)
        dog.arm(target)
        target.deadline = None
    assert dog.pending() <= 2048


def test_a_target_whose_expiry_fails_does_not_kill_the_watcher(dog: Watchdog) -> None:
    """An exception in one expiry is logged and the next target is still served."""

    class Broken(Target):
        def expire(self) -> None:
            self.deadline = None
            raise RuntimeError("boom")

    dog.arm(Broken(time.monotonic()))
    healthy = Target(time.monotonic() + 0.05)
    dog.arm(healthy)
    assert healthy.expired.wait(5.0)


# --- nothing a target or a clock does leaves the process without a watcher ----------------------

# Deadlines (seconds from now) no timer can hold: past threading.TIMEOUT_MAX, infinite, NaN.
FAR = [1e10, 1e12, 1e300, math.inf, math.nan]


class _FailingHeap(DeadlineHeap):
    """A heap whose pop_due raises once: a bug in the watcher's own loop."""

    __slots__ = ("failures",)

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.failures = [error]

    def pop_due(self, now: float) -> list[Any]:
        if self.failures:
            raise self.failures.pop()
        return super().pop_due(now)


class _RecordingCondition(threading.Condition):
    """A Condition that records every timeout it is asked to wait for."""

    def __init__(self) -> None:
        super().__init__(threading.Lock())
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(timeout)


@pytest.mark.parametrize(
    ("delay", "bounded"),
    [
        (-5.0, 0.0),
        (0.0, 0.0),
        (0.25, 0.25),
        (MAX_WAIT, MAX_WAIT),
        (1e12, MAX_WAIT),
        (math.inf, MAX_WAIT),
        (math.nan, MAX_WAIT),
        (-math.inf, 0.0),
    ],
    ids=repr,
)
def test_every_wait_is_bounded(delay: float, bounded: float) -> None:
    """bounded_wait clamps a delay to [0, MAX_WAIT], NaN included, far below threading.TIMEOUT_MAX."""
    assert bounded_wait(delay) == bounded
    assert MAX_WAIT < threading.TIMEOUT_MAX / 1000


@pytest.mark.parametrize("far", FAR, ids=repr)
def test_a_far_deadline_is_slept_towards_in_bounded_steps(dog: Watchdog, far: float) -> None:
    """A deadline beyond threading.TIMEOUT_MAX never reaches Condition.wait whole: the thread lives and serves a short deadline armed after it."""
    cond = _RecordingCondition()
    dog._cond = cond
    far_target = Target(time.monotonic() + far)
    dog.arm(far_target)
    time.sleep(0.05)  # the watcher is asleep towards the far deadline now
    short = Target(time.monotonic() + 0.05)
    dog.arm(short)
    assert short.expired.wait(5.0)
    assert dog.thread is not None
    assert dog.thread.is_alive()
    assert not far_target.expired.is_set()
    assert cond.timeouts
    assert all(t is None or 0 <= t <= MAX_WAIT for t in cond.timeouts), cond.timeouts
    far_target.deadline = None


def test_a_far_deadline_is_re_checked_when_a_bounded_sleep_ends(
    dog: Watchdog, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When a bounded sleep ends before a far deadline, the watcher sleeps again instead of expiring it (never early)."""
    monkeypatch.setattr("hermes_transport._core.deadlines.MAX_WAIT", 0.02)
    far = Target(time.monotonic() + 1e12)
    dog.arm(far)
    time.sleep(0.2)  # ten bounded sleeps
    assert not far.expired.is_set()
    short = Target(time.monotonic() + 0.01)
    dog.arm(short)
    assert short.expired.wait(5.0)
    far.deadline = None


def test_an_error_in_the_watcher_loop_is_logged_and_survived(
    dog: Watchdog, caplog: pytest.LogCaptureFixture
) -> None:
    """An unexpected exception in the watcher's own loop is logged; the same thread goes on serving targets."""
    caplog.set_level(logging.ERROR, logger="hermes_transport")
    dog._heap = _FailingHeap(OverflowError("timeout value is too large"))
    first = Target(time.monotonic())
    dog.arm(first)
    assert first.expired.wait(5.0)
    thread = dog.thread
    later = Target(time.monotonic() + 0.02)
    dog.arm(later)
    assert later.expired.wait(5.0)
    assert dog.thread is thread
    assert "watcher loop failed" in caplog.text
    assert "OverflowError" in caplog.text


# The thread is made to die on purpose; pytest reports the exit as unhandled.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_dead_watcher_thread_is_replaced_on_the_next_arm(dog: Watchdog) -> None:
    """If the watcher thread ever dies, the next arm() starts a new one and targets armed before are still served."""

    class Fatal(Target):
        def expire(self) -> None:
            self.deadline = None
            raise SystemExit  # not an Exception: it ends the thread (silently)

    dog.arm(Fatal(time.monotonic()))
    dead = dog.thread
    assert dead is not None
    dead.join(5.0)
    assert not dead.is_alive()
    waiting = Target(time.monotonic() + 0.05)  # in the heap, with no thread to serve it
    dog._heap.push(waiting)
    fresh = Target(time.monotonic() + 0.05)
    dog.arm(fresh)
    assert dog.thread is not None
    assert dog.thread is not dead
    assert fresh.expired.wait(5.0)
    assert waiting.expired.wait(5.0)


def test_a_nan_deadline_does_not_hide_the_others() -> None:
    """A NaN deadline sorts last ("never") instead of breaking the heap's order, so the others still pop on time."""
    heap = DeadlineHeap()
    broken = Target(math.nan)
    targets = [Target(float(d)) for d in (3, 1, 2)]
    heap.push(broken)
    for target in targets:
        heap.push(target)
    assert heap.earliest() == 1.0
    assert heap.pop_due(2.5) == [targets[1], targets[2]]
    assert heap.pop_due(1e300) == [targets[0]]
    assert heap.earliest() == math.inf
    target = Target(1.0)
    heap.push(target)
    target.deadline = math.nan  # moved to "never" while in the heap
    assert heap.pop_due(10.0) == []


# --- the pure heap ----------------------------------------------------------------------------


def test_the_heap_pops_only_what_is_due_and_re_pushes_moved_deadlines() -> None:
    """pop_due returns targets at or past `now`, keeps moved ones and drops disarmed ones."""
    heap = DeadlineHeap()
    due, moved, disarmed, later = Target(1.0), Target(1.0), Target(1.0), Target(5.0)
    for target in (due, moved, disarmed, later):
        heap.push(target)
    moved.deadline = 3.0
    disarmed.deadline = None
    assert heap.pop_due(0.5) == []
    assert heap.pop_due(1.0) == [due]
    assert heap.earliest() == 3.0
    assert heap.pop_due(4.0) == [moved]
    assert len(heap) == 1
    assert heap.pop_due(10.0) == [later]
    assert heap.earliest() is None


def test_the_heap_says_whether_a_push_became_the_earliest() -> None:
    """push() tells the caller when the alarm must move earlier."""
    heap = DeadlineHeap()
    assert heap.push(Target(5.0))
    assert not heap.push(Target(6.0))
    assert heap.push(Target(1.0))
    assert not heap.push(Target(None))


# --- the event-loop watcher -------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
async def test_loop_targets_expire_on_the_loop_after_their_deadline(delay: float) -> None:
    """On asyncio and trio, a target expires once, on the loop's thread, never early."""
    watcher = loop_watchdog()
    target = Target(time.monotonic() + delay)
    watcher.arm(target)
    while not target.expired.is_set():
        await anyio.sleep(0.005)
    assert target.expired_at is not None
    assert target.expired_at >= time.monotonic() - 5.0
    assert target.calls == 1
    assert not watcher.alarm_set
    assert watcher.live() == 0


@pytest.mark.anyio
async def test_loop_deadlines_move_lazily_and_releases_take_the_alarm_down() -> None:
    """A deadline moved later is honoured without re-arming; releasing the last target
    cancels the loop's timer."""
    watcher = loop_watchdog()
    target = Target(time.monotonic() + 0.05)
    watcher.arm(target)
    target.deadline = time.monotonic() + 0.3  # progress: one attribute write
    started = time.monotonic()
    while not target.expired.is_set():
        await anyio.sleep(0.005)
    assert target.expired_at is not None
    assert target.expired_at - started >= 0.29
    other = Target(time.monotonic() + 60)
    watcher.arm(other)
    assert watcher.alarm_set
    watcher.release(other)
    assert not watcher.alarm_set
    assert watcher.live() == 0


@pytest.mark.anyio
async def test_a_failing_target_does_not_stop_the_loop_watcher(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A target whose expire() raises is logged; the others still expire."""

    class Broken(Target):
        def expire(self) -> None:
            self.deadline = None
            raise RuntimeError("bug")

    watcher = loop_watchdog()
    broken, fine = Broken(time.monotonic()), Target(time.monotonic() + 0.05)
    watcher.arm(broken)
    watcher.arm(fine)
    while not fine.expired.is_set():
        await anyio.sleep(0.005)
    assert "expiring" in caplog.text


def _alarm_delay(watcher: Any) -> float:
    """Seconds from now until the loop's alarm rings, read from the loop's own timer."""
    alarm = watcher._alarm
    if isinstance(alarm, loop_watchdog_module._AsyncioAlarm):
        assert alarm._handle is not None
        return alarm._handle.when() - asyncio.get_running_loop().time()
    import trio

    assert alarm._scope is not None
    deadline: float = alarm._scope.deadline
    return deadline - trio.current_time()


@pytest.mark.anyio
@pytest.mark.parametrize("far", FAR, ids=repr)
async def test_loop_alarms_are_bounded_and_far_deadlines_stay_armed(far: float) -> None:
    """On asyncio and trio, a far or NaN deadline sets the loop's timer at most MAX_WAIT ahead, and a short one armed after it still expires."""
    watcher = loop_watchdog()
    far_target = Target(time.monotonic() + far)
    watcher.arm(far_target)
    await anyio.sleep(0.01)  # trio: the alarm task takes the new deadline
    delay = _alarm_delay(watcher)
    if math.isfinite(far):
        assert 0 <= delay <= MAX_WAIT + 1
    else:  # "never" needs no timer at all (trio's alarm is then off); a bounded one will do
        assert 0 <= delay <= MAX_WAIT + 1 or delay == math.inf
    short = Target(time.monotonic() + 0.05)
    watcher.arm(short)
    while not short.expired.is_set():
        await anyio.sleep(0.005)
    assert not far_target.expired.is_set()
    watcher.release(far_target)
    watcher.release(short)
    assert not watcher.alarm_set


@pytest.mark.anyio
async def test_a_far_deadline_on_a_loop_is_re_checked_when_its_bounded_timer_rings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """When a bounded loop timer rings before a far deadline, the watcher sets it again instead of expiring the target."""
    monkeypatch.setattr(loop_watchdog_module, "bounded_wait", lambda d: min(max(d, 0.0), 0.02))
    watcher = loop_watchdog()
    far = Target(time.monotonic() + 1e12)
    watcher.arm(far)
    await anyio.sleep(0.2)  # ten rings
    assert not far.expired.is_set()
    assert watcher.alarm_set
    watcher.release(far)


@pytest.mark.anyio
async def test_an_error_in_the_loop_watcher_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An unexpected error while the loop's alarm rings is logged (it would crash trio's run), and the next arm() serves targets again."""
    caplog.set_level(logging.ERROR, logger="hermes_transport")
    watcher = loop_watchdog()
    assert watcher.live() == 0
    watcher._heap = _FailingHeap(RuntimeError("bug"))
    first = Target(time.monotonic())
    watcher.arm(first)
    await anyio.sleep(0.05)
    assert "event-loop watcher failed" in caplog.text
    later = Target(time.monotonic() + 0.02)
    watcher.arm(later)
    while not (first.expired.is_set() and later.expired.is_set()):
        await anyio.sleep(0.005)


def test_the_loop_watcher_needs_a_running_loop() -> None:
    """Outside any event loop the error says what is missing."""
    with pytest.raises(RuntimeError, match="asyncio or trio event loop"):
        loop_watchdog()
