"""Incremental graph maintenance against rebuilds from scratch, and kill -9 during a graph sync."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from indexing.store import DocumentStore
from retrieval.collection_index import CollectionIndex
from retrieval.config import RetrievalConfig
from retrieval.graph import GraphIndex
from retrieval.retriever import Retriever

FIRST = ["Ada", "Alan", "Grace", "Linus", "Ken", "Edsger", "Barbara", "Donald", "Margaret", "Dennis", "Frances", "John", "Radia", "Whitfield"]
LAST = ["Lovelace", "Turing", "Hopper", "Torvalds", "Thompson", "Dijkstra", "Liskov", "Knuth", "Hamilton", "Ritchie", "Allen", "Backus"]
TEAMS = ["Fulham Reserves", "Leeds United", "Boston Celtics", "Ajax Amsterdam", "Real Madrid", "Hull City"]
CFG = {"mode": "bm25", "graph": {"enabled": True}}


def corpus(n: int = 60, seed: int = 3) -> list[tuple[str, str, str]]:
    """Bridge-style pages: films naming their director and cast, people naming their team. The
    first 22 pages mention "Hollywood", so deleting a few moves it across the hub threshold."""
    rnd = random.Random(seed)
    people = [f"{f} {last}" for f in FIRST for last in LAST]
    docs = []
    for i in range(n):
        if i % 3:
            # directors work with the same stars again (a chain of pairs), so some edges weigh 2+
            k = rnd.randrange(10)
            director, star, extra = people[k], people[k + 1], rnd.choice(people)
            title = f"The {rnd.choice(LAST)} Affair {i}"
            text = f"{title} is a film directed by {director}, starring {star} and {extra}."
        else:
            title = rnd.choice(people)
            text = f"{title} played for {rnd.choice(TEAMS)} and later met {rnd.choice(people)}."
        if i < 22:
            text += " It premiered in Hollywood."
        docs.append((f"d{i:03d}", title, text))
    return docs


def _fill(store: DocumentStore, docs, doc_factory) -> None:
    for doc_id, title, text in docs:
        doc, chunks = doc_factory(doc_id, text, title=title)
        store.upsert(doc, chunks)


def _scratch(tmp_path: Path, docs, doc_factory, name: str, cfg: dict = CFG) -> GraphIndex:
    store = DocumentStore(tmp_path / f"{name}.sqlite")
    _fill(store, docs, doc_factory)
    r = Retriever.from_config(cfg, store, tmp_path / f"{name}-idx")
    r.reindex()
    return r.index("default").graph


@pytest.mark.parametrize("min_weight", [1, 2])
def test_delete_then_readd_ten_percent_equals_a_fresh_build(tmp_path, doc_factory, min_weight):
    """Catches: counts that drift on delete (edges never decremented), entities a deleted
    document alone supported left behind, hub status or communities not recomputed for the
    components a change touched (stale labels), and Louvain results that depend on the order
    updates arrived in. After deleting 10% the graph must equal a build of the remaining 90%;
    after re-adding them, a build of everything (entities, weighted edges, hubs, communities), with
    every edge in the community graph and with only edges of two or more co-mentions."""
    cfg = {**CFG, "graph": {"enabled": True, "community_min_weight": min_weight}}
    docs = corpus()
    store = DocumentStore(tmp_path / "live.sqlite")
    _fill(store, docs, doc_factory)
    r = Retriever.from_config(cfg, store, tmp_path / "live-idx")
    r.sync()
    full = r.index("default").graph
    assert "hollywood" in full.hubs
    assert max(c["size"] for c in full.stats()["largest_communities"]) > 2  # Louvain had something to split
    gone = [d for d in docs[:6]]  # 10%, all of them mention Hollywood: it stops being a hub
    only_there = set().union(*(full.mentions[c.int_id].keys() for d in gone for c in store.iter_chunks(doc_id=d[0])))
    for doc_id, _, _ in gone:
        store.delete(doc_id)
    assert r.sync()["default"]["removed"] == 6
    after = r.index("default").graph
    rest = _scratch(tmp_path, docs[6:], doc_factory, "rest", cfg)
    assert after.signature() == rest.signature()
    assert "hollywood" not in after.hubs
    orphans = only_there - set(rest.chunks_of)  # entities only the deleted pages named
    assert orphans and not orphans & set(after.chunks_of)
    _fill(store, gone, doc_factory)
    assert r.sync()["default"]["added"] == 6
    readded = r.index("default").graph
    assert readded.signature() == _scratch(tmp_path, docs, doc_factory, "all", cfg).signature()
    assert "hollywood" in readded.hubs
    # and from disk: what a later process loads is the same graph
    again = Retriever.from_config(cfg, store, tmp_path / "live-idx").index("default").graph
    assert again.signature() == readded.signature()


def test_changed_document_updates_only_its_mentions(tmp_path, doc_factory):
    """Catches: an edited document keeping its old entities (the index diffed ids, not text)."""
    docs = corpus(30)
    store = DocumentStore(tmp_path / "s.sqlite")
    _fill(store, docs, doc_factory)
    r = Retriever.from_config(CFG, store, tmp_path / "idx")
    r.sync()
    edited = [(docs[4][0], "Quentin Zebulon", "Quentin Zebulon coached Hull City."), *docs[5:]]
    _fill(store, edited[:1], doc_factory)
    stats = r.sync()["default"]
    assert stats["added"] == 1 and stats["removed"] == 1
    want = _scratch(tmp_path, [*docs[:4], *edited], doc_factory, "edited")
    assert r.index("default").graph.signature() == want.signature()
    assert "quentin zebulon" in r.index("default").graph.chunks_of


CHILD = """
import sys
from indexing.store import DocumentStore
from retrieval.retriever import Retriever
store = DocumentStore(sys.argv[1])
Retriever.from_config({"mode": "bm25", "graph": {"enabled": True}}, store, sys.argv[2]).sync()
print("done")
"""


def test_kill9_during_graph_sync_keeps_the_previous_graph(tmp_path, doc_factory):
    """Catches: a graph file written in place (a kill mid-write leaves a torn graph the next
    process loads) or a manifest published before the graph it names. SIGKILL as soon as a sync
    of 300 more pages starts writing its new generation: the index on disk must load and hold
    exactly the graph before or exactly the graph after, never a mix. Retried with more pages
    while a sync finishes before the kill lands."""
    store_path, idx = tmp_path / "s.sqlite", tmp_path / "idx"
    store = DocumentStore(store_path)
    docs = corpus(1800, seed=9)
    _fill(store, docs[:300], doc_factory)
    Retriever.from_config(CFG, store, idx).sync()
    before = Retriever.from_config(CFG, store, idx).index("default").graph.signature()
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    landed = False
    for attempt in range(1, 6):
        _fill(store, docs[300 * attempt : 300 * (attempt + 1)], doc_factory)
        scratch = GraphIndex(RetrievalConfig.model_validate(CFG).graph)
        scratch.add((c.int_id, c.text, c.title) for c in store.iter_chunks())
        scratch.finish()
        after = scratch.signature()
        proc = subprocess.Popen([sys.executable, str(script), str(store_path), str(idx)],
                                env=dict(os.environ, HF_HUB_OFFLINE="1"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2])
        writing = False
        while proc.poll() is None:
            writing = any(p.name.startswith(".gen-") for p in (idx / "default").iterdir())
            if writing:
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.001)
        proc.wait(timeout=120)
        ci = CollectionIndex(idx, "default", RetrievalConfig.model_validate(CFG), lambda: None, None)
        ci.load()
        sig = ci.graph.signature()
        assert sig in (before, after)
        if writing and proc.returncode == -signal.SIGKILL:
            landed = True
            break
        before = sig
    assert landed, "no kill landed while the new generation was being written"
    final = Retriever.from_config(CFG, store, idx)
    final.sync()
    assert final.index("default").graph.signature() == after
