"""Document-store contract run against both backends (SQLite file, real Postgres), as the job store
contract is: what `rag docs dropped` relies on (record_dropped / list_dropped).

Catches: a backend without the dropped-documents record (Postgres ingests silently losing
near-duplicates), a repeat drop duplicating rows instead of replacing them, ids stored since
still listed, the collection filter or the limit ignored, and order other than newest first.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexing.pg_store import PgDocumentStore
from indexing.store import DocumentStore
from indexing.store_protocol import DocumentStoreProtocol
from indexing.types import Chunk, Document

STORES = (DocumentStore, PgDocumentStore)
# Public members only one backend has, on purpose (connection handling); anything else public must
# be on the Protocol, so a method added to one store alone fails here.
BACKEND_EXTRAS = {DocumentStore: set(), PgDocumentStore: {"backend", "conn", "masked_dsn", "ping", "stream"}}


@pytest.fixture(params=["sqlite", "postgres"])
def doc_store(request, tmp_path: Path) -> Iterator:
    if request.param == "sqlite":
        s = DocumentStore(tmp_path / "store.sqlite")
    else:
        s = PgDocumentStore(request.getfixturevalue("pg_dsn"))
    yield s
    s.close()


def _protocol_members() -> list[str]:
    return [n for n, v in vars(DocumentStoreProtocol).items()
            if (not n.startswith("_") or n in ("__enter__", "__exit__")) and callable(getattr(DocumentStoreProtocol, n))]


@pytest.mark.parametrize("store_cls", STORES, ids=lambda c: c.__name__)
def test_store_implements_every_protocol_member_with_the_same_signature(store_cls):
    """Catches a store method renamed, dropped or given other parameters on one backend (a caller
    typed against the Protocol then breaks only with that backend), and a public method added to
    one store without the Protocol (and so without the other store)."""
    members = _protocol_members()
    assert "upsert" in members and "get_chunks_by_int" in members and "stored_hash" in members
    for name in members:
        assert hasattr(store_cls, name), f"{store_cls.__name__} lacks {name}"
        want, got = inspect.signature(getattr(DocumentStoreProtocol, name)), inspect.signature(getattr(store_cls, name))
        assert list(got.parameters.values()) == list(want.parameters.values()), (
            f"{store_cls.__name__}.{name}{got} differs from the Protocol's {name}{want}")
        if want.return_annotation != "DocumentStoreProtocol":  # __enter__ returns the store itself
            assert got.return_annotation == want.return_annotation, f"{store_cls.__name__}.{name} returns {got}"
    public = {n for n in vars(store_cls) if not n.startswith("_")}
    extra = public - set(members) - BACKEND_EXTRAS[store_cls]
    assert not extra, f"{store_cls.__name__} has public members the Protocol lacks: {sorted(extra)}"


def test_open_stores_satisfy_the_protocol(doc_store):
    assert isinstance(doc_store, DocumentStoreProtocol)


def _doc(doc_id: str, text: str) -> tuple[Document, list[Chunk]]:
    doc = Document(doc_id=doc_id, text=text, source=f"docs/{doc_id}.md")
    return doc, [Chunk(chunk_id=f"{doc_id}#0", doc_id=doc_id, text=text, start=0, end=len(text),
                       source=doc.source)]


def test_dropped_documents_are_recorded_and_listed(doc_store):
    assert doc_store.record_dropped("default", []) == 0
    assert doc_store.record_dropped("default", [("blank", "in.jsonl", "empty", None),
                                                ("fin-0-copy", "in.jsonl", "near_duplicate", "fin-0")]) == 2
    time.sleep(0.01)
    doc_store.record_dropped("other", [("x", "o.md", "empty", None)])
    doc_store.record_dropped("default", [("blank", "in.jsonl", "empty", None)])  # dropped again: replaced
    rows = doc_store.list_dropped("default")
    assert [r["doc_id"] for r in rows] == ["blank", "fin-0-copy"]  # newest first
    assert rows[1] == {"collection": "default", "doc_id": "fin-0-copy", "source": "in.jsonl",
                       "reason": "near_duplicate", "duplicate_of": "fin-0", "dropped_at": rows[1]["dropped_at"]}
    assert isinstance(rows[1]["dropped_at"], float) and rows[0]["duplicate_of"] is None
    assert {r["collection"] for r in doc_store.list_dropped()} == {"default", "other"}
    assert len(doc_store.list_dropped(limit=1)) == 1 and len(doc_store.list_dropped()) == 3
    doc_store.upsert(*_doc("blank", "Now it has text."))  # stored since: no longer listed as dropped
    assert [r["doc_id"] for r in doc_store.list_dropped("default")] == ["fin-0-copy"]
    doc_store.upsert(*_doc("x", "stored in default, still dropped in other"))
    assert [r["doc_id"] for r in doc_store.list_dropped("other")] == ["x"]
