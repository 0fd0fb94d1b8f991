"""Where a request attempt is: the stage names, and the words that say each one.

A guard's ``stage`` moves forward as the attempt does; an error's ``stage``
says where it was when it was stopped. Every module names stages through
``Stage`` (mypy checks the spelling) and words them through ``STAGE_WORDS``
(one table, so a log line, an error and the probe say the same thing).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Literal, cast

__all__ = ["STAGE_WORDS", "Stage", "words_for"]

Stage = Literal[
    "before_sending",  # interrupted before anything was sent
    "pool",  # waiting for a connection from the pool
    "connecting",  # DNS, TCP connect, TLS handshake
    "sending",  # writing the request
    "headers",  # waiting for the response headers
    "first_event",  # headers in, waiting for the first progress event
    "mid_stream",  # after the first event
    "body",  # reading a body that is not an event stream
    "draining",  # reading the end of a body after [DONE] so its connection is pooled
    "after_done",  # the caller reads on after [DONE]
    "waiting",  # the runner waits for its worker thread
    "between_turns",  # a watched WebSocket waits with no turn under way
]

STAGE_WORDS: Mapping[Stage, str] = MappingProxyType(
    {
        "before_sending": "before sending",
        "pool": "waiting for a connection from the pool",
        "connecting": "connecting",
        "sending": "sending the request",
        "headers": "waiting for headers",
        "first_event": "waiting for the first event",
        "mid_stream": "reading the stream",
        "body": "reading the body",
        "draining": "reading the end of the body",
        "after_done": "waiting for the end of the body after [DONE]",
        "waiting": "waiting for the worker thread",
        "between_turns": "waiting between turns",
    }
)


def words_for(stage: str | None) -> str:
    """How ``stage`` reads in a sentence (``"while <words>"``); an unknown one as itself."""
    if stage is None:
        return "unknown"
    return cast("Mapping[str, str]", STAGE_WORDS).get(stage, stage)
