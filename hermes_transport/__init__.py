"""hermes-transport: a watchdog httpx transport for streaming LLM calls.

``WatchdogTransport`` watches server-sent-events streams for real progress
(data events, not keepalive comments), cuts a stream that stalls, and re-sends
one that stalled before its first event, all on the caller's own thread.
"""

from __future__ import annotations

import logging

from ._errors import StreamInterrupted, StreamStalled
from ._factory import http_client_for, openai_client_for, should_stream_inline
from ._interrupt import Interrupt
from ._policy import StreamPolicy
from ._runner import stream_chat_completion
from ._transport import WatchdogTransport

__version__ = "0.1.0"

# A library logs; the application decides where it goes.
logging.getLogger("hermes_transport").addHandler(logging.NullHandler())

__all__ = [
    "Interrupt",
    "StreamInterrupted",
    "StreamPolicy",
    "StreamStalled",
    "WatchdogTransport",
    "http_client_for",
    "openai_client_for",
    "should_stream_inline",
    "stream_chat_completion",
]
