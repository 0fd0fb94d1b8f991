"""The process-wide deadline watcher, on its own."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from hermes_transport._loop_watchdog import loop_watchdog
from hermes_transport._watchdog import DeadlineHeap, Watchdog


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


def test_the_loop_watcher_needs_a_running_loop() -> None:
    """Outside any event loop the error says what is missing."""
    with pytest.raises(RuntimeError, match="asyncio or trio event loop"):
        loop_watchdog()
