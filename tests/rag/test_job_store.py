"""The job store contract, run against both backends (SQLite file, real Postgres).

Catches: a backend that drops or mangles a field (JSON columns, unicode names, None vs empty),
unfinished() returning finished jobs or in the wrong order, jobs lost when the store is reopened
(i.e. the restart path the durable queue relies on), a Postgres deployment keeping jobs outside
the database every replica shares.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rag.server.job_store import Job, JobStore, PgJobStore, SqliteJobStore


@pytest.fixture(params=["sqlite", "postgres"])
def open_store(request, tmp_path: Path) -> Iterator:
    if request.param == "sqlite":
        def opener() -> JobStore:
            return SqliteJobStore(tmp_path / "store.sqlite")
    else:
        dsn = request.getfixturevalue("pg_dsn")

        def opener() -> JobStore:
            return PgJobStore(dsn)
    yield opener


def test_jobs_round_trip_and_survive_reopen(open_store):
    store = open_store()
    a = Job(id="a" * 32, kind="file", collection="研究", created=1.0, filename="Übersicht 報告.md",
            path="/up/a/x.md", metadata={"source_name": "Übersicht 報告.md", "n": 3})
    b = Job(id="b" * 32, kind="text", collection="default", created=2.0)
    c = Job(id="c" * 32, kind="file", collection="default", created=0.5)
    for j in (a, b, c):
        store.add(j)
    c.status, c.finished, c.report, c.doc_ids = "done", 3.0, {"new": 1, "failed": []}, ["d1", "d2"]
    store.save(c)
    b.status, b.started, b.attempts = "running", 2.5, 1
    store.save(b)
    store.close()

    store = open_store()  # what a restarted server sees
    assert store.get(a.id) == a
    assert store.get(c.id) == c
    assert store.get("missing") is None
    assert [j.id for j in store.unfinished()] == [a.id, b.id]  # oldest first, done job excluded
    assert store.unfinished()[1].status == "running" and store.unfinished()[1].attempts == 1
    a.status, a.error = "failed", "upload is gone"
    store.save(a)
    assert [j.id for j in store.unfinished()] == [b.id]
    store.close()
