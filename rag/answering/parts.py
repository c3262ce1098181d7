"""One answer made of other answers (`compare.py`: two options' values; `two_hop.py`: two steps):
each part's cited passage renumbered into the new answer, and the parts' costs added up.

Why one place: both paths cite what their parts cited, one marker per passage however many parts
read it, and report the parts' tokens and queries; a second copy would drift in how it numbers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any


def cite(parts: Sequence[Any]) -> tuple[list[Any], list[Any], list[int]]:
    """The passages and citations of `parts` (short `Answer`s, each citing one passage), numbered
    from 1 in the order given with one marker per passage, and each part's marker."""
    passages: list[Any] = []
    citations: list[Any] = []
    markers: list[int] = []
    for a in parts:
        c = a.citations[0]
        known = next((p.marker for p in passages if p.chunk_id == c.chunk_id), None)
        if known is None:
            src = next(p for p in a.passages if p.chunk_id == c.chunk_id)
            known = len(passages) + 1
            passages.append(dataclasses.replace(src, marker=known))
            citations.append(dataclasses.replace(c, marker=known))
        markers.append(known)
    return passages, citations, markers


def combine(question: str, text: str, mode: str, parts: Sequence[Any], cited: tuple[list[Any], list[Any]],
            calibration: dict[str, Any]) -> Any:
    """The answer `text` to `question` with the `cited` passages and citations (`cite`), the
    parts' queries and tokens summed, and the refusal `calibration` that decided its span."""
    from ..answer import Answer

    passages, citations = cited
    answer = Answer(question=question, text=text, citations=citations, passages=passages, mode=mode,
                    grounded=True, queries=[q for a in parts for q in a.queries])
    for a in parts:
        for k, v in a.tokens.items():
            answer.tokens[k] = answer.tokens.get(k, 0) + v
    answer.refusal_calibration = dict(calibration)
    return answer
