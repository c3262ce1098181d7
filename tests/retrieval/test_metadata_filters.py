"""Filters: parsing, evaluation on chunk fields/metadata, and pre-filtering inside both retrievers."""

from __future__ import annotations

import pytest

from indexing.types import Chunk
from retrieval.config import RetrievalConfig
from retrieval.filters import Filters, parse_condition
from retrieval.retriever import Retriever


def _chunk(**kw):
    base = dict(chunk_id="c", doc_id="d", text="t", start=0, end=1)
    base.update(kw)
    return Chunk(**base)


def test_parse_cli_syntax():
    assert parse_condition("lang=en").op == "eq"
    assert parse_condition("source^=docs/").op == "prefix"
    c = parse_condition("date=2020-01..2020-12")
    assert (c.op, c.gte, c.lte) == ("range", "2020-01", "2020-12")
    assert parse_condition("page>=3").gte == "3"
    assert parse_condition("topic=a|b").values == ("a", "b")
    with pytest.raises(ValueError, match="cannot parse"):
        parse_condition("nonsense")


def test_evaluation_on_fields_and_metadata():
    c = _chunk(source="docs/a/b.md", date="2020-05-01", page=4, metadata={"year": 2020, "tags": ["x", "y"]})
    ok = lambda spec: Filters.parse(spec).matches(c)  # noqa: E731
    assert ok(["source^=docs/a/"]) and not ok(["source^=news/"])
    assert ok(["date>=2020-01-01", "date<=2020"])  # "2020" as upper bound means through 2020
    assert not ok(["date<2020"]) and not ok(["date>2020-06"])
    assert ok(["page=4"]) and ok(["page=3..5"]) and not ok(["page>4"])
    assert ok(["year=2020"]) and ok({"year": {"gte": 2019, "lt": 2021}}) and ok({"metadata.year": 2020})
    assert ok({"tags": "y"}) and ok({"year": [2019, 2020]}) and not ok(["year!=2020"])
    assert not ok(["missing=1"])
    with pytest.raises(ValueError):
        Filters.parse({"year": {"between": 1}})


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_heavy_filter_returns_k_matching(topic_store, embedder, tmp_path, mode):
    # 80 chunks; the filter keeps the 5 sports chunks with rep=3 (6%); the query is about cooking
    # (its "note" matches every chunk weakly, so BM25 has something to rank), so a post-filter over
    # the unfiltered top results would return nothing.
    r = Retriever.from_config(RetrievalConfig(mode=mode), topic_store, tmp_path / "idx", embedder=embedder)
    q = "boil pasta in salted water note"
    assert "sports" not in {c.chunk.metadata["topic"] for c in r.search(q, k=10).candidates}
    res = r.search(q, k=5, filters=["topic=sports", "rep=3"])
    assert len(res.candidates) == 5
    assert all(c.chunk.metadata["topic"] == "sports" and c.chunk.metadata["rep"] == 3 for c in res.candidates)
    res = r.search(q, k=3, filters=["source^=news/finance/", "year>=2012"])
    assert res.candidates and all(c.chunk.source.startswith("news/finance/") for c in res.candidates)
    assert all(c.chunk.metadata["year"] >= 2012 for c in res.candidates)
    assert r.search("pasta", k=3, filters=["topic=nothing"]).candidates == []


def test_heavy_filter_with_hnsw_dense(topic_store, embedder, tmp_path):
    cfg = RetrievalConfig(mode="dense", dense={"index": "hnsw", "hnsw_ef_search": 4, "hnsw_m": 4})
    r = Retriever.from_config(cfg, topic_store, tmp_path / "idx", embedder=embedder)
    res = r.search("rocket launch", k=4, filters={"topic": "finance", "rep": 0})
    assert len(res.candidates) == 4 and {c.chunk.metadata["topic"] for c in res.candidates} == {"finance"}
