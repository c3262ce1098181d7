"""Choose the refusal threshold on questions the reported eval does not score.

Why: the grounded decoder always has a best span; whether to give it or refuse is a threshold on
the model's own no-answer signal (`margin` = log P(refusal start) - log P(best span start)), and
where to put it depends on the model. Picking it on the reported sample would overfit the number
we publish, so the calibration split excludes that sample's questions by construction. A second
signal, the log-probability of the least likely span token (`min_logprob`), catches spans the
model had to guess; the pair of thresholds is chosen together.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from eval.datasets import QAItem, sample_ids


@dataclass
class Point:
    """One calibration question answered down the span path: its margin and the span's F1."""

    margin: float
    impossible: bool
    f1: float
    min_logprob: float = 0.0


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
    f1, ref_ok, n_imp, false_ref, n_ans = 0.0, 0, 0, 0, 0
    for p in points:
        refused = p.margin > tau or p.min_logprob < low
        if p.impossible:
            n_imp += 1
            ref_ok += refused
            f1 += float(refused)
        else:
            n_ans += 1
            false_ref += refused
            f1 += 0.0 if refused else p.f1
    n = max(1, len(points))
    return {"f1": f1 / n, "refusal_acc": ref_ok / max(1, n_imp), "false_refusal": false_ref / max(1, n_ans)}


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
