"""The demo's crash part: a process killed mid-answer, the next one finishing it.

A child process (``multiprocessing``, spawned) streams a background Responses answer from
the embedded fault server with ``stream_response``, keeping each checkpoint with the text
it had shown, together, in a file (written aside, then renamed: atomic). The demo kills
it mid-answer (``SIGKILL``; on Windows ``TerminateProcess``), then goes on in this
process with ``resume_response`` from the kept checkpoint: the kept text and the events
after the checkpoint make the whole answer, nothing lost or repeated.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from .._core.checkpoints import ResumeCheckpoint
from .._core.policy import StreamPolicy
from .._sdk.clients import openai_client_for
from .._sdk.responses import stream_response
from .._sdk.resumed import resume_response
from ..testing import FaultServer, Scenario

__all__ = ["CRASH_TITLE", "crash_part"]

CRASH_TITLE = "killed mid-answer, resumed"
_WORDS = ("the ", "next ", "process ", "finishes ", "what ", "the ", "last ", "one ", "began ")
_SCENARIO = Scenario(content=_WORDS, event_interval=0.1)
# Killed once this many words were shown (and kept with a checkpoint).
_KILL_AFTER = 3
_BOUND = 30.0


def _child(base_url: str, state_path: str) -> None:
    """The process that is killed: streams the answer, keeping checkpoints and its text."""
    shown: list[str] = []

    def on_event(event: Any) -> None:
        if event.type == "response.output_text.delta":
            shown.append(event.delta)

    def on_checkpoint(checkpoint: ResumeCheckpoint) -> None:
        aside = state_path + ".aside"
        with open(aside, "w", encoding="utf-8") as file:
            json.dump({"checkpoint": checkpoint.to_json(), "text": "".join(shown)}, file)
        os.replace(aside, state_path)

    client = openai_client_for(
        "cron",
        base_url=base_url,
        api_key="demo",
        max_retries=0,
        policy=StreamPolicy(checkpoint_interval=0.01),
    )
    stream_response(
        client,
        model="demo",
        input="hi",
        background=True,
        on_event=on_event,
        on_checkpoint=on_checkpoint,
    )


def _kept(path: Path) -> dict[str, Any] | None:
    try:
        kept: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return kept


def crash_part(out: TextIO) -> bool:
    """Print the crash line; whether the next process finished the same answer whole."""
    full = "".join(_WORDS)
    out.write(
        "\nCrash: a background Responses answer whose process is killed mid-answer; the next"
        " process finishes it from its checkpoint.\n"
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder, FaultServer(_SCENARIO) as server:
        state = Path(folder) / "turn.json"
        child = multiprocessing.get_context("spawn").Process(
            target=_child, args=(server.base_url, str(state)), daemon=True
        )
        child.start()
        deadline = time.monotonic() + _BOUND
        kept = _kept(state)
        while (kept is None or len(kept["text"]) < len("".join(_WORDS[:_KILL_AFTER]))) and (
            time.monotonic() < deadline and child.is_alive()
        ):
            time.sleep(0.005)
            kept = _kept(state)
        child.kill()
        child.join(_BOUND)
        kept = _kept(state)
        if kept is None:
            out.write(f"{CRASH_TITLE:<31} no checkpoint kept   <-- expected one\n")
            return False
        checkpoint = ResumeCheckpoint.from_json(kept["checkpoint"])
        rest: list[str] = []

        def on_event(event: Any) -> None:
            if event.type == "response.output_text.delta":
                rest.append(event.delta)

        client = openai_client_for(None, base_url=server.base_url, api_key="demo", max_retries=0)
        try:
            answer = resume_response(client, checkpoint, on_event=on_event)
        finally:
            client.close()
    took = time.monotonic() - started
    text = kept["text"] + "".join(rest)
    ok = text == full and answer.output_text == full
    out.write(
        f"{CRASH_TITLE:<31} the killed process showed {kept['text']!r} (checkpoint: event"
        f" {checkpoint.sequence_number}); the next one went on with {''.join(rest)!r}:"
        f" {'whole, nothing lost or repeated' if ok else 'NOT the whole answer'}"
        f" in {took:.2f} s" + ("" if ok else f"   <-- expected {full!r}") + "\n"
    )
    return ok
