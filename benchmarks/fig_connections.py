"""Figure 5: TCP connections opened by 100 sequential sync streams through the openai SDK.

Each stream is ``client.chat.completions.create(..., stream=True)`` iterated to its end,
one after the other on one client; the server counts the connections it accepted. Three
times: with a server that ends the body right after ``data: [DONE]``, and with one that
lingers 20 ms, then 100 ms, there first (``Scenario.linger_after_done``), which shows
whether, and how long, a client waits for the end of the body to keep its connection. The
median time per stream goes with it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

from hermes_transport import StreamPolicy
from hermes_transport.testing import Scenario

from . import seed_model, variants
from .measure import fmt_ms
from .progress import say
from .report import Row
from .server import ServerProcess
from .variants import VARIANTS, Variant

__all__ = ["run"]

LINGERS = (0.0, 0.020, 0.100)
POLICY = StreamPolicy(stale_timeout=60.0)


def _streams(variant: Variant, server: ServerProcess, n: int) -> tuple[int, float, int]:
    """(connections opened, median seconds per stream, streams that read "hello world")."""
    durations = []
    complete = 0
    before = server.connections_opened()
    with variants.openai_client(variant, server.url(), policy=POLICY) as client:
        for _ in range(n):
            text: list[str] = []

            def took(chunk: object, text: list[str] = text) -> None:
                choices = getattr(chunk, "choices", [])
                if choices and choices[0].delta.content:
                    text.append(choices[0].delta.content)

            started = time.perf_counter()
            if variant == "seed":
                call = seed_model.SeedCall(60.0)
                seed_model.seed_stream_chat(client, call, on_chunk=took, **variants.CHAT)
            else:
                for chunk in variants.open_stream(client):
                    took(chunk)
            durations.append(time.perf_counter() - started)
            complete += "".join(text) == "hello world"
    return server.connections_opened() - before, statistics.median(durations), complete


def run(quick: bool) -> list[Row]:
    """Count for each client and linger; one row."""
    n = 20 if quick else 100
    results: dict[Variant, list[tuple[int, float, int]]] = {v: [] for v in VARIANTS}
    with ServerProcess(Scenario.healthy()) as server:
        for linger in LINGERS:
            server.set_scenario(replace(Scenario.healthy(), linger_after_done=linger))
            for variant in VARIANTS:
                results[variant].append(_streams(variant, server, n))
            say(f"connections: linger {linger * 1e3:g} ms done")
    cells: dict[str, str] = {
        v: " / ".join(str(c) for c, _, _ in r)
        + f" (median {' / '.join(fmt_ms(t) for _, t, _ in r)} ms a stream)"
        for v, r in results.items()
    }
    incomplete = {v: len(LINGERS) * n - sum(k for _, _, k in r) for v, r in results.items()}
    notes = [f"{v}: {k} streams did not read 'hello world'" for v, k in incomplete.items() if k]
    lingers = " / ".join(f"{linger * 1e3:g}" for linger in LINGERS)
    return [
        Row(
            key="5",
            figure=(
                f"TCP connections opened by {n} sequential openai streams read to the end,"
                f" the server lingering {lingers} ms after [DONE]"
            ),
            cells=cells,
            target="none set (1 = full reuse)",
            verdict="info",
            data={
                v: [
                    {"linger_s": linger, "connections": c, "median_s": t, "complete": k}
                    for linger, (c, t, k) in zip(LINGERS, r, strict=True)
                ]
                for v, r in results.items()
            },
            notes=notes,
        )
    ]
