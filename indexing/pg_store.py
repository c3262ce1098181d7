"""PostgreSQL document store: the same interface and guarantees as the SQLite `DocumentStore`.

Each document and its chunks are written in one transaction (documents row first, so concurrent
writers of one document queue on its row lock), so a client killed at any point leaves the store
exactly as it was before that document. The retrieval stage adds its own columns to `chunks`
(embedding, index hash) and a postings table whose rows cascade with their chunk, so replacing or
deleting a document also removes it from the indexes in the same transaction.

Connections come from `pg_connect` (timeouts, keepalives, masked-DSN errors as `StoreUnavailable`,
a bounded wait for a server still starting); the server maps `StoreUnavailable` to 503, and every
query has a statement timeout, so a dead server fails a request instead of hanging it. The queries
are `indexing/sql_store.py`'s, shared with the SQLite store; this file holds the connection.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .graph_rows import graph_schema
from .pg_connect import StoreUnavailable, connect, first_line, mask_dsn
from .sql_store import CHUNK_COLS, SqlDocumentStore, store_schema

SCHEMA = store_schema("JSONB", "DOUBLE PRECISION", "BIGINT", "UNIQUE (collection, int_id)")


class PgDocumentStore(SqlDocumentStore):
    """Documents and chunks of all collections in PostgreSQL (see module docstring)."""

    backend = "postgres"
    _m = "%s"
    _lock_rows = " FOR UPDATE"  # concurrent deletes and upserts of a document queue on its row

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

    def ping(self) -> None:
        """Raises StoreUnavailable when the server does not answer (for /ready)."""
        with self.conn() as db:
            db.execute("SELECT 1")
        if self.reader is not self:
            self.reader.ping()

    # ---- the connection (indexing/sql_store.py runs the queries) -------------------------
    def _one(self, q: str, args: tuple | list = ()) -> Any:
        with self.conn() as db:
            row = db.execute(q, args).fetchone()
        return row[0] if row else None

    def _all(self, q: str, args: tuple | list = ()) -> list[tuple]:
        with self.conn() as db:
            return db.execute(q, args).fetchall()

    def _stream(self, q: str, args: tuple | list = ()) -> Iterator[tuple]:
        return self.stream(q, args)

    @contextmanager
    def _write(self) -> Iterator[Any]:
        with self.conn() as db, db.transaction(), db.cursor() as cur:
            yield cur

    @contextmanager
    def _snapshot(self) -> Iterator[Any]:
        with self._write() as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            yield cur

    def _rows_by(self, col: str, keys: list, collection: str) -> Iterable[tuple]:
        return self._all(f"SELECT {col}, {CHUNK_COLS} FROM chunks WHERE collection=%s AND {col} = ANY(%s)",
                         (collection, keys))

    def _no_limit(self, limit: int | None) -> int | None:
        return limit  # LIMIT NULL is none

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
