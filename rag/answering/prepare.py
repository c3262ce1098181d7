"""From the chosen passages to the request the generator decodes: compression, the refusal when no
passage is left, the prompt within the token budget, and the answer mode's decoding constraints.

Why apart from the pipeline: the pipeline composes retrieval (plan, search, fuse, rerank); what
the answer step asks the model, and how its decode is constrained (citation markers for a long
answer, the grounded-span decoder with the policy's step-0 margin for a short one), is the answer
step's own business, beside the decode that reads those constraints back (`stream.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .. import prompt as prompt_mod
from ..answer import Answer, Passage
from .policy import Policies, refuse

if TYPE_CHECKING:
    from inference.protocols import StreamingGenerator
    from inference.sampling_params import SamplingParams
    from inference.structured import GroundedSpanProcessor
    from rerank.compress.base import Compressor

    from ..chat import ChatTurn
    from ..config import RagConfig

MODES = ("short", "long")


class Stages(Protocol):
    """What preparing an answer reads from the pipeline. Properties, so each stage is still built
    only when it is needed (a question refused before decoding never loads the generator)."""

    cfg: RagConfig

    @property
    def generator(self) -> StreamingGenerator: ...

    @property
    def compressor(self) -> Compressor | None: ...

    @property
    def policies(self) -> Policies: ...


def answer_mode(mode: str | None, default: str) -> str:
    """`mode` (a request's, else the configured `answer.mode`), checked."""
    mode = mode or default
    if mode not in MODES:
        raise ValueError(f"mode must be 'short' or 'long', not {mode!r}")
    return mode


async def arequest_for(stages: Stages, answer: Answer, passages: list[Passage], t0: float, sampling: dict[str, Any],
                       mode: str | None = None, history: Sequence[ChatTurn] = (), ranked: bool = True
                       ) -> tuple[Answer, prompt_mod.BuiltPrompt | None, SamplingParams | None]:
    """The partial Answer, the built prompt and the sampling params for `passages`; (answer, None,
    None) when compression left no passage (the answer is then the refusal, not decoded). On the
    question's loop: the compressor is awaited, the prompt built in a worker thread. `ranked`:
    the passages are retrieval's, best first, so a short answer keeps its top `short_k` (a
    caller's own passages are all given)."""
    cfg = stages.cfg
    answer.mode = mode = answer_mode(mode, cfg.answer.mode)
    if mode == "short" and cfg.answer.grounded and passages and ranked:
        # the calibrated number of passages a short answer reads (before compression: the others are not
        # read); off the loop: the policy reads its calibration files (and `auto` resolves the model)
        policy = await asyncio.to_thread(lambda: stages.policies.for_question(answer.question))
        passages = passages[:policy.short_k(len(passages))]
    compressor = (await asyncio.to_thread(lambda: stages.compressor)) if passages else None
    if compressor is not None:
        t1 = time.perf_counter()
        comp = await compressor.acompress(answer.question, [p.text for p in passages])
        passages = [dataclasses.replace(p, text=t) for p, t in zip(passages, comp.contexts) if t]
        answer.compression = comp.stats()
        answer.timings_ms["compress"] = _ms(t1)
    if not passages:
        refuse(cfg.prompt.refusal).apply(answer)
        answer.timings_ms["total"] = _ms(t0)
        return answer, None, None
    return await asyncio.to_thread(_request, stages, answer, passages, t0, sampling, mode, history)


def _request(stages: Stages, answer: Answer, passages: list[Passage], t0: float, sampling: dict[str, Any],
             mode: str, history: Sequence[ChatTurn]) -> tuple[Answer, prompt_mod.BuiltPrompt, SamplingParams]:
    """The prompt within the token budget and the mode's decoding constraints (CPU: tokenising,
    the span decoder's tables; the generator and the policy are built here on first use)."""
    cfg = stages.cfg
    question = answer.question
    gen = stages.generator
    if mode == "short":
        # Copying from the passages is the point: no penalty on tokens the prompt contains.
        sampling = {"max_tokens": cfg.answer.short_max_tokens, "repetition_penalty": 1.0, **sampling}
    params = cfg.generator.sampling.params(**sampling)
    budget = gen.max_model_len - params.max_tokens
    built = prompt_mod.build(cfg.prompt, gen.tokenizer, question, passages, budget, mode, history)
    if history:
        answer.chat["history_turns"] = built.history_turns
    if cfg.generator.context_shift:
        params.context_shift_keep = built.system_tokens
    if mode == "long" and cfg.answer.force_markers and gen.supports_logits_processors:
        params.logits_processors = [*params.logits_processors, marker_processor(gen, cfg, len(built.passages))]
    if mode == "short" and cfg.answer.grounded and gen.supports_logits_processors:
        # (a remote backend has no logits to mask: its short answers are prompted only)
        params.logits_processors = [*params.logits_processors, _span_decoder(stages, built, params, question)]
        answer.grounded = True
    answer.passages = built.passages
    answer.dropped_passages = [p.chunk_id for p in built.dropped]
    answer.timings_ms["prepare"] = _ms(t0)
    return answer, built, params


def marker_processor(gen: Any, cfg: RagConfig, n: int) -> Any:
    """The long answer's citation-marker constraint for a prompt of `n` passages (`answer.force_markers`)."""
    from inference.structured.citation_markers import CitationMarkerProcessor

    return CitationMarkerProcessor(gen.tokenizer, n, gen.eos_token_ids, cfg.prompt.refusal)


def long_request_over(gen: Any, cfg: RagConfig, question: str, built: prompt_mod.BuiltPrompt,
                      params: SamplingParams, n: int) -> tuple[prompt_mod.BuiltPrompt, SamplingParams]:
    """The long request narrowed to the top `n` passages of `built` (same question, chat turns and
    budget; `answer.long_passages: gate`): the prompt, and `params` with the citation-marker constraint
    for `n` passages in place of the one for all (the others are the same objects)."""
    from inference.structured.citation_markers import CitationMarkerProcessor

    budget = gen.max_model_len - params.max_tokens
    narrow = prompt_mod.build(cfg.prompt, gen.tokenizer, question, built.passages[:n], budget, "long", built.turns)
    procs = [marker_processor(gen, cfg, len(narrow.passages)) if isinstance(p, CitationMarkerProcessor) else p
             for p in params.logits_processors]
    return narrow, params.model_copy(update={"logits_processors": procs})


def _span_decoder(stages: Stages, built: prompt_mod.BuiltPrompt, params: SamplingParams,
                  question: str) -> GroundedSpanProcessor:
    """The grounded-span decoder of a short answer; the policy sets its step-0 refusal margin."""
    cfg, gen = stages.cfg, stages.generator
    texts = [prompt_mod.passage_body(cfg.prompt, p) for p in built.passages]
    return span_processor(gen, cfg.prompt.refusal, gen.eos_token_ids, texts, params.max_tokens,
                          stages.policies.for_question(question).decoder_margin)


def span_processor(generator: Any, refusal: str, eos: set[int] | int | None, texts: list[str], max_tokens: int,
                   refuse_margin: float | None) -> GroundedSpanProcessor:
    """The grounded-span decoder over `texts`; `refuse_margin` is the policy's `decoder_margin`
    (inf on per-passage candidates: each always gives its span, the policy decides after)."""
    from inference.structured import GroundedSpanProcessor

    return GroundedSpanProcessor(texts, generator.tokenizer, refusal, eos_token_id=eos, max_tokens=max_tokens,
                                 refuse_margin=refuse_margin)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000
