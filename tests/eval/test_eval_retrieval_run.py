"""End to end: load a dataset from disk, run a real BM25 retriever, score, write JSON/TREC/report."""

import json

import pytest

from eval.cache import QueryCache
from eval.datasets import load_beir
from eval.metrics import evaluate_run
from eval.report import write_report
from eval.retrieval_eval import evaluate_retrieval, format_table, normalise_output, save_per_query
from eval.trec import read_trec_run, write_trec_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_end_to_end_retrieval_eval_json_trec_report(tiny_dataset, bm25_search, tmp_path):
    ds = load_beir(tiny_dataset, "test")
    assert "q10" not in ds.queries  # no judgements in the split
    res = evaluate_retrieval(ds.queries, ds.qrels, bm25_search, ks=(1, 3, 10), progress=False,
                             dataset=ds.name, split=ds.split, config={"retriever": "bm25"}, name="bm25")
    assert res.n_queries == 9
    assert set(res.metrics) == {f"{m}@{k}" for m in ("ndcg", "recall", "mrr", "map", "hit") for k in (1, 3, 10)}
    # Distinctive words make this corpus easy for BM25, except q9 (two relevant capitals).
    assert res.metrics["hit@1"] >= 8 / 9
    assert res.metrics["recall@10"] == 1.0
    assert list(res.latency_ms) == ["total", "tokenize", "bm25"]
    # Chunk hits were collapsed: every document appears once per ranking.
    for ranking in res.rankings.values():
        ids = [d for d, _ in ranking]
        assert len(ids) == len(set(ids))

    out = res.save_json(tmp_path / "out" / "result.json")
    data = json.loads(out.read_text())
    assert list(data) == ["dataset", "split", "config", "metrics", "latency_ms", "n_queries"]
    assert data["dataset"] == "tiny" and data["n_queries"] == 9 and data["metrics"]["ndcg@10"] > 0.8

    # The TREC run re-scores to the same numbers (what a trec_eval user would get).
    run = read_trec_run(write_trec_run(res.rankings, tmp_path / "run.trec", tag="bm25"))
    again, _ = evaluate_run(run, ds.qrels, ks=(1, 3, 10))
    assert again == pytest.approx(res.metrics)

    paths = write_report(res, tmp_path / "report", title="tiny BM25")
    md = paths["markdown"].read_text()
    assert "| bm25 | 9 |" in md and "![" in md
    for key in ("bars", "scatter", "breakdown"):
        assert paths[key].read_bytes()[:8] == PNG_MAGIC
    assert json.loads(paths["json"].read_text())[0]["name"] == "bm25"
    assert len(list((tmp_path / "report" / "per_query").glob("bm25-*.jsonl"))) == 1
    rows = [json.loads(x) for x in save_per_query(res, tmp_path / "pq.jsonl", top=2).read_text().splitlines()]
    assert len(rows) == 9 and rows[0]["qid"] == "q1" and rows[0]["top"][0][0] == "paris" and "ndcg@10" in rows[0]
    table = format_table(res)
    assert "ndcg@10" in table.splitlines()[0] and "bm25" in table


def test_bm25_beats_reversed_ranking(tiny_dataset, make_bm25):
    ds = load_beir(tiny_dataset, "test")
    good = evaluate_retrieval(ds.queries, ds.qrels, make_bm25(), ks=(3,), progress=False)
    bad = evaluate_retrieval(ds.queries, ds.qrels, make_bm25(reverse=True), ks=(3,), progress=False)
    assert good.metrics["ndcg@3"] > bad.metrics["ndcg@3"] + 0.3


def test_normalise_output_forms():
    assert normalise_output([("d1#0", 2.0), ("d1#1", 1.5), ("d2#0", 1.0)], lambda c: c.split("#")[0]).ranking \
        == [("d1", 2.0), ("d2", 1.0)]
    out = normalise_output(([("a", 1.0)], {"bm25": 0.5}))
    assert out.ranking == [("a", 1.0)] and out.timings_ms == {"bm25": 0.5}
    assert normalise_output(["x", "y"]).ranking == [("x", 0.0), ("y", 0.0)]


def test_cache_skips_done_queries_and_survives_torn_line(tiny_dataset, bm25_search, tmp_path):
    ds = load_beir(tiny_dataset, "test")
    path = tmp_path / "c.jsonl"
    first = evaluate_retrieval(ds.queries, ds.qrels, bm25_search, ks=(10,), progress=False,
                               cache=QueryCache(path, "k1"))
    assert first.executed == 9
    with path.open("a") as f:
        f.write('{"qid": "q1", "rank')  # killed mid-write
    cache = QueryCache(path, "k1")
    assert len(cache) == 9
    again = evaluate_retrieval(ds.queries, ds.qrels, bm25_search, ks=(10,), progress=False, cache=cache)
    assert again.executed == 0 and again.metrics == first.metrics
    # Another key (other dataset version or config) must not reuse the results.
    other = QueryCache(path, "k2")
    assert len(other) == 0 and path.with_name("c.jsonl.stale").exists()


def test_warmup_search_is_untimed(tiny_dataset, bm25_search):
    ds = load_beir(tiny_dataset, "test")
    calls = []

    def search(q):
        calls.append(q)
        out = bm25_search(q)
        out.timings_ms["load"] = 1000.0 if len(calls) == 1 else 0.0  # lazy load on the first call
        return out

    res = evaluate_retrieval(ds.queries, ds.qrels, search, ks=(10,), progress=False)
    assert len(calls) == 10 and calls[0] == calls[1]
    assert res.latency_ms["load"]["p95"] == 0.0 and res.executed == 9
    calls.clear()
    evaluate_retrieval(ds.queries, ds.qrels, search, ks=(10,), progress=False, warmup=False)
    assert len(calls) == 9
