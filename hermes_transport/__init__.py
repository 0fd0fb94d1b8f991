"""hermes-transport: a watchdog httpx transport for streaming LLM calls.

``WatchdogTransport`` watches server-sent-events streams for real progress
(data events, not keepalive comments), cuts a stream that stalls, and re-sends
one that stalled before its first event, all on the caller's own thread;
``AsyncWatchdogTransport`` does the same on an asyncio or trio event loop, with
the loop's timers. An ``Interrupt`` stops the requests bound to it from any
thread. ``http_client_for`` and ``openai_client_for`` (and their async twins)
build clients on the watchdog; ``stream_chat_completion`` and
``astream_chat_completion`` stream one chat completion to the end with the same
errors on every openai major; ``stream_response`` and ``astream_response`` do
the same for one response of OpenAI's Responses API, ``stream_message`` and
``astream_message`` for one message of Anthropic's Messages API (with the
anthropic SDK, which is optional). ``genai_client_for`` builds a Google
``google-genai`` client (optional too) whose sync and async calls are watched, and
``stream_content`` and ``astream_content`` stream one Gemini answer on it;
``mcp_http_client_for`` an httpx2 client for the ``mcp`` SDK's streamable HTTP client;
``watch_connection`` and ``awatch_connection`` watch the turns of a Responses WebSocket
(``client.responses.connect()``), ``awatch_websocket`` a bare ``websockets`` one that its
client drives itself (the Agents SDK's).
``hermes_transport.httpx2`` has the
transports and http client factories on httpx2; ``hermes_transport.testing`` a
loopback fault server.
"""

from __future__ import annotations

import logging

from ._core.budgets import BudgetRules, DefaultSeconds, ModelBudget, ToolBudget
from ._core.call_budgets import CallBudgets
from ._core.checkpoints import ResumeCheckpoint
from ._core.contexts import should_stream_inline
from ._core.errors import StreamInterrupted, StreamStalled, stream_error
from ._core.interrupt import Interrupt
from ._core.mcp import McpStats
from ._core.policy import StreamPolicy
from ._core.stats import StreamStats
from ._flavors.httpx import (
    AsyncWatchdogTransport,
    WatchdogTransport,
    async_http_client_for,
    http_client_for,
)
from ._io.metrics import OpenTelemetryMetrics
from ._sdk.awebsocket import AsyncWatchedConnection, awatch_connection
from ._sdk.chat import astream_chat_completion, stream_chat_completion
from ._sdk.clients import async_openai_client_for, openai_client_for
from ._sdk.gemini import genai_client_for
from ._sdk.gemini_content import astream_content, stream_content
from ._sdk.mcp import mcp_http_client_for
from ._sdk.messages import astream_message, stream_message
from ._sdk.responses import astream_response, stream_response
from ._sdk.resumed import ResponseGone, aresume_response, resume_response
from ._sdk.websocket import WatchedConnection, watch_connection
from ._sdk.websocket_raw import WatchedWebSocket, awatch_websocket

__version__ = "0.1.0"

# A library logs; the application decides where it goes.
logging.getLogger("hermes_transport").addHandler(logging.NullHandler())

__all__ = [
    "AsyncWatchdogTransport",
    "AsyncWatchedConnection",
    "BudgetRules",
    "CallBudgets",
    "DefaultSeconds",
    "Interrupt",
    "McpStats",
    "ModelBudget",
    "OpenTelemetryMetrics",
    "ResponseGone",
    "ResumeCheckpoint",
    "StreamInterrupted",
    "StreamPolicy",
    "StreamStalled",
    "StreamStats",
    "ToolBudget",
    "WatchdogTransport",
    "WatchedConnection",
    "WatchedWebSocket",
    "aresume_response",
    "astream_chat_completion",
    "astream_content",
    "astream_message",
    "astream_response",
    "async_http_client_for",
    "async_openai_client_for",
    "awatch_connection",
    "awatch_websocket",
    "genai_client_for",
    "http_client_for",
    "mcp_http_client_for",
    "openai_client_for",
    "resume_response",
    "should_stream_inline",
    "stream_chat_completion",
    "stream_content",
    "stream_error",
    "stream_message",
    "stream_response",
    "watch_connection",
]

# Shown, documented and pickled under the public name, not the private module
# that defines it (as httpx does).
for _name in __all__:
    globals()[_name].__module__ = __name__
del _name
