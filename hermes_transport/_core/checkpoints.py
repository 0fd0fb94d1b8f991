"""Where a background Responses stream stands, for the next process: ``ResumeCheckpoint``.

Owns the value (``ResumeCheckpoint``: the response's id, the number of the last event the
caller had, the model asked for and when the response was created; it pickles, and
round-trips through ``to_json`` and ``from_json``), the callback's type, and
``Checkpoints``, one stream's emitter: which moments give one. The first comes once the
response id is known; then one at most every ``StreamPolicy.checkpoint_interval`` seconds
while events pass; and one at every stall, interrupt and close while the response is
unfinished; never once it is over. A checkpoint names only events the caller had before
the read under way (it asked for more: it is done with them), so that a process that
dies at any moment is resumed with nothing it had shown repeated. A raising callback is
logged, never raised. Pure: the body watch calls it, with the clock's reading.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CheckpointCallback", "Checkpoints", "ResumeCheckpoint", "created_at"]

logger = logging.getLogger("hermes_transport")

_CREATED_AT = re.compile(rb'"created_at"\s*:\s*(\d{1,15}(?:\.\d{1,9})?)')
_FIELDS = ("response_id", "sequence_number", "model", "created_at")


def created_at(data: bytes) -> float | None:
    """A Responses lifecycle event's ``created_at`` (Unix seconds), from its data, if any."""
    found = _CREATED_AT.search(data)
    return float(found.group(1)) if found else None


@dataclass(frozen=True)
class ResumeCheckpoint:
    """Where a background Responses stream stood: enough for another process to go on.

    ``response_id``: the response (``resp_...``); ``sequence_number``: the number of the
    last event the caller had (-1: none yet, a resume replays the stream from its start);
    ``model``: the model the request asked for, if it named one; ``created_at``: when the
    server created the response (Unix seconds, as its ``created_at``), if it said. A
    background response can be streamed again for a while only (five minutes, on
    OpenAI's API): ``created_at`` says how old it is.
    """

    response_id: str
    sequence_number: int
    model: str | None = None
    created_at: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.response_id, str) or not self.response_id:
            raise ValueError(
                f"ResumeCheckpoint.response_id must be a non-empty str, got {self.response_id!r}"
            )
        number = self.sequence_number
        if isinstance(number, bool) or not isinstance(number, int) or number < -1:
            raise ValueError(
                f"ResumeCheckpoint.sequence_number must be an int >= -1, got {number!r}"
            )
        if self.model is not None and not isinstance(self.model, str):
            raise ValueError(f"ResumeCheckpoint.model must be a str or None, got {self.model!r}")
        when = self.created_at
        if when is not None and (
            isinstance(when, bool) or not isinstance(when, (int, float)) or not math.isfinite(when)
        ):
            raise ValueError(
                f"ResumeCheckpoint.created_at must be Unix seconds or None, got {when!r}"
            )

    def to_json(self) -> str:
        """The checkpoint as a JSON object of its four fields (``from_json`` reads it)."""
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str | bytes) -> ResumeCheckpoint:
        """The checkpoint ``to_json`` wrote; a ``ValueError`` that says what is wrong for
        anything else (not JSON, not an object, a field missing, unknown or malformed)."""
        try:
            data: Any = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"ResumeCheckpoint.from_json: not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(
                f"ResumeCheckpoint.from_json: expected a JSON object, got {type(data).__name__}"
            )
        unknown = sorted(set(data) - set(_FIELDS))
        missing = [name for name in ("response_id", "sequence_number") if name not in data]
        if unknown or missing:
            said = [f"unknown field(s) {', '.join(unknown)}"] if unknown else []
            said += [f"missing field(s) {', '.join(missing)}"] if missing else []
            raise ValueError(f"ResumeCheckpoint.from_json: {'; '.join(said)}")
        return cls(**data)


#: What a transport, factory or runner calls with each checkpoint.
CheckpointCallback = Callable[[ResumeCheckpoint], object]


class Checkpoints:
    """The checkpoints of one stream of a background response (see the module docstring).

    ``known_id`` and ``after``: what the request already says (a resume ``GET`` names
    its response and the event it starts after). Owner-thread only.
    """

    __slots__ = ("_after", "_callback", "_interval", "_known_id", "_last", "_model", "_next")

    def __init__(
        self,
        callback: CheckpointCallback,
        interval: float | None,
        model: str | None,
        known_id: str | None,
        after: int,
    ) -> None:
        self._callback = callback
        self._interval = interval
        self._model = model
        self._known_id = known_id
        self._after = after
        self._last: ResumeCheckpoint | None = None
        self._next = 0.0  # when the next one may be given, after the first

    def reading(
        self, response_id: str | None, sequence: int, when: float | None, now: float
    ) -> None:
        """A read is under way: the caller is done with events up to ``sequence`` (the
        first checkpoint once the id is known, then one an interval as they pass)."""
        last = self._last
        if last is not None and (
            self._interval is None or now < self._next or sequence == last.sequence_number
        ):
            return
        self._give(response_id, sequence, when, now)

    def stopped(
        self, response_id: str | None, sequence: int, when: float | None, now: float
    ) -> None:
        """A stall, an interrupt or a close of the unfinished response: one checkpoint."""
        self._give(response_id, sequence, when, now)

    def _give(
        self, response_id: str | None, sequence: int, when: float | None, now: float
    ) -> None:
        response_id = response_id or self._known_id
        if response_id is None:
            return
        checkpoint = ResumeCheckpoint(response_id, max(sequence, self._after), self._model, when)
        self._last = checkpoint
        if self._interval is not None:
            self._next = now + self._interval
        try:
            self._callback(checkpoint)
        except Exception:
            logger.exception("the checkpoint callback %r raised", self._callback)
