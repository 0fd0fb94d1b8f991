"""FaultServers in a child process, driven over a pipe.

The measured client must not share its interpreter (its GIL, its CPU time) with the
server's threads: the server's work would show up as client latency and client CPU.
So the servers run in a spawned child, and the benchmark asks it over a pipe to change
a scenario or to report what it saw. One child can host several servers, one per lane
of concurrent trials, each with its own scenario.
"""

from __future__ import annotations

import multiprocessing
import threading
from multiprocessing.connection import Connection
from typing import Any

from hermes_transport.testing import FaultServer, Scenario

__all__ = ["ServerProcess"]

_STOP_TIMEOUT = 30.0


class ServerProcess:
    """``count`` FaultServers on 127.0.0.1, served by a child process.

    Use it as a context manager. Every method is a round trip to the child (a fraction of
    a millisecond); calls from several threads are serialised.
    """

    def __init__(self, scenario: Scenario, *, count: int = 1) -> None:
        self._scenarios = [scenario] * count
        self._lock = threading.Lock()
        self._urls: list[str] = []
        context = multiprocessing.get_context("spawn")  # never fork a threaded process
        self._conn, child_conn = context.Pipe()
        self._process = context.Process(
            target=_serve, args=(child_conn, self._scenarios), name="bench-fault-server"
        )

    def __enter__(self) -> ServerProcess:
        self._process.start()
        self._urls = self._conn.recv()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the servers and the child; idempotent."""
        if not self._process.is_alive():
            return
        try:
            with self._lock:
                self._conn.send(("stop", 0, None))
                self._conn.recv()
        except (EOFError, OSError):
            pass
        self._process.join(_STOP_TIMEOUT)
        if self._process.is_alive():  # pragma: no cover - a wedged child
            self._process.terminate()
            self._process.join()

    def url(self, index: int = 0) -> str:
        """The OpenAI base URL of server ``index``."""
        return self._urls[index]

    def set_scenario(self, scenario: Scenario, index: int = 0) -> None:
        """Answer the requests that arrive from now on according to ``scenario``."""
        self._call("scenario", index, scenario)

    def connections_opened(self, index: int = 0) -> int:
        """TCP connections server ``index`` accepted so far."""
        return int(self._call("connections", index, None))

    def request_count(self, index: int = 0) -> int:
        """Requests server ``index`` received so far."""
        return int(self._call("requests", index, None))

    def wait_for_requests(self, n: int, timeout: float = 5.0, index: int = 0) -> bool:
        """Block until server ``index`` has received ``n`` requests; False on timeout."""
        return bool(self._call("wait", index, (n, timeout)))

    def _call(self, command: str, index: int, argument: object) -> Any:
        with self._lock:
            self._conn.send((command, index, argument))
            return self._conn.recv()


def _serve(conn: Connection, scenarios: list[Scenario]) -> None:
    """The child: start the servers, then answer commands until told to stop."""
    servers = [FaultServer(scenario).start() for scenario in scenarios]
    try:
        conn.send([server.base_url for server in servers])
        while True:
            try:
                command, index, argument = conn.recv()
            except EOFError:  # the parent died
                return
            if command == "stop":
                break
            conn.send(_answer(servers[index], command, argument))
    finally:
        for server in servers:
            server.stop()
    conn.send(None)


def _answer(server: FaultServer, command: str, argument: Any) -> object:
    if command == "scenario":
        server.scenario = argument
        return None
    if command == "connections":
        return server.connections_opened
    if command == "requests":
        return len(server.requests)
    if command == "wait":
        n, timeout = argument
        return server.wait_for_requests(n, timeout)
    raise ValueError(f"unknown command {command!r}")
