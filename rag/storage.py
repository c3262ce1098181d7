"""Where documents, chunks and indexes live: the embedded SQLite files or a PostgreSQL server."""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class StorageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".rag", description="directory for the SQLite store, indexes and caches")
    backend: Literal["sqlite", "postgres"] = Field("sqlite", description=(
        "sqlite: store.sqlite + FAISS/BM25 files under path; postgres: documents, chunks, pgvector and "
        "BM25 postings in the database at dsn (caches and models stay under path)"))
    dsn: str | None = Field(None, description="postgres: libpq URL or key=value DSN; null reads $dsn_env")
    dsn_env: str = Field("RAG_PG_DSN", description="environment variable holding the DSN when dsn is null")
    statement_timeout_ms: int = Field(30000, ge=0, description="postgres: longest a query may run (0: no limit)")
    read_dsn: str | None = Field(None, description=(
        "postgres: optional read replica (hot standby) for retrieval reads; writes and index syncs stay on dsn. "
        "null reads $read_dsn_env; neither set: everything on dsn"))
    read_dsn_env: str = Field("RAG_PG_READ_DSN", description="environment variable holding read_dsn when it is null")
    connect_wait_s: float = Field(60.0, ge=0, description=(
        "postgres: how long opening the store (and `rag serve` start-up, shown by /ready) waits for a server "
        "that answers it is starting up or in recovery; refused connections and bad credentials fail at once"))

    def resolved_dsn(self) -> str:
        dsn = self.dsn or os.environ.get(self.dsn_env, "")
        if not dsn:
            raise ValueError(f"storage.backend is postgres but neither storage.dsn nor ${self.dsn_env} is set")
        return dsn

    def resolved_read_dsn(self) -> str | None:
        return self.read_dsn or os.environ.get(self.read_dsn_env) or None
