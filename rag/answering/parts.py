"""One answer made of other answers (`compare.py`: two options' values; `yes_no.py`: two things'
values; `two_hop.py`: two steps): each thing's answer and what keeps it from use, each part's cited
passage renumbered into the new answer, and the parts' costs added up.

Why one place: the paths cite what their parts cited, one marker per passage however many parts
read it, report the parts' tokens and queries, and refuse the same parts (refused, or read from a
passage about something else); a second copy would drift.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Sequence
from typing import Any


def cite(parts: Sequence[Any]) -> tuple[list[Any], list[Any], list[int]]:
    """The passages and citations of `parts` (short `Answer`s, each citing one passage), numbered
    from 1 in the order given with one marker per passage, and each part's marker."""
    from .named import cited

    return number([(cited(a), a.citations[0]) for a in parts])


def number(sources: Sequence[tuple[Any, Any | None]]) -> tuple[list[Any], list[Any], list[int]]:
    """(passage, its citation, or None for a new one) pairs as the passages and citations of one
    answer, numbered from 1 in the order given with one marker per passage (one passage may serve
    two parts), and each pair's marker."""
    from ..citations import to_citation

    passages: list[Any] = []
    citations: list[Any] = []
    markers: list[int] = []
    for src, c in sources:
        known = next((p.marker for p in passages if p.chunk_id == src.chunk_id), None)
        if known is None:
            known = len(passages) + 1
            passages.append(dataclasses.replace(src, marker=known))
            citations.append(dataclasses.replace(c, marker=known) if c is not None else to_citation(passages[-1]))
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


async def aeach(questions: Sequence[str], things: Sequence[str],
                ask: Callable[[str], Awaitable[Any]]) -> tuple[list[Any], list[str | None], str]:
    """Each thing's grounded short answer to its question (`ask`, run together), each one's span
    (None: refused) and why they cannot be used, "" when they can: one refused, or a value read
    from a passage that does not name its thing as a whole name (a neighbour's date)."""
    from ..citations import answer_span
    from .named import cited, names

    answers = list(await asyncio.gather(*(ask(q) for q in questions)))
    texts = [answer_span(a) for a in answers]
    if None in texts:
        return answers, texts, "refused: " + ", ".join(n for n, t in zip(things, texts, strict=True) if t is None)
    unnamed = [n for n, a in zip(things, answers, strict=True) if not names(cited(a), n)]
    if unnamed:
        return answers, texts, "the cited passage does not name " + ", ".join(repr(n) for n in unnamed)
    return answers, texts, ""
