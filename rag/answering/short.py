"""Running a short answer to its decision: the answerability checks, the per-passage candidates,
and what the policy is asked.

Why apart from the policy: this is the part that talks to the generator (check prompts, one decode
per passage); the policy only reads the signals it gathers, so `rag eval calibrate` can re-decide
recorded signals without a model.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

from inference.structured import GroundedSpanProcessor, span_sources

from .. import prompt as prompt_mod
from ..answer import Answer
from ..prompt import PromptConfig
from .candidates import CandidatePrompt, SpanCandidate, decode_best_first
from .policy import Candidate, Decision, Policies, ShortAnswerPolicy, says_refusal
from .signals import CHECK_ANSWER, CUT_NUMBER, cut_from_number, gave_span, span_signals


def _bodies(cfg: PromptConfig, answer: Answer) -> list[str]:
    return [prompt_mod.passage_body(cfg, p) for p in answer.passages]


def _first_source(text: str, bodies: list[str]) -> int | None:
    """The passage a short answer cites: the first (in prompt order, i.e. rank) that holds it
    verbatim, the one the answerability checks read.

    Why one: a short span such as "Poland" or "1562" is verbatim in many passages that say nothing
    about the question; citing each of them cited text that does not support the answer (on
    SQuAD, every multi-passage short citation had at most one supporting passage)."""
    src = span_sources(text.strip(), bodies)
    return src[0] if src else None


def check_anchor(check_kv: str, anchor: list[int] | None) -> list[int] | None:
    """What the answerability checks that run after the answer name as their passages' anchor
    (`check_kv`: the policy's resolved `answer.check_kv`): the answer prompt's (`prompt`: they read
    the K/V it computed) or None (`exact`, and `shared` for checks after the answer: their own
    template)."""
    return anchor if check_kv == "prompt" else None


def checks_first(check_kv: str, anchor: list[int] | None) -> bool:
    """`shared` with a passage cache to share through: the per-passage checks run before the
    answer's decode, each computing its passage's K/V in its own prompt (so they read exactly what
    the probe and the refusal model were fitted on) and storing it under the answer prompt's anchor,
    where the answer prompt's prefill then finds every passage."""
    return check_kv == "shared" and anchor is not None


async def decide_single(generator: Any, cfg: PromptConfig, policies: Policies, answer: Answer, streamed: str,
                        span: GroundedSpanProcessor | None, anchor: list[int] | None = None,
                        bodies: list[str] | None = None) -> Decision:
    """The decision on the one decode over all passages. `streamed`: its marker-checked text;
    `span`: its grounded-span processor (None: a prompted answer, e.g. on a remote backend);
    `anchor`: `check_anchor` of its prompt (None: the checks key their passage under their own
    template); `bodies`: the passages' texts as its prompt holds them (None: the answer's)."""
    from ..answerability import check_signals

    bodies = bodies if bodies is not None else _bodies(cfg, answer)
    if span is None:  # nothing to weigh: the text, unless it is the refusal, cited where it is found
        return policies.plain.judge(Candidate(streamed, {}, _first_source(streamed, bodies),
                                              says_refusal(streamed, cfg.refusal)))
    policy = policies.for_question(answer.question)
    answer.refusal_calibration = policy.calibration
    signals = span_signals(span)
    text = span.answer_text()  # whole words even when max_tokens cut the span
    if cut_from_number(text, "\n".join(bodies)):  # cut wherever the prompt holds it
        signals[CUT_NUMBER] = 1.0
    if policy.runs_checks and not span.refused and gave_span(text, signals):
        t1 = time.perf_counter()
        src = _first_source(text, bodies)
        signals.update(await check_signals(generator, answer.standalone_question, bodies[src or 0], text.strip(),
                                           policy.probe, anchor))
        answer.timings_ms["check"] = _ms(t1)
    if not span.steps:
        text = streamed
    return policy.judge(Candidate(text, signals, _first_source(text, bodies),
                                  span.refused or says_refusal(streamed, cfg.refusal)))


def candidate_prompts(generator: Any, cfg: PromptConfig, question: str, built: prompt_mod.BuiltPrompt,
                      spans: list[tuple[int, int]] | None, own: bool, budget: int) -> list[CandidatePrompt]:
    """What each passage's span decode reads: with `own` (`answer.per_passage_prompt: own`) a
    prompt holding that passage alone (`prompt.build_each`: same system head, chat turns and
    `question`), else `built` itself (its passage `spans`) for every passage. An own prompt carries
    its passage's span when `built` has spans (a backend with a passage cache)."""
    if not own:
        return [CandidatePrompt(built.token_ids, spans)] * len(built.passages)
    each = prompt_mod.build_each(cfg, generator.tokenizer, question, built, budget, "short")
    return [CandidatePrompt(b.token_ids, generator.locate_passages(b.token_ids, b.cached_texts(cfg)) if spans else None)
            for b in each]


async def decide_per_passage(generator: Any, cfg: PromptConfig, policy: ShortAnswerPolicy, answer: Answer,
                             prompts: Sequence[CandidatePrompt], params: Any,
                             processor_for: Callable[[list[str]], GroundedSpanProcessor],
                             anchor: list[int] | None = None,
                             check_anchor: list[int] | None = None, first: bool = False,
                             bodies: list[str] | None = None) -> tuple[Decision, Any]:
    """One span per passage, the checks on each, the policy's choice (cited to its passage); also
    the chosen decode's RequestOutput (None when no passage gave a span). Records every candidate
    in `answer.candidates`. `prompts`: what each passage's decode reads (`candidate_prompts`);
    `anchor`: the prompts' `passage_anchor` (the passage KV cache); `check_anchor`: what the checks
    name (`check_anchor`); `first`
    (`checks_first`): the passage checks of every passage run before the decode, whose prompt then
    reads the passages' K/V they stored (a passage that gives no span is checked for nothing). With
    a first-token selector the checks also run first without sharing, and only the best candidate
    decodes to its end (`decode_best_first`). `bodies`: the passages' texts as the prompt holds them
    (None: the answer's; the long answer's gate reads its top `short_k` only)."""
    from ..answerability import answer_check, passage_signals

    if first:  # they store each passage under the answer prompt's key; the answer check reads it back
        check_anchor = anchor
    q = answer.standalone_question
    answer.refusal_calibration = policy.calibration
    bodies = bodies if bodies is not None else _bodies(cfg, answer)
    t1 = time.perf_counter()
    # together, so the engine prefills them in one batch; each computes its passage (or reads it
    # from an earlier question's check) and leaves it stored for the decode's prompt
    # also without sharing (`exact`: each check keys its passage under its own template), so that a
    # first-token selector can choose before the spans are finished (`decode_best_first`); not with
    # `prompt`, whose checks read what the answer prompt computes
    ahead = first or (check_anchor is None and policy.chooses_at_first_token)
    early = await asyncio.gather(*(passage_signals(generator, q, b, policy.probe, check_anchor)
                                   for b in bodies)) if ahead else None
    check_ms = _ms(t1)
    def is_live(c: SpanCandidate) -> bool:
        _mark_cut(c.text, bodies, c.index, c.signals)
        return gave_span(c.text, c.signals)

    def order(cs: list[SpanCandidate]) -> list[int] | None:  # None: every candidate decoded whole
        if early is None or not policy.chooses_at_first_token:
            return None
        return policy.first_token_order([{**c.signals, **early[c.index]} for c in cs])

    cands = await decode_best_first(generator, prompts, params, lambda i: processor_for([bodies[i]]), order,
                                    is_live, anchor)
    for c in cands:
        if c.complete:
            _mark_cut(c.text, bodies, c.index, c.signals)
    t1 = time.perf_counter()
    live = [c for c in cands if c.complete and gave_span(c.text, c.signals)]
    # together: the engine runs their last tokens in one batch (with the passage cache each `prompt`
    # check computes only its question and instruction, so that step would otherwise cost as much again)
    found = [early[c.index] for c in live] if early is not None else await asyncio.gather(
        *(passage_signals(generator, q, bodies[c.index], policy.probe, check_anchor) for c in live))
    for c, signals in zip(live, found, strict=True):
        c.signals.update(signals)
    for c in cands:  # stopped after the first token: record the checks the choice read (early is set)
        if not c.complete:
            c.signals.update(early[c.index])  # type: ignore[index]
    every = policy.checks_every_candidate
    if every:
        odds = await asyncio.gather(*(answer_check(generator, q, bodies[c.index], c.text.strip(), check_anchor)
                                      for c in live))
        for c, o in zip(live, odds, strict=True):
            c.signals[CHECK_ANSWER] = o
    done = [c for c in cands if c.complete]  # the others stopped after their first token: not candidates
    k = policy.choose(done)
    chosen = done[k].index if k is not None else None
    if chosen is not None and not every:
        best = cands[chosen]
        best.signals[CHECK_ANSWER] = await answer_check(generator, q, bodies[best.index], best.text.strip(), check_anchor)
    answer.timings_ms["check"] = check_ms + _ms(t1)
    answer.candidates = [c.to_dict() for c in cands]
    # nothing was streamed on this path: only the decoder itself may have written the refusal
    decision = policy.decide([Candidate(c.text, c.signals, c.index, c.processor.refused or says_refusal("", cfg.refusal))
                              for c in cands], chosen)
    return decision, cands[chosen].output if chosen is not None else None


def _mark_cut(text: str, bodies: list[str], source: int, signals: dict[str, float]) -> None:
    """Flag a span cut out of a longer number of its passage (`signals.cut_from_number`): it then
    counts as no span, so it is neither checked nor given."""
    if cut_from_number(text, bodies[source]):
        signals[CUT_NUMBER] = 1.0


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000
