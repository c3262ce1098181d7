"""Grounded long answers (`answer.long_grounding: strict|check|off`): every sentence a reader gets is
supported by the passage it cites.

Why: a small model writes fluent sentences with invented numbers, dates and names and puts a `[1]`
after them ("The ferry leaves Tavrin harbour at 11:57 PM on Sunday, September 22, 2023 [1]" about a
file that names no ferry). An invented fact with a citation is the worst thing a RAG answer can
print, so a sentence is judged before it is shown and dropped when its passage does not hold it.

A sentence (`rag.citations.split_sentences`: the `[n]` written after it stay with it) is supported
by passages when
1. key facts: every number in it occurs in them (title included) or in the question, and every
   capitalised name in them. Deterministic and CJK-aware: digits are found inside CJK text without spaces,
   words are compared NFKC-normalised, lower-cased and stemmed (`rag.citations.content_words`);
2. overlap: at least `answer.attribution_overlap` of its other content words occur there (the
   share the lexical attribution of uncited sentences uses);
3. the engine agrees (`rag/answerability.py: answer_check`, the sentence as the proposed answer):
   log-odds >= `answer.long_check_min`, or, unset, the calibration entry's check_answer mean minus
   one std for the generator and the question's language. Without an entry the check is not asked:
   an uncalibrated model's yes/no is noise (SmolLM2 gave -1.4 to -1.9 to supported and invented
   sentences alike).

`check` judges the cited sentences (an uncited one is kept, and may get an inferred citation as
before); `strict` also re-cites a sentence to the shown passage that supports it when its own
marker is missing or wrong, and drops it when none does. What remains is the answer; nothing left:
the refusal, citing nothing. Each sentence's path is in `Answer.grounding`.

Being in the passage is not answering the question (a neighbouring fact passes all three), so where
the short answer's policy is calibrated the answer is first held to its decision (`gate.py`): a
refusal there is the answer, and otherwise only sentences that state the short answer's span are
kept (`dropped_off_question` for the others; none left: the span itself, `short_answer`).

Streaming: sentences are judged as soon as the next one starts (or the answer ends) and only then
emitted, so the concatenated stream is exactly the final answer; nothing is ever retracted (no
`replace` event) and a dropped sentence is never shown. The price is sentence-sized deltas.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..citations import attribute, content_words, sentence_markers, sentence_matches, strip_citation_markers
from ..prompt import passage_body
from .gate import states_answer
from .policy import says_refusal
from .signals import CHECK_ANSWER, P_UNANSWERABLE

if TYPE_CHECKING:
    from ..answer import Answer
    from ..config import RagConfig
    from .gate import Gate, SentenceGate

KEPT, RECITED, UNCITED, REFUSAL = "kept", "recited", "uncited", "refusal"
DROPPED_KEYFACT, DROPPED_UNSUPPORTED, DROPPED_UNCITED = "dropped_keyfact", "dropped_unsupported", "dropped_uncited"
# with the short-answer gate (gate.py): a sentence that does not state the answer; the answer span itself
DROPPED_OFF_QUESTION, SHORT_ANSWER = "dropped_off_question", "short_answer"
PATHS = (KEPT, RECITED, UNCITED, DROPPED_KEYFACT, DROPPED_UNSUPPORTED, DROPPED_UNCITED, DROPPED_OFF_QUESTION,
         SHORT_ANSWER, REFUSAL)
SHOWN = (KEPT, RECITED, UNCITED, SHORT_ANSWER)  # the paths whose sentence stays in the answer

_DIGITS = re.compile(r"\d+")
# a word in Latin script starting with a capital; not \b: CJK characters are word characters too,
# and a name written inside Chinese text ("在Tavrin工作") has no space around it
_LATIN = "A-Za-zÀ-ÖØ-öø-ÿ"
_NAME = re.compile(f"(?<![{_LATIN}])[A-ZÀ-ÖØ-Þ][{_LATIN}]*")
_LIST_ITEM = re.compile(r"(?:\d{1,2}[.)]|[-*•])")


def key_facts(sentence: str) -> tuple[list[str], list[str]]:
    """(numbers, names) a sentence states: digit runs ("11:57" -> 11, 57; "1874年" -> 1874) and
    capitalised Latin words other than the sentence's first word (which is capitalised anyway)."""
    text = unicodedata.normalize("NFKC", strip_citation_markers(sentence))
    numbers = _DIGITS.findall(text)
    names = [m.group(0) for m in _NAME.finditer(text) if text[: m.start()].strip()]
    return numbers, [w for n in names for w in content_words(n)]  # as the evidence's words (function words out)


def missing_key_facts(sentence: str, evidence: str, question: str = "") -> list[str]:
    """The numbers of `sentence` that neither `evidence` nor `question` contains ("a 14 metre boat"
    restates the question), and its names that `evidence` lacks: a name from the question under the
    wrong passage ("The capital of Quintara is Velmora [2]", [2] about Zarnovia) is the misattribution
    this catches."""
    numbers, names = key_facts(sentence)
    digits = set(_DIGITS.findall(unicodedata.normalize("NFKC", f"{evidence}\n{question}")))
    words = set(content_words(evidence))
    return list(dict.fromkeys([n for n in numbers if n not in digits] + [w for w in names if w not in words]))


def word_overlap(sentence: str, evidence: str) -> float:
    """Share of the sentence's content words, numbers aside, that `evidence` contains (1.0: none)."""
    words = [w for w in content_words(strip_citation_markers(sentence)) if not w.isdigit()]
    if not words:
        return 1.0
    known = set(content_words(evidence))
    return sum(w in known for w in words) / len(words)


@dataclass
class Judged:
    """One sentence as the model wrote it, the path it took and the text the answer keeps."""

    written: str
    path: str
    text: str = ""
    markers: list[int] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # key facts found in no cited passage
    overlap: float | None = None
    check: float | None = None  # the engine's answer-check log-odds, when asked
    p_unanswerable: float | None = None  # the sentence gate's reading (explanatory questions)
    signals: dict[str, float] | None = None  # ... and the signals it read

    def to_dict(self) -> dict[str, Any]:
        d = {"text": self.written, "path": self.path, "markers": self.markers}
        d.update({k: v for k, v in (("missing", self.missing or None), ("overlap", self.overlap),
                                    ("check", self.check), ("cited_as", self.text if self.path == RECITED else None),
                                    ("p_unanswerable", self.p_unanswerable), ("signals", self.signals))
                  if v is not None})
        return d


class LongGrounding:
    """Judges a long answer sentence by sentence while it streams (`feed`, `finish`): what each call
    returns is the text to show now. One per answer."""

    def __init__(self, generator: Any, cfg: RagConfig, answer: Answer, check_min: float | None,
                 gate: Gate | None = None, anchor: list[int] | None = None,
                 sentence_gate: SentenceGate | None = None):
        self.generator = generator
        self.sentence_gate = sentence_gate  # explanatory questions: each sentence judged (gate.py)
        self.anchor = anchor  # `check_anchor` of the long prompt: a one-passage check reads its K/V
        self.gate = gate  # the short answer's decision the sentences must state (None: not gated)
        self.mode = cfg.answer.long_grounding
        self.min_overlap = cfg.answer.attribution_overlap
        self.refusal = cfg.prompt.refusal
        self.check_min = check_min  # None: the engine is not asked
        self.question = answer.standalone_question
        self.passages = {p.marker: p for p in answer.passages}
        self._body = {p.marker: passage_body(cfg.prompt, p) for p in answer.passages}
        self._raw = ""
        self._done = 0  # the raw text before this is judged
        self._prefix = ""  # a list bullet ("1.", "-") waiting for its item
        self.judged: list[Judged] = []
        self.text = ""  # the grounded answer so far: exactly what was emitted

    async def feed(self, delta: str) -> str:
        """Take checked text (the marker filter's output); return the sentences judged and kept."""
        self._raw += delta
        found = sentence_matches(self._raw, self._done)
        return await self._judge_upto(found[:-1])  # the last one may still grow

    async def finish(self) -> str:
        """Judge what is left; the rest of the answer to emit (the refusal when nothing was kept)."""
        out = await self._judge_upto(sentence_matches(self._raw, self._done))
        if not self.text and self.gate is not None and not self.gate.refused:
            # the policy answered: no sentence stated its span, so the span is the answer (as in short mode)
            m = self.gate.marker
            j = Judged(self.gate.text, SHORT_ANSWER, self.gate.text + (f" [{m}]" if m is not None else ""),
                       [m] if m is not None else [])
            self.judged.append(j)
            self.text = out = j.text
        if not self.text:
            self.text = out = self.refusal
        return out

    @property
    def refused(self) -> bool:
        return not any(j.path in SHOWN for j in self.judged)

    def metadata(self) -> dict[str, Any]:
        counts = Counter(j.path for j in self.judged)
        return {"mode": self.mode, "sentences": [j.to_dict() for j in self.judged],
                "counts": {p: counts.get(p, 0) for p in PATHS},
                "engine_check": self.check_min is not None,
                **({"check_min": self.check_min} if self.check_min is not None else {}),
                **({"gate": self.gate.metadata()} if self.gate is not None else {}),
                **({"gate": self.sentence_gate.metadata(self.refused)} if self.sentence_gate is not None else {})}

    async def _judge_upto(self, found: list[re.Match[str]]) -> str:
        out = []
        for m in found:
            gap, self._done = self._raw[self._done:m.start()], m.end()
            written = m.group(0).strip()
            if _LIST_ITEM.fullmatch(written):
                self._prefix += written + " "
                continue
            if not content_words(strip_citation_markers(written)):
                continue  # a bare marker or stray punctuation: nothing to show or judge
            j = await self.judge(self._prefix + written)
            self._prefix = ""
            self.judged.append(j)
            if j.path in SHOWN:
                piece = gap + j.text if self.text else j.text  # the whitespace as written ("" after 。)
                self.text += piece
                out.append(piece)
        return "".join(out)

    async def judge(self, sentence: str) -> Judged:
        """The path one sentence takes (see the module docstring)."""
        j = await self._ground(sentence)
        if self.sentence_gate is None or j.path not in (KEPT, RECITED) or not j.markers:
            return j
        marker = j.markers[0]  # the check the grounding asked read this passage alone, or several joined
        refused, signals = await self.sentence_gate.judge(strip_citation_markers(sentence), marker, self._body[marker],
                                                          j.check if len(j.markers) == 1 else None)
        j.p_unanswerable = signals.pop(P_UNANSWERABLE, None)
        if j.check is None:  # the grounding did not ask the engine: the gate did
            j.check = round(signals[CHECK_ANSWER], 3)
        j.signals = {k: round(v, 4) for k, v in signals.items()}
        if refused:
            j.path = DROPPED_OFF_QUESTION
        return j

    async def _ground(self, sentence: str) -> Judged:
        """The sentence's grounding path: refusal, key facts, overlap, the engine's check, re-citing."""
        if says_refusal(sentence, self.refusal):
            return Judged(sentence, REFUSAL)
        if self.gate is not None and not states_answer(sentence, self.gate.text):
            return Judged(sentence, DROPPED_OFF_QUESTION, markers=sentence_markers(sentence))
        cited = [n for n in sentence_markers(sentence) if n in self.passages]
        if not cited:
            if self.mode == "check":
                return Judged(sentence, UNCITED, sentence)
            return await self._recite(sentence, Judged(sentence, DROPPED_UNCITED), [])
        evidence = self._evidence(cited)
        j = Judged(sentence, KEPT, sentence, cited, missing_key_facts(sentence, evidence, self.question),
                   round(word_overlap(sentence, evidence), 3))
        if j.missing:
            j.path = DROPPED_KEYFACT
        elif j.overlap is not None and j.overlap < self.min_overlap:
            j.path = DROPPED_UNSUPPORTED
        elif self.check_min is not None:
            j.check = await self._check(sentence, cited)
            if j.check < self.check_min:
                j.path = DROPPED_UNSUPPORTED
        if j.path == KEPT or self.mode == "check":
            return j
        return await self._recite(sentence, j, cited)

    async def _recite(self, sentence: str, dropped: Judged, cited: list[int]) -> Judged:
        """strict: the sentence cited to the shown passage that supports it (the best word overlap
        among those holding all its key facts, the engine agreeing when asked; two tries at most)."""
        holders = [p for n, p in self.passages.items() if n not in cited
                   and not missing_key_facts(sentence, self._evidence([n]), self.question)]
        bare = strip_citation_markers(sentence)
        for _ in range(2):
            _, cites = attribute(bare, holders, self.min_overlap)  # the attribution rule picks the passage
            if not cites:
                break
            n = cites[0].marker
            check = await self._check(sentence, [n]) if self.check_min is not None else None
            if check is None or check >= self.check_min:  # type: ignore[operator]
                return Judged(sentence, RECITED, _with_marker(bare, n), [n], dropped.missing, dropped.overlap,
                              check)
            holders = [p for p in holders if p.marker != n]
        return dropped

    def _evidence(self, markers: list[int]) -> str:
        return "\n".join(f"{self.passages[n].title}\n{self._body[n]}" for n in markers)

    async def _check(self, sentence: str, markers: list[int]) -> float:
        from ..answerability import answer_check

        passage = "\n\n".join(self._body[n] for n in markers)
        anchor = self.anchor if len(markers) == 1 else None  # several joined: no one cached passage
        return round(await answer_check(self.generator, self.question, passage, strip_citation_markers(sentence),
                                        anchor), 3)


def _with_marker(bare: str, marker: int) -> str:
    """`bare` (markers removed) with `[marker]` before its final full stop, as the model writes them."""
    body = re.sub(r"[ \t]+([.,;:!?。，])", r"\1", bare).strip()
    tail = body[-1] if body and body[-1] in ".!?。！？" else ""
    return f"{body[: len(body) - len(tail)].rstrip()} [{marker}]{tail}"


def check_threshold(cfg: RagConfig, entry: Any) -> float | None:
    """The engine check's threshold: `answer.long_check_min`, else from the calibration entry of the
    generator for the question's language (check_answer mean - std on its calibration answers), else
    None (no engine check)."""
    if cfg.answer.long_check_min is not None:
        return cfg.answer.long_check_min
    model = getattr(entry, "refusal_model", None)
    if model is None or CHECK_ANSWER not in model.features:
        return None
    i = model.features.index(CHECK_ANSWER)
    return round(model.mean[i] - model.std[i], 3)


def grounding_for(generator: Any, cfg: RagConfig, answer: Answer, entry: Any,
                  gate: Gate | None = None, anchor: list[int] | None = None,
                  sentence_gate: SentenceGate | None = None) -> LongGrounding | None:
    """The grounding of one long answer, None with `long_grounding: off` (the answer as generated);
    `gate`: the short decision it is held to (`gate.py`); `anchor`: `short.check_anchor` of the long
    prompt (with `answer.check_kv: prompt` the sentence checks then read its K/V); `sentence_gate`:
    the sentence judge of an explanatory question (`gate.SentenceGate`)."""
    if cfg.answer.long_grounding == "off":
        return None
    # The check reads the yes/no candidates' log-probabilities, which a backend that does not own the
    # decoding loop (remote) refuses as it refuses logits processors: there, the deterministic checks only.
    own_loop = getattr(generator, "supports_logits_processors", False)
    return LongGrounding(generator, cfg, answer, check_threshold(cfg, entry) if own_loop else None, gate, anchor,
                         sentence_gate if own_loop else None)


