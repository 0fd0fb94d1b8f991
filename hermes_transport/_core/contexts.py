"""Kinds of caller, and what a factory decided for a client.

Background contexts (cron turns, delegated sub-agents) stream *inline*, on the
calling thread: a worker thread wedges inside their nested thread pools.
Interactive contexts keep a worker thread, so the caller stays responsive to
a /stop while the request runs. Both get the same watchdog transport.
"""

from __future__ import annotations

from dataclasses import dataclass

from .interrupt import Interrupt
from .policy import StreamPolicy

__all__ = ["INLINE_PLATFORMS", "ClientProfile", "should_stream_inline"]

INLINE_PLATFORMS = frozenset({"cron", "subagent"})


def should_stream_inline(
    platform: str | None, api_mode: str = "chat_completions", provider: str | None = None
) -> bool:
    """Whether a caller of this kind streams on its own thread, not on a worker.

    True for platform ``"cron"`` or ``"subagent"`` with ``api_mode``
    ``"chat_completions"`` and any provider but ``"moa"``; False otherwise
    (``"cli"`` and other interactive platforms, ``None``, another
    ``api_mode`` such as ``"anthropic_messages"``, provider ``"moa"``). The
    factories record it for ``stream_chat_completion``; async callers always
    stream on their own loop.
    """
    return platform in INLINE_PLATFORMS and api_mode == "chat_completions" and provider != "moa"


@dataclass(frozen=True)
class ClientProfile:
    """What a factory decided for a client: how it streams, with which budgets."""

    inline: bool
    policy: StreamPolicy
    interrupt: Interrupt | None
