"""The server on the Postgres backend over real HTTP: a database that is down at startup makes
`/ready` false with the DSN (password masked) as the reason; a database that dies mid-service turns
requests into 503 (not a hang, not a 500) and they succeed again once it is back."""

from __future__ import annotations

import time

import httpx

from indexing.pg_local import free_port
from tests.rag.conftest import serve_in_thread


def test_database_down_at_startup_names_masked_dsn(tmp_path):
    from rag.config import load_config
    from rag.server.app import create_app

    port = free_port()  # nothing listens there
    dsn = f"postgresql://rag:s3cret-pw@127.0.0.1:{port}/ragdb"
    cfg = load_config(None, [f"storage.path={tmp_path}", "storage.backend=postgres", f"storage.dsn={dsn}"])
    base, srv, th = serve_in_thread(create_app(cfg, load_in_background=False), wait_ready=False)
    try:
        r = httpx.get(base + "/ready", timeout=10)
        assert r.status_code == 503
        err = r.json()["error"]
        assert f"postgresql://rag:***@127.0.0.1:{port}/ragdb" in err and "s3cret" not in err
    finally:
        srv.should_exit = True
        th.join(timeout=20)


def test_connection_dropped_mid_service_is_503_then_recovers(own_postgres, pipeline, corpus_dir):
    import psycopg

    from indexing.pg_store import PgDocumentStore
    from rag.app import build_ingestor
    from rag.pipeline import Pipeline
    from rag.server.app import create_app
    from retrieval.pg_retriever import PgRetriever

    cfg = pipeline.cfg.model_copy(deep=True)
    cfg.storage.backend, cfg.storage.dsn = "postgres", own_postgres.dsn
    store = PgDocumentStore(own_postgres.dsn, statement_timeout_ms=5000)
    build_ingestor(cfg, store).ingest([str(corpus_dir)], progress=False)
    retriever = PgRetriever.from_config(cfg.retrieval, store, cfg.storage_path / "indexes",
                                        embedder=pipeline.retriever.embedder())
    pipe = Pipeline(cfg, store=store, generator=pipeline.generator, retriever=retriever)
    base, srv, th = serve_in_thread(create_app(cfg, pipeline=pipe, load_in_background=False), wait_ready=False)
    body = {"query": "drone flight time", "top_k": 3}
    try:
        r = httpx.post(base + "/v1/search", json=body, timeout=60)
        assert r.status_code == 200, r.text
        assert "/products/xr" in r.json()["results"][0]["metadata"]["source"]
        assert httpx.get(base + "/ready", timeout=10).json()["documents"] == 6
        with psycopg.connect(own_postgres.dsn) as db:  # durable jobs live in the same database
            assert db.execute("SELECT to_regclass('jobs') IS NOT NULL").fetchone()[0] is True
        own_postgres.kill()
        t0 = time.monotonic()
        r = httpx.post(base + "/v1/search", json=body, timeout=60)
        assert r.status_code == 503, r.text
        assert time.monotonic() - t0 < 30 and "PostgreSQL at postgresql://postgres@127.0.0.1" in r.text
        ready = httpx.get(base + "/ready", timeout=30)
        assert ready.status_code == 503 and ready.json()["ready"] is False and "PostgreSQL" in ready.json()["error"]
        own_postgres.start()  # same data dir and port: the store reconnects on the next request
        r = httpx.post(base + "/v1/search", json=body, timeout=60)
        assert r.status_code == 200 and len(r.json()["results"]) == 3
    finally:
        srv.should_exit = True
        th.join(timeout=20)
        store.close()
