"""Progress lines on stderr while the suite runs (the table goes to stdout)."""

from __future__ import annotations

import sys
import time

__all__ = ["say"]

_STARTED = time.monotonic()


def say(message: str) -> None:
    """Print ``message`` to stderr with the seconds since the suite started."""
    print(f"  [{time.monotonic() - _STARTED:5.0f} s] {message}", file=sys.stderr, flush=True)
