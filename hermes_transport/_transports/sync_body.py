"""``WatchedStream``: a sync response body, passed up while its progress is watched.

Owns the sync reads of one response body (and of the resumes that continue
it, and the cancel sent after an interrupt), on the caller's thread; the
decisions are ``McpWatch``'s (``_core``). The shell (``sync_shell``) builds it
and hands it the one way it sends a request (``send``). Also ``pause``, how a
caller's thread waits before sending again (a re-send, a resume after a refusal).

The cancel an interrupt calls for goes out on this thread, the only one there is
to send it on, before the error is raised: from the read that the interrupt broke
or, before the first output, as the shell closes the held body. No later moment
on this thread is sure to come (openai 1.x never closes a stream that raised).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Generator, Iterator
from typing import Any

from .._core.attempt import Attempt, GuardFired, shown_cause
from .._core.exchange import Exchange
from .._core.guard import Guard
from .._core.mcp_watch import McpWatch
from .._core.progress import ProgressMeter
from .._core.resume import REFUSAL_LIMIT, ResumeRefused
from .._io.watchdog import watchdog
from .sync_send import Send, pause, send_cancel

__all__ = ["WatchedStream"]

logger = logging.getLogger("hermes_transport")


class WatchedStream(McpWatch):
    """The response body, passed up byte for byte while its progress is watched.

    On a resumable stream, passed up event by event, and continued from a
    resume when the connection stalls or dies. Made a subclass of the flavor's
    ``SyncByteStream`` where it is built.
    """

    def __init__(
        self,
        inner: Any,
        guard: Guard,
        attempt: Attempt,
        meter: ProgressMeter | None,
        stale: float | None,
        exchange: Exchange,
        send: Send,
        sockets_reachable: bool,
    ) -> None:
        super().__init__(guard, attempt, meter, stale, watchdog.arm, exchange)
        self._inner = inner
        self._chunks = iter(inner)
        self._send = send
        self._sockets_reachable = sockets_reachable
        # The caller's iteration, once started: close() must know whether a
        # thread is inside it right now.
        self._iteration: Generator[bytes, None, None] | None = None
        self._closed = False
        self._released = False  # closed, and its close done to its end
        # Set while the reader waits to resume again: a close from afar wakes it.
        self._pausing: threading.Event | None = None

    def await_first_event(self) -> None:
        """Hold chunks until the first progress event, the end, or ``HOLD_LIMIT`` bytes.

        A resumable stream that breaks meanwhile is resumed, what was held kept.
        """
        while True:
            try:
                for chunk in self._chunks:
                    if self._hold(chunk):
                        return
                self._ended()
            except Exception as exc:
                if self._whole is None or not isinstance(exc, self._attempt.dead):
                    if self._broke_early(exc):
                        return
                    raise
                failure: BaseException | None = exc
            else:
                if not self._may_resume():
                    break
                failure = None
            outcome = self._resume_or_fail(failure)
            if outcome is None:
                continue
            if outcome is False:
                break
            self._held_failed(failure, outcome)
            return
        self._hold_ended()

    def __iter__(self) -> Iterator[bytes]:
        self._iteration = iteration = self._iterate()
        return iteration

    def _iterate(self) -> Generator[bytes, None, None]:
        try:
            yield from self._take_held()
            if self._broken is not None:
                self._ending = self._broken
                self._close()
                self._raise_if_broken()
            if self._whole is not None:
                yield from self._iterate_whole()
                return
            try:
                for chunk in self._chunks:
                    self._saw(chunk)
                    yield chunk
                if self._closed:
                    # Closed by another thread while the caller held a chunk: the
                    # body did not end, so it must not look complete.
                    raise self._attempt.flavor.http.StreamClosed()
                self._ended()
            except self._attempt.dead as exc:
                # The body is dead: release everything now, on this thread, since a
                # caller's iter_raw() (for one) does not close a response that raised.
                self._ending = exc
                self._close()
                if self._cut_after_done():
                    return
                error = self._failure(exc)
                if error is None:
                    raise
                cause = shown_cause(exc)
            else:
                return
            if (answer := self._in_band(error, cause)) is not None:
                yield answer  # in band: the client fails this request alone
                return
            raise error from cause  # here: never the dead attempt's exception as context
        finally:
            if self._released:  # closed in here, its error built: see _forget
                self._forget()

    def _iterate_whole(self) -> Generator[bytes, None, None]:
        """A resumable stream's reads: whole events, and a resume where it broke."""
        while True:
            try:
                for chunk in self._chunks:
                    whole = self._pass(chunk)
                    if whole:
                        yield whole
                        self._asking()
                if self._closed:
                    raise self._attempt.flavor.http.StreamClosed()
                self._ended()
            except self._attempt.dead as exc:
                failure: BaseException | None = exc
            else:
                if not self._may_resume():
                    break
                failure = None
            outcome = self._resume_or_fail(failure)
            if outcome is None:
                continue
            self._ending = outcome[0] if outcome else None
            self._close()
            if outcome is False:
                break
            if (answer := self._answer_for(outcome)) is not None:
                yield answer  # in band: the client fails this request alone
                return
            raise outcome[0] from outcome[1]
        rest = self._rest()
        if rest:
            yield rest

    def _resume_or_fail(self, failure: BaseException | None) -> Any:
        """Resume after ``failure`` (``None``: the body ended early), as often as the
        budget allows, waiting a little after a refusal that may pass: ``None`` once
        resumed, else ``_unresumed``'s answer (``False``: end cleanly) for the first
        failure if the last resume was refused, else for the latest."""
        first = outcome = self._outcome(failure)
        refused: ResumeRefused | None = None
        self._refusals = 0
        while (request := self._resume_request()) is not None:
            try:
                self._reopen(request)
            except self._attempt.dead as exc:
                outcome, refused = self._outcome(exc), None  # it may be resumed again
                continue
            except ResumeRefused as exc:
                refused, wait = exc, self._retry_wait(exc)
                if wait is None:
                    break
                self._pausing = threading.Event()
                try:
                    pause(wait, self._exchange.tokens, self._pausing)
                finally:
                    self._pausing = None
                continue
            return None
        if self._guard.fired in ("interrupted", "closed"):  # while a resume was under way
            return self._unresumed(self._outcome(GuardFired()), None)
        return self._unresumed(first if refused else outcome, refused)

    def _reopen(self, request: Any) -> None:
        """Send the resume ``request`` and read on from its stream (raises if it failed)."""
        self._release_guard()  # before the cut connection is closed (``_core.guard``)
        self._retire()
        guard, attempt = self._exchange.begin_resume(
            request, self._resume_budget(), watchdog.arm, self._sockets_reachable
        )
        self._adopt(guard, attempt)
        watchdog.arm(guard)
        response = self._send(request, guard)
        try:
            self._check_resumed(request, response)
        except BaseException:
            # Its connection may go back to the pool, and another caller's request on it
            # must be out of this guard's reach, which the wait that may follow keeps open.
            guard.let_go()
            response.close()
            raise
        self._inner = response.stream
        self._chunks = iter(self._inner)
        self._resumed()

    def _check_resumed(self, request: Any, response: Any) -> None:
        """Raise ``ResumeRefused`` unless ``response`` is the rest of the stream."""
        if self._is_rest(response):
            return
        body = b""
        for chunk in response.stream:
            body += chunk
            if len(body) >= REFUSAL_LIMIT:
                break
        raise self._refused(request, response, body)

    def _retire(self) -> None:
        """Let go of the cut stream before a resume replaces it (its connection is dead)."""
        with contextlib.suppress(Exception):
            try:
                _close_iterator(self._chunks)
            finally:
                self._inner.close()

    def close(self) -> None:
        if getattr(self._iteration, "gi_running", False):
            # Another thread is reading this body right now, and its generators
            # cannot be closed from here: stop the read instead (as plain httpx's
            # close() does not); the reader closes everything as it unwinds.
            self._guard.close_from_afar()
            pausing = self._pausing
            if pausing is not None:  # waiting to resume again: no read to stop, wake it
                pausing.set()
            return
        self._close()

    def _close(self) -> None:
        """Release the body, then send the cancel an interrupt calls for, if any: what
        ``close()`` does, and a read that fails before it raises (nothing is sure to
        close the body after: openai 1.x does not)."""
        try:
            self._release()
        finally:
            self._cancel()
            self._released = True
            if not getattr(self._iteration, "gi_running", False):  # else as it unwinds
                self._forget()

    def _drop(self) -> None:
        super()._drop()
        # A read of the closed body finds it ended (and raises StreamClosed).
        self._inner, self._chunks, self._iteration = None, _SPENT, None
        del self._send

    def _release(self) -> None:
        """Let go of the body and its connection, and report how it ended (once)."""
        if self._closed:
            return
        self._closed = True
        if self._start_drain():
            self._drain()
        # Disarm before the connection can go back to the pool (see the invariants
        # in ``_core.guard``).
        self._release_guard()
        try:
            _close_iterator(self._chunks)
        finally:
            try:
                self._inner.close()
            finally:
                self._report()

    def _drain(self) -> None:
        # Bounded by the guard's deadline; an error means the connection is not reusable.
        with contextlib.suppress(*self._attempt.dead):
            for chunk in self._chunks:
                if not self._drained(chunk):
                    return

    def _cancel(self) -> None:
        """After an interrupt: cancel the response on the server (``send_cancel``)."""
        request = self._cancel_request()
        if request is not None:
            send_cancel(self._send, request)


#: The chunks of a body that was let go of (``_forget``): none.
_SPENT: Iterator[bytes] = iter(())


def _close_iterator(chunks: Iterator[bytes]) -> None:
    """Close the inner body's iterator: a generator has ``close``; any other iterator
    (a stream's ``__iter__`` may return one) has nothing to close."""
    close = getattr(chunks, "close", None)
    if close is not None:
        close()
