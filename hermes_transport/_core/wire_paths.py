"""Which wire a request speaks, from its path, and what a Gemini path says.

Owns ``Wire`` and ``WIRES`` (the wires whose events mean more than progress:
``wires`` sorts them), ``wire_of``, and Gemini's path: its model (the model of a
Gemini request is in its path, not its body), whether it streams (only the path
says so: the request has no ``stream`` field and accepts ``*/*``), and the provider
it names for OpenTelemetry. Pure.
"""

from __future__ import annotations

import re
from typing import Final, Literal

__all__ = ["WIRES", "Wire", "gemini_call", "gemini_provider", "wire_of"]

#: The wire a request speaks: OpenAI Chat Completions, OpenAI Responses,
#: Anthropic Messages, Google's Gemini (Gemini API and Vertex AI), MCP's streamable
#: HTTP (known from the request's body or headers, not its path: ``mcp``), or any
#: other event stream.
Wire = Literal["chat_completions", "responses", "messages", "gemini", "mcp", "generic"]
WIRES: Final[tuple[Wire, ...]] = (
    "chat_completions",
    "responses",
    "messages",
    "gemini",
    "mcp",
    "generic",
)

# POST /v1/responses, and the resume GET /v1/responses/{id} (one path segment:
# /responses/{id}/cancel and /input_items are not streams).
_RESPONSES_PATH = re.compile(r"/responses(?:/[^/]+)?$")

# Gemini's generateContent and streamGenerateContent, on the Gemini API
# ({version}/models/{model}:...) and Vertex AI (.../publishers/google/models/{model}:...),
# of a tuned model too (tunedModels/{model}), under any prefix: the model is in the path.
_GEMINI_PATH = re.compile(
    r"/(?:models|tunedModels)/([^/:]+):(streamGenerateContent|generateContent)$"
)


def wire_of(path: str) -> Wire:
    """The wire a request to ``path`` speaks (``generic`` for any other path; an MCP
    request is known from its body, by ``mcp.mcp_call``)."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return "chat_completions"
    if path.endswith("/messages"):
        return "messages"
    if _RESPONSES_PATH.search(path):
        return "responses"
    if _GEMINI_PATH.search(path):
        return "gemini"
    return "generic"


def gemini_call(path: str) -> tuple[str, bool] | None:
    """The model a Gemini ``generateContent`` path names, and whether it streams
    (``streamGenerateContent``); ``None``: not such a path."""
    found = _GEMINI_PATH.search(path.rstrip("/"))
    if found is None:
        return None
    return found.group(1), found.group(2) == "streamGenerateContent"


def gemini_provider(path: str) -> str:
    """The OpenTelemetry ``gen_ai.provider.name`` of a Gemini path: Vertex AI's, or the
    Gemini API's."""
    return "gcp.vertex_ai" if "/publishers/google/models/" in path else "gcp.gemini"
