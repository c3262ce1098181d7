"""Per-passage span candidates for a grounded short answer, checked and chosen by a calibrated
selector.

Why: the single grounded decode takes the span whose first token the model likes best across
all passages at once. That preference does not read which passage answers the question: on the
SQuAD v2 calibration split a quarter of the answerable questions got a span from a passage other
than the one holding the answer (and its citation was wrong). Decoding one span per passage, asking
the answerability checks (`rag/answerability.py`) about each, and choosing with a logistic model
fitted by `rag eval calibrate` on those same signals lets the model's own reading of each passage
decide, and the citation is the passage the chosen span was decoded from. The choice itself is the
policy's (`ShortAnswerPolicy.choose`).

Cost: one prefill (the others hit the prefix cache), k short decodes in one batch, and two check
prompts per candidate (k = the passages in the prompt).
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from inference.structured import GroundedSpanProcessor

from .signals import span_signals


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


async def decode_candidates(generator: Any, token_ids: list[int], params: Any,
                            processors: list[GroundedSpanProcessor],
                            spans: list[tuple[int, int]] | None = None, anchor: list[int] | None = None
                            ) -> list[SpanCandidate]:
    """One constrained decode per processor on the same prompt: the first alone until its prefill is
    done (it fills the prefix cache), then the rest beside it (they reuse that prefill and share its
    decode steps). With passage `spans` every decode carries them: a blended prompt is kept out of
    the prefix cache from its first reused passage on, so without spans the later decodes would
    prefill the passages in full; with them they reuse the passages the first one stored.

    Why not the rest after the first has finished: its decode steps (up to `short_max_tokens`)
    would run alone, then the others' in a second round; one batch of k rows costs little more per
    step than one row (the weights are read once)."""

    def params_for(p: GroundedSpanProcessor) -> Any:
        sp = copy.copy(params)
        sp.logits_processors = [*(x for x in params.logits_processors if not isinstance(x, GroundedSpanProcessor)), p]
        return sp

    async def one(p: GroundedSpanProcessor) -> Any:
        return await generator.agenerate(token_ids, params_for(p), passage_spans=spans, passage_anchor=anchor)

    if not processors:
        return []
    prefilled = asyncio.Event()

    async def first() -> Any:
        last = None
        agen = generator.astream(token_ids, params_for(processors[0]), passage_spans=spans, passage_anchor=anchor)
        try:
            async for last in agen:  # noqa: B007 - keep the final output
                prefilled.set()  # its first token: the prompt is in the prefix cache
        finally:
            prefilled.set()
            await agen.aclose()
        assert last is not None
        return last

    head = asyncio.create_task(first())
    try:
        await prefilled.wait()
        if head.done() and head.exception() is not None:
            head.result()  # re-raises its error: the others would fail the same way
        rest = await asyncio.gather(*(one(p) for p in processors[1:]))
        outs = [await head, *rest]
    finally:
        if not head.done():
            head.cancel()
    return [SpanCandidate(i, p, o, span_signals(p, i)) for i, (p, o) in enumerate(zip(processors, outs))]
