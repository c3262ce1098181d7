"""Retrieval metrics: hand-computed values and agreement with ranx (the reference library)."""

import math
import random
import sys

import pytest

from eval.metrics import (
    doc_ranking,
    evaluate_rankings,
    evaluate_run,
    hit_at_k,
    map_at_k,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    rank_scores,
    recall_at_k,
)

RANKED = ["d1", "d2", "d3", "d4", "d5"]
RELS = {"d2": 2, "d4": 1, "d9": 3, "d7": 0}


def test_hand_computed_graded_example():
    idcg = 3 + 2 / math.log2(3) + 1 / math.log2(4)
    assert ndcg_at_k(RANKED, RELS, 5) == pytest.approx((2 / math.log2(3) + 1 / math.log2(5)) / idcg)
    assert ndcg_at_k(RANKED, RELS, 1) == 0.0
    assert recall_at_k(RANKED, RELS, 5) == pytest.approx(2 / 3)
    assert recall_at_k(RANKED, RELS, 3) == pytest.approx(1 / 3)
    assert mrr_at_k(RANKED, RELS, 5) == 0.5
    assert mrr_at_k(RANKED, RELS, 1) == 0.0
    # AP@5: hits at ranks 2 and 4, precision 1/2 and 2/4, divided by the 3 relevant docs.
    assert map_at_k(RANKED, RELS, 5) == pytest.approx((0.5 + 0.5) / 3)
    assert hit_at_k(RANKED, RELS, 1) == 0.0
    assert hit_at_k(RANKED, RELS, 2) == 1.0
    assert precision_at_k(RANKED, RELS, 5) == pytest.approx(0.4)


def test_perfect_ranking_scores_one():
    ranked = ["d9", "d2", "d4"]
    for f in (ndcg_at_k, recall_at_k, mrr_at_k, map_at_k, hit_at_k):
        assert f(ranked, RELS, 3) == pytest.approx(1.0)


def test_zero_judgement_is_not_relevant():
    assert recall_at_k(["d7"], {"d7": 0, "d1": 1}, 1) == 0.0
    assert mrr_at_k(["d7", "d1"], {"d7": 0, "d1": 1}, 2) == 0.5


def test_unjudged_queries_skipped_and_missing_runs_score_zero():
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}, "q3": {"c": 0}}
    mean, per_query = evaluate_rankings({"q1": ["a"]}, qrels, ks=(1,), names=("ndcg", "recall"))
    assert set(per_query) == {"q1", "q2"}
    assert per_query["q2"]["ndcg@1"] == 0.0
    assert mean == {"ndcg@1": 0.5, "recall@1": 0.5}


def test_rank_scores_breaks_ties_like_trec_eval():
    assert rank_scores({"a": 1.0, "b": 2.0, "c": 1.0}) == ["b", "c", "a"]


def test_doc_ranking_document_ranks_at_best_chunk():
    hits = [("d2", 9.0), ("d1", 8.0), ("d2", 7.0), ("d3", 9.5)]
    assert doc_ranking(hits) == [("d2", 9.0), ("d1", 8.0), ("d3", 9.5)]


def test_unknown_metric_raises():
    with pytest.raises(ValueError, match="unknown retrieval metric"):
        evaluate_rankings({}, {"q": {"a": 1}}, names=("bleu",))


def _random_run_and_qrels(seed: int):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(60)]
    qrels, run = {}, {}
    for q in range(40):
        qid = f"q{q}"
        judged = rng.sample(docs, rng.randint(1, 8))
        rels = {d: rng.randint(0, 3) for d in judged}
        rels[judged[0]] = rng.randint(1, 3)  # at least one relevant document per query
        qrels[qid] = rels
        retrieved = rng.sample(docs, rng.randint(5, 40))
        scores = rng.sample(range(10_000), len(retrieved))  # distinct, so no tie-break question
        run[qid] = {d: s / 100.0 for d, s in zip(retrieved, scores, strict=True)}
    return run, qrels


def _ranx():
    """ranx with numba's JIT off: the same reference code run as plain Python. Compiling its
    kernels took ~1 CPU-minute on every fresh venv (52 s of a CI run) for 40 queries that plain
    Python scores in ~2 s. Nothing else in the suite uses numba."""
    numba = pytest.importorskip("numba", reason="ranx (the reference implementation) needs numba")
    if "ranx" not in sys.modules:
        numba.config.DISABLE_JIT = True  # read when ranx's functions are decorated, at import
    return pytest.importorskip("ranx", reason="ranx is the reference implementation")


@pytest.mark.parametrize("seed", [0, 1])
def test_agrees_with_ranx_to_4_decimals(seed):
    ranx = _ranx()
    run, qrels = _random_run_and_qrels(seed)
    ks = (1, 3, 5, 10, 20)
    ours, _ = evaluate_run(run, qrels, ks=ks, names=("ndcg", "recall", "mrr", "map", "hit", "precision"))
    ranx_names = {"ndcg": "ndcg", "recall": "recall", "mrr": "mrr", "map": "map", "hit": "hit_rate",
                  "precision": "precision"}
    wanted = [f"{ranx_names[n]}@{k}" for n in ranx_names for k in ks]
    ref = ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), wanted)
    for n, rn in ranx_names.items():
        for k in ks:
            assert round(ours[f"{n}@{k}"], 4) == round(float(ref[f"{rn}@{k}"]), 4), f"{n}@{k}"
