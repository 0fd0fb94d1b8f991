"""The gemini wire's paths and events: what the watch reads from Gemini API and Vertex AI."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hermes_transport import StreamPolicy
from hermes_transport._core.sse import SSEScanner
from hermes_transport._core.wire_paths import gemini_call, gemini_provider, wire_of
from hermes_transport._core.wires import ErrorEvent, classify

from _support import events_read_one_by_one_up_to

# Pure: the same under every openai major.
pytestmark = pytest.mark.once

MODEL = "gemini-2.5-pro"


@pytest.mark.parametrize(
    ("path", "model", "streams"),
    [
        (f"/v1beta/models/{MODEL}:streamGenerateContent", MODEL, True),
        (f"/v1/models/{MODEL}:streamGenerateContent", MODEL, True),
        (f"/v1beta/models/{MODEL}:generateContent", MODEL, False),
        ("/v1beta/tunedModels/my-tuned-1:streamGenerateContent", "my-tuned-1", True),
        (
            "/v1/projects/p/locations/us-central1/publishers/google/models/"
            "gemini-3-pro:streamGenerateContent",
            "gemini-3-pro",
            True,
        ),
        (
            "/v1beta1/projects/p/locations/global/publishers/google/models/"
            "gemini-2.5-flash:generateContent",
            "gemini-2.5-flash",
            False,
        ),
        (f"/proxy/google/v1beta/models/{MODEL}:streamGenerateContent/", MODEL, True),
    ],
)
def test_a_gemini_path_names_its_wire_model_and_streaming(
    path: str, model: str, streams: bool
) -> None:
    """Gemini API and Vertex AI content paths, tuned models and proxy prefixes included, speak the gemini wire, name their model and say whether they stream."""
    assert wire_of(path) == "gemini"
    assert gemini_call(path) == (model, streams)


@pytest.mark.parametrize(
    "path",
    [
        f"/v1beta/models/{MODEL}:countTokens",
        f"/v1beta/models/{MODEL}:embedContent",
        f"/v1beta/models/{MODEL}",
        "/v1beta/models",
        f"/v1beta/cachedContents/{MODEL}:streamGenerateContent",
    ],
)
def test_other_gemini_paths_are_generic(path: str) -> None:
    """Gemini paths that generate no content (token counts, embeddings, model listings) are not the gemini wire."""
    assert wire_of(path) == "generic"
    assert gemini_call(path) is None


@pytest.mark.parametrize(
    ("path", "provider"),
    [
        (f"/v1beta/models/{MODEL}:streamGenerateContent", "gcp.gemini"),
        (
            f"/v1/projects/p/locations/l/publishers/google/models/{MODEL}:streamGenerateContent",
            "gcp.vertex_ai",
        ),
    ],
)
def test_a_gemini_path_names_its_provider(path: str, provider: str) -> None:
    """A Vertex AI path is the gcp.vertex_ai provider's, any other Gemini path gcp.gemini's."""
    assert gemini_provider(path) == provider


def chunk(*parts: dict[str, Any], finish: str | None = None, usage: bool = False) -> bytes:
    """A ``GenerateContentResponse``'s JSON: one candidate with ``parts``."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": list(parts)}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    payload: dict[str, Any] = {"candidates": [candidate], "modelVersion": MODEL}
    if usage:
        payload["usageMetadata"] = {"promptTokenCount": 3, "totalTokenCount": 5}
    return json.dumps(payload).encode()


USAGE_ONLY = json.dumps({"usageMetadata": {"promptTokenCount": 3}, "modelVersion": MODEL}).encode()


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (chunk({"text": "hi"}), "output"),
        (chunk({"text": "planning", "thought": True}), "output"),
        (chunk({"functionCall": {"name": "f", "args": {}}}), "output"),
        (chunk({"inlineData": {"mimeType": "image/png", "data": "AAAA"}}), "output"),
        (chunk({"executableCode": {"language": "PYTHON", "code": "1"}}), "output"),
        (chunk({"text": ""}), "preamble"),
        (chunk({"thoughtSignature": "c2ln"}), "preamble"),
        (chunk(), "preamble"),
        (USAGE_ONLY, "preamble"),
        (json.dumps({"promptFeedback": {"blockReason": "SAFETY"}}).encode(), "preamble"),
        (chunk({"text": "bye"}, finish="STOP", usage=True), "end"),
        (chunk(finish="MAX_TOKENS"), "end"),
        (
            json.dumps(
                {"candidates": [{"finishReason": "STOP"}, {"content": {"parts": [{"text": "x"}]}}]}
            ).encode(),
            "output",
        ),
        (chunk({"text": "cut sho"})[:-9], "output"),  # cut short: it may carry anything
    ],
    ids=[
        "text",
        "thought",
        "function-call",
        "inline-data",
        "code",
        "empty-text",
        "signature-only",
        "no-parts",
        "usage-only",
        "prompt-feedback",
        "finish-with-text",
        "finish-alone",
        "one-of-two-finished",
        "unreadable",
    ],
)
def test_each_gemini_event_has_its_class(data: bytes, expected: str) -> None:
    """A candidate part with content is output, every candidate finished is the end, and a chunk of usage or feedback alone is preamble."""
    assert classify("gemini", b"message", data, frozenset()) == expected


# The same text chunk as servers spell it (the Gemini API's spacing, the fault server's
# order, compact JSON) and spaced as no server does, which only the pattern reads.
SPELLINGS = [
    '{"candidates": [{"content": {"parts": [{"text": %s}], "role": "model"}, "index": 0%s}]}',
    '{"candidates": [{"content": {"role": "model", "parts": [{"text": %s}]}, "index": 0%s}]}',
    '{"candidates":[{"content":{"parts":[{"text":%s}],"role":"model"},"index":0%s}]}',
    '{"candidates":[{"content":{"role":"model","parts":[{"text":%s}]},"index":0%s}]}',
    ' {\r\n "candidates" :[ {"content": {\t"parts":[ { "text" : %s } ] }%s } ] }',
]


@pytest.mark.parametrize("spelling", SPELLINGS)
@pytest.mark.parametrize(
    ("text", "finish", "expected"),
    [
        ('"hi"', "", "output"),
        ('"\\"quoted\\""', "", "output"),
        ('"\\n"', "", "output"),
        ('""', "", "preamble"),
        ('"hi"', ', "finishReason": "STOP"', "end"),
        ('""', ',"finishReason":"STOP"', "end"),
    ],
    ids=["text", "escaped-quote", "escaped-newline", "empty", "finished", "empty-finished"],
)
def test_a_text_chunk_has_its_class_however_it_is_spelled(
    spelling: str, text: str, finish: str, expected: str
) -> None:
    """A chunk whose first part is text is judged without a parse as the parse would judge it, in every spacing: non-empty text is output, empty text is not, a finish is the end."""
    data = (spelling % (text, finish)).encode()
    json.loads(data)  # the case is valid JSON
    assert classify("gemini", b"message", data, frozenset()) == expected


@pytest.mark.parametrize(
    ("error", "kind", "transient"),
    [
        ({"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}, "UNAVAILABLE", True),
        ({"code": 429, "status": "RESOURCE_EXHAUSTED"}, "RESOURCE_EXHAUSTED", True),
        ({"code": 500, "status": "INTERNAL"}, "INTERNAL", True),
        ({"code": 504}, "504", True),
        ({"status": "DEADLINE_EXCEEDED"}, "DEADLINE_EXCEEDED", True),
        ({"code": 400, "status": "INVALID_ARGUMENT"}, "INVALID_ARGUMENT", False),
        ({"code": 403, "status": "PERMISSION_DENIED"}, "PERMISSION_DENIED", False),
        ("broken", None, False),
    ],
)
def test_gemini_error_events_say_whether_the_server_failed_transiently(
    error: object, kind: str | None, transient: bool
) -> None:
    """An error event is transient for codes 429, 500, 503 and 504 and their statuses, not for a request's own error."""
    found = classify("gemini", b"message", json.dumps({"error": error}).encode(), frozenset())
    assert isinstance(found, ErrorEvent)
    assert (found.kind, found.transient) == (kind, transient)


def sse(data: bytes, crlf: bool) -> bytes:
    newline = b"\r\n" if crlf else b"\n"
    return b"data: " + data + newline + newline


@pytest.mark.parametrize("middle", [None, 0], ids=["default", "every-run-skipped"])
@pytest.mark.parametrize("crlf", [False, True], ids=["lf", "crlf"])
def test_a_gemini_stream_is_progress_from_its_first_content_to_its_finish(
    crlf: bool, middle: int | None
) -> None:
    """Usage-only chunks are no progress, each content chunk is, and the chunk where every candidate finished ends the stream as its read's last event; a keepalive comment changes nothing."""
    heartbeats = StreamPolicy().heartbeats_for("gemini")
    scanner = SSEScanner(heartbeats, "gemini")
    with events_read_one_by_one_up_to(10**9 if middle is None else middle):
        assert scanner.feed(sse(USAGE_ONLY, crlf) + b": keepalive\n\n") == 0
        assert scanner.feed(sse(chunk({"text": "thinking", "thought": True}), crlf)) == 1
        assert scanner.feed(sse(chunk({"text": "a"}), crlf) * 40) >= 1
        assert not scanner.done
        assert scanner.feed(sse(chunk({"text": "b"}, finish="STOP", usage=True), crlf)) == 1
    assert scanner.done
    assert scanner.error is None


def test_a_gemini_error_before_any_output_is_kept() -> None:
    """An error event before any content is kept for the exchange (a transient one is re-sent), not counted as progress."""
    scanner = SSEScanner((), "gemini")
    error = {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}
    assert scanner.feed(sse(json.dumps({"error": error}).encode(), False)) == 0
    assert scanner.error is not None
    assert (scanner.error.kind, scanner.error.transient) == ("UNAVAILABLE", True)
    assert "overloaded" in str(scanner.error)


@pytest.mark.parametrize(
    ("model", "reasoning"),
    [
        ("gemini-2.5-pro", True),
        ("gemini-1.5-pro-002", True),
        ("gemini-3-flash", True),
        ("gemini-3.0-pro-preview", True),
        ("gemini-2.0-flash-thinking-exp", True),
        ("gemini-2.5-flash", False),
        ("gemini-2.0-flash-lite", False),
    ],
)
def test_gemini_reasoning_models_get_the_reasoning_budgets(model: str, reasoning: bool) -> None:
    """Pro, Gemini 3 and thinking models get the reasoning-class budgets by default; the other Gemini models the policy's own."""
    budgets = StreamPolicy().budgets_for(model)
    plain = StreamPolicy().budgets_for()
    if reasoning:
        assert (budgets.first_event, budgets.stale) == (600.0, 300.0)
        assert repr(model) in budgets.source
    else:
        assert (budgets.first_event, budgets.stale) == (plain.first_event, plain.stale)


def test_an_explicit_budget_wins_over_a_gemini_rule() -> None:
    """A stale budget the user set holds for a Gemini reasoning model too."""
    budgets = StreamPolicy(stale_timeout=20.0).budgets_for("gemini-2.5-pro")
    assert budgets.stale == 20.0


_PART_KEYS = ["text", "thought", "functionCall", "thoughtSignature", "inlineData"]


def _reference_class(payload: dict[str, Any]) -> str:
    """The class of a parsed chunk, read from its JSON alone (the wire's rules, for errors aside)."""
    candidates = payload.get("candidates")
    if not isinstance(candidates, list) or not candidates:
        return "preamble"
    if all(isinstance(c, dict) and c.get("finishReason") for c in candidates):
        return "end"
    for candidate in candidates:
        parts = ((candidate.get("content") or {}) if isinstance(candidate, dict) else {}).get(
            "parts"
        )
        for part in parts or []:
            if any(part.get(key) for key in ("text", "functionCall", "inlineData")):
                return "output"
    return "preamble"


@given(
    candidates=st.lists(
        st.fixed_dictionaries(
            {
                "content": st.fixed_dictionaries(
                    {
                        "parts": st.lists(
                            st.dictionaries(
                                st.sampled_from(_PART_KEYS),
                                st.one_of(st.text(max_size=3), st.booleans(), st.just({"n": 1})),
                                max_size=3,
                            ),
                            max_size=3,
                        )
                    },
                    optional={"role": st.just("model")},
                )
            },
            optional={"finishReason": st.sampled_from(["STOP", ""])},
        ),
        max_size=2,
    ),
    usage=st.booleans(),
    spaced=st.booleans(),
)
def test_any_chunk_is_classed_as_its_json_says(
    candidates: list[dict[str, Any]], usage: bool, spaced: bool
) -> None:
    """Whatever its candidates, parts and key order, a chunk's class is the one its parsed JSON gives: reading a text part's start without parsing decides nothing else."""
    payload: dict[str, Any] = {"candidates": candidates}
    if usage:
        payload["usageMetadata"] = {"totalTokenCount": 3}
    data = json.dumps(payload, separators=(", ", ": ") if spaced else (",", ":")).encode()
    assert classify("gemini", b"message", data, frozenset()) == _reference_class(payload)
