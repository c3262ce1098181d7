"""From a built prompt to the final answer: decode (streaming long answers as they come), then
decide a short answer or cite a long one, then record what it cost.

Why apart from the pipeline: the pipeline composes the stages up to the prompt; what happens to
the generated text is the answer step's own business, and each part of it has one home here:
the short answer's decision (`policy.py`, gathered by `short.py`), the long answer's grounding
(`long.py`: its sentences judged against the passages they cite) and citations
(`rag/citations.py: long_citations`), the token accounting (`Answer.add_costs`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from inference.structured import GroundedSpanProcessor

from ..answer import Answer
from ..citations import MarkerFilter, locate_spans, long_citations, sentence_markers
from ..loops import is_looping
from .gate import SentenceGate, gates, long_prompt_passages, reads_gate_kv, short_gate
from .long import LongGrounding, grounding_for
from .policy import Decision, Policies, refuse, says_refusal
from .prepare import long_request_over, span_processor
from .short import candidate_prompts, check_anchor, checks_first, decide_per_passage, decide_single

if TYPE_CHECKING:
    from ..config import RagConfig
    from ..prompt import BuiltPrompt


def gate_kv_anchor(cfg: RagConfig, check_kv: str, anchor: list[int] | None, gate: Any) -> list[int] | None:
    """The key the long prompt reads its passages under instead of its own (None: its own). With the
    short-answer gate (`answer.long_passage_kv: gate`, the default; `gate.reads_gate_kv`) it is the
    gate's: the gate's prompts have just computed its passages' K/V under the short prompt's anchor,
    so the long prompt's prefill copies them to their positions instead of computing ~200 tokens per
    passage again (the long prompt's sentences are held to the gate's decision, so what it reads
    shapes their wording, not whether the answer refuses). The long prompt then stores nothing
    (`store_passages`): a passage it computes amid the others, kept under the gate's key, would serve
    a later question's gate in place of an exact entry (own corpus, 0.5B: two later gates changed
    their span so)."""
    if anchor is None or gate is None or not reads_gate_kv(cfg, check_kv):
        return None
    return gate.passage_anchor


async def decode_answer(generator: Any, cfg: RagConfig, policies: Policies, answer: Answer, built: BuiltPrompt,
                        params: Any, t0: float, eos: set[int] | int | None,
                        request_id: str | None = None, ranked: bool = True) -> AsyncIterator[str | Answer]:
    """Text deltas (a long answer's, as generated; a short answer's whole, once decided), then the
    final `Answer`. Closing this generator closes the engine stream (the request is aborted).
    `ranked`: the passages are retrieval's, best first (a long answer's gate then reads the top
    `short_k`, as a short answer does; a caller's own passages are all read)."""
    short = answer.mode == "short"  # a few tokens that may still turn into the refusal: sent whole
    # where the passages are, for the engine's passage KV cache (None when the backend has none)
    spans = generator.locate_passages(built.token_ids, built.cached_texts(cfg.prompt))
    anchor = built.passage_anchor if spans else None
    if short and answer.grounded and policies.for_question(answer.question).per_passage:
        final = await _per_passage(generator, cfg, policies, answer, built, params, t0, eos, spans, anchor)
        yield final.text
        yield final
        return
    # long answers: each sentence is shown once judged (None: `answer.long_grounding: off`), held to
    # the short answer's decision where its policy is calibrated (gate.py)
    grounding = None
    if not short:
        gate, judge = None, None
        policy = policies.for_question(answer.question)
        kv = check_anchor(policy.check_kv, anchor)
        if gates(generator, cfg, policies, answer):
            if policy.judges_sentences(answer.standalone_question):  # an explanation: no span to hold it to
                judge = SentenceGate(generator, policy, answer.standalone_question, kv)
                answer.refusal_calibration = {**policy.calibration, "by": "sentence_refusal_model"}
            else:
                def processor(texts: list[str], max_tokens: int, margin: float | None) -> GroundedSpanProcessor:
                    return span_processor(generator, cfg.prompt.refusal, eos, texts, max_tokens, margin)

                gate = await short_gate(generator, cfg, policies, answer, processor, ranked)
        grounding = grounding_for(generator, cfg, answer, policy.entry, gate, kv, judge)
        if gate is not None and gate.refused:  # the policy refused: nothing is generated, nothing cited
            gate.decision.apply(answer)
            answer.grounding = grounding.metadata() if grounding is not None else {}
            final = _account(answer, None, t0)
            yield final.text
            yield final
            return
        if (n := long_prompt_passages(cfg, gate)) is not None:
            built, params = await asyncio.to_thread(long_request_over, generator, cfg, answer.question, built,
                                                    params, n)
            spans = generator.locate_passages(built.token_ids, built.cached_texts(cfg.prompt))
            anchor = built.passage_anchor if spans else None
        if (gate_anchor := gate_kv_anchor(cfg, policy.check_kv, anchor, gate)) is not None:
            anchor = gate_anchor  # the gate's entries are its exact ones: read, never overwritten
            params = params.model_copy(update={"store_passages": False})
    markers = MarkerFilter({p.marker for p in built.passages})
    last = None
    agen = generator.astream(built.token_ids, params, request_id=request_id, passage_spans=spans,
                             passage_anchor=anchor)
    looped = False
    try:
        async for out in agen:
            last = out
            delta = markers.feed(out.outputs[0].delta_text)
            if delta and not short and (shown := await grounding.feed(delta) if grounding else delta):
                yield shown
            if delta and is_looping(markers.text):
                looped = True  # stop a degenerate loop now (closing the stream aborts the request)
                break
    finally:
        await agen.aclose()
    tail = markers.flush()
    if grounding is not None:
        tail = await grounding.feed(tail) + await grounding.finish()
    if tail and not short:
        yield tail
    if short:
        span = next((p for p in params.logits_processors if isinstance(p, GroundedSpanProcessor)), None)
        decision = await decide_single(generator, cfg.prompt, policies, answer, markers.text, span,
                                       check_anchor(policies.for_question(answer.question).check_kv, anchor))
        final = _finish_short(answer, decision, last, t0, markers.removed)
    else:
        final = _finish_long(cfg, answer, markers, last, t0, grounding)
    if looped:
        final.finish_reason = "repetition"
    if short:
        yield final.text
    yield final


async def _per_passage(generator: Any, cfg: RagConfig, policies: Policies, answer: Answer, built: BuiltPrompt,
                       params: Any, t0: float, eos: set[int] | int | None,
                       spans: list[tuple[int, int]] | None = None, anchor: list[int] | None = None) -> Answer:
    """One span per passage, the checks on each, the policy's choice; cited to its passage."""
    def processor(texts: list[str]) -> GroundedSpanProcessor:
        return span_processor(generator, cfg.prompt.refusal, eos, texts, params.max_tokens, float("inf"))

    policy = policies.for_question(answer.question)
    # off the loop, as every prompt is built: tokenising one prompt per passage
    prompts = await asyncio.to_thread(candidate_prompts, generator, cfg.prompt, answer.question, built, spans,
                                      cfg.answer.per_passage_prompt == "own", generator.max_model_len - params.max_tokens)
    decision, out = await decide_per_passage(generator, cfg.prompt, policy, answer, prompts, params, processor,
                                             anchor, check_anchor(policy.check_kv, anchor),
                                             checks_first(policy.check_kv, anchor))
    return _finish_short(answer, decision, out, t0, 0)


def _finish_short(answer: Answer, decision: Decision, out: Any, t0: float, removed_markers: int) -> Answer:
    """A short answer: the policy's decision (the span and the marker of the passage it cites, or
    the refusal), then what it cost."""
    decision.apply(answer)
    answer.removed_markers = removed_markers
    locate_spans(answer.text, answer.citations, answer.passages)
    return _account(answer, out, t0)


def _finish_long(cfg: RagConfig, answer: Answer, markers: MarkerFilter, out: Any, t0: float,
                 grounding: LongGrounding | None = None) -> Answer:
    """A long answer is exactly what was streamed: with grounding, the sentences it kept (none: the
    refusal); when the model cited nothing, citations are attributed by word overlap and flagged
    `inferred`. A refusal cites nothing."""
    ac = cfg.answer
    answer.removed_markers = markers.removed
    if grounding is not None:
        answer.grounding = grounding.metadata()
        if grounding.refused:
            refuse(cfg.prompt.refusal).apply(answer)
            return _account(answer, out, t0)
        text, used = grounding.text, sentence_markers(grounding.text)
    else:
        text, used = markers.text, markers.used
    answer.text = text
    answer.refused = says_refusal(text, cfg.prompt.refusal)
    answer.citations = long_citations(text, used, answer.passages, ac.attribute, ac.attribution_overlap,
                                      answer.refused)
    locate_spans(answer.text, answer.citations, answer.passages)
    return _account(answer, out, t0)


def _account(answer: Answer, out: Any, t0: float) -> Answer:
    """Token counts and timings of the decode the answer came from (None: nothing was decoded); a
    refusal keeps the passages it read as the closest ones."""
    if answer.refused and not answer.closest_passages:
        answer.closest_passages = list(answer.passages)
    if out is not None:
        answer.add_costs(out)
    answer.timings_ms["total"] = (time.perf_counter() - t0) * 1000
    return answer
