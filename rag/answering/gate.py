"""A long answer answers the question: the short answer's decision first, then only the sentences
that state it.

Why: long grounding (`long.py`) asks whether each sentence is in the passage it cites, not whether
it answers the question, so a neighbouring fact passed ("When does the ferry leave?" -> "The fuel
dock opens in April [1]": supported, cited, and an invented answer). On the own corpus 6 of 16
unanswerable questions got such a cited answer in long mode while short mode, whose calibrated
policy weighs the span decoder's confidence and the answerability checks, refused 14.

So a long answer first runs exactly what a short answer runs (the grounded span decode, single or
per passage, its checks and `ShortAnswerPolicy` deciding: one refusal rule for both modes):
- refused: the long answer is that refusal, citing nothing, and nothing is generated;
- answered with span S: the long answer is generated and each sentence, after its own grounding,
  is kept only when it states S (`states_answer`: every content word and number of S occurs in the
  sentence); a sentence about something else is `dropped_off_question`. Nothing left: the answer is
  S itself with its citation (what short mode would have said), never a refusal the policy did not
  make.

A question asking for an explanation ("How do I get my deposit back?", `question_form.explanatory`)
has no span to hold the answer to: the decoder copies some phrase ("150 euros") and the sentences
that explain are dropped for not stating it. Where the entry has a sentence refusal model, such a
long answer is generated without the span gate and each grounded sentence is judged by that model
instead (`SentenceGate`: the passage check and probe of the passage it cites, and the answer check
with the sentence as the answer; fitted on the same calibration questions as the refusal model, the
shipped entries' cut chosen again on long answers' sentences: docs/results.md, session 27).
A refused sentence is `dropped_off_question`; none left: the refusal, citing nothing.

It applies where the policy is calibrated for the question's language (a refusal model or span
thresholds, from an entry or `answer.refuse_*`): an uncalibrated generator (SmolLM2, a question in a
language no entry lists) has no calibrated decision to share, and its long answers keep the
sentence checks only (`Answer.grounding["gate"]` is absent then). Cost: one short answer's work
before the long one (docs/results.md, "Own corpus").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inference.structured import GroundedSpanProcessor

from .. import prompt as prompt_mod
from ..answerability import answer_check, passage_signals
from ..citations import MarkerFilter, content_words, strip_citation_markers
from .policy import Decision, Policies, ShortAnswerPolicy
from .signals import CHECK_ANSWER, P_UNANSWERABLE

if TYPE_CHECKING:
    from ..answer import Answer
    from ..config import RagConfig


@dataclass(frozen=True)
class Gate:
    """The short decision a long answer is held to: refused, or the span `text` from the passage
    with prompt marker `marker`. `passage_anchor`: the key under which the gate's prompts left its
    passages' K/V in the engine's passage cache (the short prompt's anchor: its span decodes or its
    one prompt computed them there, or with `check_kv: shared` its checks did), None without one.
    `read`: how many of the answer's passages (its top ones) the gate read, None for all."""

    decision: Decision
    marker: int | None
    passage_anchor: list[int] | None = None
    read: int | None = None

    @property
    def refused(self) -> bool:
        return self.decision.refused

    @property
    def text(self) -> str:
        return self.decision.text.strip()

    def metadata(self) -> dict[str, Any]:
        d: dict[str, Any] = {"refused": self.refused}
        if not self.refused:
            d.update(answer=self.text, marker=self.marker)
        if self.read is not None:
            d["read"] = self.read
        return d


class SentenceGate:
    """Judges each grounded sentence of a long answer to an explanatory question with the policy's
    sentence refusal model (`ShortAnswerPolicy.judge_sentence`). The passage signals are computed
    once per cited passage (the passage check; the probe reads its hidden state)."""

    def __init__(self, generator: Any, policy: ShortAnswerPolicy, question: str, anchor: list[int] | None = None):
        self.generator = generator
        self.policy = policy
        self.question = question
        self.anchor = anchor  # `short.check_anchor` of the long prompt
        self._passage: dict[int, dict[str, float]] = {}
        self.judged = 0
        self.dropped = 0

    async def judge(self, sentence: str, marker: int, body: str, check: float | None
                    ) -> tuple[bool, dict[str, float]]:
        """(refused, signals) of `sentence` (markers stripped) citing passage `marker`, whose text the
        checks read is `body`; `check`: its answer check against that passage when the grounding
        already asked it (None: asked here)."""
        if marker not in self._passage:
            self._passage[marker] = await passage_signals(self.generator, self.question, body,
                                                          self.policy.probe, self.anchor)
        if check is None:
            check = await answer_check(self.generator, self.question, body, sentence, self.anchor)
        signals = {**self._passage[marker], CHECK_ANSWER: check}
        refused, p = self.policy.judge_sentence(signals)
        if p is not None:
            signals[P_UNANSWERABLE] = p
        self.judged += 1
        self.dropped += refused
        return refused, signals

    def metadata(self, refused: bool) -> dict[str, Any]:
        return {"kind": "sentences", "refused": refused, "judged": self.judged, "dropped": self.dropped}


def gates(generator: Any, cfg: RagConfig, policies: Policies, answer: Answer) -> bool:
    """Whether this long answer is held to the short decision: grounding on, grounded spans possible
    (a backend that owns its decoding loop) and a calibrated policy for the question's language."""
    if not answer.passages or not getattr(generator, "supports_logits_processors", False):
        return False
    return gated_by(cfg, policies.for_question(answer.question))


def reads_gate_kv(cfg: RagConfig, check_kv: str) -> bool:
    """Whether a gated long prompt reads its passages' K/V under the gate's key
    (`answer.long_passage_kv: gate`; `stream.gate_kv_anchor`). Not with `check_kv` (resolved)
    `prompt`, whose sentence checks read what the long prompt itself stores."""
    return cfg.answer.long_passage_kv == "gate" and check_kv != "prompt"


def long_prompt_passages(cfg: RagConfig, gate: Gate | None) -> int | None:
    """How many of the answer's top passages a long prompt held to `gate` holds: the gate's own
    (`answer.long_passages: gate`, the default): its span and citation come from them and the
    sentences kept must state that span, so the others would only cost a prefill (~200 tokens each;
    the 1.5B's long answer on a Zen 5 core 8.0 -> 5.6 s, docs/results.md "Session 45"). None: all
    (`all`, no gate, or a gate that read them all)."""
    if gate is None or gate.read is None or cfg.answer.long_passages != "gate":
        return None
    return gate.read


def gated_by(cfg: RagConfig, policy: ShortAnswerPolicy) -> bool:
    """The config's part of `gates`: long grounding on, grounded answers, and `policy` (the
    question language's) calibrated. `rag index --warm-kv` asks it too (`rag/warm_kv.py: gate_reads`)."""
    if cfg.answer.long_grounding == "off" or not cfg.answer.grounded:
        return False
    return bool(policy.calibration["calibrated"])


async def short_gate(generator: Any, cfg: RagConfig, policies: Policies, answer: Answer,
                     span_processor: Callable[[list[str], int, float | None], GroundedSpanProcessor],
                     ranked: bool = True) -> Gate:
    """Run the short answer's decision over the long answer's top `short_k` passages (the short
    prompt, its grounded-span decoder, its checks, its policy) and return it; the answer's
    `refusal_calibration`, `candidates` and check timing record it as a short answer's do. `span_processor(texts,
    max_tokens, refuse_margin)`: the short answer's grounded-span decoder (`prepare.span_processor`).
    `ranked`: the passages are retrieval's (a caller's own are all read, as short mode reads them)."""
    from .short import candidate_prompts, check_anchor, checks_first, decide_per_passage, decide_single

    t0 = time.perf_counter()
    question = answer.standalone_question
    policy = policies.for_question(answer.question)
    params = cfg.generator.sampling.params(max_tokens=cfg.answer.short_max_tokens, repetition_penalty=1.0)
    budget = generator.max_model_len - params.max_tokens
    # the top passages a short answer would read (`short_k`: what the policy decides well over); the
    # long answer itself still reads them all
    read = list(answer.passages)[:policy.short_k(len(answer.passages)) if ranked else None]
    built = await asyncio.to_thread(prompt_mod.build, cfg.prompt, generator.tokenizer, question,
                                    read, budget, "short")
    texts = [prompt_mod.passage_body(cfg.prompt, p) for p in built.passages]
    spans = generator.locate_passages(built.token_ids, built.cached_texts(cfg.prompt))
    anchor = built.passage_anchor if spans else None
    if len(built.passages) != len(read):  # the short prompt is the smaller one; never expected
        raise RuntimeError("the short-answer gate lost passages the long prompt holds")
    if policy.per_passage:
        def processor(ts: list[str]) -> GroundedSpanProcessor:
            return span_processor(ts, params.max_tokens, float("inf"))

        prompts = await asyncio.to_thread(candidate_prompts, generator, cfg.prompt, question, built, spans,
                                          cfg.answer.per_passage_prompt == "own", budget)
        decision, _ = await decide_per_passage(generator, cfg.prompt, policy, answer, prompts, params, processor,
                                               anchor, check_anchor(policy.check_kv, anchor),
                                               checks_first(policy.check_kv, anchor), texts)
    else:
        span = span_processor(texts, params.max_tokens, policy.decoder_margin)
        params.logits_processors = [*params.logits_processors, span]
        out = await generator.agenerate(built.token_ids, params, passage_spans=spans, passage_anchor=anchor)
        markers = MarkerFilter({p.marker for p in built.passages})
        markers.feed(out.outputs[0].text)
        markers.flush()
        decision = await decide_single(generator, cfg.prompt, policies, answer, markers.text, span,
                                       check_anchor(policy.check_kv, anchor), texts)
    answer.timings_ms["gate"] = (time.perf_counter() - t0) * 1000
    answer.signals = dict(decision.signals)  # what the decision read, as a short answer records it
    marker = None if decision.citation is None else answer.passages[decision.citation].marker
    return Gate(decision, marker, anchor, len(read) if len(read) < len(answer.passages) else None)


def states_answer(sentence: str, span: str) -> bool:
    """Whether `sentence` states the short answer `span`: every content word of the span (numbers
    split as `content_words` splits them, CJK by character, stemmed) occurs in the sentence; a span
    of function words only must occur verbatim (case and spacing aside)."""
    want = content_words(span)
    bare = strip_citation_markers(sentence)
    if not want:
        return " ".join(span.lower().split()) in " ".join(bare.lower().split())
    have = set(content_words(bare))
    return all(w in have for w in want)
