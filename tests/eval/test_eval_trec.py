"""TREC run files round-trip and keep the written order."""

import pytest

from eval.metrics import rank_scores
from eval.trec import read_trec_qrels, read_trec_run, write_trec_qrels, write_trec_run


def test_round_trip_score_run(tmp_path):
    run = {"q1": {"d1": 1.5, "d2": 3.25, "d3": -0.5}, "q2": {"d9": 0.125}}
    path = write_trec_run(run, tmp_path / "run.trec", tag="bm25")
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 d2 1 3.250000 bm25"
    assert lines[2] == "q1 Q0 d3 3 -0.500000 bm25"
    assert read_trec_run(path) == run


def test_ordered_ranking_with_disagreeing_scores_keeps_its_order(tmp_path):
    ranking = {"q": [("a", 0.1), ("b", 0.9), ("c", 0.5)]}  # e.g. reranked, first-stage scores
    back = read_trec_run(write_trec_run(ranking, tmp_path / "r.trec"))
    assert rank_scores(back["q"]) == ["a", "b", "c"]


def test_consistent_ranking_keeps_real_scores(tmp_path):
    back = read_trec_run(write_trec_run({"q": [("a", 2.0), ("b", 1.0)]}, tmp_path / "r.trec"))
    assert back == {"q": {"a": 2.0, "b": 1.0}}


def test_rejects_whitespace_and_bad_lines(tmp_path):
    with pytest.raises(ValueError):
        write_trec_run({"q 1": {"d": 1.0}}, tmp_path / "r.trec")
    with pytest.raises(ValueError):
        write_trec_run({"q": {"d": 1.0}}, tmp_path / "r.trec", tag="two words")
    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1\n")
    with pytest.raises(ValueError, match="6 columns"):
        read_trec_run(bad)


def test_qrels_round_trip(tmp_path):
    qrels = {"q1": {"d1": 1, "d2": 2}, "q2": {"d3": 0}}
    assert read_trec_qrels(write_trec_qrels(qrels, tmp_path / "qrels.txt")) == qrels
