"""Paired significance tests between variants."""

import numpy as np
import pytest
from scipy import stats

from eval.significance import paired_test


def per_query(values, metric="ndcg@10"):
    return {f"q{i}": {metric: float(v)} for i, v in enumerate(values)}


def test_identical_runs_are_not_different():
    a = per_query(np.linspace(0, 1, 20))
    t = paired_test(a, a, "ndcg@10")
    assert t["delta"] == 0.0 and t["p_value"] == 1.0 and t["ci_low"] == t["ci_high"] == 0.0


def test_randomization_p_matches_exact_sign_flip_distribution():
    # d = 1..5: of the 32 sign assignments only all-plus and all-minus reach |sum| = 15.
    a = per_query([0, 0, 0, 0, 0])
    b = per_query([1, 2, 3, 4, 5])
    t = paired_test(a, b, "ndcg@10", n_resamples=20_000, seed=1)
    assert t["delta"] == 3.0
    assert t["p_value"] == pytest.approx(2 / 32, abs=0.01)
    assert paired_test(a, b, "ndcg@10", seed=1) == paired_test(a, b, "ndcg@10", seed=1)


def test_consistent_gain_is_significant_and_ttest_matches_scipy():
    rng = np.random.default_rng(0)
    xa = rng.random(40)
    xb = xa + 0.05 + rng.normal(0, 0.02, 40)
    a, b = per_query(xa), per_query(xb)
    t = paired_test(a, b, "ndcg@10")
    assert t["delta"] == pytest.approx(float(np.mean(xb - xa)))
    assert t["p_value"] < 0.001 and 0.03 < t["ci_low"] < t["delta"] < t["ci_high"] < 0.08
    order = sorted(a)  # paired_test pairs queries by sorted id
    ref = stats.ttest_rel([b[q]["ndcg@10"] for q in order], [a[q]["ndcg@10"] for q in order]).pvalue
    assert paired_test(a, b, "ndcg@10", method="ttest")["p_value"] == pytest.approx(ref)


def test_only_shared_queries_with_the_metric_count():
    a = {"q1": {"m": 1.0}, "q2": {"m": 0.0}, "q3": {"x": 1.0}}
    b = {"q1": {"m": 1.0}, "q2": {"m": 1.0}, "q4": {"m": 1.0}}
    assert paired_test(a, b, "m")["n"] == 2.0
    with pytest.raises(ValueError):
        paired_test(a, b, "missing")


def test_many_queries_run_in_bounded_blocks():
    rng = np.random.default_rng(1)
    t = paired_test(per_query(rng.random(5000)), per_query(rng.random(5000)), "ndcg@10", n_resamples=2000)
    assert 0.0 < t["p_value"] <= 1.0
