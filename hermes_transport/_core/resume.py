"""Resuming a background Responses stream: which streams can be, and the requests that do it.

Owns ``resumable_for`` (which streaming requests make a resumable stream: a
Responses creation whose JSON body has ``"background": true``, and the resume
``GET /responses/{id}?stream=true`` itself), ``Resumable`` (how to ask for
the rest of that stream after event N, and how to cancel its response),
``WholeEvents`` (cuts such a stream's bytes at event boundaries, so that a
splice always falls between two events) and ``refusal`` (what a server that
would not resume said). Pure: the body watch (``body``) decides when to
resume, the shells send.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

import httpx

from .wires import Wire

if TYPE_CHECKING:
    from .progress import ProgressMeter

__all__ = [
    "CANCEL_TIMEOUT",
    "REFUSAL_LIMIT",
    "RETRY_AFTER_LIMIT",
    "TAIL_LIMIT",
    "Resumable",
    "ResumeRefused",
    "WholeEvents",
    "refusal",
    "resumable_for",
    "retry_after",
    "spliceable",
]

#: Bytes of an unfinished event held back on a resumable stream. An event
#: longer than this is passed up as it comes (nothing is lost), and until it
#: ends the stream cannot be resumed: a splice would cut it in two.
TAIL_LIMIT = 1024 * 1024
#: Seconds a cancel sent after an interrupt may take, connecting included;
#: then it is given up (and logged): the interrupted caller is never kept longer.
CANCEL_TIMEOUT = 2.0
#: Bytes of a refused resume's body read for the server's message.
REFUSAL_LIMIT = 64 * 1024
#: Seconds of a refused resume's ``Retry-After`` honoured before the next resume; a
#: longer one is cut to this (the caller waits on its own thread meanwhile).
RETRY_AFTER_LIMIT = 5.0

# Headers that describe a request's body: the resume GET and the cancel carry none.
_BODY_HEADERS = frozenset({b"content-length", b"content-type", b"transfer-encoding"})
# A blank line, whatever the line endings: two line terminators in a row, a
# CRLF being one (atomic groups: "\r\n" alone is not two).
_BLANK_LINE = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
# Enough of the held tail to find a blank line that straddles it and the next chunk.
_STRADDLE = 4


class ResumeRefused(Exception):
    """The server answered a resume with something other than the rest of the stream.

    ``said`` is its status and message; ``error`` the ``HTTPStatusError`` for its
    answer (the cause of the error the caller gets); ``status`` its status code and
    ``retry_after`` its ``Retry-After`` in seconds (``None``: none, or a date). Never
    shown itself.
    """

    def __init__(
        self, said: str, error: Exception, status: int = 0, retry_after: float | None = None
    ) -> None:
        super().__init__(said)
        self.said = said
        self.error = error
        self.status = status
        self.retry_after = retry_after

    @property
    def transient(self) -> bool:
        """Whether the refusal may pass (408, 429, a 5xx): the stream is resumed again,
        while resumes are left; a 404 or 400 (expired, cancelled, not background) is final."""
        return self.status in (408, 429) or self.status >= 500


def retry_after(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (``None`` for none, a date or nonsense)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < math.inf else None  # NaN compares false


@dataclass(frozen=True)
class Resumable:
    """A stream that can be resumed: the request it came from, and what that already says.

    ``response_id`` is known up front only for a resume ``GET`` (from its path);
    a creation's id comes with its first events. ``after`` is the resume's own
    ``starting_after`` (-1: none, a creation).
    """

    request: httpx.Request
    response_id: str | None
    after: int
    http: Any  # the flavor's httpx-like module, whose Request is built

    def resume_from(self, meter: ProgressMeter) -> tuple[httpx.Request, str] | str:
        """The resume after the last event ``meter`` saw, and where it resumes (for the
        log); or why it cannot be, as an error's note says it."""
        response_id = meter.response_id or self.response_id
        after = max(meter.sequence, self.after)
        if response_id is None or after < 0:
            missing = "named its response" if response_id is None else "numbered an event"
            return f"; not resumed: the stream had not yet {missing}"
        return self.resume_request(
            response_id, after
        ), f"response {response_id} after event {after}"

    def cancels_given_up(self, handed: bool) -> bool:
        """Whether a stall given up cancels the response: a creation the caller had none of
        (``handed``: it had the stream); nobody else knows its id. Never the caller's own
        resume: it knows the id."""
        return self.response_id is None and not handed

    def cancel_from(self, meter: ProgressMeter | None, reason: str) -> httpx.Request | None:
        """The cancel of the response ``meter`` named (``reason`` is not sent)."""
        response_id = (meter.response_id if meter is not None else None) or self.response_id
        return None if response_id is None else self.cancel_request(response_id)

    def resume_request(self, response_id: str, after: int) -> httpx.Request:
        """``GET .../responses/{id}?stream=true&starting_after={after}`` with the
        original request's headers, query and extensions (timeouts) and nothing else."""
        url = self._url(response_id).copy_merge_params(
            {"stream": "true", "starting_after": str(after)}
        )
        return self._request("GET", url)

    def cancel_request(self, response_id: str) -> httpx.Request:
        """``POST .../responses/{id}/cancel`` with the original request's headers."""
        params = self.request.url.params.remove("stream").remove("starting_after")
        query = b"?" + str(params).encode("ascii") if params else b""
        url = self.request.url.copy_with(raw_path=self._raw_path(response_id) + b"/cancel" + query)
        request = self._request("POST", url)
        # Bounded however the client's own timeouts are set.
        timeouts = dict.fromkeys(("connect", "read", "write", "pool"), CANCEL_TIMEOUT)
        request.extensions = {**request.extensions, "timeout": timeouts}
        return request

    def _url(self, response_id: str) -> httpx.URL:
        url: httpx.URL = self.request.url
        if self.request.method == "GET":  # already /responses/{id}
            return url
        return url.copy_with(raw_path=self._raw_path(response_id) + b"?" + url.query)

    def _raw_path(self, response_id: str) -> bytes:
        """The path of ``/responses/{id}``, as sent (percent-encoded), without a query."""
        path: bytes = self.request.url.raw_path.split(b"?", 1)[0]
        if self.request.method == "GET":
            return path
        return path.rstrip(b"/") + b"/" + quote(response_id, safe="").encode("ascii")

    def _request(self, method: str, url: httpx.URL) -> httpx.Request:
        original = self.request
        headers = [(k, v) for k, v in original.headers.raw if k.lower() not in _BODY_HEADERS]
        request: httpx.Request = self.http.Request(
            method, url, headers=headers, extensions=dict(original.extensions)
        )
        return request


def resumable_for(
    request: httpx.Request, wire: Wire, payload: Mapping[str, Any] | None, http: Any
) -> Resumable | None:
    """The resumable stream ``request`` asks for, if it does (``payload``: its body's
    top-level JSON object, if known: ``progress.stream_asked`` parses it)."""
    if wire != "responses":
        return None
    url = request.url
    if request.method == "GET":
        if url.params.get("stream") != "true":
            return None
        segments = url.raw_path.split(b"?", 1)[0].decode("ascii").rstrip("/").split("/")
        if len(segments) < 2 or segments[-2] != "responses":
            return None  # no id: not a stream of one response
        response_id = unquote(segments[-1])
        value = url.params.get("starting_after", "")
        after = int(value) if value.isdigit() else -1
        return Resumable(request, response_id, after, http)
    if request.method != "POST" or payload is None or payload.get("background") is not True:
        return None
    return Resumable(request, None, -1, http)


class WholeEvents:
    """Cuts a byte stream at event boundaries: what is passed up ends with a whole event.

    ``take(chunk)`` returns the bytes up to the last blank line seen so far and
    holds the rest (an unfinished event) for the next chunk, at most
    ``TAIL_LIMIT`` bytes: past that the tail is passed up, and ``mid_event``
    stays true until the event ends. ``rest()`` hands over what is held (the
    body ended); ``drop()`` forgets it (a resume sends that event again).
    """

    __slots__ = ("_context", "_pieces", "_size", "mid_event")

    def __init__(self) -> None:
        self._pieces: list[bytes] = []
        self._size = 0
        # The last bytes taken (held or passed up), where a blank line may begin.
        self._context = b""
        #: Part of an unfinished event was passed up: a splice now would break it.
        self.mid_event = False

    def take(self, chunk: bytes) -> bytes:
        """The bytes held and ``chunk`` up to their last event boundary."""
        if not chunk:
            return b""
        pieces, context = self._pieces, self._context
        probe = context + chunk
        self._context = probe[-_STRADDLE:]
        if b"\r" in probe:
            end = -1
            for match in _BLANK_LINE.finditer(probe):
                end = match.end()
        else:
            end = probe.rfind(b"\n\n")
            end = end + 2 if end >= 0 else -1
        # As an offset into chunk; a match that ends in the context (the end of
        # what was already taken) was seen, and cut at, before.
        end -= len(context)
        if end <= 0:
            pieces.append(chunk)
            self._size += len(chunk)
            if self._size <= TAIL_LIMIT:
                return b""
            self.mid_event = True
            return self.rest()
        self.mid_event = False
        whole = b"".join((*pieces, chunk[:end])) if pieces else chunk[:end]
        tail = chunk[end:]
        self._pieces = [tail] if tail else []
        self._size = len(tail)
        return whole

    def rest(self) -> bytes:
        """What is held, handed over (the body ended, or the tail grew too long)."""
        held, self._pieces, self._size = b"".join(self._pieces), [], 0
        return held

    def drop(self) -> None:
        """Forget what is held: the resumed stream sends that event whole."""
        self._pieces, self._size, self._context = [], 0, b""
        self.mid_event = False


def refusal(status: int, body: bytes) -> str:
    """What a server that would not resume said: its status and error message."""
    message = ""
    try:
        payload = json.loads(body)
    except ValueError:
        message = body.decode("utf-8", "replace").strip()[:200]
    else:
        error = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            message = error["message"]
        elif isinstance(payload, dict) and isinstance(payload.get("message"), str):
            message = payload["message"]
    return f"{status} {message}".rstrip() if message else str(status)


def spliceable(content_encoding: str) -> bool:
    """Whether a body in ``content_encoding`` can be spliced: only an identity one (a
    resumed body is compressed afresh, so bytes from two bodies cannot be joined)."""
    return content_encoding.strip().lower() in ("", "identity")
