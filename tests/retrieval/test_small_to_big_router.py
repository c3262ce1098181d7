"""Small-to-big expansion (parents, sentence windows) and collection routing."""

from __future__ import annotations

from indexing.types import Chunk, Document
from retrieval.config import CollectionConfig, RetrievalConfig, RouterConfig
from retrieval.retriever import Retriever
from retrieval.router import Router
from retrieval.small_to_big import sentence_spans

PARENT_A = "Solar panels convert sunlight to power. They sit on roofs. Batteries store the surplus."
PARENT_B = "The harbour freezes in winter. Ships wait outside. Icebreakers clear a lane."


def _parent_child_store(store):
    """Two documents, each one parent chunk and sentence-sized children pointing at it."""
    for doc_id, text in (("a", PARENT_A), ("b", PARENT_B)):
        doc = Document(doc_id=doc_id, text=text, source=f"{doc_id}.txt")
        parent = Chunk(chunk_id=f"{doc_id}#p", doc_id=doc_id, text=text, start=0, end=len(text),
                       granularity="parent", metadata={"role": "parent"})
        kids = []
        for n, (s, e) in enumerate(sentence_spans(text)):
            while text[s] == " ":
                s += 1
            kids.append(Chunk(chunk_id=f"{doc_id}#c{n}", doc_id=doc_id, text=text[s:e], start=s, end=e,
                              granularity="child", parent_id=parent.chunk_id, metadata={"role": "child"}))
        store.upsert(doc, [parent, *kids])


def test_children_map_to_deduplicated_parents(store, embedder, tmp_path):
    _parent_child_store(store)
    cfg = RetrievalConfig(mode="hybrid", small_to_big={"enabled": True})
    r = Retriever.from_config(cfg, store, tmp_path / "idx", embedder=embedder)
    assert r.sync()["default"]["added"] == 6  # children only: parents are never indexed
    res = r.search("sunlight power batteries roofs", k=2)
    assert [c.chunk_id for c in res.candidates] == ["a#p", "b#p"]  # 3 matching children -> 1 parent
    top = res.candidates[0]
    assert top.text == PARENT_A and top.chunk.metadata["matched_child"].startswith("a#c")
    assert top.ranks["bm25"] == 1 and top.ranks["dense"] == 1  # best child's ranks are kept


def test_sentence_window_expansion(store, embedder, tmp_path):
    _parent_child_store(store)
    cfg = RetrievalConfig(mode="bm25", granularity="child", small_to_big={"sentence_window": 1})
    r = Retriever.from_config(cfg, store, tmp_path / "idx", embedder=embedder)
    top = r.search("ships wait", k=1).candidates[0]
    assert top.text == "The harbour freezes in winter. Ships wait outside. Icebreakers clear a lane."
    assert top.chunk.metadata["matched_text"] == "Ships wait outside."
    top = r.search("harbour freezes", k=1).candidates[0]
    assert top.text == "The harbour freezes in winter. Ships wait outside."


COLLS = [CollectionConfig(name="code", description="Python source code, functions, classes and APIs",
                          keywords=["traceback", "def"], patterns=[r"\w+\.py\b"]),
         CollectionConfig(name="docs", description="Cooking recipes, baking bread and kitchen techniques",
                          keywords=["recipe"])]


def test_router_rules_then_embedding(embedder):
    router = Router(COLLS, RouterConfig(), lambda: embedder)
    assert router.by_rules("error in utils.py line 3") == ["code"]
    assert router.by_rules("a recipe for bread") == ["docs"]
    assert router.route("a recipe for bread") == ["docs"]
    assert router.route("how long should dough rise before baking") == ["docs"]  # no rule: embedding
    assert router.route("which class implements the HTTP client method") == ["code"]
    assert Router(COLLS, RouterConfig(method="all")).route("anything") == ["code", "docs"]
    hooked = Router(COLLS, RouterConfig(), lambda: embedder, llm_hook=lambda q, cs: ["code"])
    assert hooked.route("a recipe for bread") == ["code"]


def test_retriever_searches_routed_collection(store, embedder, tmp_path, doc_factory):
    doc, chunks = doc_factory("utils", "def parse(x): return int(x)  # parse a string into an integer")
    store.upsert(doc, chunks, "code")
    doc, chunks = doc_factory("bread", "Knead the dough and let it rise for an hour before baking")
    store.upsert(doc, chunks, "docs")
    r = Retriever.from_config(RetrievalConfig(collections=COLLS), store, tmp_path / "idx", embedder=embedder)
    res = r.search("how long should dough rise before baking", k=3)
    assert res.collections == ["docs"] and [c.doc_id for c in res.candidates] == ["bread"]
    res = r.search("parse", k=3, collection=["code", "docs"])
    assert res.candidates[0].doc_id == "utils"
