"""Whether a question asks for an explanation ("How do I get my deposit back?", "Why ...?") rather
than a phrase ("How many moorings ...?", "Who ...?").

Why: a long answer is held to the short answer's decision (`gate.py`), a span the grounded decoder
copies from a passage, with refusal signals fitted on extractive questions. An explanation has no
such span: the decoder copies some phrase ("150 euros" for "How do I get my deposit back?") and the
gate keeps only sentences stating it. So these questions are judged sentence by sentence instead
(`gate.SentenceGate`). English only: the rule reads English question words, and a question in
another language keeps the span gate.
"""

from __future__ import annotations

import re

# "how" followed by one of these asks for a quantity, a time or a degree: a phrase answers it
_HOW_QUANTITY = ("many", "much", "long", "old", "far", "often", "tall", "big", "large", "high", "early",
                 "late", "soon", "fast", "deep", "wide", "heavy", "small", "short", "low", "recent", "great",
                 "well", "important", "successful", "unsuccessful", "likely", "close", "common", "popular",
                 "effective", "expensive", "strong", "good", "bad", "hot", "cold", "rich", "wealthy",
                 "significant", "severe", "serious", "frequent", "quickly")
_EXPLAIN = re.compile(
    r"^(?:why\b|how\b(?!\s+(?:" + "|".join(_HOW_QUANTITY) + r")\b)|what\s+happens\b|what\s+should\s+i\s+do\b"
    r"|in\s+what\s+way\b|explain\b|describe\b)", re.IGNORECASE)
# a lead-in before the question word ("And how ...", "So, why ...", "Please explain ...")
_LEAD = re.compile(r"^(?:and|so|but|then|please|ok|okay|also)\b[\s,]*", re.IGNORECASE)


def explanatory(question: str, language: str) -> bool:
    """Whether `question` (in `language`, as `policy.question_language` detects it) asks for an
    explanation: English questions starting with why, a "how" that is not "how many/much/long/...",
    "what happens", "explain" or "describe"."""
    if language != "en":
        return False
    q = question.strip().lstrip("\"'¿¡(").strip()
    q = _LEAD.sub("", q)
    return bool(_EXPLAIN.match(q))
