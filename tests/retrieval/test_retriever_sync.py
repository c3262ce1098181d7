"""Retriever end to end on a real store: ranks/scores, persistence, store<->index consistency,
mismatched-index errors and the embedding cache."""

from __future__ import annotations

import json

import pytest

from retrieval.collection_index import IndexMismatchError
from retrieval.config import EmbedderConfig, RetrievalConfig
from retrieval.embeddings import CachedEmbedder, EmbeddingCache, make_embedder
from retrieval.retriever import Retriever


def _cached(embedder, tmp_path):
    return CachedEmbedder(embedder, EmbeddingCache(tmp_path / "embeddings.sqlite"))


def test_hybrid_candidates_carry_per_retriever_ranks(topic_store, embedder, tmp_path):
    r = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=embedder)
    res = r.search("astronauts docking with the space station", k=5)
    top = res.candidates[0]
    assert "station" in top.text
    assert set(top.ranks) == {"bm25", "dense"} and top.ranks["dense"] >= 1
    assert top.score == pytest.approx(sum(1 / (60 + rk) for rk in top.ranks.values()))
    d = top.to_dict()
    assert set(d) == {"chunk_id", "doc_id", "score", "text", "metadata"}
    assert d["metadata"]["topic"] == "space" and d["metadata"]["source"].startswith("docs/space/")
    json.dumps(res.to_dict())
    assert {"embed", "bm25", "dense", "fuse", "fetch", "total"} <= set(res.timings_ms)
    many = r.search_many(["astronauts docking with the space station", "interest rates"], k=5)
    assert [c.chunk_id for c in many[0].candidates] == [c.chunk_id for c in res.candidates]
    assert r.to_config()["mode"] == "hybrid"


def test_persistence_roundtrip_without_reembedding(topic_store, embedder, tmp_path):
    emb = _cached(embedder, tmp_path)
    r1 = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=emb)
    r1.sync()
    assert emb.misses == 80
    before = [(c.chunk_id, c.ranks) for c in r1.search("the bond market fell", k=8).candidates]
    manifest = json.loads((tmp_path / "indexes" / "default" / "manifest.json").read_text())
    assert manifest["n_chunks"] == 80 and manifest["dim"] == 384 and "MiniLM" in manifest["embedding_model"]
    emb2 = _cached(embedder, tmp_path)
    r2 = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=emb2)
    after = [(c.chunk_id, c.ranks) for c in r2.search("the bond market fell", k=8).candidates]
    assert after == before
    assert emb2.misses == 0 and emb2.hits == 0  # loaded from disk: nothing embedded, nothing looked up
    assert r2.sync()["default"]["added"] == 0


def test_delete_and_update_stay_consistent(topic_store, embedder, tmp_path, doc_factory):
    emb = _cached(embedder, tmp_path)
    r = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=emb)
    r.sync()
    assert topic_store.delete("space-0-0") == 1
    doc, chunks = doc_factory("finance-0-0", "zeppelins float over the harbour at dawn", title="Finance",
                              metadata={"topic": "finance", "year": 2000, "rep": 0})
    assert topic_store.upsert(doc, chunks) == "changed"  # same chunk id, new text
    report = r.sync()["default"]
    assert report["removed"] == 2 and report["added"] == 1
    assert emb.misses == 81  # only the changed chunk was embedded
    ci = r.index("default")
    ids = set(topic_store.int_ids("default"))
    assert set(ci.hashes) == ids == set(ci.dense.ids().tolist()) == set(ci.bm25.live_ids().tolist())
    for mode in ("bm25", "dense"):
        res = r.search("rocket reached low earth orbit", k=80, mode=mode)
        assert "space-0-0#0" not in [c.chunk_id for c in res.candidates]
        top = r.search("zeppelins floating over a harbour", k=1, mode=mode).candidates[0]
        assert top.chunk_id == "finance-0-0#0" and "zeppelins" in top.text
    # a store change is picked up on search without an explicit sync (auto_sync)
    topic_store.delete("finance-0-0")
    res = r.search("zeppelins floating over a harbour", k=3, mode="bm25")
    assert all(c.doc_id != "finance-0-0" for c in res.candidates)


def test_mismatched_index_raises_with_reindex_hint(topic_store, embedder, tmp_path):
    Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=embedder).sync()
    other = make_embedder(EmbedderConfig(model="minilm", max_seq_length=128))  # another vector space
    r = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=other)
    with pytest.raises(IndexMismatchError, match="rag reindex"):
        r.search("rates", k=3)
    assert r.reindex()["default"]["added"] == 80
    assert r.search("interest rates rose", k=1).candidates[0].doc_id.startswith("finance")
    # BM25 analyzer settings are part of the index identity too
    cfg = RetrievalConfig(mode="bm25", bm25={"analyzer": {"stemming": None}})
    r3 = Retriever.from_config(cfg, topic_store, tmp_path / "indexes")
    with pytest.raises(IndexMismatchError, match="bm25"):
        r3.search("rates", k=3)


def test_missing_index_file_raises(topic_store, embedder, tmp_path):
    r = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=embedder)
    r.sync()
    gen = next((tmp_path / "indexes" / "default").glob("gen-*"))
    (gen / "dense.faiss").unlink()
    r2 = Retriever.from_config({"mode": "hybrid"}, topic_store, tmp_path / "indexes", embedder=embedder)
    with pytest.raises(IndexMismatchError, match=r"missing \['dense.faiss'\].*rag reindex"):
        r2.search("rates")


def test_embedding_cache_hits_on_reindex(topic_store, embedder, tmp_path):
    emb = _cached(embedder, tmp_path)
    r = Retriever.from_config({"mode": "dense"}, topic_store, tmp_path / "indexes", embedder=emb)
    r.sync()
    assert (emb.misses, emb.hits) == (80, 0)
    r.reindex()  # full rebuild of the index files: vectors come from embeddings.sqlite
    assert (emb.misses, emb.hits) == (80, 80)
    assert emb.cache.count(emb.name) == 80
