"""Choose the refusal threshold on questions the reported eval does not score.

Why: the grounded decoder always has a best span; whether to give it or refuse is a threshold on
the model's own no-answer signal (`margin` = log P(refusal start) - log P(best span start)), and
where to put it depends on the model. Picking it on the reported sample would overfit the number
we publish, so the calibration split excludes that sample's questions by construction.
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


def calibration_items(items: Sequence[QAItem], n: int, seed: int, exclude_limit: int,
                      exclude_seed: int) -> list[QAItem]:
    """`n` sampled questions that are not in the `exclude_limit` sample drawn with `exclude_seed`
    (the one `rag eval qa --limit L --sample --seed S` scores)."""
    ids = [i.id for i in items]
    held = set(sample_ids(ids, exclude_limit, True, exclude_seed)) if exclude_limit else set()
    rest = [i for i in items if i.id not in held]
    keep = set(sample_ids([i.id for i in rest], n, True, seed))
    return [i for i in rest if i.id in keep]


def score_threshold(points: Sequence[Point], tau: float) -> dict[str, float]:
    """SQuAD v2 F1, refusal accuracy and false refusals when refusing every margin above tau."""
    f1, ref_ok, n_imp, false_ref, n_ans = 0.0, 0, 0, 0, 0
    for p in points:
        refused = p.margin > tau
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


def pick_margin(points: Sequence[Point], max_false_refusal: float = 0.15) -> dict[str, float]:
    """The threshold with the best F1 whose false-refusal rate stays within the limit.

    Candidates are midpoints between neighbouring observed margins (plus both ends), so the
    chosen value does not sit exactly on a calibration question.
    """
    ms = sorted({p.margin for p in points})
    if not ms:
        raise ValueError("no calibration points")
    cands = [ms[0] - 1.0] + [(a + b) / 2 for a, b in zip(ms, ms[1:])] + [ms[-1] + 1.0]
    best: dict[str, float] | None = None
    for tau in cands:
        s = score_threshold(points, tau)
        if s["false_refusal"] > max_false_refusal:
            continue
        if best is None or s["f1"] > best["f1"] + 1e-12:
            best = {"refuse_margin": round(tau, 4), **s}
    assert best is not None  # the top candidate refuses nothing, so it always qualifies
    best["n"] = float(len(points))
    return best
