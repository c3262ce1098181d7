"""Incremental graph maintenance against rebuilds from scratch, and kill -9 during a graph sync."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

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
            director, star = rnd.sample(people, 2)
            title = f"The {rnd.choice(LAST)} Affair {i}"
            text = f"{title} is a film directed by {director}, starring {star}."
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


def _scratch(tmp_path: Path, docs, doc_factory, name: str) -> GraphIndex:
    store = DocumentStore(tmp_path / f"{name}.sqlite")
    _fill(store, docs, doc_factory)
    r = Retriever.from_config(CFG, store, tmp_path / f"{name}-idx")
    r.reindex()
    return r.index("default").graph


def test_delete_then_readd_ten_percent_equals_a_fresh_build(tmp_path, doc_factory):
    """Catches: counts that drift on delete (edges never decremented), entities a deleted
    document alone supported left behind, hub status or communities not recomputed for the
    components a change touched (stale labels), and Louvain results that depend on the order
    updates arrived in. After deleting 10% the graph must equal a build of the remaining 90%;
    after re-adding them, a build of everything (entities, weighted edges, hubs, communities)."""
    docs = corpus()
    store = DocumentStore(tmp_path / "live.sqlite")
    _fill(store, docs, doc_factory)
    r = Retriever.from_config(CFG, store, tmp_path / "live-idx")
    r.sync()
    full = r.index("default").graph
    assert "hollywood" in full.hubs and len(full.stats()["largest_communities"]) > 1
    gone = [d for d in docs[:6]]  # 10%, all of them mention Hollywood: it stops being a hub
    only_there = set().union(*(full.mentions[c.int_id].keys() for d in gone for c in store.iter_chunks(doc_id=d[0])))
    for doc_id, _, _ in gone:
        store.delete(doc_id)
    assert r.sync()["default"]["removed"] == 6
    after = r.index("default").graph
    rest = _scratch(tmp_path, docs[6:], doc_factory, "rest")
    assert after.signature() == rest.signature()
    assert "hollywood" not in after.hubs
    orphans = only_there - set(rest.chunks_of)  # entities only the deleted pages named
    assert orphans and not orphans & set(after.chunks_of)
    _fill(store, gone, doc_factory)
    assert r.sync()["default"]["added"] == 6
    readded = r.index("default").graph
    assert readded.signature() == _scratch(tmp_path, docs, doc_factory, "all").signature()
    assert "hollywood" in readded.hubs
    # and from disk: what a later process loads is the same graph
    again = Retriever.from_config(CFG, store, tmp_path / "live-idx").index("default").graph
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
    process loads) or a manifest published before the graph it names. SIGKILL while a sync of
    1,200 more pages runs: the index on disk must load and hold exactly the old graph or
    exactly the new one, never a mix."""
    store_path, idx = tmp_path / "s.sqlite", tmp_path / "idx"
    store = DocumentStore(store_path)
    docs = corpus(1500, seed=9)
    _fill(store, docs[:300], doc_factory)
    Retriever.from_config(CFG, store, idx).sync()
    old = Retriever.from_config(CFG, store, idx).index("default").graph.signature()
    _fill(store, docs[300:], doc_factory)
    new = _scratch(tmp_path, docs, doc_factory, "new").signature()
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    seen, kills = set(), []
    for delay in (0.3, 0.8, None):  # None: kill as soon as the new generation is being written
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        proc = subprocess.Popen([sys.executable, str(script), str(store_path), str(idx)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=Path(__file__).resolve().parents[2])
        t0 = time.monotonic()
        while proc.poll() is None:
            writing = any(p.name.startswith(".gen-") for p in (idx / "default").iterdir())
            if (delay is None and writing) or (delay is not None and time.monotonic() - t0 > delay):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.002)
        proc.wait(timeout=120)
        kills.append((delay, proc.returncode == -signal.SIGKILL, writing))
        ci = CollectionIndex(tmp_path / "idx", "default", RetrievalConfig.model_validate(CFG), lambda: None, None)
        ci.load()
        sig = ci.graph.signature()
        assert sig in (old, new)
        seen.add("new" if sig == new else "old")
        if sig == new:
            break
    assert any(killed and writing for _, killed, writing in kills), kills  # one kill landed mid-save
    final = Retriever.from_config(CFG, store, idx)
    final.sync()
    assert final.index("default").graph.signature() == new
