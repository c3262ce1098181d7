"""Choose the refusal threshold on questions the reported eval does not score.

Why: the grounded decoder always has a best span; whether to give it or refuse is a threshold on
the model's own no-answer signal (`margin` = log P(refusal start) - log P(best span start)), and
where to put it depends on the model. Picking it on the reported sample would overfit the number
we publish, so the calibration split excludes that sample's questions by construction. A second
signal, the log-probability of the least likely span token (`min_logprob`), catches spans the
model had to guess; the pair of thresholds is chosen together.

With the answerability checks on (`answer.verify`), `fit_refusal_model` instead fits a logistic
model of "unanswerable" on every signal and picks the threshold on its score the same way: best
SQuAD v2 F1 with false refusals under the cap. The fit is a few Newton steps with an L2 penalty
on standardised features; with ~100-200 calibration questions and five features that is all the
model the data can carry.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from eval.datasets import QAItem, sample_ids
from rag.answering.signals import (
    CHECK_ANSWER,
    CUT_NUMBER,
    MARGIN,
    MIN_LOGPROB,
    REFUSAL_FEATURES,
    SELECTOR_FEATURES,
    SENTENCE_REFUSAL_FEATURES,
    SPAN_TOKENS,
)


@dataclass
class Point:
    """One calibration question answered down the span path: its margin and the span's F1."""

    margin: float
    impossible: bool
    f1: float
    min_logprob: float = 0.0
    signals: dict[str, float] = field(default_factory=dict)  # every refusal signal of the answer
    # per-passage span candidates (`answer.per_passage`): {"signals", "f1", "span"} each
    candidates: list[dict] = field(default_factory=list)
    domain: str = ""  # the calibration set it came from (leave-one-domain-out CV holds each out)


def calibration_items(items: Sequence[QAItem], n: int, seed: int, exclude_limit: int,
                      exclude_seed: int) -> list[QAItem]:
    """`n` sampled questions that are not in the `exclude_limit` sample drawn with `exclude_seed`
    (the one `rag eval qa --limit L --sample --seed S` scores)."""
    ids = [i.id for i in items]
    held = set(sample_ids(ids, exclude_limit, True, exclude_seed)) if exclude_limit else set()
    rest = [i for i in items if i.id not in held]
    keep = set(sample_ids([i.id for i in rest], n, True, seed))
    return [i for i in rest if i.id in keep]


def score_threshold(points: Sequence[Point], tau: float, low: float = float("-inf")) -> dict[str, float]:
    """SQuAD v2 F1, refusal accuracy and false refusals when refusing every margin above `tau`
    and every span whose least likely token is below `low`."""
    return _score_refusals(points, [p.margin > tau or p.min_logprob < low for p in points])


def _cands(values: list[float]) -> list[float]:
    """Midpoints between neighbouring observed values, plus both ends, so a chosen threshold does
    not sit exactly on a calibration question."""
    vs = sorted(set(values))
    return [vs[0] - 1.0] + [(a + b) / 2 for a, b in zip(vs, vs[1:])] + [vs[-1] + 1.0]


def pick_margin(points: Sequence[Point], max_false_refusal: float = 0.15,
                use_min_logprob: bool = True) -> dict[str, float]:
    """The (margin, min log-prob) thresholds with the best F1 whose false-refusal rate stays
    within the limit; ties keep the more permissive pair (fewer refusals)."""
    if not points:
        raise ValueError("no calibration points")
    lows = _cands([p.min_logprob for p in points]) if use_min_logprob else [float("-inf")]
    best: dict[str, float] | None = None
    for tau in reversed(_cands([p.margin for p in points])):
        for low in lows:
            s = score_threshold(points, tau, low)
            if s["false_refusal"] > max_false_refusal:
                continue
            if best is None or s["f1"] > best["f1"] + 1e-12:
                best = {"refuse_margin": round(tau, 4),
                        "refuse_min_logprob": round(low, 4) if low != float("-inf") else None, **s}
    assert best is not None  # the top candidate refuses nothing, so it always qualifies
    best["n"] = float(len(points))
    return best


def _logistic(z: np.ndarray, y: np.ndarray, l2: float, steps: int = 50) -> tuple[np.ndarray, float]:
    """Weights and bias of an L2-penalised logistic regression (Newton's method, bias unpenalised)."""
    a = np.hstack([z, np.ones((len(z), 1))])
    w = np.zeros(a.shape[1])
    pen = np.full(a.shape[1], l2)
    pen[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -50, 50)))
        grad = a.T @ (p - y) + pen * w
        hess = (a.T * (p * (1 - p))) @ a + np.diag(pen) + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], float(w[-1])


def fit_refusal_model(points: Sequence[Point], max_false_refusal: float = 0.15,
                      features: Sequence[str] = REFUSAL_FEATURES, l2: float = 1.0) -> dict:
    """A `RefusalModel` dict over the features every point has, plus its calibration scores.

    The threshold is the score cut with the best F1 whose false-refusal rate stays within the cap
    (ties keep the higher cut: fewer refusals)."""
    if not points:
        raise ValueError("no calibration points")
    # A question refused before any span was decoded (no passage in its group survived retrieval or
    # compression) is a refusal whatever the model says: it is scored as one and not fitted on.
    live = [gave_span_point(p) for p in points]
    spans = [p for p, ok in zip(points, live) if ok]
    if not spans:
        raise ValueError("no calibration question was answered with a span")
    feats = [f for f in features if all(f in p.signals for p in spans)]
    if not feats:
        raise ValueError("the calibration points carry none of the refusal signals " + ", ".join(features))
    x = np.array([[p.signals[f] for f in feats] for p in spans], dtype=np.float64)
    y = np.array([p.impossible for p in spans], dtype=np.float64)
    mean, std = x.mean(0), x.std(0)
    std[std == 0] = 1.0
    coef, bias = _logistic((x - mean) / std, y, l2)
    score = ((x - mean) / std) @ coef + bias
    best = _best_cut(points, live, list(score), max_false_refusal)
    model = {"features": feats, "mean": mean.tolist(), "std": std.tolist(), "coef": coef.tolist(),
             "bias": bias, "threshold": best.pop("threshold")}
    return {"refusal_model": model, **best, "n": float(len(points))}


def _best_cut(points: Sequence[Point], live: Sequence[bool], score: Sequence[float],
              max_false_refusal: float) -> dict:
    """The score cut (refuse at score >= cut) with the best F1 whose false-refusal rate stays within
    the cap; ties keep the higher cut (fewer refusals). `score`: one per live point; a point that is
    not live is a refusal at any cut."""
    best: dict | None = None
    for t in reversed(_cands(list(score))):
        cut = iter(np.asarray(score) >= t)
        s = _score_refusals(points, [bool(next(cut)) if ok else True for ok in live])
        if s["false_refusal"] <= max_false_refusal and (best is None or s["f1"] > best["f1"] + 1e-12):
            best = {"threshold": float(t), **s}
    assert best is not None  # the top cut refuses nothing, so it always qualifies
    return best


def _cut_again(model: dict, points: Sequence[Point], live: Sequence[bool], max_false_refusal: float,
               lacking: str) -> tuple[dict, dict]:
    """A fitted refusal model dict with only its cut chosen again on `points` (`_best_cut` over its
    scores; a point that is not `live` is a refusal at any cut), and what that cut scored. `lacking`:
    the error when a live point lacks a feature the model reads."""
    from rag.calibration import RefusalModel

    rm = RefusalModel.from_dict(model)
    scores = [rm.score(p.signals) for p, ok in zip(points, live) if ok]
    if any(v is None for v in scores):
        raise ValueError(lacking)
    best = _best_cut(points, live, scores, max_false_refusal)  # type: ignore[arg-type]
    return {**model, "threshold": best.pop("threshold")}, best


def sentence_points(answers: Sequence[dict]) -> list[Point]:
    """Points from long answers to explanatory questions judged by a sentence gate that refused
    nothing (`rag eval qa --mode long --answers`, every grounded sentence's `signals` recorded): one
    per question, the signals of its first judged sentence, F1 1.0 for an answerable question whose
    answer contains a gold answer (`right`), else 0; a question with no judged sentence (every
    sentence dropped by its grounding) is a refusal at any cut."""
    pts = []
    for d in answers:
        judged = [s for s in (d.get("grounding") or {}).get("sentences", []) if s.get("signals")]
        f1 = 0.0 if d["is_impossible"] else float(bool(d.get("right")))
        signals = {**judged[0]["signals"], SPAN_TOKENS: 1.0} if judged else {}
        pts.append(Point(0.0, bool(d["is_impossible"]), f1, 0.0, signals, [], d.get("domain", "")))
    return pts


def rechoose_sentence_threshold(model: dict, answers: Sequence[dict], max_false_refusal: float = 1.0) -> dict:
    """`model` (a sentence refusal model) with its cut chosen again on sentences (`sentence_points`),
    the refusal model's rule (`_best_cut`): fitted on short answers' spans, its answer check read a
    span; a sentence restates the question and reads higher, so the cut the spans gave lets more
    unanswerable questions through (docs/results.md, session 27). Returns the model and its scores."""
    pts = sentence_points(answers)
    cut, best = _cut_again(model, pts, [bool(p.signals) for p in pts], max_false_refusal,
                           "the answers lack a signal the sentence model reads (recorded without its probe?)")
    return {"model": cut, **best, "n": float(len(pts))}


def gave_span_point(p: Point) -> bool:
    """Whether a calibration point's answer was a decoded span (signals recorded, `span_tokens` > 0
    where recorded, not `cut_number`): the others were refused before decoding (or are a piece of a
    longer number, which the policy refuses) and are refusals under any model."""
    return bool(p.signals) and bool(p.signals.get(SPAN_TOKENS, 1)) and not p.signals.get(CUT_NUMBER)


def _score_refusals(points: Sequence[Point], refused: Sequence[bool]) -> dict[str, float]:
    """SQuAD v2 F1, refusal accuracy and false refusals of a given refusal decision per point."""
    f1 = sum(float(r) if p.impossible else (0.0 if r else p.f1) for p, r in zip(points, refused))
    imp = [r for p, r in zip(points, refused) if p.impossible]
    ans = [r for p, r in zip(points, refused) if not p.impossible]
    return {"f1": f1 / max(1, len(points)), "refusal_acc": sum(imp) / max(1, len(imp)),
            "false_refusal": sum(ans) / max(1, len(ans))}


def fit_span_selector(points: Sequence[Point], features: Sequence[str] = SELECTOR_FEATURES,
                      l2: float = 1.0) -> dict | None:
    """A `SpanSelector` dict: a logistic model of "this per-passage span is right" (F1 >= 0.5),
    fitted on every candidate of the answerable points (an unanswerable question has no right
    span to learn from). None when the points carry no candidates with these signals."""
    rows = [c for p in points if not p.impossible for c in p.candidates
            if all(f in c["signals"] for f in features)]
    if not rows or len({c["f1"] >= 0.5 for c in rows}) < 2:
        return None
    x = np.array([[c["signals"][f] for f in features] for c in rows], dtype=np.float64)
    y = np.array([c["f1"] >= 0.5 for c in rows], dtype=np.float64)
    mean, std = x.mean(0), x.std(0)
    std[std == 0] = 1.0
    coef, bias = _logistic((x - mean) / std, y, l2)
    return {"features": list(features), "mean": mean.tolist(), "std": std.tolist(), "coef": coef.tolist(),
            "bias": bias}


def select_candidates(points: Sequence[Point], selector: dict | None) -> list[Point]:
    """Each point as the pipeline would answer it with `selector`: the chosen candidate's signals
    and F1 (`ShortAnswerPolicy.choose`, the pipeline's own rule); points without candidates unchanged."""
    from rag.answering.policy import Candidate, ShortAnswerPolicy
    from rag.calibration import CalibrationEntry, SpanSelector

    sel = SpanSelector.from_dict(selector) if selector else None
    policy = ShortAnswerPolicy(CalibrationEntry(span_selector=sel))
    out = []
    for p in points:
        i = policy.choose([Candidate(c.get("span", ""), c["signals"]) for c in p.candidates])
        if i is None:
            out.append(p)
            continue
        c = p.candidates[i]
        s = c["signals"]
        out.append(Point(s[MARGIN], p.impossible, c["f1"], s.get(MIN_LOGPROB, 0.0), dict(s), p.candidates,
                         p.domain))
    return out


def fit_entry(points: Sequence[Point], max_false_refusal: float = 0.15,
              refusal_features: Sequence[str] = REFUSAL_FEATURES,
              selector_features: Sequence[str] | None = SELECTOR_FEATURES) -> dict:
    """The span selector (None without candidates, or `selector_features` None), the refusal model
    fitted on the candidates the selector chooses and the sentence refusal model fitted on the same:
    what `rag eval calibrate` stores, and what each fold of `domain_cv` refits."""
    selector = fit_span_selector(points, selector_features) if selector_features else None
    chosen = select_candidates(points, selector)
    fitted = fit_refusal_model(chosen, max_false_refusal, refusal_features)
    return {**fitted, "span_selector": selector,
            "sentence_refusal_model": fit_sentence_model(chosen, max_false_refusal)}


def fit_sentence_model(chosen: Sequence[Point], max_false_refusal: float = 0.15) -> dict | None:
    """The sentence refusal model (`gate.SentenceGate`): a refusal model over the signals that need no
    span (`SENTENCE_REFUSAL_FEATURES`, those the points carry), fitted on the chosen candidates with
    the same cap; None when the points lack the answer check (a run without checks)."""
    try:
        model = fit_refusal_model(chosen, max_false_refusal, SENTENCE_REFUSAL_FEATURES)["refusal_model"]
    except ValueError:
        return None
    return model if CHECK_ANSWER in model["features"] else None


def decide(points: Sequence[Point], entry: dict) -> list[tuple[Point, bool]]:
    """Each point as the pipeline would decide it with a fitted entry: the selector's candidate
    (`select_candidates`), then the refusal model (`ShortAnswerPolicy.judge`, the pipeline's rule,
    so a span the decoder did not give is a refusal and a missing feature falls back to giving it)."""
    from rag.answering.policy import Candidate, ShortAnswerPolicy
    from rag.calibration import CalibrationEntry, RefusalModel

    policy = ShortAnswerPolicy(CalibrationEntry(refusal_model=RefusalModel.from_dict(entry["refusal_model"])))
    out = []
    for p in select_candidates(points, entry.get("span_selector")):
        if not gave_span_point(p):
            out.append((p, True))
            continue
        d = policy.judge(Candidate("span", {SPAN_TOKENS: 1.0, **p.signals}))
        out.append((p, d.refused))
    return out


def transfer_scores(decided: Sequence[tuple[Point, bool]]) -> dict[str, float]:
    """Refusal accuracy, false refusals, cited inventions (unanswerable questions answered: a short
    answer that is not a refusal cites its passage) and F1 of decided points."""
    pts = [p for p, _ in decided]
    s = _score_refusals(pts, [r for _, r in decided])
    imp = [r for p, r in decided if p.impossible]
    return {**s, "cited_invention_rate": sum(not r for r in imp) / max(1, len(imp)), "n": float(len(pts)),
            "n_unanswerable": float(len(imp))}


def domain_cv(points: Sequence[Point], max_false_refusal: float = 0.15,
              refusal_features: Sequence[str] = REFUSAL_FEATURES,
              selector_features: Sequence[str] | None = SELECTOR_FEATURES) -> dict[str, dict[str, float]]:
    """Leave-one-domain-out cross-validation: for each domain, the entry fitted on every other
    domain's points decides that domain's questions. How well refusals transfer to a corpus the
    calibration never saw; a domain whose held-out figures are far from the in-domain ones is one
    the shipped entry will not serve. Domains need at least two to compare (else {})."""
    domains = sorted({p.domain for p in points})
    if len(domains) < 2:
        return {}
    out = {}
    for d in domains:
        train = [p for p in points if p.domain != d]
        test = [p for p in points if p.domain == d]
        if len({p.impossible for p in train}) < 2:
            continue  # nothing to fit a refusal model on
        entry = fit_entry(train, max_false_refusal, refusal_features, selector_features)
        out[d] = transfer_scores(decide(test, entry))
    return out


def rechoose_refusal_threshold(entry: dict, points: Sequence[Point], max_false_refusal: float = 0.15) -> dict:
    """`entry` with only its refusal model's cut chosen again on `points` (its span selector picks
    each point's candidate, its coefficients score it, `_best_cut` picks the cut under the cap), and
    what that cut scored there (`transfer_scores`).

    Why: a pipeline change that moves how sure the spans come out moves the false-refusal rate of a
    fitted cut off the cap it was chosen under (session 32: each passage's span decoded from its own
    prompt took the 1.5B entry's calibration-split false refusals to 0.175 with a 0.12 cap), while the
    coefficients, fitted on more varied data earlier, cross-validate better than a refit on the new
    points. Returns {"entry": the entry, "from": the old cut, **scores}."""
    model = entry.get("refusal_model")
    if not model:
        raise ValueError("the entry has no refusal model whose cut could be chosen again")
    chosen = select_candidates(points, entry.get("span_selector"))
    live = [gave_span_point(p) for p in chosen]
    if not any(live):
        raise ValueError("no calibration question was answered with a span")
    missing = sorted({f for p, ok in zip(chosen, live) if ok for f in model["features"] if f not in p.signals})
    cut, _ = _cut_again(model, chosen, live, max_false_refusal,
                        "the points lack signals the refusal model reads: " + ", ".join(missing)
                        + " (record them with the probe and answer.verify the entry was fitted with)")
    out = {**entry, "refusal_model": cut}
    return {"entry": out, "from": model["threshold"], **transfer_scores(decide(points, out))}


def cut_cv(entry: dict, points: Sequence[Point], max_false_refusal: float = 0.15, folds: int = 5,
           shuffles: int = 5) -> dict[str, float]:
    """K-fold cross-validation of `rechoose_refusal_threshold` (the cut chosen on the other folds
    decides each fold), averaged over `shuffles` seeded shuffles: what the re-chosen cut is worth on
    questions it was not chosen on."""
    import random

    agg: dict[str, list[float]] = {}
    for seed in range(shuffles):
        idx = list(range(len(points)))
        random.Random(seed).shuffle(idx)
        parts = [idx[i::folds] for i in range(folds)]
        decided: list[tuple[Point, bool]] = []
        for part in parts:
            held = set(part)
            e = rechoose_refusal_threshold(entry, [points[i] for i in idx if i not in held], max_false_refusal)
            decided += decide([points[i] for i in part], e["entry"])
        for k, v in transfer_scores(decided).items():
            agg.setdefault(k, []).append(v)
    return {k: float(np.mean(v)) for k, v in agg.items()}
