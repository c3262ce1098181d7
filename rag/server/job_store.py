"""Where ingest jobs live: a `jobs` table in the document store's own database (SQLite or Postgres).

Why the store's database: a job and the documents it writes then share one file, one backup and
one lifetime; a job never outlives (or predates) the store it feeds. The runner only talks to the
small `JobStore` protocol, so another backend (Postgres) implements the same five methods.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from indexing.sqlite_connect import connect_wal

UNFINISHED = ("queued", "running")


@dataclass
class Job:
    id: str
    kind: str
    collection: str
    status: str = "queued"  # queued | running | done | failed
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    report: dict[str, Any] | None = None
    error: str | None = None
    doc_ids: list[str] = field(default_factory=list)
    filename: str | None = None  # the client's name for an uploaded file
    attempts: int = 0
    path: str | None = None  # the upload on disk; server-internal, never returned to clients
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("path"), d.pop("metadata")
        return d


class JobStore(Protocol):
    def add(self, job: Job) -> None: ...
    def save(self, job: Job) -> None: ...
    def get(self, job_id: str) -> Job | None: ...
    def unfinished(self) -> list[Job]: ...
    def close(self) -> None: ...


_COLS = ("id", "kind", "collection", "status", "created", "started", "finished", "report", "error", "doc_ids",
         "filename", "attempts", "path", "metadata")
_JSON = ("report", "doc_ids", "metadata")


def _to_row(job: Job) -> tuple[Any, ...]:
    """A job as one row of `_COLS` (JSON columns as text): both backends store the same row."""
    d = asdict(job)
    return tuple(json.dumps(d[c], ensure_ascii=False) if c in _JSON else d[c] for c in _COLS)


def _from_row(row: tuple[Any, ...]) -> Job:
    d = dict(zip(_COLS, row))
    for c in _JSON:
        d[c] = json.loads(d[c]) if d[c] is not None else None
    d["doc_ids"] = d["doc_ids"] or []
    d["metadata"] = d["metadata"] or {}
    return Job(**d)


class SqliteJobStore:
    """Jobs in the store's SQLite file (WAL, so the store's readers never wait on a job update)."""

    def __init__(self, path: str | Path):
        self._db = connect_wal(path)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, collection TEXT NOT NULL,"
                " status TEXT NOT NULL, created REAL, started REAL, finished REAL, report TEXT, error TEXT,"
                " doc_ids TEXT, filename TEXT, attempts INTEGER NOT NULL DEFAULT 0, path TEXT, metadata TEXT)")
            self._db.execute("CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created)")

    def add(self, job: Job) -> None:
        with self._lock:
            self._db.execute(f"INSERT INTO jobs ({','.join(_COLS)}) VALUES ({','.join('?' * len(_COLS))})",
                             _to_row(job))

    def save(self, job: Job) -> None:
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {','.join(c + '=?' for c in _COLS[1:])} WHERE id=?",
                             (*_to_row(job)[1:], job.id))

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute(f"SELECT {','.join(_COLS)} FROM jobs WHERE id=?", (job_id,)).fetchone()
        return _from_row(row) if row else None

    def unfinished(self) -> list[Job]:
        with self._lock:
            rows = self._db.execute(f"SELECT {','.join(_COLS)} FROM jobs WHERE status IN (?, ?) ORDER BY created",
                                    UNFINISHED).fetchall()
        return [_from_row(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class PgJobStore:
    """Jobs in the Postgres database that holds the documents (same table and semantics as the
    SQLite one), so a restarted server, or any replica sharing the database, sees them."""

    def __init__(self, dsn: str, statement_timeout_ms: int = 30000):
        from indexing.pg_connect import connect

        self._db = connect(dsn, statement_timeout_ms=statement_timeout_ms)
        self._lock = threading.Lock()
        # Replicas start together: concurrent CREATE ... IF NOT EXISTS can still collide in the
        # catalogue, so the schema is created under a transaction-scoped advisory lock.
        with self._lock, self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(hashtext('ragstack.jobs.schema'))")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, kind TEXT NOT NULL, collection TEXT NOT NULL,"
                " status TEXT NOT NULL, created DOUBLE PRECISION, started DOUBLE PRECISION,"
                " finished DOUBLE PRECISION, report TEXT, error TEXT, doc_ids TEXT, filename TEXT,"
                " attempts INTEGER NOT NULL DEFAULT 0, path TEXT, metadata TEXT)")
            self._db.execute("CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, created)")

    def add(self, job: Job) -> None:
        with self._lock:
            self._db.execute(f"INSERT INTO jobs ({','.join(_COLS)}) VALUES ({','.join(['%s'] * len(_COLS))})",
                             _to_row(job))

    def save(self, job: Job) -> None:
        with self._lock:
            self._db.execute(f"UPDATE jobs SET {','.join(c + '=%s' for c in _COLS[1:])} WHERE id=%s",
                             (*_to_row(job)[1:], job.id))

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            row = self._db.execute(f"SELECT {','.join(_COLS)} FROM jobs WHERE id=%s", (job_id,)).fetchone()
        return _from_row(row) if row else None

    def unfinished(self) -> list[Job]:
        with self._lock:
            rows = self._db.execute(f"SELECT {','.join(_COLS)} FROM jobs WHERE status IN (%s, %s) ORDER BY created",
                                    UNFINISHED).fetchall()
        return [_from_row(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()
