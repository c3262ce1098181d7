"""The short-answer policy: given what the decoder and the checks produced, give a span or refuse.

Why one object: the decision used to be spread over the pipeline (four calibration loaders, the
span decoder's step-0 margin, the thresholds after decoding, the choice among per-passage
candidates) and `rag eval calibrate` (the same choice on recorded candidates). A policy is built
once per generator and question language from one `CalibrationEntry` and the `answer.*` config,
and everything that decides reads it: the pipeline, the span decoder's margin
(`decoder_margin`) and the calibration re-choice. A calibration run builds its policies with
`record=True` instead of flipping fields on a live pipeline.

The refusal is made in one function, `refuse`; `ShortAnswerPolicy.judge` is the one place that
decides to call it after decoding.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from ..answer import Answer
from ..calibration import (
    SHIPPED,
    CalibrationEntry,
    RefusalModel,
    SpanSelector,
    YesNoThresholds,
    calibration_path,
    load_entry,
    load_thresholds,
)
from ..citations import to_citation
from ..config import AnswerConfig
from ..prompt import DEFAULT_REFUSAL
from .question_form import explanatory
from .signals import (
    CHECK_ANSWER,
    CHECK_PROBE,
    CUT_NUMBER,
    FIRST_TOKEN_FEATURES,
    MARGIN,
    MIN_LOGPROB,
    P_UNANSWERABLE,
    SPAN_TOKENS,
    gave_span,
)


@functools.cache
def measured_yes_no() -> YesNoThresholds | None:
    """The one-thing yes/no checks' thresholds as measured for qwen2.5-1.5b (its shipped entry's
    `yes_no`, read from there, not copied): what `answer.yes_no: true` uses for a model whose entry
    holds none. Read once, and only that part (not the whole entry with its probe)."""
    d = load_thresholds(SHIPPED, "qwen2.5-1.5b", language="en").get("yes_no")
    return YesNoThresholds.from_dict(d) if d else None


if TYPE_CHECKING:
    from retrieval.types import Candidate as Retrieved

    from ..answerability import AnswerabilityProbe
    from ..config import RagConfig


class Scored(Protocol):
    """What a choice among candidates reads: the span and its signals."""

    @property
    def text(self) -> str: ...

    @property
    def signals(self) -> dict[str, float]: ...


@dataclass
class Candidate:
    """One short answer the policy may give.

    `passage`: index (in the prompt's passages) of the passage it cites, None for none.
    `refused`: the decoder already wrote the refusal (or the text says it)."""

    text: str
    signals: dict[str, float] = field(default_factory=dict)
    passage: int | None = None
    refused: bool = False


@dataclass(frozen=True)
class Decision:
    """The answer to give: the text (the span, or the refusal), the passage it cites (an index,
    None for none), whether it is a refusal, and the signals it was decided on."""

    text: str
    citation: int | None
    refused: bool
    signals: dict[str, float]

    def apply(self, answer: Answer) -> None:
        """Write the decision into the answer: the text with the cited passage's marker appended,
        the citation, the refusal flag and (when there are any) the signals."""
        cites = [] if self.refused or self.citation is None else [to_citation(answer.passages[self.citation])]
        answer.text = self.text.strip() + " " + "".join(f"[{c.marker}]" for c in cites) if cites else self.text
        answer.citations, answer.refused = cites, self.refused
        if self.signals:
            answer.signals = self.signals


def refuse(refusal: str, signals: dict[str, float] | None = None) -> Decision:
    """The refusal: the configured text, no citation. Every refusal, before decoding (no passage
    above `refuse_below`, none left after compression, no candidate) or after, is made here."""
    return Decision(refusal, None, True, dict(signals or {}))


def below_threshold(retrieved: Sequence[Retrieved], threshold: float | None, key: str) -> bool:
    """Whether even the best retrieved passage scores under `answer.refuse_below` (on the score
    `answer.refusal_score` names): then nothing is good enough to answer from, and the answer is the
    refusal without decoding."""
    if threshold is None or not retrieved:
        return False
    best = max((c.scores.get(key, c.score) if key != "score" else c.score) for c in retrieved)
    return best < threshold


def says_refusal(text: str, refusal: str) -> bool:
    """Whether generated text is the refusal (a prompted model may add or drop the full stop)."""
    return refusal.lower().rstrip(".") in text.lower()


def question_language(question: str) -> str:
    """The question's language for choosing a calibration entry ("" when there is no question)."""
    from indexing.language import detect_language

    return detect_language(question) if question else ""


class ShortAnswerPolicy:
    """The short-answer decision of one generator for one question language.

    `entry`: the calibration it decides with. `answer`: the config, whose `refuse_margin` /
    `refuse_min_logprob`, when set, replace the calibrated thresholds and switch the refusal model
    off (the user chose thresholds). `record`: a calibration run; every check runs and is kept,
    and per-passage candidates are chosen as the single decode would (the selector is what the
    run fits)."""

    def __init__(self, entry: CalibrationEntry | None = None, answer: AnswerConfig | None = None,
                 refusal: str = DEFAULT_REFUSAL, record: bool = False, language: str = ""):
        self.language = language
        self.entry = entry = entry or CalibrationEntry()
        # a copy: the policy is built once, so a later change to the live config must not half-apply
        self.answer = ac = answer.model_copy() if answer is not None else AnswerConfig()
        self.refusal = refusal
        self.record = record
        user_thresholds = ac.refuse_margin is not None or ac.refuse_min_logprob is not None
        self.refusal_model: RefusalModel | None = None if not ac.verify or user_thresholds else entry.refusal_model
        self.refuse_min_logprob = ac.refuse_min_logprob if ac.refuse_min_logprob is not None \
            else entry.refuse_min_logprob
        # With a refusal model the span path is always taken; the model weighs the margin itself.
        self.decoder_margin = float("inf") if self.refusal_model is not None else (
            ac.refuse_margin if ac.refuse_margin is not None else entry.refuse_margin)
        self.selector: SpanSelector | None = None if record else entry.span_selector
        self.probe: AnswerabilityProbe | None = entry.probe
        # the sentence judge of explanatory long answers: off wherever the refusal model is off (user
        # thresholds, `verify: false`), with `answer.sentence_gate: off`, and in calibration runs, which
        # record short answers only
        off = self.refusal_model is None or record or ac.sentence_gate == "off"
        self.sentence_model: RefusalModel | None = None if off else entry.sentence_refusal_model

    @property
    def calibration(self) -> dict[str, str | bool]:
        """What decides this policy's refusals, for the answer's metadata (`Answer.refusal_calibration`):
        `calibrated` false means no calibration entry covers the question's language (or the generator
        has none) and the decoder's own no-answer path decides, so a reader knows the refusal was not
        fitted for it. `by`: refusal_model, thresholds (the entry's span thresholds), config (the
        user's `answer.refuse_*`) or decoder."""
        ac, e = self.answer, self.entry
        if ac.refuse_margin is not None or ac.refuse_min_logprob is not None:
            by = "config"
        elif self.refusal_model is not None:
            by = "refusal_model"
        elif e.refuse_margin is not None or e.refuse_min_logprob is not None:
            by = "thresholds"
        else:
            by = "decoder"
        return {"calibrated": by != "decoder", "by": by, "language": self.language}

    def judges_sentences(self, question: str) -> bool:
        """Whether a long answer to `question` is judged sentence by sentence (`gate.SentenceGate`)
        instead of being held to a short answer's span: the question asks for an explanation, which
        no span answers (`question_form.explanatory`), and the entry has a sentence refusal model
        whose features the answer can have (the probe it reads is there)."""
        m = self.sentence_model
        if m is None or (CHECK_PROBE in m.features and self.probe is None):
            return False
        return explanatory(question, self.language)

    def judge_sentence(self, signals: dict[str, float]) -> tuple[bool, float | None]:
        """(refused, P(unanswerable)) of one sentence from its signals (`SENTENCE_REFUSAL_FEATURES`);
        a missing signal keeps the sentence, as `judge` gives a span it cannot decide, and so does
        `answer.sentence_gate: record` (the model's reading is still returned)."""
        m = self.sentence_model
        decided = m.refuses(signals) if m is not None else None
        p = m.probability(signals) if decided is not None else None  # type: ignore[union-attr]
        return bool(decided) and self.answer.sentence_gate != "record", p

    @property
    def runs_checks(self) -> bool:
        """Whether the answerability checks run: only when a refusal model reads them (or a
        calibration run records them); else they are two prompts for nothing."""
        return self.answer.verify and (self.record or self.refusal_model is not None)

    @property
    def per_passage(self) -> bool:
        """One span per passage (`rag/answering/candidates.py`): as configured, else when a span
        selector is calibrated for the generator. They need the checks."""
        ac = self.answer
        if not self.runs_checks:
            return False
        return ac.per_passage if ac.per_passage is not None else self.entry.span_selector is not None

    @property
    def check_kv(self) -> str:
        """`answer.check_kv` for this generator: as configured, or with `auto` what its calibration
        entry names (`exact` where it names nothing). Why per model: reading passages the checks
        computed costs the 1.5B nothing measurable in its answers but the 0.5B several spans
        (docs/results.md, "Checks first")."""
        ac = self.answer.check_kv
        if ac != "auto":
            return ac
        return self.entry.check_kv if self.entry.check_kv in ("exact", "prompt", "shared") else "exact"

    def short_k(self, n: int) -> int:
        """How many of `n` retrieved passages (best first) a grounded short answer reads: as
        configured (`answer.short_k`), else the calibration entry's where it was measured for the
        question's language (`short_k_languages`), else all. Why: the entry's
        selector and refusal model decide well over that many passages (recorded or measured so), and
        on the SQuAD calibration questions the shipped entries decide better over the top three than
        over five (the lower-ranked passages mostly add distractor spans), while each passage left
        out saves its check and its prefill."""
        e = self.entry
        measured = e.short_k_languages is None or self.language in e.short_k_languages
        k = self.answer.short_k if self.answer.short_k is not None else (e.short_k if measured else None)
        return min(n, k) if k else n

    @property
    def two_hop(self) -> bool:
        """Whether a refusal is tried in two steps (`rag/answering/two_hop.py`): as configured
        (`answer.two_hop`), else where the calibration entry says it was measured to help; English
        questions only (the splitting examples are English). Why per model: the 1.5B splits bridge
        questions and answers both steps; the 0.5B restates the question or chains its own
        inventions (docs/results.md, "Session 29")."""
        on = self.answer.two_hop if self.answer.two_hop is not None else self.entry.two_hop
        return bool(on) and self.language == "en"

    @property
    def yes_no(self) -> YesNoThresholds | None:
        """The log-odds thresholds of the one-thing checks of "Are A and B both ...?" and "Which ...,
        A or B?" (`rag/answering/yes_no.py`), or None when that path is off: as configured (`answer.yes_no`),
        else where the calibration entry holds them; English only (the rule reads English). Why per
        model: the thresholds are where the model's checks were measured to be right (the 1.5B on
        hotpotqa_pooled dev, docs/results.md "Session 30"); another model's log-odds sit elsewhere."""
        on = self.answer.yes_no
        if on is False or self.language != "en":
            return None
        if self.entry.yes_no is not None:
            return self.entry.yes_no
        return measured_yes_no() if on else None

    @property
    def chooses_at_first_token(self) -> bool:
        """Whether the choice among per-passage candidates is known once each has its first token:
        a selector reading only the first token's margin, the passage checks and the rank (the
        shipped ones), outside a calibration run (which records every candidate whole)."""
        return (not self.record and self.selector is not None and not self.checks_every_candidate
                and set(self.selector.features) <= FIRST_TOKEN_FEATURES)

    def first_token_order(self, signals: Sequence[dict[str, float]]) -> list[int] | None:
        """Candidate indices best first by the selector (ties: the better-ranked passage), as
        `choose` would rank them; None when one lacks a feature (`choose` then falls back)."""
        return self.selector.rank(list(signals)) if self.selector is not None else None

    @property
    def checks_every_candidate(self) -> bool:
        """The answer check is one more prompt per candidate: only the chosen span needs it (for the
        refusal) unless the selector reads it or a calibration run records every signal."""
        return self.record or (self.selector is not None and CHECK_ANSWER in self.selector.features)

    def choose(self, candidates: Sequence[Scored]) -> int | None:
        """Index of the candidate to answer with among those that gave a span: the selector's best;
        without one (or when a candidate lacks a signal it reads) the single decode's choice, the
        span whose first token the model preferred (lowest margin; ties: better-ranked passage).
        None when no candidate gave a span."""
        live = [i for i, c in enumerate(candidates) if gave_span(c.text, c.signals)]
        if not live:
            return None
        signals = [candidates[i].signals for i in live]
        k = self.selector.choose(signals) if self.selector is not None else None
        if k is None:
            k = min(range(len(live)), key=lambda j: (signals[j][MARGIN], j))
        return live[k]

    def judge(self, candidate: Candidate) -> Decision:
        """Give `candidate` or refuse. A span cut out of a longer number (`cut_number`) is refused. A
        decoded span (its signals hold `span_tokens` > 0) the decoder did not refuse goes to the
        refusal model; where the model cannot decide (no model, or a signal it reads is missing) the
        `refuse_min_logprob` threshold applies."""
        signals = dict(candidate.signals)
        refused = candidate.refused or bool(signals.get(CUT_NUMBER))  # a piece of a number is no answer
        if not refused and signals.get(SPAN_TOKENS):
            model = self.refusal_model
            decided = model.refuses(signals) if model is not None else None
            if decided is not None:
                refused = decided
                signals[P_UNANSWERABLE] = model.probability(signals)  # type: ignore[union-attr,assignment]
            elif (low := self.refuse_min_logprob) is not None and signals[MIN_LOGPROB] < low:
                refused = True  # a span the model had to guess a token of: not supported well enough
        if refused:
            return refuse(self.refusal, signals)
        return Decision(candidate.text, candidate.passage, False, signals)

    def decide(self, candidates: Sequence[Candidate], chosen: int | None = None) -> Decision:
        """Choose among per-passage candidates and judge the chosen one; the refusal when none gave
        a span. `chosen`: what `choose` already returned (the caller ran the chosen span's answer
        check in between)."""
        i = self.choose(candidates) if chosen is None else chosen
        return refuse(self.refusal) if i is None else self.judge(candidates[i])


class Policies:
    """The short-answer policies of one pipeline's generator, one per question language, each built
    on first use from the calibration entry for that language (the local file is read once per
    language, the shipped one once per process).

    `record` / `probe`: a calibration run (`rag eval calibrate`): its policies record every check
    and use exactly `probe` (None: none), not the stored one, so the entry written afterwards
    matches the signals it was fitted on."""

    def __init__(self, cfg: RagConfig, record: bool = False, probe: AnswerabilityProbe | None = None):
        self.cfg = cfg
        self.record = record
        self._probe = probe
        self._by_language: dict[str, ShortAnswerPolicy] = {}
        self._lock = threading.Lock()  # questions from server threads may build the same language
        # What an ungrounded short answer is judged by: no span signals, so no calibration.
        self.plain = ShortAnswerPolicy(None, cfg.answer, cfg.prompt.refusal, record)

    def for_question(self, question: str) -> ShortAnswerPolicy:
        lang = question_language(question)
        with self._lock:
            if lang not in self._by_language:
                cfg = self.cfg
                entry = load_entry(calibration_path(cfg.storage_path, cfg.answer.calibration),
                                   cfg.generator.engine.model, language=lang)
                if self.record:
                    entry = replace(entry, probe=self._probe)
                self._by_language[lang] = ShortAnswerPolicy(entry, cfg.answer, cfg.prompt.refusal, self.record, lang)
            return self._by_language[lang]
