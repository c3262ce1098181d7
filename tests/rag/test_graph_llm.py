"""LLM triple extraction for the entity graph with the packaged SmolLM2 (real engine, 3 tiny docs).

Catches: replies that are not the constrained format (the schema not applied, or the engine
call not batched), a bad reply aborting the ingest instead of being skipped and counted, triples
that never become relations (edges) of the graph, and summaries that outlive their documents."""

from __future__ import annotations

import pytest

from indexing.store import DocumentStore
from rag.graph_llm import EngineGraphLLM
from retrieval.config import GraphConfig
from retrieval.retriever import Retriever
from retrieval.triples import parse_triples
from tests.retrieval.conftest import make_doc

DOCS = [
    ("curie", "Marie Curie", "Marie Curie was born in Warsaw. She worked at the University of Paris with Pierre Curie."),
    ("sorbonne", "University of Paris", "The University of Paris, known as the Sorbonne, is in Paris, France."),
    ("warsaw", "Warsaw", "Warsaw is the capital of Poland. Marie Curie was born there."),
]
LLM_CFG = {"mode": "bm25", "graph": {"enabled": True, "extractor": "llm", "entity_embeddings": False}}


def _store(tmp_path, docs=DOCS) -> DocumentStore:
    store = DocumentStore(tmp_path / "s.sqlite")
    for doc_id, title, text in docs:
        store.upsert(*make_doc(doc_id, text, title=title))
    return store


class OneBadReply(EngineGraphLLM):
    """The real engine's replies (kept in `real`), with the first one replaced by what an
    unconstrained model might say: the graph must skip it and count it."""

    real: list[str]

    def triples(self, chunks):
        out = super().triples(chunks)
        self.real = list(out)
        out[0] = "Sure! Here are the triples: Marie Curie | born in | Warsaw"
        return out


def test_parser_accepts_the_format_and_rejects_garbage():
    """Catches: a parser that takes free text as triples (or crashes on it), and one that keeps
    numbers or self-loops as entities."""
    ok = parse_triples('{"triples": [{"head": "Marie Curie", "relation": "Born In", "tail": "Warsaw"}, '
                       '{"head": "1867", "relation": "year", "tail": "Warsaw"}, '
                       '{"head": "Paris", "relation": "is", "tail": "paris"}]}')
    assert ok == [("Marie Curie", "born in", "Warsaw")]
    assert parse_triples('{"triples": []}') == []
    for bad in ("Marie Curie | born in | Warsaw", '{"triples": [{"head": "x"', '{"facts": []}', "", '["a"]'):
        assert parse_triples(bad) is None


def test_parser_drops_triples_the_passage_does_not_write():
    """Catches: a forced triple (the schema asks for at least one) naming what the passage never
    says (an invented tail, a word matched inside another word) entering the graph, and a respelled
    name (case, possessive, leading article) being dropped although the passage writes it."""
    passage = "Curie's Lab\nThe University of Paris hired Marie Curie. Warsawian students visited."
    reply = ('{"triples": [{"head": "Marie Curie", "relation": "worked at", "tail": "university of Paris"}, '
             '{"head": "Marie Curie", "relation": "born in", "tail": "Warsaw"}, '
             '{"head": "Curie", "relation": "owns", "tail": "Lab"}, '
             '{"head": "Marie Curie", "relation": "won", "tail": "Nobel Prize"}]}')
    assert parse_triples(reply, passage=passage) == [("Marie Curie", "worked at", "university of Paris"),
                                                     ("Curie", "owns", "Lab")]
    assert len(parse_triples(reply)) == 4  # without the passage nothing is checked
    assert parse_triples('{"triples": [{"head": "Pi", "relation": "is", "tail": "Number"}]}',
                         passage="3.14159 2.71828 1.41421") == []


def test_smollm2_triples_batched_parsed_and_become_relations(pipeline, tmp_path):
    gen = pipeline.generator
    cfg = GraphConfig.model_validate(LLM_CFG["graph"])
    store = _store(tmp_path)
    llm = OneBadReply(lambda: gen, cfg)
    r = Retriever.from_config(LLM_CFG, store, tmp_path / "idx", graph_llm=llm)
    stats = r.sync()["default"]
    assert len(llm.real) == 3 and llm.calls == 1  # the three chunks in one batched engine call
    assert all(parse_triples(r) is not None for r in llm.real), llm.real  # constrained: always valid output
    assert stats["graph_skipped_replies"] == 1  # the bad reply: skipped and counted, the ingest went on
    g = r.index("default").graph
    assert g.skipped_replies == 1 and g.stats()["skipped_replies"] == 1
    first = next(c.int_id for c in store.iter_chunks(doc_id="curie"))
    assert first not in g.triples and "marie curie" in g.mentions[first]  # it keeps its title entity
    triples = [t for ts in g.triples.values() for t in ts]
    assert triples, "SmolLM2 extracted no triple from the two good replies"
    for h, rel, t in triples:
        assert g.edges[h][t] >= 1 and g.edges[t][h] >= 1  # each triple is a relation of the graph
        assert any(n["key"] == t and rel in n["relations"] for n in g.show(h)["neighbours"])
    # stored: a fresh process gets the same triples and the skip count back
    again = Retriever.from_config(LLM_CFG, store, tmp_path / "idx").index("default").graph
    assert again.triples == g.triples and again.skipped_replies == 1


@pytest.mark.parametrize("extractor", ["cooccurrence"])
def test_community_summaries_by_the_engine_and_dropped_with_their_documents(pipeline, tmp_path, extractor):
    """Catches: summaries not written (or not stored), the global mode not returning them with
    their member chunks, and a summary left behind after the documents of its community are
    deleted (a stale summary the global mode would still serve)."""
    gen = pipeline.generator
    docs = [(f"p{i}", f"Project Nimbus {i}", f"Project Nimbus {i} was run by Alma Reyes with Boris Kaan at "
             f"Kestrel Labs and Orion Forge.") for i in range(3)] + [
        ("solo", "Lone Page", "Quintus Vale met Petra Lind in Galdor City.")]
    store = _store(tmp_path, docs)
    cfg = {"mode": "bm25", "graph": {"enabled": True, "extractor": extractor, "entity_embeddings": False,
                                     "summaries": True, "summary_min_size": 3}}
    gcfg = GraphConfig.model_validate(cfg["graph"])
    r = Retriever.from_config(cfg, store, tmp_path / "idx", graph_llm=EngineGraphLLM(lambda: gen, gcfg))
    r.sync()
    g = r.index("default").graph
    assert g.summaries and all(s.text for s in g.summaries.values())
    assert {s.label for s in store.graph_load("default").summaries} == set(g.summaries)
    top = g.global_search("What are the main themes?", 2)
    assert top and top[0]["summary"] and top[0]["chunks"]
    nimbus = next(s for s in top if "alma reyes" in {k for k in g.members()[s["community"]]})
    docs_of = {c.int_id: c.doc_id for c in store.iter_chunks()}
    assert {docs_of[c] for c in nimbus["chunks"]} <= {"p0", "p1", "p2"}
    for d in ("p0", "p1", "p2"):
        store.delete(d)
    r.sync()
    g2 = r.index("default").graph
    assert nimbus["community"] not in g2.summaries
    assert not any(s.label == nimbus["community"] for s in store.graph_load("default").summaries)


def test_global_mode_cli_and_api(tmp_path, capsys, server):
    """Catches: `rag search --mode global` missing or not returning the summaries `rag index`
    wrote with the engine (with their member chunks), a deleted document's community still served,
    and `/v1/search` rejecting mode global or answering it with a 500 when summaries are off."""
    import json

    import httpx

    from rag.cli import main

    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(3):
        (docs / f"nimbus{i}.md").write_text(f"# Project Nimbus {i}\n\nProject Nimbus {i} was run by Alma Reyes with "
                                            "Boris Kaan at Kestrel Labs and Orion Forge.\n", encoding="utf-8")
    common = ["--set", f"storage.path={tmp_path / 'rag'}", "--set", "retrieval.mode=bm25",
              "--set", "retrieval.graph.enabled=true", "--set", "retrieval.graph.summaries=true",
              "--set", "retrieval.graph.entity_embeddings=false", "--set", "generator.engine.model=smollm2",
              "--set", "generator.engine.max_model_len=1024", "--set", "generator.engine.dtype=float32",
              "--set", "generator.engine.quantization=none", "--set", "generator.engine.kv_cache_memory=0.5"]
    assert main(["index", str(docs), "--no-progress", *common]) == 0
    capsys.readouterr()
    assert main(["search", "What are the main themes?", "--mode", "global", "--json", *common]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["mode"] == "global" and out["communities"]
    top = out["communities"][0]
    assert top["summary"] and top["chunks"] and all(c["title"].startswith("Project Nimbus") for c in top["chunks"])
    for i in range(3):
        assert main(["docs", "delete", str(docs / f"nimbus{i}.md"), "--source", *common]) == 0
    capsys.readouterr()
    assert main(["search", "What are the main themes?", "--mode", "global", "--json", *common]) == 0
    assert json.loads(capsys.readouterr().out)["communities"] == []  # its summary went with its documents

    base, _ = server  # the session server's config has no summaries: a 409 naming the fix
    r = httpx.post(base + "/v1/search", json={"query": "What are the main themes?", "mode": "global"}, timeout=60)
    assert r.status_code == 409 and "retrieval.graph.summaries" in r.text
