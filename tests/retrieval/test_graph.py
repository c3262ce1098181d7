"""The entity graph end to end on small real corpora: extraction (English and CJK), personalised
PageRank across a bridge document, weighted-RRF fusion, the empty-graph fallback and the CLI."""

from __future__ import annotations

import json
import logging

import pytest

from indexing.store import DocumentStore
from retrieval.entities import extract, normalize, question_keys
from retrieval.retriever import Retriever

BRIDGE = [
    ("heat_wave", "Heat Wave (1954 film)", "Heat Wave is a 1954 crime film directed by Ken Hughes. It stars "
                                           "Alex Nicol and Hillary Brooke, and was shot at Bray Studios."),
    # the bridge: shares no word with the question below, only the entity "Ken Hughes"
    ("ken_hughes", "Ken Hughes", "Ken Hughes was an English screenwriter. As a youth Ken Hughes was a goalkeeper "
                                 "at Fulham Reserves."),
    ("cold_front", "Cold Front", "Cold Front is a 1989 thriller directed by Paul Bnarbic, starring Martin Sheen."),
    ("martin_sheen", "Martin Sheen", "Martin Sheen is an American actor known for Apocalypse Now."),
    ("bray", "Bray Studios", "Bray Studios is a film studio in Berkshire, used by Hammer Film Productions."),
    ("numbers", "", "the side of a square is 4 cm and its area is 16 cm2, once more 16 = 4 * 4"),
]
QUESTION = "For which side did the filmmaker behind Heat Wave once appear?"


def _store(tmp_path, doc_factory, docs=BRIDGE) -> DocumentStore:
    store = DocumentStore(tmp_path / "store.sqlite")
    for doc_id, title, text in docs:
        doc, chunks = doc_factory(doc_id, text, title=title)
        store.upsert(doc, chunks)
    return store


def test_extraction_names_titles_quotes_and_no_numbers():
    """Catches: sentence starters or years taken as entities (they link unrelated documents), a
    name cut at an initial ("Tom T. Hall"), a title kept with its "(1954 film)" suffix (other
    documents cite it without), and connectors lost inside names ("Battle of Manila")."""
    ents = extract('It was released in November 1972 by Tom T. Hall on "The Storyteller". However, the '
                   "Battle of Manila came after 1945 and 16 km.", title="Watermelon Wine (song)")
    assert {"watermelon wine", "tom t hall", "storyteller", "battle of manila"} <= set(ents)
    assert not {"it", "however", "november 1972", "november", "1945", "16 km"} & set(ents)
    assert normalize("The Beatles'") == normalize("BEATLES") == "beatles"


def test_cjk_extraction_needs_no_whitespace():
    """Catches: a whitespace tokeniser turning a Chinese sentence into one giant "entity", and
    Traditional vs Simplified spellings of one name becoming two entities."""
    ents = extract("台北市政府位於臺灣，由柯文哲擔任市長。他出版了《白色的力量》一書。", title="台北市政府")
    assert {"台北市政府", "台湾", "白色的力量"} <= set(ents)
    assert all(len(k) <= 12 for k in ents)
    assert normalize("臺灣") == normalize("台湾")
    # a question written without spaces links by substring
    assert "台北市政府" in question_keys("台北市政府的市长是谁", set(ents))


def test_ppr_reaches_the_bridge_document(tmp_path, doc_factory):
    """Catches: graph search that only re-finds what BM25 finds. The bridge page (Ken Hughes)
    shares no word with the question, so BM25 cannot return it; PPR from "Heat Wave" through the
    co-mention of Ken Hughes must."""
    store = _store(tmp_path, doc_factory)
    r = Retriever.from_config({"mode": "bm25", "graph": {"enabled": True}}, store, tmp_path / "idx")
    bm25_only = r.search(QUESTION, k=5, mode="bm25")
    fused = r.search(QUESTION, k=5)
    graph = [c for c in fused.candidates if c.chunk.doc_id == "ken_hughes"]
    assert graph and "graph" in graph[0].ranks and "bm25" not in graph[0].ranks
    assert all(c.chunk.doc_id != "ken_hughes" or "bm25" not in c.ranks for c in bm25_only.candidates)
    alone = Retriever.from_config({"mode": "bm25", "graph": {"enabled": True}}, store, tmp_path / "idx")
    ranked = alone.index("default").graph.search(QUESTION, 5)
    ids = {c.int_id: c.doc_id for c in store.iter_chunks()}
    assert [ids[i] for i, _ in ranked][:2] == ["heat_wave", "ken_hughes"]
    assert "timings_ms" in fused.to_dict() and "graph" in fused.timings_ms


def test_graph_is_fused_by_the_weighted_rrf(tmp_path, doc_factory):
    """Catches: a second fusion formula for the graph, or `fusion.weights.graph` ignored: the fused
    score must be sum(w_r / (k + rank_r)) with the configured graph weight, and weight 0 must give
    the BM25 order back."""
    store = _store(tmp_path, doc_factory)
    cfg = {"mode": "bm25", "graph": {"enabled": True}, "fusion": {"weights": {"bm25": 1.0, "graph": 0.3}}}
    r = Retriever.from_config(cfg, store, tmp_path / "idx")
    for c in r.search(QUESTION, k=5).candidates:
        want = sum({"bm25": 1.0, "graph": 0.3}[n] / (60 + rk) for n, rk in c.ranks.items())
        assert c.score == pytest.approx(want)
    cfg["fusion"]["weights"]["graph"] = 0.0
    off = Retriever.from_config(cfg, store, tmp_path / "idx")
    plain = Retriever.from_config({"mode": "bm25"}, store, tmp_path / "idx-plain")
    assert [c.chunk_id for c in off.search(QUESTION, k=5).candidates] == \
        [c.chunk_id for c in plain.search(QUESTION, k=5).candidates]


def test_empty_graph_warns_and_graph_mode_returns_the_hybrid(tmp_path, doc_factory, embedder, caplog):
    """Catches: an error (or an empty answer) from graph mode on a corpus with no extractable
    entity (numbers, code): the graph builds empty with a warning and mode graph returns exactly
    the hybrid's results; the same for a question that names no entity of a non-empty graph."""
    docs = [("n1", "", "1234 5678 = 42 * 99"), ("n2", "", "x = 3; y = x + 1; return y * 2"),
            ("n3", "", "0x1f 0x20 0x21 == 31 32 33")]
    store = _store(tmp_path, doc_factory, docs)
    with caplog.at_level(logging.WARNING):
        r = Retriever.from_config({"mode": "graph"}, store, tmp_path / "idx", embedder=embedder)
        r.sync()
    assert "graph is empty" in caplog.text
    assert r.index("default").graph.stats()["entities"] == 0
    hybrid = Retriever.from_config({"mode": "hybrid"}, store, tmp_path / "idx-h", embedder=embedder)
    for q in ("return y * 2", "0x1f"):
        got = [(c.chunk_id, c.ranks) for c in r.search(q, k=3).candidates]
        assert got and got == [(c.chunk_id, c.ranks) for c in hybrid.search(q, k=3).candidates]
    store2 = _store(tmp_path / "b", doc_factory)
    r2 = Retriever.from_config({"mode": "graph"}, store2, tmp_path / "idx2", embedder=embedder)
    h2 = Retriever.from_config({"mode": "hybrid"}, store2, tmp_path / "idx2h", embedder=embedder)
    q = "square area in cm"
    assert [c.chunk_id for c in r2.search(q, k=3).candidates] == [c.chunk_id for c in h2.search(q, k=3).candidates]


def test_llm_extractor_without_an_engine_is_refused_clearly(tmp_path, doc_factory):
    """Catches: `extractor: llm` silently building a co-occurrence graph (or nothing) when the
    retriever was built without the engine (outside `rag index`)."""
    store = _store(tmp_path, doc_factory, BRIDGE[:2])
    r = Retriever.from_config({"mode": "bm25", "graph": {"enabled": True, "extractor": "llm"}}, store, tmp_path / "i")
    with pytest.raises(ValueError, match="needs the engine"):
        r.sync()


def test_graph_cli_stats_and_show(tmp_path, capsys):
    """Catches: `rag graph` not registered, or show/stats broken on a real `rag index` run."""
    from rag.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    for doc_id, title, text in BRIDGE:
        (docs / f"{doc_id}.md").write_text(f"# {title or doc_id}\n\n{text}\n", encoding="utf-8")
    common = ["--set", f"storage.path={tmp_path / 'rag'}", "--set", "retrieval.mode=bm25",
              "--set", "retrieval.graph.enabled=true"]
    assert main(["index", str(docs), "--no-progress", *common]) == 0
    capsys.readouterr()
    assert main(["graph", "stats", "--json", *common]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["entities"] > 5 and stats["edges"] > 0
    assert main(["graph", "show", "ken hughes", "--json", *common]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["name"] == "Ken Hughes" and len(info["documents"]) == 2
    assert any(n["key"] == "fulham reserves" for n in info["neighbours"])
    assert main(["graph", "show", "nobody at all", *common]) == 1
    assert main(["graph", "stats", "--set", f"storage.path={tmp_path / 'rag'}"]) == 2  # no graph configured


def test_entity_linking_by_embedding_finds_a_respelled_name(tmp_path, doc_factory, embedder):
    """Catches: linking by exact string only (a question spelling the director "Kenneth Hughes"
    seeds nothing), entity embeddings not computed at index time or not stored (a fresh process
    loading the graph from the store links nothing), and a threshold so loose that an unrelated
    name ("Ken Loach", cosine ~0.5 to "ken hughes") seeds the walk."""
    store = _store(tmp_path, doc_factory)
    cfg = {"mode": "bm25", "graph": {"enabled": True}}
    Retriever.from_config(cfg, store, tmp_path / "idx", embedder=embedder).sync()
    graph = Retriever.from_config(cfg, store, tmp_path / "idx", embedder=embedder).index("default").graph
    assert graph.embedding_model == embedder.name and "ken hughes" in graph.vectors
    q = "Where did Kenneth Hughes play as a youth?"
    assert graph.link(q) == []  # no key is spelled in the question
    assert graph.link(q, embedder) == ["ken hughes"]
    ids = {c.int_id: c.doc_id for c in store.iter_chunks()}
    assert {ids[i] for i, _ in graph.search(q, 3, embed=embedder)[:2]} == {"ken_hughes", "heat_wave"}
    assert graph.link("What did Ken Loach direct?", embedder) == []
    off = Retriever.from_config({"mode": "bm25", "graph": {"enabled": True, "entity_embeddings": False}}, store,
                                tmp_path / "idx-off", embedder=embedder)
    assert off.index("default").graph.search(q, 3, embed=embedder) == []


def test_postgres_backend_searches_the_graph_it_stores(pg_dsn, doc_factory, tmp_path):
    """Catches: the Postgres backend refusing or ignoring the graph (the bridge page only the
    graph reaches missing from its fused results), filters not applied to graph candidates, and
    a second replica serving a graph it never loaded from the tables."""
    from indexing.pg_store import PgDocumentStore
    from retrieval.pg_retriever import PgRetriever

    cfg = {"mode": "bm25", "graph": {"enabled": True, "entity_embeddings": False}}
    with PgDocumentStore(pg_dsn) as store:
        for doc_id, title, text in BRIDGE:
            store.upsert(*doc_factory(doc_id, text, title=title))
        r = PgRetriever.from_config(cfg, store, tmp_path / "idx")
        r.sync()
        fused = r.search(QUESTION, k=5).candidates
        bridge = [c for c in fused if c.chunk.doc_id == "ken_hughes"]
        assert bridge and "graph" in bridge[0].ranks and "bm25" not in bridge[0].ranks
        only = r.search(QUESTION, k=5, filters=["source^=docs/heat"]).candidates
        assert only and {c.chunk.doc_id for c in only} == {"heat_wave"}
        replica = PgRetriever.from_config(cfg, store, tmp_path / "idx2")  # loads the graph from the tables
        assert replica.index("default").graph.signature() == r.index("default").graph.signature()
