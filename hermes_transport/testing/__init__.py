"""An embedded OpenAI-compatible fault server for tests, demos and benchmarks.

:class:`FaultServer` answers ``POST /v1/chat/completions`` on 127.0.0.1 from background
threads, shaping each response after a :class:`Scenario`: healthy, silent before the status
line, silent mid-stream, only SSE keep-alive comments, cut off, reset mid-body (a
connection reset after N events, maybe mid-event), trickled a byte at a time,
thinking in silence before its first output event, failing with an in-stream error event
inside an HTTP 200 stream, or an error status. It answers Anthropic's ``POST /v1/messages``
too, in that API's event format, with ``event: ping`` as its keepalive instead of a
comment, and OpenAI's Responses API (:data:`RESPONSES_PATH`): ``POST /v1/responses``
(named, numbered events with ``keepalive`` data events as its keepalive, ``response.queued``
in background mode), ``GET /v1/responses/{id}`` (the stored response),
``GET /v1/responses/{id}?stream=true&starting_after=N`` (a resume of a background
response: its stored events numbered above N, under the current scenario) and
``POST /v1/responses/{id}/cancel``. And Google's Gemini API and Vertex AI, as the
google-genai SDK calls them (``POST {version}/models/{model}:streamGenerateContent`` and
``:generateContent``, or under ``{version}/projects/{p}/locations/{l}/publishers/google/``,
below any prefix): data-only events, ``: keepalive`` comments as a proxy's keepalive,
Google's error JSON, the model in the path (:func:`gemini_model` reads it back). Give
google-genai the server's root, ``HttpOptions(base_url=server.base_url.removesuffix("/v1"))``.
And MCP's streamable HTTP transport, as the ``mcp`` SDK's client speaks it, at any path
ending in ``/mcp`` (``server.base_url.removesuffix("/v1") + "/mcp"``): sessions, ``ping``,
``tools/list`` (one tool, :data:`MCP_TOOL_NAME`) and ``tools/call``, the scenario's
attempt, streamed as progress or logging notifications, then the result.
Every request is recorded as a :class:`RecordedRequest`::

    import openai
    from hermes_transport.testing import FaultServer, Scenario

    def test_sdk_retries_a_stalled_request() -> None:
        with FaultServer(Scenario.stall_first(1)) as server, openai.OpenAI(
            base_url=server.base_url, api_key="x", timeout=0.5, max_retries=1
        ) as client:
            reply = client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "hi"}]
            )
            assert reply.choices[0].message.content == "hello world"
            assert [r.attempt for r in server.requests] == [0, 1]  # attempt 0 stalled
            server.scenario = Scenario.silent_after(1)  # for the requests that follow

Good to know:

* Standard library only; HTTP/1.1 with keep-alive, chunked SSE, TCP_NODELAY; HTTPS when
  given an ``ssl_context``.
* Every stall lasts at most :attr:`Scenario.hold` seconds (then the server hangs up without
  finishing the response), ends at once on :meth:`FaultServer.stop`, and ends early when
  its client hangs up.
* ``stall_after_events``, ``truncate_after_events``, ``drop_after_events``,
  ``comment_interval``, ``event_interval``, ``think``, ``keepalive_interval`` and the
  ``error_*`` fields shape streams only; a non-streaming request gets the whole JSON
  after ``json_delay``.
  ``stall_before_headers``, ``status``, ``gzip`` and ``byte_by_byte`` apply to both.
* Background mode, as in the real API: every Responses response is kept by id, as it is
  created, while the server runs; only one created with ``"background": true`` can be
  resumed (else 404) or cancelled (else 400). It keeps all the events of a whole healthy
  stream, numbered from 0, even when the creating connection stalls or drops, so a
  resume delivers the rest, the same JSON, with the same numbers; keepalives repeat the
  number of the event before them, so ``starting_after`` the last number seen is right.
  A resume more than ``FaultServer(resume_window=...)`` seconds (default 300) after
  creation answers 400 "...can no longer be streamed because it is more than 5 minutes
  old."; a cancel sets the status ``cancelled``, after which a resume answers 400
  "Response '<id>' was cancelled." (this server's choice).
* Resumes count as attempts, so ``Scenario.stall_first(1, stall=Scenario.silent_after(3))``
  (or ``stall=Scenario.dropped_after(3)``, a connection reset) faults a background
  creation and serves its resume healthy; nest ``stall_first`` to fault the n-th attempt
  only: ``stall_first(n, stall=stall_first(n - 1, then=fault, stall=Scenario()))``.
* :attr:`FaultServer.sent` says what was sent for each of the latest requests and when
  (``time.monotonic()``): the status and headers, each body write (as on the wire, without
  the chunked framing) and when the server was done, to check a client's timings against.
* The ``openai`` SDK retries timeouts and 5xx by itself: pass ``max_retries=0`` when a test
  counts requests.
* Combine fields with :func:`dataclasses.replace`, e.g.
  ``replace(Scenario.silent_after(2), crlf=True, hold=1.0)``.
"""

from __future__ import annotations

from .gemini import gemini_model
from .mcp import MCP_TOOL_NAME
from .messages import MESSAGES_PATH
from .responses import RESPONSES_PATH
from .scenarios import (
    CHAT_COMPLETIONS_PATH,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    RecordedRequest,
    Scenario,
    SentResponse,
)
from .server import FaultServer

__all__ = [
    "CHAT_COMPLETIONS_PATH",
    "MCP_TOOL_NAME",
    "MESSAGES_PATH",
    "RESPONSES_PATH",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_NAME",
    "FaultServer",
    "RecordedRequest",
    "Scenario",
    "SentResponse",
    "gemini_model",
]

# Shown, documented and pickled under the public name, not the module that defines it.
for _name in __all__:
    if not isinstance(globals()[_name], str):
        globals()[_name].__module__ = __name__
del _name
