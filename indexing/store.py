"""SQLite document store: the source of truth that every index is derived from.

One file in WAL mode. Each document and its chunks are written in a single transaction, so a
process killed at any point leaves the store exactly as it was before that document. Indexes
(FAISS, BM25) are caches of this table and resynchronise from it by chunk id. The queries are
`indexing/sql_store.py`'s, shared with the Postgres store; this file holds the SQLite connection.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from .graph_rows import graph_schema
from .sql_store import CHUNK_COLS, Outcome, SqlDocumentStore, store_schema
from .sqlite_connect import connect_wal

__all__ = ["DocumentStore", "Outcome"]

_SCHEMA = store_schema("TEXT", "REAL", "INTEGER",
                       "CREATE UNIQUE INDEX IF NOT EXISTS chunks_int ON chunks(collection, int_id);")


class DocumentStore(SqlDocumentStore):
    """Documents and chunks of all collections in one SQLite file."""

    _m = "?"

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = connect_wal(self.path)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.executescript(graph_schema("BLOB", "TEXT"))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> DocumentStore:
        return self

    # ---- the connection (indexing/sql_store.py runs the queries) -------------------------
    def _one(self, q: str, args: tuple | list = ()) -> Any:
        row = self._db.execute(q, args).fetchone()
        return row[0] if row else None

    def _all(self, q: str, args: tuple | list = ()) -> list[tuple]:
        return self._db.execute(q, args).fetchall()

    def _stream(self, q: str, args: tuple | list = ()) -> Iterator[tuple]:
        yield from self._db.execute(q, args)

    @contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Cursor]:
        cur = self._db.cursor()
        cur.execute(begin)
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    def _write(self) -> AbstractContextManager[sqlite3.Cursor]:
        """BEGIN IMMEDIATE: the write lock up front, so two writers queue instead of deadlocking."""
        return self._transaction("BEGIN IMMEDIATE")

    def _snapshot(self) -> AbstractContextManager[sqlite3.Cursor]:
        return self._transaction("BEGIN")  # a read transaction: one snapshot of the WAL file

    def _rows_by(self, col: str, keys: list, collection: str) -> Iterable[tuple]:
        for i in range(0, len(keys), 500):  # SQLite caps the bound parameters of one statement
            part = keys[i : i + 500]
            yield from self._db.execute(
                f"SELECT {col}, {CHUNK_COLS} FROM chunks WHERE collection=? AND {col} IN ({','.join('?' * len(part))})",
                [collection, *part])

    def _no_limit(self, limit: int | None) -> int:
        return -1 if limit is None else limit  # SQLite: a negative LIMIT is none; NULL is an error
