"""SIGKILL at several points of a real ingest subprocess: the store must hold only whole
documents (chunk count == n_chunks, no orphan chunks) and keep everything committed before.
Runs on both stores: the SQLite file and PostgreSQL (a real server from the session fixture)."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

CHILD = """
import json, sys
from indexing.config import IndexingConfig
from indexing.pipeline import Ingestor, ingest
cfg = IndexingConfig.model_validate({
    "cleaning": {"near_dedup": "off"},
    "chunking": {"chunkers": [{"type": "sliding", "chunk_size": 48, "overlap": 8},
                              {"type": "small_to_big", "child_size": 24, "child_overlap": 0}]},
    "batch_size": 4,
})
if sys.argv[2].startswith("postgresql://"):
    from indexing.pg_store import PgDocumentStore
    with PgDocumentStore(sys.argv[2]) as store:
        report = Ingestor(store, cfg).ingest([sys.argv[1]], "k", progress=False)
else:
    report = ingest([sys.argv[1]], sys.argv[2], cfg, collection="k", progress=False)
print(json.dumps(report.to_dict()))
"""

N_DOCS = 240
_WORDS = ("store commit page chunk token index query answer vector sparse dense model source title date "
          "section overlap window parent child sentence cluster")
VOCAB = [w for w in _WORDS.split(" ")]


def write_corpus(path: Path) -> None:
    rnd = random.Random(7)
    with path.open("w", encoding="utf-8") as fh:
        for i in range(N_DOCS):
            words = [rnd.choice(VOCAB) + ("." if rnd.random() < 0.12 else "") for _ in range(rnd.randint(150, 400))]
            fh.write(json.dumps({"_id": f"doc{i:04d}", "title": f"Doc {i}", "text": " ".join(words)}) + "\n")


def _open(target: Path | str):
    if isinstance(target, str):
        import psycopg

        return psycopg.connect(target, autocommit=True)
    return sqlite3.connect(str(target), timeout=30)


def snapshot(target: Path | str) -> dict[str, tuple[int, str]]:
    """doc_id -> (n_chunks, content_hash) of what a reader sees right now."""
    if isinstance(target, Path) and not target.exists():
        return {}
    db = _open(target)
    try:
        return {d: (n, h) for d, n, h in db.execute("SELECT doc_id, n_chunks, content_hash FROM documents")}
    except Exception as e:  # schema not created yet
        if "documents" not in str(e):
            raise
        return {}
    finally:
        db.close()


def check_whole(target: Path | str, committed: dict[str, tuple[int, str]]) -> int:
    db = _open(target)
    try:
        if isinstance(target, Path):
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = db.execute(
            "SELECT d.doc_id, d.n_chunks, d.content_hash, d.text, "
            "(SELECT COUNT(*) FROM chunks c WHERE c.collection = d.collection AND c.doc_id = d.doc_id) "
            "FROM documents d").fetchall()
        for doc_id, n_chunks, _, _, found in rows:
            assert n_chunks > 0 and found == n_chunks, f"{doc_id}: {found} chunks stored, n_chunks={n_chunks}"
        orphans = db.execute("SELECT COUNT(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM documents d "
                             "WHERE d.collection = c.collection AND d.doc_id = c.doc_id)").fetchone()[0]
        assert orphans == 0
        stored = {d: (n, h) for d, n, h, _, _ in rows}
        for doc_id, meta in committed.items():  # nothing committed before the kill was lost or changed
            assert stored.get(doc_id) == meta
        texts = {d: t for d, _, _, t, _ in rows}
        for doc_id, text, start, end in db.execute('SELECT doc_id, text, start, "end" FROM chunks'):
            assert texts[doc_id][start:end] == text
        return len(rows)
    finally:
        db.close()


def start(script: Path, corpus: Path, store: Path | str) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen([sys.executable, str(script), str(corpus), str(store)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_sigkill_leaves_only_whole_documents(tmp_path: Path, backend: str, request):
    corpus, script = tmp_path / "corpus.jsonl", tmp_path / "child.py"
    store = request.getfixturevalue("pg_dsn") if backend == "postgres" else tmp_path / "store.sqlite"
    write_corpus(corpus)
    script.write_text(CHILD, encoding="utf-8")
    kills = mid_ingest = 0
    # Kill once a number of documents is visible, and once at a fixed delay (wherever it is then).
    for target in (1, 70, 150, "delay"):
        proc = start(script, corpus, store)
        t0, committed = time.monotonic(), {}
        while proc.poll() is None:
            seen = snapshot(store)
            due = time.monotonic() - t0 > 0.8 + kills * 0.1 if target == "delay" else len(seen) >= target
            if due:
                committed = seen
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
                break
            time.sleep(0.003)
        proc.wait(timeout=60)
        if proc.returncode == -signal.SIGKILL:
            stored = check_whole(store, committed)
            assert stored >= len(committed)
            mid_ingest += 0 < stored < N_DOCS
        else:  # it finished before the kill point: fine, but it must have finished cleanly
            assert proc.returncode == 0, proc.stderr.read()
    assert kills >= 3 and mid_ingest >= 2, (kills, mid_ingest)
    # A clean run completes the collection from wherever the kills left it.
    before = snapshot(store)
    proc = start(script, corpus, store)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    report = json.loads(out.strip().splitlines()[-1])
    assert report["new"] == N_DOCS - len(before) and report["unchanged"] == len(before)
    assert check_whole(store, before) == N_DOCS
