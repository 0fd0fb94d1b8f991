"""Resume after a crash: a process killed mid-stream, its background response finished by another.

A child process (forked by a forkserver that has openai and the package imported) streams
a background response with ``stream_response``, keeping each checkpoint with the text it
had shown, atomically, as the README's crash-safe pattern does. The test kills it with
``SIGKILL`` at a random moment, then finishes the response with ``resume_response`` from
the kept checkpoint: the kept text and the events after the checkpoint make the whole
text, nothing lost or repeated, and the result equals an uninterrupted run's.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from hermes_transport import ResumeCheckpoint, openai_client_for, resume_response, stream_response
from hermes_transport.testing import FaultServer, Scenario

from _resume_child import stream_until_killed

# A process killed by the test, not the openai major: once, under the newest.
pytestmark = [
    pytest.mark.once,
    pytest.mark.skipif(
        sys.platform == "win32" or "forkserver" not in multiprocessing.get_all_start_methods(),
        reason="needs a forkserver and SIGKILL",
    ),
]

RUNS = 50
PIECES = tuple(f"w{i} " for i in range(12))
SCENARIO = Scenario(content=PIECES, event_interval=0.005)
# A kill falls once the child has kept some pieces (none, some, all), then up to this
# much later: between two checkpoints, mid-read, or after the stream's end.
KILL_WITHIN = 0.012
# Generous: a busy machine.
BOUND = 10.0


@pytest.fixture(scope="module")
def forkserver() -> Any:
    """A forkserver with openai and the package imported: a child a few milliseconds."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["openai", "hermes_transport", "_resume_child"])
    return context


class Deltas:
    """An ``on_event`` that keeps the text the events show."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def __call__(self, event: Any) -> None:
        if event.type == "response.output_text.delta":
            self.pieces.append(event.delta)

    @property
    def text(self) -> str:
        return "".join(self.pieces)


def _kept_text(path: Path) -> str | None:
    """The text the child kept with its latest checkpoint (``None``: none kept yet)."""
    try:
        kept: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    text: str = kept["text"]
    return text


def _wait_for(path: Path, pieces: int, child: Any) -> None:
    """Until the child kept ``pieces`` pieces of text with a checkpoint, or ended."""
    wanted = len("".join(PIECES[:pieces]))
    deadline = time.monotonic() + BOUND
    while child.is_alive():
        text = _kept_text(path)
        if text is not None and len(text) >= wanted:
            return
        assert time.monotonic() < deadline, f"{pieces} piece(s) not kept within {BOUND} s"
        time.sleep(0.001)


def test_a_process_killed_anywhere_is_finished_by_the_next_from_its_checkpoint(
    forkserver: Any, tmp_path: Path
) -> None:
    """Over 50 runs, a child killed at a random moment of its stream leaves a checkpoint and the text it had shown, and resume_response in the parent finishes the same response: the text is whole, nothing repeated, and the result is an uninterrupted run's."""
    full = "".join(PIECES)
    rng = random.Random(20261205)
    with contextlib.ExitStack() as stack, FaultServer(SCENARIO) as server:
        client = openai_client_for(None, base_url=server.base_url, api_key="test", max_retries=0)
        stack.callback(client.close)
        uninterrupted = stream_response(client, model="gpt-4o-mini", input="hi", background=True)
        assert uninterrupted.output_text == full
        kept_lengths = []
        for run in range(RUNS):
            state = tmp_path / f"state-{run}.json"
            child = forkserver.Process(
                target=stream_until_killed, args=(server.base_url, str(state))
            )
            child.start()
            try:
                _wait_for(state, rng.randint(0, len(PIECES)), child)
                time.sleep(rng.uniform(0.0, KILL_WITHIN))
                os.kill(child.pid, signal.SIGKILL)
            finally:
                child.join(BOUND)
            assert child.exitcode in (-signal.SIGKILL, 0), child.exitcode
            kept = json.loads(state.read_text(encoding="utf-8"))
            checkpoint = ResumeCheckpoint.from_json(kept["checkpoint"])
            rest = Deltas()
            finished = resume_response(client, checkpoint, on_event=rest)
            assert kept["text"] + rest.text == full, (run, checkpoint, kept["text"], rest.text)
            assert finished.output_text == full
            assert finished.id == checkpoint.response_id
            # The whole response, as the server keeps it and an uninterrupted run ends with.
            stored = client.responses.retrieve(checkpoint.response_id)
            assert finished.to_dict() == stored.to_dict()
            kept_lengths.append(len(kept["text"]))
    # The kills fell at different points: before any text, mid-text and, for some, after.
    assert min(kept_lengths) < len(full) // 2 < max(kept_lengths), kept_lengths
