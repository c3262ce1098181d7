"""Multi-hop evaluation: all_gold@k, per-type metrics and the QA fields they are read from."""

from __future__ import annotations

import json

import pytest

from retrieval.beir import load_beir
from retrieval.metrics import all_gold_at_k, by_type, query_metrics


def test_all_gold_needs_every_supporting_document():
    """Catches: all_gold computed as recall (0.5 for one of two) or as hit (1 for one of two)."""
    rels = {"a": 1, "b": 1, "x": 0}
    assert all_gold_at_k(["a", "c", "b"], rels, 3) == 1.0
    assert all_gold_at_k(["a", "c", "b"], rels, 2) == 0.0
    assert all_gold_at_k(["x"], {"x": 0}, 1) == 0.0  # nothing relevant: never "all found"
    m = query_metrics(["a", "c"], rels, [2], ("all_gold", "recall", "hit"))
    assert m == {"all_gold@2": 0.0, "recall@2": 0.5, "hit@2": 1.0}


def test_metrics_by_type_means_per_type():
    """Catches: per-type means taken over all queries, or queries without a type counted."""
    per_query = {"q1": {"m": 1.0}, "q2": {"m": 0.0}, "q3": {"m": 1.0}, "q4": {"m": 0.0}}
    out = by_type(per_query, {"q1": "bridge", "q2": "bridge", "q3": "comparison"}, ["m"])
    assert out == {"bridge": {"m": 0.5, "n": 2.0}, "comparison": {"m": 1.0, "n": 1.0}}


@pytest.fixture
def hotpot_like(tmp_path):
    root = tmp_path / "mini"
    (root / "qa").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("\n".join(json.dumps({"_id": d, "title": d, "text": d})
                                                 for d in ("A", "B", "C", "D")), encoding="utf-8")
    rows = [{"id": "q1", "question": "a b?", "answers": ["x"], "gold_doc_id": "A", "gold_doc_ids": ["A", "B"],
             "type": "bridge"},
            {"id": "q2", "question": "c d?", "answers": ["y"], "gold_doc_id": "C", "gold_doc_ids": ["C", "D"],
             "type": "comparison"}]
    (root / "qa" / "dev.jsonl").write_text("\n".join(json.dumps(r) for r in rows), encoding="utf-8")
    return root


def test_qa_file_gives_both_gold_docs_and_types(hotpot_like):
    """Catches: a QA file without qrels judging only `gold_doc_id` (the first supporting paragraph),
    which makes all_gold equal hit, and `type` dropped on the way to the evaluation."""
    ds = load_beir(hotpot_like, "dev")
    assert ds.qrels == {"q1": {"A": 1, "B": 1}, "q2": {"C": 1, "D": 1}}
    assert ds.types == {"q1": "bridge", "q2": "comparison"}


def test_eval_json_reports_all_gold_and_metrics_by_type(hotpot_like, tmp_path):
    """Catches: all_gold@10 missing from `metrics` on a typed multi-gold set, or `metrics_by_type`
    missing from the --json output; an untyped set keeps its old keys exactly (no new field)."""
    from eval.retrieval_eval import evaluate_retrieval

    ds = load_beir(hotpot_like, "dev")
    runs = {"a b?": ["A", "B"], "c d?": ["C", "X"]}
    res = evaluate_retrieval(ds.queries, ds.qrels, lambda q: runs[q], ks=(10,), progress=False, types=ds.types)
    out = json.loads(json.dumps(res.to_dict()))
    assert out["metrics"]["all_gold@10"] == 0.5
    assert out["metrics_by_type"]["bridge"]["all_gold@10"] == 1.0
    assert out["metrics_by_type"]["comparison"]["all_gold@10"] == 0.0
    for qrels in ({"q": {"A": 1}}, {"q": {"A": 1, "B": 1}}):  # BEIR sets (SciFact) have multi-rel queries too
        plain = evaluate_retrieval({"q": "a"}, qrels, lambda q: ["A"], ks=(10,), progress=False)
        assert "all_gold@10" not in plain.metrics and "metrics_by_type" not in plain.to_dict()
