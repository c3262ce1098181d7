"""SQLite document store: the source of truth that every index is derived from.

One file in WAL mode. Each document and its chunks are written in a single transaction, so a
process killed at any point leaves the store exactly as it was before that document. Indexes
(FAISS, BM25) are caches of this table and resynchronise from it by chunk id.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from .graph_rows import SELECTS, GraphDelta, GraphState, graph_schema, load_rows, write_delta
from .types import Chunk, Document, content_hash

Outcome = Literal["new", "changed", "unchanged"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    date TEXT,
    content_hash TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    text TEXT NOT NULL,
    n_chunks INTEGER NOT NULL,
    ingested_at REAL NOT NULL,
    PRIMARY KEY (collection, doc_id)
);
CREATE INDEX IF NOT EXISTS documents_source ON documents(source);
CREATE TABLE IF NOT EXISTS chunks (
    collection TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    int_id INTEGER NOT NULL,
    doc_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    granularity TEXT NOT NULL,
    parent_id TEXT,
    start INTEGER NOT NULL,
    end INTEGER NOT NULL,
    text TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT NOT NULL,
    date TEXT,
    section TEXT NOT NULL,
    page INTEGER,
    language TEXT NOT NULL,
    metadata TEXT NOT NULL DEFAULT '{}',
    PRIMARY KEY (collection, chunk_id)
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(collection, doc_id);
CREATE UNIQUE INDEX IF NOT EXISTS chunks_int ON chunks(collection, int_id);
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    version INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dropped (
    collection TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    duplicate_of TEXT,
    dropped_at REAL NOT NULL,
    PRIMARY KEY (collection, doc_id, source)
);
"""

_CHUNK_COLS = (
    "chunk_id, doc_id, text, start, end, granularity, parent_id, source, title, date, section, page, "
    "language, metadata"
)


DROPPED_KEYS = ("collection", "doc_id", "source", "reason", "duplicate_of", "dropped_at")


def dropped_query(collection: str | None, mark: str) -> tuple[str, list[Any]]:
    """`list_dropped`'s SQL for both stores (`mark`: the driver's placeholder, ? or %s); the caller
    appends the LIMIT value to the returned arguments."""
    q = (f"SELECT {', '.join('x.' + k for k in DROPPED_KEYS)} FROM dropped x WHERE NOT EXISTS "
         "(SELECT 1 FROM documents d WHERE d.collection = x.collection AND d.doc_id = x.doc_id)")
    args: list[Any] = []
    if collection is not None:
        q, args = q + f" AND x.collection={mark}", [collection]
    return q + f" ORDER BY x.dropped_at DESC, x.doc_id LIMIT {mark}", args


class DocumentStore:
    """Documents and chunks of all collections in one SQLite file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        self._db.executescript(_SCHEMA)
        self._db.executescript(graph_schema("BLOB", "TEXT"))

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> DocumentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- writes -------------------------------------------------------------------------
    def document_hash(self, doc_id: str, collection: str = "default") -> str | None:
        row = self._db.execute(
            "SELECT content_hash FROM documents WHERE collection=? AND doc_id=?", (collection, doc_id)
        ).fetchone()
        return row[0] if row else None

    @staticmethod
    def stored_hash(doc: Document, fingerprint: str = "") -> str:
        """Hash kept for a document: its content plus the fingerprint of the chunking that cut it,
        so changing chunk settings re-ingests while an unchanged re-ingest stays a no-op."""
        return content_hash(doc.content_hash + "\x00" + fingerprint) if fingerprint else doc.content_hash

    def is_current(self, doc: Document, collection: str = "default", fingerprint: str = "") -> bool:
        return self.document_hash(doc.doc_id, collection) == self.stored_hash(doc, fingerprint)

    def upsert(
        self, doc: Document, chunks: list[Chunk], collection: str = "default", fingerprint: str = ""
    ) -> Outcome:
        """Insert or replace a document with its chunks atomically; no-op if the content is unchanged."""
        old = self.document_hash(doc.doc_id, collection)
        new_hash = self.stored_hash(doc, fingerprint)
        if old == new_hash:
            return "unchanged"
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            cur.execute("DELETE FROM chunks WHERE collection=? AND doc_id=?", (collection, doc.doc_id))
            cur.execute(
                "INSERT OR REPLACE INTO documents VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    collection, doc.doc_id, doc.source, doc.title, doc.date, new_hash,
                    json.dumps(doc.metadata, ensure_ascii=False, default=str), doc.text, len(chunks),
                    time.time(),
                ),
            )
            cur.executemany(
                "INSERT INTO chunks VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    (
                        collection, c.chunk_id, c.int_id, c.doc_id, i, c.granularity, c.parent_id,
                        c.start, c.end, c.text, c.content_hash, c.source, c.title, c.date, c.section,
                        c.page, c.language, json.dumps(c.metadata, ensure_ascii=False, default=str),
                    )
                    for i, c in enumerate(chunks)
                ],
            )
            self._bump(cur, collection)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return "new" if old is None else "changed"

    def delete(self, doc_id: str, collection: str | None = None) -> int:
        """Delete a document (in one collection, or in all); returns how many were removed."""
        return self._delete_where("doc_id=?", (doc_id,), collection)

    def delete_source(self, source: str, collection: str | None = None) -> int:
        return self._delete_where("source=?", (source,), collection)

    def _delete_where(self, cond: str, args: tuple, collection: str | None) -> int:
        if collection is not None:
            cond, args = cond + " AND collection=?", args + (collection,)
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            rows = cur.execute(f"SELECT collection, doc_id FROM documents WHERE {cond}", args).fetchall()
            for coll, did in rows:
                cur.execute("DELETE FROM chunks WHERE collection=? AND doc_id=?", (coll, did))
                cur.execute("DELETE FROM documents WHERE collection=? AND doc_id=?", (coll, did))
                self._bump(cur, coll)
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        return len(rows)

    @staticmethod
    def _bump(cur: sqlite3.Cursor, collection: str) -> None:
        cur.execute(
            "INSERT INTO collections(name, version) VALUES (?, 1) "
            "ON CONFLICT(name) DO UPDATE SET version = version + 1",
            (collection,),
        )

    # ---- entity graph (indexing/graph_rows.py) ------------------------------------------
    def graph_load(self, collection: str = "default") -> GraphState:
        """The collection's graph rows, read in one transaction (a consistent snapshot)."""
        cur = self._db.cursor()
        cur.execute("BEGIN")
        try:
            rows = {t: cur.execute(q.format(m="?"), (collection,)).fetchall() for t, q in SELECTS.items()}
        finally:
            cur.execute("COMMIT")
        return load_rows(rows)

    def graph_write(self, collection: str, delta: GraphDelta) -> None:
        """Apply one graph sync's changes atomically: a kill mid-write leaves the previous graph."""
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            write_delta(cur, collection, delta, "?", json.dumps(delta.meta, ensure_ascii=False))
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    # ---- reads --------------------------------------------------------------------------
    def version(self, collection: str = "default") -> int:
        """Monotonic counter bumped by every change to a collection (indexes compare it to resync)."""
        row = self._db.execute("SELECT version FROM collections WHERE name=?", (collection,)).fetchone()
        return row[0] if row else 0

    def collections(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT DISTINCT collection FROM documents ORDER BY 1")]

    def count_documents(self, collection: str | None = None) -> int:
        if collection is None:
            return self._db.execute("SELECT COUNT(*) FROM documents").fetchone()[0]
        return self._db.execute(
            "SELECT COUNT(*) FROM documents WHERE collection=?", (collection,)
        ).fetchone()[0]

    def count_chunks(self, collection: str | None = None) -> int:
        if collection is None:
            return self._db.execute("SELECT COUNT(*) FROM chunks").fetchone()[0]
        return self._db.execute("SELECT COUNT(*) FROM chunks WHERE collection=?", (collection,)).fetchone()[0]

    def record_dropped(self, collection: str, rows: Iterable[tuple[str, str, str, str | None]]) -> int:
        """Remember documents the cleaner dropped (doc_id, source, reason, duplicate_of): an ingest
        that silently loses records is the hardest bug to see, so `rag docs dropped` lists them."""
        now = time.time()
        data = [(collection, d, s, r, dup, now) for d, s, r, dup in rows]
        if data:
            self._db.executemany("INSERT OR REPLACE INTO dropped VALUES (?, ?, ?, ?, ?, ?)", data)
        return len(data)

    def list_dropped(self, collection: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Dropped documents, newest first, leaving out ids that were stored since."""
        q, args = dropped_query(collection, "?")
        rows = self._db.execute(q, [*args, -1 if limit is None else limit])
        return [dict(zip(DROPPED_KEYS, r, strict=True)) for r in rows]

    def language_counts(self, collection: str = "default") -> dict[str, int]:
        """Chunks per detected language: the retriever picks the embedder from this mix."""
        rows = self._db.execute("SELECT language, COUNT(*) FROM chunks WHERE collection=? GROUP BY language",
                                (collection,))
        return {lang: n for lang, n in rows}

    def list_documents(
        self, collection: str | None = None, limit: int | None = None, offset: int = 0
    ) -> list[dict[str, Any]]:
        q = (
            "SELECT collection, doc_id, source, title, date, content_hash, metadata, n_chunks, ingested_at, "
            "length(text) FROM documents"
        )
        args: tuple = ()
        if collection is not None:
            q, args = q + " WHERE collection=?", (collection,)
        q += " ORDER BY collection, doc_id LIMIT ? OFFSET ?"
        args += (-1 if limit is None else limit, offset)
        keys = ("collection", "doc_id", "source", "title", "date", "content_hash", "metadata", "n_chunks",
                "ingested_at", "n_chars")
        out = []
        for row in self._db.execute(q, args):
            d = dict(zip(keys, row, strict=True))
            d["metadata"] = json.loads(d["metadata"])
            out.append(d)
        return out

    def document_sources(self, collection: str = "default") -> dict[str, str]:
        """doc_id -> source for a collection (lets an ingest prune what its inputs no longer hold)."""
        return dict(self._db.execute("SELECT doc_id, source FROM documents WHERE collection=?", (collection,)))

    def iter_texts(self, collection: str = "default") -> Iterator[tuple[str, str, str]]:
        """(doc_id, source, cleaned text) of every document (dedup of a new ingest against the store)."""
        yield from self._db.execute("SELECT doc_id, source, text FROM documents WHERE collection=?", (collection,))

    def get_document(self, doc_id: str, collection: str | None = None) -> dict[str, Any] | None:
        q = "SELECT collection, doc_id, source, title, date, content_hash, metadata, n_chunks, text FROM documents"
        q += " WHERE doc_id=?" + (" AND collection=?" if collection else "")
        row = self._db.execute(q, (doc_id, collection) if collection else (doc_id,)).fetchone()
        if row is None:
            return None
        keys = ("collection", "doc_id", "source", "title", "date", "content_hash", "metadata", "n_chunks", "text")
        d = dict(zip(keys, row, strict=True))
        d["metadata"] = json.loads(d["metadata"])
        return d

    def iter_chunks(
        self, collection: str = "default", granularity: str | None = None, doc_id: str | None = None
    ) -> Iterator[Chunk]:
        q, args = f"SELECT {_CHUNK_COLS} FROM chunks WHERE collection=?", [collection]
        if granularity is not None:
            q, args = q + " AND granularity=?", args + [granularity]
        if doc_id is not None:
            q, args = q + " AND doc_id=?", args + [doc_id]
        for row in self._db.execute(q + " ORDER BY doc_id, seq", args):
            yield _row_to_chunk(row)

    def int_ids(self, collection: str = "default", granularity: str | None = None) -> list[int]:
        q, args = "SELECT int_id FROM chunks WHERE collection=?", [collection]
        if granularity is not None:
            q, args = q + " AND granularity=?", args + [granularity]
        return [r[0] for r in self._db.execute(q, args)]

    def granularities(self, collection: str = "default") -> list[str]:
        return [r[0] for r in self._db.execute(
            "SELECT DISTINCT granularity FROM chunks WHERE collection=? ORDER BY 1", (collection,))]

    def get_chunks(self, chunk_ids: Iterable[str], collection: str = "default") -> list[Chunk]:
        """Chunks by string id, in the order asked (missing ids are skipped)."""
        return self._get_by("chunk_id", list(chunk_ids), collection)

    def get_chunks_by_int(self, int_ids: Iterable[int], collection: str = "default") -> list[Chunk]:
        return self._get_by("int_id", [int(i) for i in int_ids], collection)

    def _get_by(self, col: str, keys: list, collection: str) -> list[Chunk]:
        found: dict = {}
        for i in range(0, len(keys), 500):
            part = keys[i : i + 500]
            marks = ",".join("?" * len(part))
            for row in self._db.execute(
                f"SELECT {col}, {_CHUNK_COLS} FROM chunks WHERE collection=? AND {col} IN ({marks})",
                [collection, *part],
            ):
                found[row[0]] = _row_to_chunk(row[1:])
        return [found[k] for k in keys if k in found]


def _row_to_chunk(row: tuple) -> Chunk:
    (chunk_id, doc_id, text, start, end, gran, parent, source, title, date, section, page, lang, meta) = row
    return Chunk(
        chunk_id=chunk_id, doc_id=doc_id, text=text, start=start, end=end, granularity=gran,
        parent_id=parent, source=source, title=title, date=date, section=section, page=page,
        language=lang, metadata=json.loads(meta),
    )
