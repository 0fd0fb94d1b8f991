"""The process-wide deadline watcher, on its own."""

from __future__ import annotations

import threading
import time

import pytest

from hermes_transport._watchdog import Watchdog


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
