"""Figure 4: threads alive beyond the callers' own while 200 sync streams are open at once.

Each client runs in a fresh process (so no watchdog thread has been started before, and
no thread of another figure lingers), with the server in yet another. 200 caller threads
each start a chat completion stream and, at its first chunk, wait there until every
stream is open; then the threads are counted: extra = alive - before - 200.

``inline`` streams on the caller's thread (background work: cron, sub-agents);
``worker`` is the interactive mode, where the request runs on a worker thread so that the
caller stays responsive (the library's ``stream_chat_completion(inline=False)``, the
seed's worker thread).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Literal

from hermes_transport import StreamPolicy, stream_chat_completion
from hermes_transport.testing import Scenario

from . import seed_model, variants
from .progress import say
from .report import Row
from .server import ServerProcess
from .variants import Variant

__all__ = ["run"]

Mode = Literal["inline", "worker"]
MODES: tuple[tuple[Variant, Mode], ...] = (
    ("plain", "inline"),
    ("watchdog", "inline"),
    ("watchdog", "worker"),
    ("seed", "inline"),
    ("seed", "worker"),
)
TARGET = 1
POLICY = StreamPolicy(stale_timeout=60.0)
OPEN_TIMEOUT = 60.0


def _os_threads() -> int | None:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _count(variant: Variant, mode: Mode, url: str, streams: int) -> dict[str, Any]:
    """In a fresh process: open ``streams`` streams at once and count the threads."""
    before, os_before = threading.active_count(), _os_threads()
    opened = threading.Semaphore(0)
    release = threading.Event()
    errors: list[str] = []
    client = variants.openai_client(variant, url, policy=POLICY)

    def call() -> None:
        held = False

        def hold(_chunk: object) -> None:
            nonlocal held
            if not held:
                held = True
                opened.release()
                release.wait(OPEN_TIMEOUT)

        inline = mode == "inline"
        try:
            if variant == "watchdog":
                stream_chat_completion(client, inline=inline, on_delta=hold, **variants.CHAT)
            elif variant == "seed":
                call = seed_model.SeedCall(60.0)
                seed_model.seed_stream_chat(
                    client, call, inline=inline, on_chunk=hold, **variants.CHAT
                )
            else:
                for chunk in variants.open_stream(client):
                    hold(chunk)
        except Exception as exc:  # reported, and the count is then void
            errors.append(repr(exc))
            opened.release()

    callers = [threading.Thread(target=call, name="caller") for _ in range(streams)]
    for caller in callers:
        caller.start()
    for _ in range(streams):
        opened.acquire(timeout=OPEN_TIMEOUT)
    alive, os_alive = threading.active_count(), _os_threads()
    names = sorted(
        {t.name for t in threading.enumerate() if t.name not in ("caller", "MainThread")}
    )
    release.set()
    for caller in callers:
        caller.join()
    client.close()
    return {
        "extra": alive - before - streams,
        "os_extra": None
        if os_before is None or os_alive is None
        else os_alive - os_before - streams,
        "thread_names": names,
        "errors": errors,
    }


def _in_fresh_process(variant: Variant, mode: Mode, url: str, streams: int) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(_count, variant, mode, url, streams).result(timeout=300)


def _cell(results: dict[tuple[Variant, Mode], dict[str, Any]], variant: Variant) -> str:
    parts = []
    for (v, mode), result in results.items():
        if v != variant:
            continue
        text = f"{result['extra']} ({mode})"
        if result["errors"]:
            text += f", {len(result['errors'])} failed"
        parts.append(text)
    return "; ".join(parts)


def run(quick: bool) -> list[Row]:
    """Count, in a fresh process per client and mode; one row."""
    streams = 50 if quick else 200
    results: dict[tuple[Variant, Mode], dict[str, Any]] = {}
    with ServerProcess(Scenario.healthy(content=("a", "b", "c"))) as server:
        for variant, mode in MODES:
            results[(variant, mode)] = _in_fresh_process(variant, mode, server.url(), streams)
            say(f"threads {variant} {mode}: {results[(variant, mode)]['extra']} extra")
    inline = results[("watchdog", "inline")]
    passed = inline["extra"] <= TARGET and not inline["errors"]
    return [
        Row(
            key="4",
            figure=f"threads alive beyond the callers' while {streams} sync streams are open",
            cells={v: _cell(results, v) for v in variants.VARIANTS},
            target=f"<= {TARGET} (inline)",
            verdict="PASS" if passed else "MISS",
            data={f"{v}/{m}": r for (v, m), r in results.items()},
            notes=[
                "threads beyond the callers', by name: "
                + "; ".join(
                    f"{v} {m}: {', '.join(r['thread_names']) or 'none'}"
                    for (v, m), r in results.items()
                )
            ],
        )
    ]
