"""`rag serve --replicas 2` on the Postgres backend over real HTTP: two worker processes behind one
port, both ready, and a document written to the database after startup is found by every request
whichever replica answers it (shared state lives in Postgres, not in a process)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from indexing.pg_local import free_port
from tests.readiness import process_alive, stop, wait_for, wait_http


@pytest.mark.slow
def test_two_replicas_share_the_database(pg_dsn, corpus_dir, tmp_path):
    import psutil

    from indexing.pg_store import PgDocumentStore
    from indexing.types import Chunk, Document
    from rag.app import build_ingestor
    from rag.config import load_config

    sets = ["storage.backend=postgres", f"storage.dsn={pg_dsn}", f"storage.path={tmp_path}",
            "retrieval.embedder.model=minilm", "generator.engine.max_model_len=1024",
            "generator.engine.kv_cache_memory=0.3"]
    cfg = load_config(None, sets)
    with PgDocumentStore(pg_dsn) as store:
        build_ingestor(cfg, store).ingest([str(corpus_dir)], progress=False)
    port = free_port()
    args = [sys.executable, "-m", "rag", "serve", "--replicas", "2", "--port", str(port)]
    for s in sets:
        args += ["--set", s]
    log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115 - the server outlives this statement
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    base = f"http://127.0.0.1:{port}"
    try:
        wait_http(base + "/ready", "rag serve --replicas 2 did not become ready", timeout=600,
                  alive=process_alive(proc), log=tmp_path / "serve.log")
        workers = [c for c in psutil.Process(proc.pid).children() if "spawn_main" in " ".join(c.cmdline())]
        assert len(workers) == 2
        # each worker loads its own engine: wait until both have said ready (the first 200 came from
        # one of them; a request to the other one meanwhile is a correct 503 "loading")
        ready_pids: set[int] = set()
        failed: list[str] = []

        def both_ready() -> bool:
            r = httpx.get(base + "/ready", timeout=10)
            if r.json().get("error"):
                failed.append(f"worker {r.json().get('worker_pid')}: {r.json()['error']}")
            if r.status_code == 200:
                ready_pids.add(r.json()["worker_pid"])
            return ready_pids == {w.pid for w in workers}

        server_alive = process_alive(proc)

        def alive() -> str | None:  # a replica whose start-up failed stays down: fail now, not at the timeout
            return server_alive() or (f"a replica failed to start: {failed[-1]}" if failed else None)

        wait_for(both_ready, "both replicas became ready", timeout=600, alive=alive,
                 log=tmp_path / "serve.log", interval=0.05)
        with PgDocumentStore(pg_dsn) as store:  # written behind the replicas' backs
            text = "The quokka is a small marsupial found on Rottnest Island."
            doc = Document(doc_id="quokka", text=text, source="animals/quokka.md", title="Quokka")
            store.upsert(doc, [Chunk(chunk_id="quokka#0", doc_id="quokka", text=text, start=0, end=len(text),
                                     source=doc.source, title="Quokka")])

        def ask(_: int) -> list[str]:
            r = httpx.post(base + "/v1/search", json={"query": "quokka marsupial Rottnest", "top_k": 1}, timeout=120)
            assert r.status_code == 200, r.text
            return [x["doc_id"] for x in r.json()["results"]]

        with ThreadPoolExecutor(4) as ex:
            assert all(ids == ["quokka"] for ids in ex.map(ask, range(12)))
    finally:
        stop(proc, signal.SIGINT, grace=60)
        log.close()
