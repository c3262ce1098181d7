"""The Postgres index's schema: what `PgIndex` adds beside the store's tables (the postings, the
index meta, the pgvector column and its HNSW index) and the pgvector text form. Apart from the
sync and the search so the DDL, and what an embedder of another dimension does to it, read in one
place (retrieval/pg_index.py says why postings and pgvector)."""

from __future__ import annotations

from typing import Any

import numpy as np

from indexing.pg_store import PgDocumentStore

from .collection_index import IndexMismatchError
from .config import DenseConfig
from .embeddings.base import Embedder
from .pg_filters import SQL_FUNCTIONS

SCHEMA = """
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS index_hash TEXT;
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS doc_len INTEGER;
CREATE TABLE IF NOT EXISTS rag_postings (
    collection TEXT NOT NULL,
    term TEXT NOT NULL,
    int_id BIGINT NOT NULL,
    tf REAL NOT NULL,
    dl REAL NOT NULL,
    PRIMARY KEY (collection, term, int_id) INCLUDE (tf, dl),
    FOREIGN KEY (collection, int_id) REFERENCES chunks(collection, int_id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS rag_postings_chunk ON rag_postings(collection, int_id);
CREATE TABLE IF NOT EXISTS rag_index_meta (
    collection TEXT PRIMARY KEY,
    config JSONB NOT NULL,
    store_version BIGINT NOT NULL DEFAULT -1,
    n_docs BIGINT NOT NULL DEFAULT 0,
    sum_len DOUBLE PRECISION NOT NULL DEFAULT 0,
    mean_idf DOUBLE PRECISION NOT NULL DEFAULT 0
);
"""


def vector_literal(v: np.ndarray) -> str:
    """pgvector text form; 9 significant digits round-trip a float32 exactly."""
    return "[" + ",".join(f"{x:.9g}" for x in np.asarray(v, dtype=np.float32).ravel().tolist()) + "]"


def vector_dim(store: PgDocumentStore) -> int | None:
    """Dimension of the `chunks.embedding` column, None when there is none yet."""
    with store.conn() as db:
        row = db.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                         "'chunks'::regclass AND attname = 'embedding' AND NOT attisdropped").fetchone()
    if row is None:
        return None
    inner = row[0].partition("(")[2].rstrip(")")
    return int(inner) if inner.isdigit() else None


def create_schema(store: PgDocumentStore, emb: Embedder | None, rebuild_dim: bool = False) -> None:
    """Tables and SQL functions, then (with a dense retriever: `emb` given) the embedding column of
    `emb`'s dimension. A column of another dimension is refused, or with `rebuild_dim` dropped and
    every chunk marked for re-indexing."""
    with store.conn() as db, db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(7151)")  # concurrent replicas create the schema once
        db.execute(SCHEMA)
        db.execute(SQL_FUNCTIONS)
    if emb is None:
        return
    have = vector_dim(store)
    if have is not None and have != emb.dim:
        if not rebuild_dim:
            raise IndexMismatchError(
                f"pgvector column chunks.embedding at {store.masked_dsn} holds {have}-dimensional "
                f"vectors but the embedder {emb.name!r} produces {emb.dim}-dimensional ones; use the "
                f"embedder the store was built with, or run `rag reindex` to re-embed every collection")
        with store.conn() as db:
            db.execute("ALTER TABLE chunks DROP COLUMN embedding")
            db.execute("UPDATE chunks SET index_hash = NULL")
        have = None
    if have is None:
        with store.conn() as db:
            db.execute(f"ALTER TABLE chunks ADD COLUMN IF NOT EXISTS embedding vector({int(emb.dim)})")


def create_hnsw(store: PgDocumentStore, dense: DenseConfig) -> None:
    """The HNSW index on `chunks.embedding` (inner product), once; built after the first vectors."""
    with store.conn() as db:
        exists = db.execute("SELECT 1 FROM pg_indexes WHERE indexname = 'chunks_embedding_hnsw'").fetchone()
        if not exists:
            # at least 512MB (a graph that does not fit is built on disk, many times slower);
            # never lower what the server or session already grants (1M x 384 needs ~2GB)
            db.execute("SELECT set_config('maintenance_work_mem', CASE WHEN pg_size_bytes(current_setting("
                       "'maintenance_work_mem')) < 512 * 1024 * 1024 THEN '512MB' ELSE current_setting("
                       "'maintenance_work_mem') END, false)")
            db.execute(f"CREATE INDEX IF NOT EXISTS chunks_embedding_hnsw ON chunks USING hnsw "
                       f"(embedding vector_ip_ops) WITH (m = {int(dense.hnsw_m)}, "
                       f"ef_construction = {int(dense.hnsw_ef_construction)})")


def read_index_meta(store: PgDocumentStore, collection: str) -> dict[str, Any] | None:
    """What the collection's index was built with (None: never synced)."""
    with store.conn() as db:
        if db.execute("SELECT to_regclass('rag_index_meta')").fetchone()[0] is None:
            return None
        row = db.execute("SELECT config, store_version, n_docs, sum_len, mean_idf FROM rag_index_meta "
                         "WHERE collection = %s", (collection,)).fetchone()
    if row is None:
        return None
    return {"config": row[0], "store_version": row[1], "n_docs": row[2], "sum_len": row[3], "mean_idf": row[4]}
