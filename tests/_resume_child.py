"""What a process killed mid-stream runs (``tests/sdk/test_resume_after_crash.py``).

Imported by the test's child processes (a forkserver's), so it lives beside ``_support``
on the tests' import path, and imports nothing of the tests.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hermes_transport import ResumeCheckpoint, StreamPolicy, openai_client_for, stream_response

#: How often the child's transport gives checkpoints: at every read, nearly.
CHECKPOINT_INTERVAL = 0.001


def stream_until_killed(base_url: str, state_path: str) -> None:
    """Stream a background response, keeping after every checkpoint the checkpoint and the
    text shown so far, together (written aside, then renamed over the last: atomic), as a
    crash-safe caller does; the parent kills this process at some moment."""
    shown: list[str] = []

    def on_event(event: Any) -> None:
        if event.type == "response.output_text.delta":
            shown.append(event.delta)

    def on_checkpoint(checkpoint: ResumeCheckpoint) -> None:
        state = {"checkpoint": checkpoint.to_json(), "text": "".join(shown)}
        aside = state_path + ".aside"
        with open(aside, "w", encoding="utf-8") as file:
            json.dump(state, file)
        os.replace(aside, state_path)

    policy = StreamPolicy(checkpoint_interval=CHECKPOINT_INTERVAL)
    client = openai_client_for(
        "cron", base_url=base_url, api_key="test", max_retries=0, policy=policy
    )
    stream_response(
        client,
        model="gpt-4o-mini",
        input="hi",
        background=True,
        on_event=on_event,
        on_checkpoint=on_checkpoint,
    )
