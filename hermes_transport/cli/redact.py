"""The probe's masking of the API key: ``Redactor``, its mark (``MASK``) and ``FRAGMENT``.

Owns the one rule every text the probe writes goes through: the key, and every
run of ``FRAGMENT`` of its characters, is masked, and a text is masked before it
is ever cut. A key a server echoes re-encoded (base64, percent-encoded, in
another case) cannot be recognised. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["FRAGMENT", "MASK", "Redactor"]

MASK = "[api key]"
FRAGMENT = 8  # this many characters of the key in a row are masked wherever they appear

# Marks that may stand for the key, in order of preference; the first the key
# cannot run into is used (see Redactor). None needs escaping in JSON.
_MARKS = (
    MASK,
    *(f"{a}api key{b}" for a, b in ("<>", "{}", "()")),
    *(c * 3 for c in "#*~^|%!?@$&=+;/"),
)
# One unit of the inside of a JSON string as json.dumps writes it: an escape or a character.
_JSON_UNIT = re.compile(r"\\u[0-9a-fA-F]{4}|\\.|.", re.DOTALL)


class Redactor:
    """Masks the API key in a text: the key, and every run of ``FRAGMENT`` of its characters.

    Every text the probe writes goes through it, and a text that is cut is
    masked before the cut (``clip``): a cut key is no longer the key, and a
    server may truncate or split the key itself. Each position of the text
    inside a run of ``FRAGMENT`` characters of the key (the whole key, if it is
    shorter) is masked, and each stretch of masked positions becomes one
    ``mark``. The mark is chosen so that nothing can run into it to spell part
    of the key (its first and last characters are not in the key), so the
    result holds no such run, whatever the input. ``json`` applies the same
    rule to a JSON document as written, escapes included.
    """

    def __init__(self, secret: str | None) -> None:
        self._secret = secret or ""
        self._size = min(FRAGMENT, len(self._secret))
        ends = range(self._size, len(self._secret) + 1) if self._secret else range(0)
        self._runs = frozenset(self._secret[end - self._size : end] for end in ends)
        # The last resort is for a key holding all of their characters; a key is ASCII.
        self.mark = next((m for m in _MARKS if self._sound(m)), "\ufffd")
        self.margin = len(self._secret)  # characters past a cut that can hold a key across it

    def __call__(self, text: str) -> str:
        """``text`` with the key and every run of ``FRAGMENT`` of its characters masked."""
        spans = self._spans(text)
        if not spans:
            return text
        pieces: list[str] = []
        end = 0
        for start, stop in spans:
            pieces += (text[end:start], self.mark)
            end = stop
        pieces.append(text[end:])
        return "".join(pieces)

    def clip(self, text: str, limit: int) -> str:
        """At most ``limit`` characters of ``text``, masked before the cut; never half a mark."""
        # Only the start can show: a key's length past the limit is enough to see a key
        # across the cut whole (and spares masking a megabyte line to show 60 characters).
        limit = max(limit, 0)
        masked = self(text[: limit + self.margin])
        if len(masked) <= limit:
            return masked
        size = len(self.mark)
        start = masked.find(self.mark, max(0, limit - size + 1), limit + size - 1)
        return masked[: start if start >= 0 else limit]

    def json(self, value: Any) -> str:
        """``value`` as ``json.dumps`` writes it, each string and number masked as written.

        As written means escapes included: ``\\u0073k-`` must not spell ``sk-``.
        A run of the key can then only span the JSON syntax between values,
        which takes a key holding quotes, colons, commas, brackets or spaces;
        ``Console.write`` masks the whole text as well, for that case.
        """
        if isinstance(value, dict):
            items = (f"{self.json(str(k))}: {self.json(v)}" for k, v in value.items())
            return "{" + ", ".join(items) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(self.json(item) for item in value) + "]"
        literal = json.dumps(value)
        if isinstance(value, str):
            return self._json_string(literal)
        # A number that spells part of the key (a user's budget, say) becomes a string.
        return f'"{self.mark}"' if self._spans(literal) else literal

    def _json_string(self, literal: str) -> str:
        spans = self._spans(literal)
        if not spans:
            return literal
        # Whole escapes are masked, so what is left is still a valid JSON string.
        pieces, hidden, k = ['"'], False, 0
        for unit in _JSON_UNIT.finditer(literal, 1, len(literal) - 1):
            start, end = unit.span()
            while k < len(spans) and spans[k][1] <= start:
                k += 1
            if k < len(spans) and spans[k][0] < end:
                if not hidden:
                    pieces.append(self.mark)
                hidden = True
            else:
                pieces.append(unit.group())
                hidden = False
        pieces.append('"')
        return "".join(pieces)

    def _spans(self, text: str) -> list[tuple[int, int]]:
        """The stretches of ``text`` inside runs of the key, merged where they touch."""
        size, runs = self._size, self._runs
        spans: list[tuple[int, int]] = []
        if not runs:
            return spans
        for i in range(len(text) - size + 1):
            if text[i : i + size] in runs:
                if spans and i <= spans[-1][1]:
                    spans[-1] = (spans[-1][0], i + size)
                else:
                    spans.append((i, i + size))
        return spans

    def _sound(self, mark: str) -> bool:
        # A run through the mark would hold its first or last character, or lie inside it.
        return not ({mark[0], mark[-1]} & set(self._secret) or self._spans(mark))
