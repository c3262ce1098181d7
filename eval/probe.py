"""Train the answerability probe (`rag.answerability.AnswerabilityProbe`) on question/passage pairs.

Why pairs and not answered questions: the probe only reads the passage check (question + one
passage), so its training data needs no retrieval and no answer, just a label: does this passage
answer this question? A QA set with unanswerable questions gives both kinds on the same passages
(SQuAD v2: an answerable question on its paragraph -> yes; an unanswerable one, written from the
paragraph's own words -> no), plus the wrong-passage case the pipeline meets when it copies a span
from a passage that is about something else (another paragraph of the same article -> no).
One prefill per pair; a paragraph's pairs run one after another (`passage_order`), so the prefix
cache serves its passage to the later ones: ~0.4 s per pair with the 1.5B model on 2 cores (Zen 4;
1.0 s in dataset order), so ~2,300 pairs take ~15 minutes.

Leakage: every question of the reported sample and the calibration sample is left out, and so is
every other question on their paragraphs, so neither the reported numbers nor the refusal model
fitted on the calibration sample see a paragraph the probe was trained on.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eval.answers import contains_answer
from eval.calibrate import _logistic
from eval.datasets import CorpusDoc, QAItem


@dataclass
class ProbePair:
    qid: str
    question: str
    passage: str
    label: int  # 1: the passage answers the question
    kind: str  # "gold" (the question's own paragraph) or "other" (a same-article paragraph without the answer)


def probe_pairs(items: Sequence[QAItem], corpus: dict[str, CorpusDoc], n: int, seed: int,
                held_ids: set[str], other_share: float = 0.35) -> list[ProbePair]:
    """Up to `n` questions (seeded) that are not held out and whose paragraph no held-out question
    uses: each with its own paragraph, and a share of the answerable ones also with another
    paragraph of the same article that does not contain any gold answer."""
    held_paragraphs = {i.gold_doc_id for i in items if i.id in held_ids}
    pool = [i for i in items if i.id not in held_ids and i.gold_doc_id not in held_paragraphs
            and i.gold_doc_id in corpus]
    rng = random.Random(seed)
    rng.shuffle(pool)
    by_title: dict[str, list[str]] = {}
    for d in corpus.values():
        if d.doc_id not in held_paragraphs:
            by_title.setdefault(d.title, []).append(d.doc_id)
    pairs: list[ProbePair] = []
    for it in pool[:n]:
        gold = corpus[it.gold_doc_id]
        pairs.append(ProbePair(it.id, it.question, gold.text, int(not it.is_impossible), "gold"))
        if not it.is_impossible and rng.random() < other_share:
            others = [p for p in by_title.get(gold.title, []) if p != gold.doc_id
                      and not contains_answer(corpus[p].text, it.answers)]
            if others:
                pairs.append(ProbePair(it.id, it.question, corpus[rng.choice(others)].text, 0, "other"))
    return pairs


def passage_order(pairs: Sequence[ProbePair]) -> list[int]:
    """The pairs' indices with the pairs on one passage next to each other (first seen first): the
    order to run their checks in, so the prefix cache holds each passage while its pairs are read."""
    first: dict[str, int] = {}
    for i, p in enumerate(pairs):
        first.setdefault(p.passage, i)
    return sorted(range(len(pairs)), key=lambda i: (first[pairs[i].passage], i))


def roc_auc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve (ties count half): P(score of a positive > score of a negative),
    from the Mann-Whitney rank sum with average ranks for ties."""
    from scipy.stats import rankdata

    y = np.asarray(labels, dtype=bool)
    pos, neg = int(y.sum()), int((~y).sum())
    if not pos or not neg:
        raise ValueError("AUC needs both positive and negative labels")
    ranks = rankdata(np.asarray(scores, dtype=np.float64))
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


def fit_probe(x: np.ndarray, y: np.ndarray, l2: float) -> tuple[np.ndarray, float]:
    """Logistic regression on standardised features; returns weights and bias on the raw features
    (standardisation folded in, so scoring a hidden state is one dot product)."""
    mean, std = x.mean(0), x.std(0) + 1e-6
    w, b = _logistic((x - mean) / std, y.astype(np.float64), l2)
    return w / std, float(b - (w * mean / std).sum())


def cross_validate(x: np.ndarray, y: np.ndarray, groups: Sequence[str], l2: float, folds: int = 5,
                   seed: int = 0) -> np.ndarray:
    """Out-of-fold probe scores; both pairs of a question always fall in the same fold."""
    keys = sorted(set(groups))
    perm = np.random.default_rng(seed).permutation(len(keys))
    fold_of = {keys[i]: k % folds for k, i in enumerate(perm)}
    fold = np.array([fold_of[g] for g in groups])
    out = np.zeros(len(y))
    for k in range(folds):
        w, b = fit_probe(x[fold != k], y[fold != k], l2)
        out[fold == k] = x[fold == k] @ w + b
    return out


def train_probe(x: np.ndarray, pairs: Sequence[ProbePair], check_odds: Sequence[float],
                l2s: Sequence[float]) -> tuple[np.ndarray, float, dict]:
    """Pick the L2 penalty by 5-fold cross-validated AUC, fit on every pair, and summarise: the
    probe's CV AUC next to the passage check's on the same pairs, overall and on own-paragraph pairs
    (answerable vs unanswerable on the same text, the hard part)."""
    y = np.array([p.label for p in pairs])
    groups = [p.qid for p in pairs]
    gold = np.array([p.kind == "gold" for p in pairs])
    odds = np.asarray(check_odds, dtype=np.float64)
    oof = {l2: cross_validate(x, y, groups, l2) for l2 in l2s}
    cv = {l2: roc_auc(s, y) for l2, s in oof.items()}
    best = max(cv, key=lambda k: (cv[k], -k))
    w, b = fit_probe(x, y, best)
    return w, b, {"l2": best, "cv_auc": cv[best], "cv_auc_by_l2": {str(k): v for k, v in cv.items()},
                  "check_auc": roc_auc(odds, y), "check_auc_same_paragraph": roc_auc(odds[gold], y[gold]),
                  "cv_auc_same_paragraph": roc_auc(oof[best][gold], y[gold]),
                  "pairs": len(pairs), "answerable_pairs": int(y.sum())}
