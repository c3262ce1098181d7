"""PostgreSQL document store: the same interface and guarantees as the SQLite `DocumentStore`.

Each document and its chunks are written in one transaction (documents row first, so concurrent
writers of one document queue on its row lock), so a client killed at any point leaves the store
exactly as it was before that document. The retrieval stage adds its own columns to `chunks`
(embedding, index hash) and a postings table whose rows cascade with their chunk, so replacing or
deleting a document also removes it from the indexes in the same transaction.

Connections come from `pg_connect` (timeouts, keepalives, masked-DSN errors as `StoreUnavailable`,
a bounded wait for a server still starting); the server maps `StoreUnavailable` to 503, and every
query has a statement timeout, so a dead server fails a request instead of hanging it.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .graph_rows import SELECTS, GraphDelta, GraphState, graph_schema, load_rows, write_delta
from .pg_connect import StoreUnavailable, connect, first_line, mask_dsn
from .store import DROPPED_KEYS, DocumentStore, Outcome, dropped_query
from .types import Chunk, Document

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    date TEXT,
    content_hash TEXT NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{}',
    text TEXT NOT NULL,
    n_chunks INTEGER NOT NULL,
    ingested_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (collection, doc_id)
);
CREATE INDEX IF NOT EXISTS documents_source ON documents(source);
CREATE TABLE IF NOT EXISTS chunks (
    collection TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    int_id BIGINT NOT NULL,
    doc_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    granularity TEXT NOT NULL,
    parent_id TEXT,
    start INTEGER NOT NULL,
    "end" INTEGER NOT NULL,
    text TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    date TEXT,
    section TEXT NOT NULL,
    page INTEGER,
    language TEXT NOT NULL,
    metadata JSONB NOT NULL DEFAULT '{}',
    PRIMARY KEY (collection, chunk_id),
    UNIQUE (collection, int_id)
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(collection, doc_id);
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    version BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dropped (
    collection TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    duplicate_of TEXT,
    dropped_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (collection, doc_id, source)
);
"""

_CHUNK_COLS = ('chunk_id, doc_id, text, start, "end", granularity, parent_id, source, title, date, section, page, '
               "language, metadata")
_INSERT_CHUNK = ('INSERT INTO chunks (collection, chunk_id, int_id, doc_id, seq, granularity, parent_id, start, '
                 '"end", text, content_hash, source, title, date, section, page, language, metadata) '
                 "VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)")
_DOC_KEYS = ("collection", "doc_id", "source", "title", "date", "content_hash", "metadata", "n_chunks",
             "ingested_at", "n_chars")


class PgDocumentStore:
    """Documents and chunks of all collections in PostgreSQL (see module docstring)."""

    backend = "postgres"

    def __init__(self, dsn: str, statement_timeout_ms: int = 30000, read_dsn: str | None = None,
                 read_only: bool = False, connect_wait_s: float = 0.0):
        self.dsn = dsn
        self.statement_timeout_ms = statement_timeout_ms
        # the first connection waits out a server still starting; reconnects only briefly (a
        # request must fail fast with 503 while the database is down)
        self.connect_wait_s = connect_wait_s
        self._lock = threading.RLock()  # one connection; psycopg serialises, the lock keeps transactions whole
        self._db = None
        # Retrieval reads (candidate lists, chunk fetches) go to `reader`: a read replica when
        # `read_dsn` is given, else this store. A replica is read-only, so it creates no schema.
        self.reader: PgDocumentStore = (PgDocumentStore(read_dsn, statement_timeout_ms, read_only=True,
                                                        connect_wait_s=connect_wait_s)
                                        if read_dsn and read_dsn != dsn else self)
        if not read_only:
            self._db = connect(dsn, statement_timeout_ms=statement_timeout_ms, wait_s=connect_wait_s)
            with self.conn() as db:
                db.execute("CREATE EXTENSION IF NOT EXISTS vector")
                db.execute(SCHEMA)
                db.execute(graph_schema("BYTEA", "JSONB"))

    @property
    def masked_dsn(self) -> str:
        return mask_dsn(self.dsn)

    @contextmanager
    def conn(self):
        """The shared connection, (re)opened on demand; connection errors become StoreUnavailable."""
        import psycopg

        with self._lock:
            if self._db is None or self._db.closed:
                self._db = connect(self.dsn, statement_timeout_ms=self.statement_timeout_ms,
                                   wait_s=min(self.connect_wait_s, 5.0))
            try:
                yield self._db
            except psycopg.OperationalError as e:
                if self._db.broken or self._db.closed:
                    self._db = None
                raise StoreUnavailable(f"PostgreSQL at {self.masked_dsn}: {first_line(e)}") from None

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
        if self.reader is not self:
            self.reader.close()

    def __enter__(self) -> PgDocumentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ping(self) -> None:
        """Raises StoreUnavailable when the server does not answer (for /ready)."""
        with self.conn() as db:
            db.execute("SELECT 1")
        if self.reader is not self:
            self.reader.ping()

    # ---- writes -------------------------------------------------------------------------
    def document_hash(self, doc_id: str, collection: str = "default") -> str | None:
        with self.conn() as db:
            row = db.execute("SELECT content_hash FROM documents WHERE collection=%s AND doc_id=%s",
                             (collection, doc_id)).fetchone()
        return row[0] if row else None

    stored_hash = staticmethod(DocumentStore.stored_hash)

    def is_current(self, doc: Document, collection: str = "default", fingerprint: str = "") -> bool:
        return self.document_hash(doc.doc_id, collection) == self.stored_hash(doc, fingerprint)

    def upsert(self, doc: Document, chunks: list[Chunk], collection: str = "default",
               fingerprint: str = "") -> Outcome:
        """Insert or replace a document with its chunks atomically; no-op if the content is unchanged."""
        old = self.document_hash(doc.doc_id, collection)
        new_hash = self.stored_hash(doc, fingerprint)
        if old == new_hash:
            return "unchanged"
        with self.conn() as db, db.transaction(), db.cursor() as cur:
            cur.execute(
                "INSERT INTO documents VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (collection, doc_id) "
                "DO UPDATE SET source=EXCLUDED.source, title=EXCLUDED.title, date=EXCLUDED.date, "
                "content_hash=EXCLUDED.content_hash, metadata=EXCLUDED.metadata, text=EXCLUDED.text, "
                "n_chunks=EXCLUDED.n_chunks, ingested_at=EXCLUDED.ingested_at",
                (collection, doc.doc_id, doc.source, doc.title, doc.date, new_hash, _json(doc.metadata), doc.text,
                 len(chunks), time.time()))
            cur.execute("DELETE FROM chunks WHERE collection=%s AND doc_id=%s", (collection, doc.doc_id))
            cur.executemany(_INSERT_CHUNK, [
                (collection, c.chunk_id, c.int_id, c.doc_id, i, c.granularity, c.parent_id, c.start, c.end, c.text,
                 c.content_hash, c.source, c.title, c.date, c.section, c.page, c.language, _json(c.metadata))
                for i, c in enumerate(chunks)])
            self._bump(cur, collection)
        return "new" if old is None else "changed"

    def delete(self, doc_id: str, collection: str | None = None) -> int:
        return self._delete_where("doc_id=%s", (doc_id,), collection)

    def delete_source(self, source: str, collection: str | None = None) -> int:
        return self._delete_where("source=%s", (source,), collection)

    def _delete_where(self, cond: str, args: tuple, collection: str | None) -> int:
        if collection is not None:
            cond, args = cond + " AND collection=%s", args + (collection,)
        with self.conn() as db, db.transaction(), db.cursor() as cur:
            rows = cur.execute(f"SELECT collection, doc_id FROM documents WHERE {cond} FOR UPDATE", args).fetchall()
            for coll, did in rows:
                cur.execute("DELETE FROM chunks WHERE collection=%s AND doc_id=%s", (coll, did))
                cur.execute("DELETE FROM documents WHERE collection=%s AND doc_id=%s", (coll, did))
            for coll in {c for c, _ in rows}:
                self._bump(cur, coll)
        return len(rows)

    @staticmethod
    def _bump(cur: Any, collection: str) -> None:
        cur.execute("INSERT INTO collections(name, version) VALUES (%s, 1) "
                    "ON CONFLICT(name) DO UPDATE SET version = collections.version + 1", (collection,))

    def record_dropped(self, collection: str, rows: Iterable[tuple[str, str, str, str | None]]) -> int:
        """Remember documents the cleaner dropped (doc_id, source, reason, duplicate_of) for
        `rag docs dropped`; same contract as DocumentStore.record_dropped (a repeat replaces)."""
        now = time.time()
        data = [(collection, d, s, r, dup, now) for d, s, r, dup in rows]
        if data:
            with self.conn() as db, db.transaction(), db.cursor() as cur:
                cur.executemany("INSERT INTO dropped VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (collection, doc_id, "
                                "source) DO UPDATE SET reason=EXCLUDED.reason, duplicate_of=EXCLUDED.duplicate_of, "
                                "dropped_at=EXCLUDED.dropped_at", data)
        return len(data)

    def list_dropped(self, collection: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Dropped documents, newest first, leaving out ids that were stored since."""
        q, args = dropped_query(collection, "%s")
        return [dict(zip(DROPPED_KEYS, r, strict=True)) for r in self._all(q, [*args, limit])]

    # ---- entity graph (indexing/graph_rows.py) ------------------------------------------
    def graph_load(self, collection: str = "default") -> GraphState:
        """The collection's graph rows from one snapshot (REPEATABLE READ transaction)."""
        with self.conn() as db, db.transaction(), db.cursor() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            rows = {t: cur.execute(q.format(m="%s"), (collection,)).fetchall() for t, q in SELECTS.items()}
        return load_rows(rows)

    def graph_write(self, collection: str, delta: GraphDelta) -> None:
        """Apply one graph sync's changes in one transaction (a killed client leaves the previous graph)."""
        with self.conn() as db, db.transaction(), db.cursor() as cur:
            write_delta(cur, collection, delta, "%s", _json(delta.meta))

    # ---- reads --------------------------------------------------------------------------
    def _one(self, q: str, args: tuple = ()) -> Any:
        with self.conn() as db:
            row = db.execute(q, args).fetchone()
        return row[0] if row else None

    def _all(self, q: str, args: tuple | list = ()) -> list[tuple]:
        with self.conn() as db:
            return db.execute(q, args).fetchall()

    def version(self, collection: str = "default") -> int:
        return self._one("SELECT version FROM collections WHERE name=%s", (collection,)) or 0

    def collections(self) -> list[str]:
        return [r[0] for r in self._all("SELECT DISTINCT collection FROM documents ORDER BY 1")]

    def count_documents(self, collection: str | None = None) -> int:
        if collection is None:
            return self._one("SELECT COUNT(*) FROM documents")
        return self._one("SELECT COUNT(*) FROM documents WHERE collection=%s", (collection,))

    def count_chunks(self, collection: str | None = None) -> int:
        if collection is None:
            return self._one("SELECT COUNT(*) FROM chunks")
        return self._one("SELECT COUNT(*) FROM chunks WHERE collection=%s", (collection,))

    def language_counts(self, collection: str = "default") -> dict[str, int]:
        """Chunks per detected language (same contract as DocumentStore.language_counts)."""
        return {lang: n for lang, n in self._all(
            "SELECT language, COUNT(*) FROM chunks WHERE collection=%s GROUP BY language", (collection,))}

    def list_documents(self, collection: str | None = None, limit: int | None = None,
                       offset: int = 0) -> list[dict[str, Any]]:
        q = ("SELECT collection, doc_id, source, title, date, content_hash, metadata, n_chunks, ingested_at, "
             "length(text) FROM documents")
        args: tuple = ()
        if collection is not None:
            q, args = q + " WHERE collection=%s", (collection,)
        q += " ORDER BY collection, doc_id LIMIT %s OFFSET %s"
        return [dict(zip(_DOC_KEYS, row, strict=True)) for row in self._all(q, args + (limit, offset))]

    def document_sources(self, collection: str = "default") -> dict[str, str]:
        return dict(self._all("SELECT doc_id, source FROM documents WHERE collection=%s", (collection,)))

    def iter_texts(self, collection: str = "default") -> Iterator[tuple[str, str, str]]:
        yield from self.stream("SELECT doc_id, source, text FROM documents WHERE collection=%s", (collection,))

    def get_document(self, doc_id: str, collection: str | None = None) -> dict[str, Any] | None:
        q = "SELECT collection, doc_id, source, title, date, content_hash, metadata, n_chunks, text FROM documents"
        q += " WHERE doc_id=%s" + (" AND collection=%s" if collection else "") + " ORDER BY collection LIMIT 1"
        rows = self._all(q, (doc_id, collection) if collection else (doc_id,))
        if not rows:
            return None
        keys = ("collection", "doc_id", "source", "title", "date", "content_hash", "metadata", "n_chunks", "text")
        return dict(zip(keys, rows[0], strict=True))

    def stream(self, q: str, args: tuple | list = (), batch: int = 2000) -> Iterator[tuple]:
        """Rows of a large read through a server-side cursor on a connection of its own, so the
        shared connection stays free for the writes a caller may interleave."""
        import psycopg

        db = connect(self.dsn, statement_timeout_ms=0)
        try:
            with db.transaction(), db.cursor(name="rag_stream") as cur:
                cur.itersize = batch
                cur.execute(q, args)
                yield from cur
        except psycopg.OperationalError as e:
            raise StoreUnavailable(f"PostgreSQL at {self.masked_dsn}: {first_line(e)}") from None
        finally:
            db.close()

    def iter_chunks(self, collection: str = "default", granularity: str | None = None,
                    doc_id: str | None = None) -> Iterator[Chunk]:
        q, args = f"SELECT {_CHUNK_COLS} FROM chunks WHERE collection=%s", [collection]
        if granularity is not None:
            q, args = q + " AND granularity=%s", args + [granularity]
        if doc_id is not None:
            q, args = q + " AND doc_id=%s", args + [doc_id]
        for row in self.stream(q + " ORDER BY doc_id, seq", args):
            yield row_to_chunk(row)

    def int_ids(self, collection: str = "default", granularity: str | None = None) -> list[int]:
        q, args = "SELECT int_id FROM chunks WHERE collection=%s", [collection]
        if granularity is not None:
            q, args = q + " AND granularity=%s", args + [granularity]
        return [r[0] for r in self._all(q, args)]

    def granularities(self, collection: str = "default") -> list[str]:
        return [r[0] for r in self._all(
            "SELECT DISTINCT granularity FROM chunks WHERE collection=%s ORDER BY 1", (collection,))]

    def get_chunks(self, chunk_ids: Iterable[str], collection: str = "default") -> list[Chunk]:
        return self._get_by("chunk_id", list(chunk_ids), collection)

    def get_chunks_by_int(self, int_ids: Iterable[int], collection: str = "default") -> list[Chunk]:
        return self._get_by("int_id", [int(i) for i in int_ids], collection)

    def _get_by(self, col: str, keys: list, collection: str) -> list[Chunk]:
        if not keys:
            return []
        rows = self._all(f"SELECT {col}, {_CHUNK_COLS} FROM chunks WHERE collection=%s AND {col} = ANY(%s)",
                         (collection, keys))
        found = {r[0]: row_to_chunk(r[1:]) for r in rows}
        return [found[k] for k in keys if k in found]


def _json(d: dict) -> str:
    return json.dumps(d, ensure_ascii=False, default=str)


def row_to_chunk(row: tuple) -> Chunk:
    (chunk_id, doc_id, text, start, end, gran, parent, source, title, date, section, page, lang, meta) = row
    return Chunk(chunk_id=chunk_id, doc_id=doc_id, text=text, start=start, end=end, granularity=gran,
                 parent_id=parent, source=source, title=title, date=date, section=section, page=page,
                 language=lang, metadata=meta if isinstance(meta, dict) else json.loads(meta))
