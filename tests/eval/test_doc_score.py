"""`rag eval retrieval --doc-score`: chunk hits collapse to documents by max or mean score."""

from __future__ import annotations

from eval.retrieval_eval import normalise_output


def test_max_and_mean_doc_scores_rank_differently():
    # doc a: one lucky chunk; doc b: two solid ones
    hits = [("a", 0.9), ("b", 0.8), ("b", 0.8), ("a", 0.1)]
    assert [d for d, _ in normalise_output(hits).ranking] == ["a", "b"]
    mean = normalise_output(hits, doc_score="mean").ranking
    assert [d for d, _ in mean] == ["b", "a"] and abs(mean[1][1] - 0.5) < 1e-9
