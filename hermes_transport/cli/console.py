"""The probe's terminal side: ``Console`` (where text goes), ``Ticker`` (the live line), ``CtrlC``.

Owns everything that touches the terminal: timeline lines on stdout, the live
"waiting" line on stderr (rewritten in place on a terminal, plain "still
waiting" lines otherwise), and the SIGINT handler that turns Ctrl+C into an
``Interrupt``. What the live line says comes from a ``Watched`` (the
``Timeline``); every text is masked by the console's ``Redactor`` as it is written.
"""

from __future__ import annotations

import shutil
import signal
import threading
from types import FrameType
from typing import Any, Protocol, TextIO

from .._core.interrupt import Interrupt
from .._core.policy import StreamPolicy
from .redact import Redactor

__all__ = ["LIVE_TICK", "PLAIN_TICK", "Console", "CtrlC", "Ticker", "Watched"]

LIVE_TICK = 0.1  # seconds between redraws of the live line on a terminal
PLAIN_TICK = 10.0  # seconds between "still waiting" lines when not on a terminal


class Watched(Protocol):
    """What the live line reads: the seconds so far and what is being waited for."""

    def now(self) -> float: ...

    def waiting(self, policy: StreamPolicy) -> str: ...


class Console:
    """Where the probe writes: timeline lines to ``out``, the live line to ``err``.

    On a terminal (``err.isatty()``) the live line is rewritten in place with
    ``\\r``; otherwise no ``\\r`` is ever written. With ``--json`` the timeline
    lines are kept for the final object instead. One lock keeps a timeline line
    from landing in the middle of the live line. Every text is masked by
    ``redact`` as it is written, whole, after any masking at its source.
    """

    def __init__(self, out: TextIO, err: TextIO, *, lines: bool, secret: str | None) -> None:
        self._out, self._err = out, err
        self._lines = lines
        self.redact = Redactor(secret)
        self._lock = threading.Lock()
        self._drawn = False
        self.tty = _isatty(err)

    def line(self, text: str) -> None:
        if self._lines:
            self.write(text)

    def write(self, text: str) -> None:
        """A whole line on ``out``, whatever the mode (the summary, the JSON)."""
        with self._lock:
            self._erase()
            self._out.write(self.redact(text) + "\n")
            self._out.flush()

    def live(self, text: str) -> None:
        """Draw the live line in place (terminals only)."""
        # Cut to the terminal's width: a wrapped line cannot be rewritten in place.
        width = shutil.get_terminal_size().columns - 1
        with self._lock:
            self._err.write("\r" + self.redact.clip(text, width) + "\x1b[K")
            self._err.flush()
            self._drawn = True

    def clear(self) -> None:
        with self._lock:
            self._erase()

    def _erase(self) -> None:
        if self._drawn:
            self._err.write("\r\x1b[K")
            self._err.flush()
            self._drawn = False


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class Ticker:
    """A daemon thread showing the live line until the probe ends; joined on exit.

    On a terminal it redraws every ``LIVE_TICK`` s; otherwise it prints a
    plain "still waiting" line every ``PLAIN_TICK`` s (none with ``--json``).
    """

    def __init__(self, console: Console, timeline: Watched, policy: StreamPolicy) -> None:
        self._console, self._timeline, self._policy = console, timeline, policy
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hermes-probe-live", daemon=True)

    def __enter__(self) -> Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()
        self._console.clear()

    def _run(self) -> None:
        console, timeline = self._console, self._timeline
        period = LIVE_TICK if console.tty else PLAIN_TICK
        while not self._stop.wait(period):
            text = timeline.waiting(self._policy)
            if console.tty:
                console.live(text)
            else:
                console.line(f"{timeline.now():9.3f} s  still {text}")


class CtrlC:
    """While entered, Ctrl+C interrupts the probe's request through ``token``.

    The handler only sets an event and a helper thread calls
    ``token.interrupt``: a handler runs between two bytecodes of the main
    thread, maybe while it holds a lock ``interrupt()`` takes (the token's, a
    guard's). A second Ctrl+C raises ``KeyboardInterrupt``, for the stages an
    interrupt cannot reach (DNS). Installed only on the main thread (the only
    one Python signals) and where SIGINT is not ignored (a background job
    ignores it on purpose); the previous handler is restored on exit.
    """

    def __init__(self, token: Interrupt) -> None:
        self._token = token
        self._pressed = threading.Event()
        self._closing = False
        self._previous: Any = None
        self._installed = False
        self._thread = threading.Thread(target=self._run, name="hermes-probe-ctrl-c", daemon=True)

    def __enter__(self) -> CtrlC:
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not signal.SIG_IGN:
                self._previous = signal.signal(signal.SIGINT, self._handler)
                self._installed = True
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
        self._closing = True
        self._pressed.set()
        self._thread.join()

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._pressed.is_set():
            raise KeyboardInterrupt
        self._pressed.set()

    def _run(self) -> None:
        self._pressed.wait()
        if not self._closing:
            self._token.interrupt("Ctrl+C")
