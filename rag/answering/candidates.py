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

Each span is decoded from a prompt that holds its passage alone (`answer.per_passage_prompt:
own`, the default): with every passage in one prompt the others pull the span away from what its
own passage says ("What deposit is needed for an e-bike?" gave the 150 euros of a repair clause,
with the e-bike passage alone the 250 euros it states); on the SQuAD v2 dev seed-0 sample all 11
wrong spans were copied from a passage holding the answer, and read alone 5 of those passages gave
it (docs/results.md, session 31).

Cost: with own prompts k short prefills (the system head hits the prefix cache, each passage the
K/V its checks stored in the passage cache), with one shared prompt one prefill; then k short
decodes in one batch, and two check prompts per candidate (k = the passages read).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Sequence
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
    complete: bool = True  # False: stopped after its first token (`decode_best_first`)

    @property
    def text(self) -> str:
        return self.processor.answer_text()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"passage": self.index, "span": self.text, "signals": dict(self.signals)}
        if not self.complete:
            out["complete"] = False
        return out


@dataclass(frozen=True)
class CandidatePrompt:
    """What one candidate's decode reads: its prompt's token ids and where its passages are in it
    (for the engine's passage KV cache; None: no cache)."""

    token_ids: list[int]
    spans: list[tuple[int, int]] | None = None


async def decode_best_first(generator: Any, prompts: Sequence[CandidatePrompt], params: Any,
                            processor_for: Callable[[int], GroundedSpanProcessor],
                            order: Callable[[list[SpanCandidate]], list[int] | None],
                            live: Callable[[SpanCandidate], bool], anchor: list[int] | None = None
                            ) -> list[SpanCandidate]:
    """One constrained decode per candidate (`processor_for(i)` on `prompts[i]`: one prompt with
    every passage, or each passage's own; `per_passage_prompt`), and,
    when the choice is known after each candidate's first token, only the chosen one decoded to its
    end. Every decode runs to its first token, the first alone until its prefill is done (it fills
    the prefix cache the others then hit: the shared prompt, or its own prompts' system head);
    `order` ranks them from what they hold then (None: it
    cannot, and every decode runs to its end, together), and only the best goes on to its end; the
    others stop there (`complete` False). When the best turns out not `live`, the next in order is
    decoded in full (again from the prefix cache), and so on, so the candidate given is the one a
    full decode of all would have chosen. With passage spans every decode carries them: a blended
    prompt is kept out of the prefix cache from its first reused passage on, so without spans the
    later decodes would prefill the passages in full; with them they reuse what the first stored
    (each own prompt's passage: what its checks stored under `anchor`).

    Why: the per-passage decodes ran together for up to `short_max_tokens` steps, and a step of k
    rows costs ~2.5x a step of one on two AVX2 cores (the 1.5B: 92 vs 37 ms at k = 5), while the
    choice (the shipped selectors read the first token's margin, the probe and the rank) never
    needed the others' whole spans. The others start once the first has prefilled, not after it has
    finished: its decode steps would otherwise run alone, then theirs in a second round."""
    n = len(prompts)
    procs = [processor_for(i) for i in range(n)]
    streams: list[Any] = []  # opened one by one: an engine's `astream` submits its request at once
    outs: list[Any] = [None] * n
    ended = [False] * n

    async def advance(i: int) -> None:
        try:
            outs[i] = await streams[i].__anext__()
        except StopAsyncIteration:
            ended[i] = True

    def open_(i: int) -> None:
        streams.append(generator.astream(prompts[i].token_ids, _with_processor(params, procs[i]),
                                         passage_spans=prompts[i].spans, passage_anchor=anchor))

    async def drain(i: int) -> None:
        async for out in streams[i]:
            outs[i] = out
        ended[i] = True

    try:
        if n:
            open_(0)
            await advance(0)  # its prefill fills the prefix cache the others then hit
            for i in range(1, n):
                open_(i)
            await asyncio.gather(*(advance(i) for i in range(1, n)))
        for i in range(n):  # a stream yields its last output, then ends: see which have ended
            if outs[i] is not None and outs[i].finished:
                ended[i] = True
        cands = [SpanCandidate(i, p, outs[i], span_signals(p, i)) for i, p in enumerate(procs)]
        ranked = order(cands)
        go_on = list(range(n)) if ranked is None else ranked[:1]
        for i in range(n):
            if i not in go_on and not ended[i]:
                await streams[i].aclose()  # aborts its request
                cands[i].complete = False
        await asyncio.gather(*(drain(i) for i in go_on if not ended[i]))  # together: one batch per step
        for i in go_on:
            cands[i] = SpanCandidate(i, procs[i], outs[i], span_signals(procs[i], i))
        if ranked is not None:
            for i in ranked:
                if not cands[i].complete:  # stopped early: decode it in full now
                    p = processor_for(i)
                    out = await generator.agenerate(prompts[i].token_ids, _with_processor(params, p),
                                                    passage_spans=prompts[i].spans, passage_anchor=anchor)
                    cands[i] = SpanCandidate(i, p, out, span_signals(p, i))
                if live(cands[i]):
                    break
        return cands
    finally:
        for st in streams:
            await st.aclose()


def _with_processor(params: Any, p: GroundedSpanProcessor) -> Any:
    sp = copy.copy(params)
    sp.logits_processors = [*(x for x in params.logits_processors if not isinstance(x, GroundedSpanProcessor)), p]
    return sp
