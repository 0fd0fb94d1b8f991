"""Where the fault server keeps the Responses it answered, by id.

Owns :class:`StoredResponse` and :class:`ResponseStore`, which the server holds for as
long as it runs, so that a Responses response can be retrieved, and a background one
resumed and cancelled (``background.py`` says which may be). A response is kept as it
is created, before its first byte is sent, with its final JSON (the server completes
every response at once, however its connection fares) and, in background mode, every
event a healthy stream of it carries, numbered. It imports nothing else of the package.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ResponseStore", "StoredResponse"]


@dataclass
class StoredResponse:
    """One response as the server keeps it: its latest JSON and, in background mode, events.

    ``events`` (None unless ``background``) hold their ``sequence_number``, 0 up, keepalives
    excepted; ``think_seq`` is the number of the first output event; ``created`` is
    :func:`time.monotonic` when it was kept, where its resume window starts.
    """

    response: dict[str, Any]
    events: list[dict[str, Any]] | None = None
    think_seq: int = 0
    background: bool = False
    created: float = field(default_factory=time.monotonic)


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
