"""What the sync and async shells share: settings checks, and the inner transport.

``check_settings`` validates a transport's constructor arguments with errors
that name the culprit; ``Shell`` holds the inner transport, the policy and
the transport's own interrupt, and lets guards reach the inner transport's
sockets (``_io.backend.track_sockets``) when it is the flavor's own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

from .._core.checkpoints import CheckpointCallback
from .._core.errors import in_band_answer
from .._core.exchange import Exchange
from .._core.flavor import Flavor, library_of, runs_on
from .._core.interrupt import Interrupt, bound_interrupts
from .._core.mcp_asks import WaitingAsks
from .._core.policy import StreamPolicy
from .._core.stats import StatsCallback
from .._io.backend import refuse_http2, track_sockets

__all__ = ["Shell", "check_settings"]


def check_settings(
    transport: str,
    inner: object,
    policy: object,
    interrupt: object,
    settings: dict[str, Any],
    flavor: Flavor,
    method: str,
) -> None:
    """Validate a transport's constructor arguments; the message names the culprit.

    ``method`` is what the shell calls on ``inner`` (``handle_request`` or
    ``handle_async_request``).
    """
    if inner is not None and not runs_on(inner, flavor):
        library = library_of(inner)
        if library is not None and library != flavor.name:
            home = "hermes_transport" + ("" if library == "httpx" else f".{library}")
            raise TypeError(
                f"{transport} runs on {flavor.name}, but inner is an {library} transport"
                f" ({type(inner).__name__}): use {home}.{transport} with it, or give an"
                f" {flavor.name} inner transport"
            )
    if inner is not None and not callable(getattr(inner, method, None)):
        raise TypeError(
            f"inner must be a transport with {method}() ({transport} is"
            f" {'async' if 'async' in method else 'sync'}), got {inner!r}"
        )
    if inner is not None and settings:
        raise TypeError(
            f"{transport} got {', '.join(sorted(settings))} together"
            " with an inner transport: those settings configure the transport it builds"
            " when inner is None; configure your inner transport instead"
        )
    if inner is None:
        refuse_http2(settings.get("http2"), transport)
    if policy is not None and not isinstance(policy, StreamPolicy):
        raise TypeError(f"policy must be a StreamPolicy or None, got {policy!r}")
    if interrupt is not None and not isinstance(interrupt, Interrupt):
        raise TypeError(f"interrupt must be an Interrupt or None, got {interrupt!r}")


_Inner = TypeVar("_Inner")


class Shell(Generic[_Inner]):
    """What the sync and async transports hold: inner transport, policy, own interrupt.

    Each public class sets ``_flavor``: the HTTP library it runs on, through which
    every library name is looked up.
    """

    _flavor: ClassVar[Flavor]
    _inner_method: ClassVar[str]  # what the shell calls on its inner transport
    _inner: _Inner
    _policy: StreamPolicy
    _interrupt: Interrupt | None
    _on_stats: StatsCallback | None
    _on_checkpoint: CheckpointCallback | None
    _sockets_reachable: bool
    #: Whether an MCP request the watch ends is answered in band (``_answered``): set by
    #: ``mcp_http_client_for`` for the mcp SDK, which fails only that request on it.
    _in_band = False

    def _configure(
        self,
        inner: _Inner | None,
        policy: StreamPolicy | None,
        interrupt: Interrupt | None,
        callbacks: tuple[StatsCallback | None, CheckpointCallback | None],
        settings: dict[str, Any],
        http_transport: type[Any],
        pool: type[Any],
        tracking_backend: Callable[[Any], Any],
    ) -> None:
        """Build (``http_transport(**settings)``) or take the inner transport, and
        let guards reach its sockets when it is an ``http_transport`` over a ``pool``."""
        name = type(self).__name__
        check_settings(name, inner, policy, interrupt, settings, self._flavor, self._inner_method)
        self._inner = inner if inner is not None else http_transport(**settings)
        self._sockets_reachable = track_sockets(
            self._inner, http_transport, pool, tracking_backend, name
        )
        on_stats, on_checkpoint = callbacks
        for field, given, kind in (
            ("on_stats", on_stats, "StreamStats"),
            ("on_checkpoint", on_checkpoint, "ResumeCheckpoint"),
        ):
            if given is not None and not callable(given):
                raise TypeError(
                    f"{name}: {field} must be a callable taking a {kind}, or None; got {given!r}"
                )
        self._interrupt = interrupt
        self._on_stats = on_stats
        self._on_checkpoint = on_checkpoint
        self._policy = policy if policy is not None else StreamPolicy.from_env()
        self._asks = WaitingAsks()  # MCP: the streams waiting for their client's answer

    def _exchange(self, request: Any) -> Exchange:
        """The exchange of one ``handle_request``, under this transport's settings and the
        interrupts bound where it is called."""
        policy, interrupt, on_stats = self._policy, self._interrupt, self._on_stats
        bound = bound_interrupts()
        in_band, asks, checkpoints = self._in_band, self._asks, self._on_checkpoint
        return Exchange(
            request,
            self._flavor,
            policy,
            interrupt,
            bound,
            on_stats,
            in_band=in_band,
            asks=asks,
            on_checkpoint=checkpoints,
        )

    def _answer_sent(self, exchange: Exchange) -> None:
        """After a request is over: if it was a client's answer to a request of an MCP
        server's, the stream that waited for it has its budget again (sent or failed, the
        server has all it will get)."""
        if exchange.answers is not None:
            self._asks.answered(exchange.session, exchange.answers)

    def _answered(self, request: Any, exchange: Exchange, error: BaseException) -> Any:
        """The response written in the server's place for a stalled or interrupted MCP
        request answered in band (a JSON-RPC error for its id, the error kept for
        ``stream_error``); ``None``: ``error`` is raised."""
        event = in_band_answer(exchange.in_band, error)
        if event is None:
            return None
        headers = {"content-type": "text/event-stream"}
        return self._flavor.http.Response(200, headers=headers, content=event, request=request)

    @property
    def policy(self) -> StreamPolicy:
        """The liveness budgets this transport applies."""
        return self._policy

    @property
    def inner(self) -> _Inner:
        """The transport that does the HTTP."""
        return self._inner
