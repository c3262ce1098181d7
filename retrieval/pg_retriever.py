"""`Retriever` over PostgreSQL: BM25 postings and pgvector HNSW in the database, fusion here.

Same interface as `retrieval.retriever.Retriever` (it is a subclass: routing, query batching,
fusion weights and small-to-big come from the base class), so the pipeline, the server and eval do
not know which backend they use. Both candidate lists are computed in SQL with the metadata filters
pushed into the WHERE clause and fused with our own RRF/convex fusion, so a hybrid result has the
same per-retriever ranks and scores as the in-process backend.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from indexing.pg_store import PgDocumentStore

from .filters import Filters
from .pg_index import PgIndex
from .retriever import Retriever
from .types import Candidate


class PgRetriever(Retriever):
    store: PgDocumentStore

    def __init__(self, *args: Any, **kw: Any):
        super().__init__(*args, **kw)
        self._pg: dict[str, PgIndex] = {}
        self._pg_lock = threading.RLock()

    # ---- indexes ----------------------------------------------------------------------
    def _new_pg_index(self, name: str, rebuild: bool = False) -> PgIndex:
        """The collection's index with the settings `embedder.model: auto` picks for its language
        mix (embedder, fusion weights, BM25-only fallback), as the in-process backend does."""
        return PgIndex(self.store, name, self.language_choice(name).cfg, lambda: self.embedder_for(name),
                       self.analyzer, rebuild=rebuild, graph_llm=self.graph_llm)

    def index(self, collection: str) -> PgIndex:  # type: ignore[override]
        with self._pg_lock:
            pi = self._pg.get(collection)
            if pi is None or pi.cfg != self.language_choice(collection).cfg:
                pi = self._pg[collection] = self._new_pg_index(collection)
            if not pi.stats or self.cfg.auto_sync:
                meta = pi.meta()
                if meta is not None and self._choice_changed(collection, meta["config"]):
                    return self._pg_sync_one(collection, rebuild=True)[0]
                if meta is not None:
                    pi.check(meta)
                if meta is None or (self.cfg.auto_sync and meta["store_version"] != self.store.version(collection)):
                    pi.sync()
                else:
                    pi.stats = meta
            return pi

    def sync(self, collection: str | None = None, *args: Any, **kw: Any) -> dict[str, dict[str, int]]:
        return self._pg_sync(collection, rebuild=False)

    def reindex(self, collection: str | None = None, *args: Any, **kw: Any) -> dict[str, dict[str, int]]:
        return self._pg_sync(collection, rebuild=True)

    def _pg_sync(self, collection: str | None, rebuild: bool) -> dict[str, dict[str, int]]:
        return {name: self._pg_sync_one(name, rebuild)[1]
                for name in ([collection] if collection else self.collection_names())}

    def _pg_sync_one(self, name: str, rebuild: bool) -> tuple[PgIndex, dict[str, int]]:
        with self._pg_lock:
            pi = self._pg.get(name)
            if pi is not None and pi.cfg != self.language_choice(name).cfg:
                pi = None  # the language mix changed the settings
            if pi is None and not rebuild:
                meta = PgIndex.read_meta(self.store, name)
                rebuild = meta is not None and self._choice_changed(name, meta["config"])  # re-embed
            if pi is None or rebuild:
                pi = self._pg[name] = self._new_pg_index(name, rebuild=rebuild)
            return pi, pi.sync(rebuild=rebuild)

    @property
    def read_store(self) -> PgDocumentStore:
        return self.store.reader  # storage.read_dsn: a streaming replica takes the search reads

    # ---- search -----------------------------------------------------------------------
    def _search_collection(self, name: str, texts: list[str], qvecs: np.ndarray | None, k: int, mode: str,
                           filters: Filters, must_terms: Sequence[str] | None,
                           timings: dict[str, float]) -> list[Candidate]:
        pi = self.index(name)
        wanted, qvecs, k_hits, fuse, depth = self._plan(name, pi.retrievers, texts, qvecs, k, mode)
        must = [self.analyzer(m) for m in must_terms or [] if self.analyzer(m)]
        graph = pi.graph if "graph" in wanted else None
        allowed = pi.allowed(filters, must) if graph is not None else None
        rankings = self._rank(name, texts, wanted, depth, mode, graph, allowed,
                              lambda text, d: pi.bm25(self.analyzer(text), d, filters, must),
                              lambda qi, d: pi.dense(qvecs[qi], d, filters, must), timings)
        return self._candidates(name, rankings, pi.cfg.fusion, fuse and len(rankings) > 1, k, k_hits, timings)
