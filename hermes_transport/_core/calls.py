"""Re-send accounting for one logical call, across every layer that may re-send.

Three layers could send a stalled streaming request again: the transport (a
stall before the first event), the SDK's own retry loop (it retries the
``StreamStalled`` the transport raises, since that is a ``ReadTimeout``) and
the streaming runner (a stall after the first event whose content reached
nobody). Each would multiply the others. A ``Call`` holds the one budget of
stall re-sends: the transport and the runner draw on it, and an SDK retry of
a stream whose budget is spent fails at once, offline (under a runner the
SDK never sees the stall: see ``errors.Handoff``). So stalls cost a call at
most ``retries`` re-sends. ``attempts`` counts every attempt of the call,
the SDK's retries after other failures (a 5xx, say) included; those draw
nothing from the budget. Only a streaming request with a first-event budget,
or a resumable one, looks its call up (and counts an attempt); any other gets
no ``Call``. A
``Call`` also holds the call's budget of resumes (``StreamPolicy.resumes``),
drawn on by every resumable stream of the call, and counts the resumes made.

How a request finds its call: the runner binds one for its whole run
(``bind_call``). Otherwise the transport keeps one per SDK call in a context
variable, starting a new one for every first try and finding the same one for
the SDK's retries, which the SDK marks with an ``x-stainless-retry-count``
header greater than zero and makes one after another in the same context.
Also the pause before sending again after a refusal that may pass
(``backoff_before``: a transient error event re-sent, a resume refused for a
while). Pure: no I/O, no clock.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING

from .errors import StreamStalled

if TYPE_CHECKING:
    from .checkpoints import CheckpointCallback

__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_LIMIT",
    "Call",
    "backoff_before",
    "bind_call",
    "call_for_request",
    "under_runner",
]

RETRY_HEADER = "x-stainless-retry-count"

#: The pause before sending again after the server said to come back later (a
#: transient error event before any output, a resume refused with a 429 or a 5xx):
#: this long before the first such send, doubled for each one after, at most
#: ``BACKOFF_LIMIT``; each pause is drawn between half of that and all of it, so
#: that clients told "overloaded" at once do not all come back at once.
BACKOFF_FIRST = 0.2
BACKOFF_LIMIT = 1.0


def backoff_before(n: int) -> float:
    """The pause before the ``n``-th send again (1 up), as ``BACKOFF_FIRST`` says."""
    ceiling = min(BACKOFF_LIMIT, BACKOFF_FIRST * 2 ** (n - 1))
    return random.uniform(ceiling / 2, ceiling)


class Call:
    """The stall re-send budget of one logical call, and its attempts so far.

    Used only by the thread or task making the call, one attempt after another.
    """

    __slots__ = (
        "attempts",
        "last_stall",
        "on_checkpoint",
        "resends_left",
        "resumed",
        "resumes_left",
    )

    def __init__(
        self, resends: int, resumes: int = 0, on_checkpoint: CheckpointCallback | None = None
    ) -> None:
        #: Given the call's checkpoints (a background Responses stream's; see ``checkpoints``).
        self.on_checkpoint = on_checkpoint
        self.resends_left = resends
        self.resumes_left = resumes
        self.resumed = 0  # resumes made so far
        self.attempts = 0  # sent so far, by every layer
        # The stall that ended the latest attempt, until an attempt gets a response.
        self.last_stall: StreamStalled | None = None

    def start_attempt(self) -> int:
        """Count one more attempt; return its number (1-based)."""
        self.attempts += 1
        return self.attempts

    def take_resend(self) -> bool:
        """Spend one re-send if any is left."""
        if self.resends_left <= 0:
            return False
        self.resends_left -= 1
        return True

    def take_resume(self) -> bool:
        """Spend one resume if any is left."""
        if self.resumes_left <= 0:
            return False
        self.resumes_left -= 1
        self.resumed += 1
        return True

    def exhausted_by_stalls(self) -> bool:
        """Whether the previous attempt stalled and no re-send is left: do not send again."""
        return self.last_stall is not None and self.resends_left <= 0


_runner_call: ContextVar[Call | None] = ContextVar("hermes_transport_runner_call", default=None)
_sdk_call: ContextVar[Call | None] = ContextVar("hermes_transport_sdk_call", default=None)


@contextmanager
def bind_call(call: Call) -> Iterator[Call]:
    """Make every streaming request in this context draw from ``call``."""
    token = _runner_call.set(call)
    try:
        yield call
    finally:
        _runner_call.reset(token)


def under_runner() -> bool:
    """Whether this context runs inside a streaming runner (``bind_call``)."""
    return _runner_call.get() is not None


def call_for_request(
    headers: Mapping[str, str],
    resends: int,
    resumes: int = 0,
    on_checkpoint: CheckpointCallback | None = None,
) -> Call:
    """The call a streaming request belongs to (see the module docstring); a new one gets
    the transport's ``on_checkpoint``, a runner's keeps its own unless it has none."""
    call = _runner_call.get()
    if call is not None:
        if call.on_checkpoint is None:
            call.on_checkpoint = on_checkpoint
        return call
    previous = _sdk_call.get()
    if previous is not None and headers.get(RETRY_HEADER, "0") not in ("", "0"):
        return previous
    call = Call(resends, resumes, on_checkpoint)
    # Set in the caller's own context (handle_request is a plain call), so the
    # SDK's next retry, made in the same context, finds it.
    _sdk_call.set(call)
    return call
