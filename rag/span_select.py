"""Per-passage span candidates for a grounded short answer, checked and chosen by a calibrated
selector.

Why: the single grounded decode takes the span whose first token the model likes best across
all passages at once. That preference does not read which passage answers the question: on the
SQuAD v2 calibration split a quarter of the answerable questions got a span from a passage other
than the one holding the answer (and its citation was wrong). Decoding one span per passage, asking
the answerability checks (`rag/answerability.py`) about each, and choosing with a logistic model
fitted by `rag eval calibrate` on those same signals lets the model's own reading of each passage
decide, and the citation is the passage the chosen span was decoded from.

Cost: one prefill (the others hit the prefix cache), k short decodes in one batch, and two check
prompts per candidate (k = the passages in the prompt).
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from inference.structured import GroundedSpanProcessor

from .calibration import SpanSelector


@dataclass
class SpanCandidate:
    """The span decoded from passage `index` (0 = best ranked) and its refusal signals."""

    index: int
    processor: GroundedSpanProcessor
    output: Any  # the engine's RequestOutput
    signals: dict[str, float] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return self.processor.answer_text()

    def to_dict(self) -> dict[str, Any]:
        return {"passage": self.index, "span": self.text, "signals": dict(self.signals)}


def span_signals(p: GroundedSpanProcessor, index: int) -> dict[str, float]:
    """The span decoder's signals of a candidate and its passage's rank in the prompt (the
    checks' are added by the pipeline)."""
    return {"margin": p.margin if p.margin is not None else 0.0, "span_logprob": p.span_logprob,
            "min_logprob": p.min_logprob, "span_tokens": float(p.steps), "passage_rank": float(index)}


async def decode_candidates(generator: Any, token_ids: list[int], params: Any,
                            processors: list[GroundedSpanProcessor]) -> list[SpanCandidate]:
    """One constrained decode per processor on the same prompt: the first alone (it fills the
    prefix cache), the rest together (they reuse it and share decode steps)."""

    async def one(p: GroundedSpanProcessor) -> Any:
        sp = copy.copy(params)
        sp.logits_processors = [*(x for x in params.logits_processors if not isinstance(x, GroundedSpanProcessor)), p]
        return await generator.agenerate(token_ids, sp)

    if not processors:
        return []
    outs = [await one(processors[0])]
    outs += await asyncio.gather(*(one(p) for p in processors[1:]))
    return [SpanCandidate(i, p, o, span_signals(p, i)) for i, (p, o) in enumerate(zip(processors, outs))]


def pick(signals: list[dict[str, float]], selector: SpanSelector | None) -> int | None:
    """Index of the candidate to answer with, given each live candidate's signals: the selector's
    best; without one (or when a candidate lacks a signal it reads) the single decode's choice, the
    span whose first token the model preferred (lowest margin; ties: better-ranked passage). None
    when there is no candidate. `rag eval calibrate` re-chooses calibration points with this too."""
    if not signals:
        return None
    i = selector.choose(signals) if selector is not None else None
    return i if i is not None else min(range(len(signals)), key=lambda k: (signals[k]["margin"], k))


def choose(candidates: list[SpanCandidate], selector: SpanSelector | None) -> SpanCandidate | None:
    """The candidate to answer with (`pick`) among those that gave a span; None when none did."""
    live = [c for c in candidates if c.text.strip() and c.processor.steps]
    i = pick([c.signals for c in live], selector)
    return None if i is None else live[i]
