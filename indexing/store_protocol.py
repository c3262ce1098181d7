"""The document store contract: what ingestion, retrieval and the server may call on a store.

Two backends implement it side by side, `indexing.store.DocumentStore` (one SQLite file) and
`indexing.pg_store.PgDocumentStore` (PostgreSQL, shared by server replicas), whose queries are
written once in `indexing.sql_store.SqlDocumentStore`. Code that works on either
(`rag.app.open_store`, the ingestor, the retriever) is typed against this Protocol instead of the
SQLite class (which needed a `type: ignore` for the Postgres one), and
`tests/indexing/test_store_contract.py` checks that both classes define every member below with
the same parameters, so a method added to one backend only fails there, not in production.
Backend-specific extras (the SQLite `path`, the Postgres `dsn`, `ping`, `reader`) stay off it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

from .graph_rows import GraphDelta, GraphState
from .sql_store import Outcome
from .types import Chunk, Document


@runtime_checkable
class DocumentStoreProtocol(Protocol):
    """Documents and chunks of every collection; per-collection versions tell indexes when to sync."""

    def close(self) -> None: ...

    def __enter__(self) -> DocumentStoreProtocol: ...

    def __exit__(self, *exc: object) -> None: ...

    # ---- writes -----------------------------------------------------------------------------
    def document_hash(self, doc_id: str, collection: str = "default") -> str | None: ...

    @staticmethod
    def stored_hash(doc: Document, fingerprint: str = "") -> str:
        """The hash kept for a document: content plus chunking fingerprint (one rule for both)."""
        ...

    def is_current(self, doc: Document, collection: str = "default", fingerprint: str = "") -> bool: ...

    def upsert(self, doc: Document, chunks: list[Chunk], collection: str = "default",
               fingerprint: str = "") -> Outcome:
        """Insert or replace a document with its chunks atomically; a no-op when unchanged."""
        ...

    def delete(self, doc_id: str, collection: str | None = None) -> int: ...

    def delete_source(self, source: str, collection: str | None = None) -> int: ...

    def record_dropped(self, collection: str, rows: Iterable[tuple[str, str, str, str | None]]) -> int:
        """Remember documents ingestion left out (`rag docs dropped`); a repeat replaces the row."""
        ...

    def list_dropped(self, collection: str | None = None, limit: int | None = None) -> list[dict[str, Any]]: ...

    # ---- entity graph (indexing/graph_rows.py; meaning in retrieval/graph/) ------------------
    def graph_load(self, collection: str = "default") -> GraphState:
        """The collection's graph rows as one consistent snapshot."""
        ...

    def graph_write(self, collection: str, delta: GraphDelta) -> None:
        """Apply one graph sync's changes in a single transaction."""
        ...

    # ---- reads ------------------------------------------------------------------------------
    def version(self, collection: str = "default") -> int:
        """Bumped by every write to the collection: an index built at another version is stale."""
        ...

    def collections(self) -> list[str]: ...

    def count_documents(self, collection: str | None = None) -> int: ...

    def count_chunks(self, collection: str | None = None) -> int: ...

    def language_counts(self, collection: str = "default") -> dict[str, int]: ...

    def list_documents(self, collection: str | None = None, limit: int | None = None,
                       offset: int = 0) -> list[dict[str, Any]]: ...

    def document_sources(self, collection: str = "default") -> dict[str, str]: ...

    def iter_texts(self, collection: str = "default") -> Iterator[tuple[str, str, str]]: ...

    def get_document(self, doc_id: str, collection: str | None = None) -> dict[str, Any] | None: ...

    def iter_chunks(self, collection: str = "default", granularity: str | None = None,
                    doc_id: str | None = None) -> Iterator[Chunk]: ...

    def int_ids(self, collection: str = "default", granularity: str | None = None) -> list[int]: ...

    def granularities(self, collection: str = "default") -> list[str]: ...

    def get_chunks(self, chunk_ids: Iterable[str], collection: str = "default") -> list[Chunk]: ...

    def get_chunks_by_int(self, int_ids: Iterable[int], collection: str = "default") -> list[Chunk]: ...
