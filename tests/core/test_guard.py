"""A guard that lets go of its connection stays open for its caller, and reaches no socket."""

from __future__ import annotations

import pytest

from hermes_transport import Interrupt
from hermes_transport._core.guard import Guard


class Connection:
    """A stand-in for a tracked connection: records the kills that reach it."""

    def __init__(self) -> None:
        self.kills = 0
        self.closes = 0

    def kill(self) -> bool:
        self.kills += 1
        return True

    def finish_close(self) -> None:
        self.closes += 1


@pytest.mark.parametrize("how", ["interrupt", "close_from_afar"])
def test_a_guard_that_let_go_still_fires_but_kills_nothing(how: str) -> None:
    """After let_go() an interrupt (from its token) or a close from afar still fires the guard, which the waiting caller reads, and no kill reaches the connection it had."""
    token = Interrupt()
    guard = Guard("mid_stream")
    assert guard.bind([token])
    connection = Connection()
    guard.attach(connection)
    guard.deadline = 123.0
    guard.let_go()
    assert guard.deadline is None
    if how == "interrupt":
        token.interrupt("user pressed stop")
    else:
        guard.close_from_afar()
    assert guard.fired == ("interrupted" if how == "interrupt" else "closed")
    assert connection.kills == 0
    guard.close()


def test_a_close_deferred_under_the_guard_is_done_when_it_lets_go() -> None:
    """A close of the attached connection that another thread deferred is done at let_go(), when the connection stops being the guard's, and not again at close()."""
    guard = Guard("mid_stream")
    connection = Connection()
    guard.attach(connection)
    assert guard.defer_close(connection)
    guard.let_go()
    assert connection.closes == 1
    guard.close()
    assert connection.closes == 1
