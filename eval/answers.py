"""Answer-quality metrics: SQuAD exact match / token F1, Chinese character F1, refusals,
citations and RGB accuracy.

Why these rules: EM/F1 follow the SQuAD v2 normalisation (lower case, no punctuation, no
English articles, collapsed whitespace) so English numbers are comparable with published ones;
Chinese has no spaces, so F1 over whitespace tokens would be all-or-nothing and the CMRC/DRCD
convention of one token per CJK character (Latin words and numbers stay whole) is used instead.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict

from indexing.language import CJK_RANGES

# an answer's sentences and content words: one definition, shared with the long-answer grounding
from rag.citations import content_words, split_sentences, strip_citation_markers  # noqa: F401 (re-exported)

Mode = Literal["auto", "en", "zh"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_CJK = re.compile(f"[{CJK_RANGES}]")
_ZH_TOKENS = re.compile(f"[{CJK_RANGES}]|[a-z0-9]+")
_EN_PUNCT = set(string.punctuation)


def is_cjk(text: str) -> bool:
    """True when the text contains CJK characters (then character-level scoring is used)."""
    return bool(_CJK.search(text))


def _is_punct(ch: str) -> bool:
    return ch in _EN_PUNCT or unicodedata.category(ch).startswith("P") or unicodedata.category(ch) == "Sm"


def normalize_answer(text: str) -> str:
    """SQuAD v2 normalisation: lower, drop punctuation and English articles, fix whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _EN_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def normalize_zh(text: str) -> str:
    """Chinese normalisation: NFKC (full-width to half-width), lower, drop punctuation and spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    return "".join(ch for ch in text if not _is_punct(ch) and not ch.isspace())


def _tokens(text: str, mode: Mode) -> list[str]:
    if mode == "zh":
        return _ZH_TOKENS.findall(unicodedata.normalize("NFKC", text).lower())
    return normalize_answer(text).split()


def _resolve(mode: Mode, prediction: str, golds: Sequence[str]) -> Mode:
    if mode != "auto":
        return mode
    return "zh" if any(is_cjk(t) for t in (prediction, *golds)) else "en"


def _f1(pred_toks: list[str], gold_toks: list[str]) -> float:
    if not pred_toks or not gold_toks:
        return float(pred_toks == gold_toks)
    common = sum((Counter(pred_toks) & Counter(gold_toks)).values())
    if common == 0:
        return 0.0
    p, r = common / len(pred_toks), common / len(gold_toks)
    return 2 * p * r / (p + r)


def exact_match(prediction: str, golds: Sequence[str], mode: Mode = "auto") -> float:
    """1.0 when the normalised prediction equals any normalised gold answer.

    An empty gold list means "unanswerable" (SQuAD v2): only an empty prediction matches.
    """
    golds = list(golds) or [""]
    m = _resolve(mode, prediction, golds)
    norm = normalize_zh if m == "zh" else normalize_answer
    p = norm(prediction)
    return max(float(p == norm(g)) for g in golds)


def token_f1(prediction: str, golds: Sequence[str], mode: Mode = "auto") -> float:
    """Max token F1 over gold answers; in 'zh' mode each CJK character is a token."""
    golds = list(golds) or [""]
    m = _resolve(mode, prediction, golds)
    p = _tokens(prediction, m)
    return max(_f1(p, _tokens(g, m)) for g in golds)


def char_f1(prediction: str, golds: Sequence[str]) -> float:
    """Character-level F1 for Chinese (shorthand for token_f1 in 'zh' mode)."""
    return token_f1(prediction, golds, mode="zh")


class RefusalConfig(BaseModel):
    """Phrases that mark an answer as a refusal ("the context does not say").

    Configurable because every prompt template words its refusal differently; `extra` adds to
    the defaults, `phrases` replaces them.
    """

    model_config = ConfigDict(extra="forbid")
    phrases: list[str] = [
        "i don't know", "i do not know", "cannot answer", "can't answer", "unable to answer",
        "not enough information", "insufficient information", "no answer", "unanswerable",
        "does not contain", "doesn't contain", "does not mention", "not mentioned",
        "does not provide", "doesn't provide", "cannot be determined", "cannot find",
        "无法回答", "無法回答", "不知道", "信息不足", "資訊不足", "资料不足", "資料不足",
        "没有提到", "沒有提到", "没有提及", "沒有提及", "无法确定", "無法確定", "未提及", "无法找到",
    ]
    extra: list[str] = []


def is_refusal(text: str, config: RefusalConfig | None = None) -> bool:
    """True when the answer is empty or contains a refusal phrase (case-insensitive)."""
    cfg = config or RefusalConfig()
    low = text.strip().lower().replace("’", "'")
    if not low:
        return True
    return any(p.lower() in low for p in (*cfg.phrases, *cfg.extra))


def refusal_scores(
    predictions: Sequence[str], impossible: Sequence[bool], config: RefusalConfig | None = None
) -> dict[str, float]:
    """Refusal accuracy on unanswerable questions, and false refusals on answerable ones.

    `refusal_acc` is the share of unanswerable questions that were refused; `false_refusal` the
    share of answerable ones that were refused (a system that always refuses scores 1.0 / 1.0).
    """
    refused = [is_refusal(p, config) for p in predictions]
    neg = [r for r, imp in zip(refused, impossible, strict=True) if imp]
    pos = [r for r, imp in zip(refused, impossible, strict=True) if not imp]
    return {
        "refusal_acc": sum(neg) / len(neg) if neg else 0.0,
        "false_refusal": sum(pos) / len(pos) if pos else 0.0,
        "n_unanswerable": float(len(neg)),
    }


@dataclass
class Cited:
    """A passage the answer cites: its document id and the text that was shown to the model."""

    doc_id: str
    text: str = ""


def contains_answer(text: str, answers: Iterable[str]) -> bool:
    """Whether `text` holds a gold answer (CJK answers by characters, others as whole words)."""
    zh = normalize_zh(text)
    en = f" {normalize_answer(text)} "
    for a in answers:
        if is_cjk(a):
            if normalize_zh(a) and normalize_zh(a) in zh:
                return True
        elif normalize_answer(a) and f" {normalize_answer(a)} " in en:
            return True
    return False


_MARKER_NUMBERS = re.compile(r"\[(\d+(?:\s*[,，]\s*\d+)*)\]|【(\d+)】")
SUPPORT_MIN_SHARE = 0.8


def sentence_support(sentence: str, passages: Mapping[str, str], question: str = "",
                     min_share: float = SUPPORT_MIN_SHARE) -> bool | None:
    """Whether a long-answer sentence is supported by the passages its markers cite: every number in
    it occurs in them (or in the question), and at least `min_share` of its other content words do.
    None for a sentence with no content word (a bare marker). Deterministic and cheap on purpose:
    it catches invented numbers, names and dates, not paraphrase, and never needs a model."""
    words = content_words(strip_citation_markers(sentence))
    if not words:
        return None
    cited = [n for m in _MARKER_NUMBERS.finditer(sentence) for n in re.split(r"\s*[,，]\s*", m.group(1) or m.group(2))]
    evidence = " ".join(passages[n] for n in cited if n in passages)
    if not evidence:
        return False  # uncited, or citing a passage that was never shown
    known = set(content_words(evidence))
    asked = set(content_words(question))
    if any(w.isdigit() and w not in known and w not in asked for w in words):
        return False
    plain = [w for w in words if not w.isdigit()]
    return not plain or sum(w in known or w in asked for w in plain) / len(plain) >= min_share


def supported_sentences(text: str, passages: Mapping[str, str], question: str = "") -> tuple[int, int]:
    """(supported, counted) sentences of one long answer; see `sentence_support`."""
    verdicts = [sentence_support(s, passages, question) for s in split_sentences(text)]
    counted = [v for v in verdicts if v is not None]
    return sum(counted), len(counted)


def citation_scores(
    cited: Sequence[Cited], gold_answers: Sequence[str], gold_doc_ids: Sequence[str]
) -> dict[str, float] | None:
    """Citation precision and recall of one answer; None when it cites nothing.

    A citation is correct when its passage contains a gold answer or comes from a gold document.
    Recall is the share of gold documents that are cited; without gold documents it is 1.0 when
    any citation is correct (the evidence was found) and 0.0 otherwise.
    """
    if not cited:
        return None
    gold = set(gold_doc_ids)
    ok = [c.doc_id in gold or contains_answer(c.text, gold_answers) for c in cited]
    precision = sum(ok) / len(ok)
    if gold:
        recall = len(gold & {c.doc_id for c in cited}) / len(gold)
    else:
        recall = 1.0 if any(ok) else 0.0
    return {"citation_precision": precision, "citation_recall": recall}


RGB_REJECT = ("信息不足", "insufficient information")


def rgb_labels(prediction: str, answer: Sequence[str | Sequence[str]]) -> list[int]:
    """One 0/1 label per required answer part: the part (or any alias of it) is in the text.

    RGB checks plain lower-cased containment, without SQuAD normalisation; we keep its rule so
    numbers stay comparable with the paper.
    """
    low = prediction.lower()
    labels = []
    for part in answer:
        aliases = [part] if isinstance(part, str) else list(part)
        labels.append(int(any(a.lower() in low for a in aliases)))
    return labels


def rgb_correct(prediction: str, answer: Sequence[str | Sequence[str]]) -> bool:
    """RGB accuracy of one answer: every part found (and at least one part exists)."""
    labels = rgb_labels(prediction, answer)
    return bool(labels) and all(labels)


def rgb_scores(predictions: Sequence[str], answers: Sequence[Sequence[str | Sequence[str]]]) -> dict[str, float]:
    """RGB noise-robustness accuracy and rejection rate (the paper's 'insufficient information')."""
    n = len(predictions)
    if n == 0:
        return {"rgb_acc": 0.0, "rgb_reject": 0.0}
    acc = sum(rgb_correct(p, a) for p, a in zip(predictions, answers, strict=True)) / n
    rej = sum(any(r in p.lower() for r in RGB_REJECT) for p in predictions) / n
    return {"rgb_acc": acc, "rgb_reject": rej}
