"""Detect a degenerate loop in streamed answer text, so generation can stop early.

Why text-level: loops of small models often count up ("13. JSONL 14. JSON 15. JSONL ..."), so no
exact token n-gram repeats and `no_repeat_ngram` cannot see them. Lines or sentences compared
with their digits removed do repeat.
"""

from __future__ import annotations

import re

_UNIT = re.compile(r"[\n.!?;。！？；]+")
_DIGITS = re.compile(r"\d+")


def is_looping(text: str, window: int = 12, repeats: int = 3) -> bool:
    """True when one line/sentence (digits ignored) occurs `repeats` times in the last `window`.

    Only finished units count (the text after the last separator may still be growing).
    """
    parts = _UNIT.split(text)[:-1]
    units = [u for u in (" ".join(_DIGITS.sub("", p).lower().split()) for p in parts) if u]
    recent = units[-window:]
    return any(recent.count(u) >= repeats for u in set(recent))
