"""Read replica (`storage.read_dsn`): a streaming hot standby of the session server started by
`indexing.pg_local` (pg_basebackup -R, second port, 127.0.0.1), writes on the primary becoming
visible through the read DSN, and retrieval reads going to the replica while syncs write the primary."""

from __future__ import annotations

import pytest

from indexing.pg_store import PgDocumentStore
from rag.app import build_retriever, open_store
from rag.config import load_config


@pytest.fixture(scope="module")
def replica(postgres_server):
    rep = postgres_server.start_replica()
    yield rep
    rep.cleanup()


def _read_dsn(pg_dsn: str, primary, replica) -> str:
    return pg_dsn.replace(f":{primary.port}/", f":{replica.port}/")


def test_row_written_to_primary_is_read_through_the_replica(pg_dsn, postgres_server, replica, doc_factory,
                                                           tmp_path):
    """Catches: a replica that is not streaming (a one-off copy, or not a standby at all), a
    `storage.read_dsn` that is ignored (reads still on the primary), and a retriever that reads
    candidates or chunks from the primary or tries to write schema on the read-only replica."""
    rdsn = _read_dsn(pg_dsn, postgres_server, replica)
    replica.replay_lag(timeout=30)  # the test's CREATE DATABASE has reached the standby
    cfg = load_config(None, ["storage.backend=postgres", f"storage.dsn={pg_dsn}", f"storage.read_dsn={rdsn}",
                             f"storage.path={tmp_path}", "retrieval.mode=bm25"])
    store: PgDocumentStore = open_store(cfg)  # type: ignore[assignment]
    try:
        assert store.reader is not store and store.reader.dsn == rdsn
        assert store.reader._one("SELECT pg_is_in_recovery()") is True
        assert store._one("SELECT pg_is_in_recovery()") is False
        for i, text in enumerate(["bread rises with yeast", "the striker scored twice", "rates rose again"]):
            store.upsert(*doc_factory(f"filler{i}", text))  # enough documents for BM25 idf > 0
        store.upsert(*doc_factory("late", "the lighthouse keeper logs every passing tanker"))
        replica.replay_lag(timeout=30)  # the primary's WAL up to now is replayed on the standby
        assert store.reader.get_document("late")["text"].startswith("the lighthouse keeper")
        r = build_retriever(cfg, store)
        assert r.sync()["default"]["added"] == 4
        replica.replay_lag(timeout=30)
        assert r.search("lighthouse tanker", k=1).candidates[0].chunk.doc_id == "late"
        # with replay paused, a document indexed on the primary is not found: the search reads the replica
        store.reader._one("SELECT pg_wal_replay_pause()")
        try:
            store.upsert(*doc_factory("later", "a second lighthouse with a foghorn for tankers"))
            assert r.sync()["default"]["added"] == 1  # syncs write the primary (the replica is read-only)
            assert {c.chunk.doc_id for c in r.search("foghorn lighthouse", k=5).candidates} == {"late"}
        finally:
            store.reader._one("SELECT pg_wal_replay_resume()")
        replica.replay_lag(timeout=30)
        assert r.search("foghorn lighthouse", k=1).candidates[0].chunk.doc_id == "later"
    finally:
        store.close()
