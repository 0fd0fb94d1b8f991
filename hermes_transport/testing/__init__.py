"""An embedded OpenAI-compatible fault server for tests, demos and benchmarks.

:class:`FaultServer` answers ``POST /v1/chat/completions`` on 127.0.0.1 from background
threads, shaping each response after a :class:`Scenario`: healthy, silent before the status
line, silent mid-stream, only SSE keep-alive comments, cut off, trickled a byte at a time,
thinking in silence before its first output event, failing with an in-stream error event
inside an HTTP 200 stream, or an error status. It answers Anthropic's ``POST /v1/messages``
too, in that API's event format, with ``event: ping`` as its keepalive instead of a
comment, and OpenAI's Responses API (:data:`RESPONSES_PATH`): ``POST /v1/responses``
(named, numbered events with ``keepalive`` data events as its keepalive, ``response.queued``
in background mode), ``GET /v1/responses/{id}`` (the stored response),
``GET /v1/responses/{id}?stream=true&starting_after=N`` (a resume: the stored events
numbered above N, under the current scenario) and ``POST /v1/responses/{id}/cancel``.
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
* ``stall_after_events``, ``truncate_after_events``, ``comment_interval``,
  ``event_interval``, ``think``, ``keepalive_interval`` and the ``error_*`` fields shape
  streams only; a non-streaming request gets the whole JSON after ``json_delay``.
  ``stall_before_headers``, ``status``, ``gzip`` and ``byte_by_byte`` apply to both.
* Every streamed Responses response is kept by id while the server runs, and can be
  resumed whether or not it was created with ``background`` (the real API resumes only
  background ones); keepalives are not kept, so a resume skips their numbers.
* The ``openai`` SDK retries timeouts and 5xx by itself: pass ``max_retries=0`` when a test
  counts requests.
* Combine fields with :func:`dataclasses.replace`, e.g.
  ``replace(Scenario.silent_after(2), crlf=True, hold=1.0)``.
"""

from __future__ import annotations

from .messages import MESSAGES_PATH
from .responses import RESPONSES_PATH
from .scenarios import (
    CHAT_COMPLETIONS_PATH,
    TOOL_CALL_ARGUMENTS,
    TOOL_CALL_NAME,
    RecordedRequest,
    Scenario,
)
from .server import FaultServer

__all__ = [
    "CHAT_COMPLETIONS_PATH",
    "MESSAGES_PATH",
    "RESPONSES_PATH",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_NAME",
    "FaultServer",
    "RecordedRequest",
    "Scenario",
]

# Shown, documented and pickled under the public name, not the module that defines it.
for _name in __all__:
    if isinstance(globals()[_name], type):
        globals()[_name].__module__ = __name__
del _name
