"""Drivers for the watched Responses WebSocket tests: one script, sync or async.

A ``Driver`` opens ``watch_connection`` (sync) or ``awatch_connection`` (async, on an
``asyncio.Runner`` of the test's thread: the loop runs while a call runs, so its timers
fire only then, as in an application awaiting the connection) on the SDK's
``responses.connect()`` against the fault server, and runs the same calls either way.
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from typing import Any, Literal

import openai

from hermes_transport import StreamPolicy, StreamStats, awatch_connection, watch_connection
from hermes_transport.testing import FaultServer, RecordedRequest

Mode = Literal["sync", "async"]
MODES: tuple[Mode, ...] = ("sync", "async")

# websockets reads the *_proxy variables by default: a loopback server needs none.
OPTIONS: Any = {"proxy": None}
TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
# Short budgets, so that a stall is seen soon; generous bounds around them in the tests.
BUDGET = 0.5
POLICY = StreamPolicy(stale_timeout=BUDGET, first_event_timeout=BUDGET, budget_rules=None)


def has_connect() -> bool:
    """Whether the installed openai speaks the Responses API over a WebSocket (2.x, 3.x)."""
    from openai.resources.responses import Responses

    return hasattr(Responses, "connect")


class Driver:
    """One watched connection, driven the same way sync or async."""

    def __init__(
        self,
        mode: Mode,
        server: FaultServer,
        *,
        entered: bool = False,
        connect: dict[str, Any] | None = None,
        **watch: Any,
    ) -> None:
        self.mode = mode
        self.stats: list[StreamStats] = []
        watch.setdefault("policy", POLICY)
        watch.setdefault("on_stats", self.stats.append)
        options = {"websocket_connection_options": OPTIONS, **(connect or {})}
        client_kind: Any = openai.OpenAI if mode == "sync" else openai.AsyncOpenAI
        self.client = client_kind(
            base_url=server.base_url,
            websocket_base_url=server.websocket_base_url,
            api_key="x",
            max_retries=0,
            timeout=10.0,
        )
        manager = self.client.responses.connect(**options)
        if mode == "sync":
            self._runner: asyncio.Runner | None = None
            if entered:
                self.conn: Any = watch_connection(manager.enter(), **watch)
            else:
                self.conn = watch_connection(manager, **watch).enter()
            return
        self._runner = asyncio.Runner()
        if entered:

            async def watched() -> Any:  # made on the loop, as in an application
                return awatch_connection(await manager.enter(), **watch)

            self.conn = self._runner.run(watched())
        else:
            self.conn = awatch_connection(manager, **watch)
            self.call(self.conn.enter)

    def call(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``method(*args, **kwargs)``, awaited on the driver's loop when async."""
        result = method(*args, **kwargs)
        if self._runner is not None:
            # The caller's context, as a task awaiting the call would have: its bound tokens.
            return self._runner.run(result, context=contextvars.copy_context())
        return result

    def create(self, **fields: Any) -> None:
        fields.setdefault("model", "m")
        fields.setdefault("input", "hi")
        self.call(self.conn.response.create, **fields)

    def recv(self) -> Any:
        return self.call(self.conn.recv)

    def turn(self, **fields: Any) -> list[Any]:
        """Send a create and read its events up to the terminal one."""
        self.create(**fields)
        return self.rest()

    def rest(self) -> list[Any]:
        """Read events up to a terminal one."""
        events = [self.recv()]
        while events[-1].type not in TERMINAL:
            events.append(self.recv())
        return events

    def idle(self, seconds: float) -> None:
        """Let ``seconds`` pass with the loop running (async) or the thread asleep."""
        if self._runner is not None:
            self._runner.run(asyncio.sleep(seconds))
        else:
            time.sleep(seconds)

    def close(self) -> None:
        try:
            self.call(self.conn.close)
            if self._runner is None:
                self.client.close()
            else:
                self._runner.run(self.client.close())
        finally:
            if self._runner is not None:
                self._runner.close()


def creates(server: FaultServer) -> list[RecordedRequest]:
    """The ``response.create`` frames the server heard."""
    return [
        r
        for r in server.requests
        if r.method == "WEBSOCKET"
        and isinstance(r.json, dict)
        and r.json.get("type") == "response.create"
    ]


def types(events: list[Any]) -> list[str]:
    return [event.type for event in events]


class Drivers:
    """The drivers a test opens in one mode, each closed after it (``ws_drivers``)."""

    def __init__(self, mode: Mode) -> None:
        self.mode = mode
        self._made: list[Driver] = []

    def open(self, server: FaultServer, **kwargs: Any) -> Driver:
        driver = Driver(self.mode, server, **kwargs)
        self._made.append(driver)
        return driver

    def close(self) -> None:
        for driver in self._made:
            driver.close()
