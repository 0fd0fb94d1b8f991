"""Where the fault server keeps the Responses it answered, by id.

Owns :class:`StoredResponse` and :class:`ResponseStore`, which the server holds for as
long as it runs, so that a Responses stream can be retrieved, resumed and cancelled. It
imports nothing else of the package.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

__all__ = ["ResponseStore", "StoredResponse"]


@dataclass
class StoredResponse:
    """One response as the server keeps it: its latest JSON and, if streamed, its events.

    ``events`` hold their ``sequence_number``; keepalives sent live are not kept, so a
    resume skips their numbers. ``think_seq`` is the number of the first output event.
    """

    response: dict[str, Any]
    events: list[dict[str, Any]] | None = None
    think_seq: int = 0


class ResponseStore:
    """The server's responses by id; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._responses: dict[str, StoredResponse] = {}

    def put(self, stored: StoredResponse) -> None:
        with self._lock:
            self._responses[stored.response["id"]] = stored

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            return self._responses.get(response_id)

    def cancel(self, response_id: str) -> dict[str, Any] | None:
        """Mark the response cancelled; its JSON, or None for an unknown id."""
        with self._lock:
            stored = self._responses.get(response_id)
            if stored is None:
                return None
            stored.response = {**stored.response, "status": "cancelled"}
            return stored.response
