"""The document store's logic written once, over SQL both backends speak.

Why a base class: the SQLite store (`indexing/store.py`) and the Postgres store (`indexing/pg_store.py`)
keep the same tables and the same guarantees (one transaction per document, a version bump per write,
the graph in one transaction per sync), so the queries and the row handling were copies that differed
only in the placeholder. A backend gives the connection handling: the placeholder (`_m`), single-value
and all-row reads (`_one`, `_all`), a large read that may stream (`_stream`), a write transaction
(`_write`) and a consistent read (`_snapshot`), chunk rows by a list of ids (`_rows_by`) and the
LIMIT value that means none (`_no_limit`). The contract both satisfy is `store_protocol.DocumentStoreProtocol`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Literal

from .graph_rows import SELECTS, GraphDelta, GraphState, load_rows, write_delta
from .types import Chunk, Document, content_hash

Outcome = Literal["new", "changed", "unchanged"]

CHUNK_COLS = ('chunk_id, doc_id, text, start, "end", granularity, parent_id, source, title, date, section, page, '
              "language, metadata")
DROPPED_KEYS = ("collection", "doc_id", "source", "reason", "duplicate_of", "dropped_at")
_LISTED_KEYS = ("collection", "doc_id", "source", "title", "date", "content_hash", "metadata", "n_chunks",
                "ingested_at", "n_chars")
_DOC_KEYS = ("collection", "doc_id", "source", "title", "date", "content_hash", "metadata", "n_chunks", "text")


def store_schema(json_type: str, float_type: str, int64: str, int_id_key: str) -> str:
    """The tables both stores keep, in one place so a column added for one is there for the other
    (`json_type`: TEXT or JSONB, `float_type`: REAL or DOUBLE PRECISION, `int64`: INTEGER or BIGINT,
    `int_id_key`: the statement that keeps int_id unique per collection, a table constraint or an index)."""
    inline = int_id_key.startswith("UNIQUE")
    in_table, after_table = (",\n    " + int_id_key, "") if inline else ("", "\n" + int_id_key)
    return f"""
CREATE TABLE IF NOT EXISTS documents (
    collection TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    title TEXT NOT NULL DEFAULT '',
    date TEXT,
    content_hash TEXT NOT NULL,
    metadata {json_type} NOT NULL DEFAULT '{{}}',
    text TEXT NOT NULL,
    n_chunks INTEGER NOT NULL,
    ingested_at {float_type} NOT NULL,
    PRIMARY KEY (collection, doc_id)
);
CREATE INDEX IF NOT EXISTS documents_source ON documents(source);
CREATE TABLE IF NOT EXISTS chunks (
    collection TEXT NOT NULL,
    chunk_id TEXT NOT NULL,
    int_id {int64} NOT NULL,
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
    metadata {json_type} NOT NULL DEFAULT '{{}}',
    PRIMARY KEY (collection, chunk_id){in_table}
);
CREATE INDEX IF NOT EXISTS chunks_doc ON chunks(collection, doc_id);{after_table}
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    version {int64} NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS dropped (
    collection TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    source TEXT NOT NULL,
    reason TEXT NOT NULL,
    duplicate_of TEXT,
    dropped_at {float_type} NOT NULL,
    PRIMARY KEY (collection, doc_id, source)
);
"""

class SqlDocumentStore:
    """Documents and chunks of all collections in SQL tables; a subclass gives the connection."""

    _m: ClassVar[str]  # the driver's placeholder: ? (sqlite3) or %s (psycopg)
    _lock_rows: ClassVar[str] = ""  # what locks the rows a delete reads (Postgres: FOR UPDATE)

    # ---- what a backend gives --------------------------------------------------------------
    def _one(self, q: str, args: tuple | list = ()) -> Any:
        """The first column of the first row, None without a row."""
        raise NotImplementedError

    def _all(self, q: str, args: tuple | list = ()) -> list[tuple]:
        raise NotImplementedError

    def _stream(self, q: str, args: tuple | list = ()) -> Iterator[tuple]:
        """Rows of a read that may be large (every chunk of a collection), not all held at once."""
        raise NotImplementedError

    def _write(self) -> AbstractContextManager[Any]:
        """A cursor inside one write transaction: committed on exit, rolled back on an exception."""
        raise NotImplementedError

    def _snapshot(self) -> AbstractContextManager[Any]:
        """A cursor inside one read transaction that sees a single consistent state."""
        raise NotImplementedError

    def _rows_by(self, col: str, keys: list, collection: str) -> Iterable[tuple]:
        """(key, *CHUNK_COLS) rows of the chunks whose `col` is in `keys`, in any order."""
        raise NotImplementedError

    def _no_limit(self, limit: int | None) -> Any:
        """The LIMIT argument for `limit` (None: no limit)."""
        raise NotImplementedError

    def __enter__(self) -> SqlDocumentStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        raise NotImplementedError

    # ---- writes -------------------------------------------------------------------------
    def document_hash(self, doc_id: str, collection: str = "default") -> str | None:
        m = self._m
        return self._one(f"SELECT content_hash FROM documents WHERE collection={m} AND doc_id={m}",
                         (collection, doc_id))

    @staticmethod
    def stored_hash(doc: Document, fingerprint: str = "") -> str:
        """Hash kept for a document: its content plus the fingerprint of the chunking that cut it,
        so changing chunk settings re-ingests while an unchanged re-ingest stays a no-op."""
        return content_hash(doc.content_hash + "\x00" + fingerprint) if fingerprint else doc.content_hash

    def is_current(self, doc: Document, collection: str = "default", fingerprint: str = "") -> bool:
        return self.document_hash(doc.doc_id, collection) == self.stored_hash(doc, fingerprint)

    def upsert(self, doc: Document, chunks: list[Chunk], collection: str = "default",
               fingerprint: str = "") -> Outcome:
        """Insert or replace a document with its chunks atomically; no-op if the content is unchanged.
        The documents row is written first, so concurrent writers of one document queue on its lock."""
        old = self.document_hash(doc.doc_id, collection)
        new_hash = self.stored_hash(doc, fingerprint)
        if old == new_hash:
            return "unchanged"
        m = self._m
        with self._write() as cur:
            cur.execute(
                f"INSERT INTO documents VALUES ({','.join([m] * 10)}) ON CONFLICT (collection, doc_id) "
                "DO UPDATE SET source=EXCLUDED.source, title=EXCLUDED.title, date=EXCLUDED.date, "
                "content_hash=EXCLUDED.content_hash, metadata=EXCLUDED.metadata, text=EXCLUDED.text, "
                "n_chunks=EXCLUDED.n_chunks, ingested_at=EXCLUDED.ingested_at",
                (collection, doc.doc_id, doc.source, doc.title, doc.date, new_hash, _json(doc.metadata), doc.text,
                 len(chunks), time.time()))
            cur.execute(f"DELETE FROM chunks WHERE collection={m} AND doc_id={m}", (collection, doc.doc_id))
            cur.executemany(
                "INSERT INTO chunks (collection, chunk_id, int_id, doc_id, seq, granularity, parent_id, start, "
                '"end", text, content_hash, source, title, date, section, page, language, metadata) '
                f"VALUES ({','.join([m] * 18)})",
                [(collection, c.chunk_id, c.int_id, c.doc_id, i, c.granularity, c.parent_id, c.start, c.end, c.text,
                  c.content_hash, c.source, c.title, c.date, c.section, c.page, c.language, _json(c.metadata))
                 for i, c in enumerate(chunks)])
            self._bump(cur, collection)
        return "new" if old is None else "changed"

    def delete(self, doc_id: str, collection: str | None = None) -> int:
        """Delete a document (in one collection, or in all); returns how many were removed."""
        return self._delete_where(f"doc_id={self._m}", (doc_id,), collection)

    def delete_source(self, source: str, collection: str | None = None) -> int:
        return self._delete_where(f"source={self._m}", (source,), collection)

    def _delete_where(self, cond: str, args: tuple, collection: str | None) -> int:
        m = self._m
        if collection is not None:
            cond, args = cond + f" AND collection={m}", args + (collection,)
        with self._write() as cur:
            rows = cur.execute(f"SELECT collection, doc_id FROM documents WHERE {cond}{self._lock_rows}",
                               args).fetchall()
            for coll, did in rows:
                cur.execute(f"DELETE FROM chunks WHERE collection={m} AND doc_id={m}", (coll, did))
                cur.execute(f"DELETE FROM documents WHERE collection={m} AND doc_id={m}", (coll, did))
            for coll in {c for c, _ in rows}:
                self._bump(cur, coll)
        return len(rows)

    def _bump(self, cur: Any, collection: str) -> None:
        cur.execute(f"INSERT INTO collections(name, version) VALUES ({self._m}, 1) "
                    "ON CONFLICT(name) DO UPDATE SET version = collections.version + 1", (collection,))

    def record_dropped(self, collection: str, rows: Iterable[tuple[str, str, str, str | None]]) -> int:
        """Remember documents the cleaner dropped (doc_id, source, reason, duplicate_of): an ingest
        that silently loses records is the hardest bug to see, so `rag docs dropped` lists them.
        A repeat replaces the row."""
        now = time.time()
        data = [(collection, d, s, r, dup, now) for d, s, r, dup in rows]
        if data:
            with self._write() as cur:
                cur.executemany(f"INSERT INTO dropped VALUES ({','.join([self._m] * 6)}) ON CONFLICT (collection, "
                                "doc_id, source) DO UPDATE SET reason=EXCLUDED.reason, "
                                "duplicate_of=EXCLUDED.duplicate_of, dropped_at=EXCLUDED.dropped_at", data)
        return len(data)

    def list_dropped(self, collection: str | None = None, limit: int | None = None) -> list[dict[str, Any]]:
        """Dropped documents, newest first, leaving out ids that were stored since."""
        m = self._m
        q = (f"SELECT {', '.join('x.' + k for k in DROPPED_KEYS)} FROM dropped x WHERE NOT EXISTS "
             "(SELECT 1 FROM documents d WHERE d.collection = x.collection AND d.doc_id = x.doc_id)")
        args: list[Any] = []
        if collection is not None:
            q, args = q + f" AND x.collection={m}", [collection]
        rows = self._all(q + f" ORDER BY x.dropped_at DESC, x.doc_id LIMIT {m}", [*args, self._no_limit(limit)])
        return [dict(zip(DROPPED_KEYS, r, strict=True)) for r in rows]

    # ---- entity graph (indexing/graph_rows.py) ------------------------------------------
    def graph_load(self, collection: str = "default") -> GraphState:
        """The collection's graph rows, read in one transaction (a consistent snapshot)."""
        with self._snapshot() as cur:
            rows = {t: cur.execute(q.format(m=self._m), (collection,)).fetchall() for t, q in SELECTS.items()}
        return load_rows(rows)

    def graph_write(self, collection: str, delta: GraphDelta) -> None:
        """Apply one graph sync's changes atomically: a kill mid-write leaves the previous graph."""
        with self._write() as cur:
            write_delta(cur, collection, delta, self._m, _json(delta.meta))

    # ---- reads --------------------------------------------------------------------------
    def version(self, collection: str = "default") -> int:
        """Monotonic counter bumped by every change to a collection (indexes compare it to resync)."""
        return self._one(f"SELECT version FROM collections WHERE name={self._m}", (collection,)) or 0

    def collections(self) -> list[str]:
        return [r[0] for r in self._all("SELECT DISTINCT collection FROM documents ORDER BY 1")]

    def count_documents(self, collection: str | None = None) -> int:
        if collection is None:
            return self._one("SELECT COUNT(*) FROM documents")
        return self._one(f"SELECT COUNT(*) FROM documents WHERE collection={self._m}", (collection,))

    def count_chunks(self, collection: str | None = None) -> int:
        if collection is None:
            return self._one("SELECT COUNT(*) FROM chunks")
        return self._one(f"SELECT COUNT(*) FROM chunks WHERE collection={self._m}", (collection,))

    def language_counts(self, collection: str = "default") -> dict[str, int]:
        """Chunks per detected language: the retriever picks the embedder from this mix."""
        return {lang: n for lang, n in self._all(
            f"SELECT language, COUNT(*) FROM chunks WHERE collection={self._m} GROUP BY language", (collection,))}

    def list_documents(self, collection: str | None = None, limit: int | None = None,
                       offset: int = 0) -> list[dict[str, Any]]:
        m = self._m
        q = ("SELECT collection, doc_id, source, title, date, content_hash, metadata, n_chunks, ingested_at, "
             "length(text) FROM documents")
        args: tuple = ()
        if collection is not None:
            q, args = q + f" WHERE collection={m}", (collection,)
        q += f" ORDER BY collection, doc_id LIMIT {m} OFFSET {m}"
        return [_with_metadata(dict(zip(_LISTED_KEYS, row, strict=True)))
                for row in self._all(q, args + (self._no_limit(limit), offset))]

    def document_sources(self, collection: str = "default") -> dict[str, str]:
        """doc_id -> source for a collection (lets an ingest prune what its inputs no longer hold)."""
        return dict(self._all(f"SELECT doc_id, source FROM documents WHERE collection={self._m}", (collection,)))

    def iter_texts(self, collection: str = "default") -> Iterator[tuple[str, str, str]]:
        """(doc_id, source, cleaned text) of every document (dedup of a new ingest against the store)."""
        yield from self._stream(f"SELECT doc_id, source, text FROM documents WHERE collection={self._m}",
                                (collection,))

    def get_document(self, doc_id: str, collection: str | None = None) -> dict[str, Any] | None:
        """The document (the first collection by name holding `doc_id` when none is given)."""
        m = self._m
        q = f"SELECT {', '.join(_DOC_KEYS)} FROM documents WHERE doc_id={m}"
        q += (f" AND collection={m}" if collection else "") + " ORDER BY collection LIMIT 1"
        rows = self._all(q, (doc_id, collection) if collection else (doc_id,))
        return _with_metadata(dict(zip(_DOC_KEYS, rows[0], strict=True))) if rows else None

    def iter_chunks(self, collection: str = "default", granularity: str | None = None,
                    doc_id: str | None = None) -> Iterator[Chunk]:
        m = self._m
        q, args = f"SELECT {CHUNK_COLS} FROM chunks WHERE collection={m}", [collection]
        if granularity is not None:
            q, args = q + f" AND granularity={m}", args + [granularity]
        if doc_id is not None:
            q, args = q + f" AND doc_id={m}", args + [doc_id]
        for row in self._stream(q + " ORDER BY doc_id, seq", args):
            yield row_to_chunk(row)

    def int_ids(self, collection: str = "default", granularity: str | None = None) -> list[int]:
        q, args = f"SELECT int_id FROM chunks WHERE collection={self._m}", [collection]
        if granularity is not None:
            q, args = q + f" AND granularity={self._m}", args + [granularity]
        return [r[0] for r in self._all(q, args)]

    def granularities(self, collection: str = "default") -> list[str]:
        return [r[0] for r in self._all(
            f"SELECT DISTINCT granularity FROM chunks WHERE collection={self._m} ORDER BY 1", (collection,))]

    def get_chunks(self, chunk_ids: Iterable[str], collection: str = "default") -> list[Chunk]:
        """Chunks by string id, in the order asked (missing ids are skipped)."""
        return self._get_by("chunk_id", list(chunk_ids), collection)

    def get_chunks_by_int(self, int_ids: Iterable[int], collection: str = "default") -> list[Chunk]:
        return self._get_by("int_id", [int(i) for i in int_ids], collection)

    def _get_by(self, col: str, keys: list, collection: str) -> list[Chunk]:
        found = {r[0]: row_to_chunk(r[1:]) for r in self._rows_by(col, keys, collection)} if keys else {}
        return [found[k] for k in keys if k in found]


def _json(d: dict) -> str:
    return json.dumps(d, ensure_ascii=False, default=str)


def _metadata(meta: Any) -> dict:
    """A metadata column as a dict: Postgres JSONB arrives decoded, SQLite TEXT as JSON."""
    return meta if isinstance(meta, dict) else json.loads(meta)


def _with_metadata(d: dict[str, Any]) -> dict[str, Any]:
    d["metadata"] = _metadata(d["metadata"])
    return d


def row_to_chunk(row: tuple) -> Chunk:
    """A `CHUNK_COLS` row as a Chunk."""
    (chunk_id, doc_id, text, start, end, gran, parent, source, title, date, section, page, lang, meta) = row
    return Chunk(chunk_id=chunk_id, doc_id=doc_id, text=text, start=start, end=end, granularity=gran,
                 parent_id=parent, source=source, title=title, date=date, section=section, page=page,
                 language=lang, metadata=_metadata(meta))
