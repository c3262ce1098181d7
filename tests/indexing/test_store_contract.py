"""Document-store contract run against both backends (SQLite file, real Postgres), as the job store
contract is: what `rag docs dropped` relies on (record_dropped / list_dropped).

Catches: a backend without the dropped-documents record (Postgres ingests silently losing
near-duplicates), a repeat drop duplicating rows instead of replacing them, ids stored since
still listed, the collection filter or the limit ignored, and order other than newest first.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from indexing.store import DocumentStore
from indexing.types import Chunk, Document


@pytest.fixture(params=["sqlite", "postgres"])
def doc_store(request, tmp_path: Path) -> Iterator:
    if request.param == "sqlite":
        s = DocumentStore(tmp_path / "store.sqlite")
    else:
        from indexing.pg_store import PgDocumentStore

        s = PgDocumentStore(request.getfixturevalue("pg_dsn"))
    yield s
    s.close()


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
