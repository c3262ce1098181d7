"""`Retriever` over PostgreSQL: BM25 postings and pgvector HNSW in the database, fusion here.

Same interface as `retrieval.retriever.Retriever` (it is a subclass: routing, query batching,
fusion weights and small-to-big come from the base class), so the pipeline, the server and eval do
not know which backend they use. Both candidate lists are computed in SQL with the metadata filters
pushed into the WHERE clause and fused with our own RRF/convex fusion, so a hybrid result has the
same per-retriever ranks and scores as the in-process backend.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from indexing.pg_store import PgDocumentStore

from .collection_index import IndexMismatchError, retrievers_for
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
    def index(self, collection: str) -> PgIndex:  # type: ignore[override]
        with self._pg_lock:
            pi = self._pg.get(collection)
            if pi is None:
                pi = self._pg[collection] = PgIndex(self.store, collection, self.cfg, self.embedder, self.analyzer)
            if not pi.stats or self.cfg.auto_sync:
                meta = pi.meta()
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
        out = {}
        for name in [collection] if collection else self.collection_names():
            with self._pg_lock:
                pi = self._pg.get(name)
                if pi is None or rebuild:
                    pi = self._pg[name] = PgIndex(self.store, name, self.cfg, self.embedder, self.analyzer,
                                                  rebuild=rebuild)
                out[name] = pi.sync(rebuild=rebuild)
        return out

    # ---- search -----------------------------------------------------------------------
    def _search_collection(self, name: str, texts: list[str], qvecs: np.ndarray | None, k: int, mode: str,
                           filters: Filters, must_terms: Sequence[str] | None,
                           timings: dict[str, float]) -> list[Candidate]:
        pi = self.index(name)
        wanted = retrievers_for(mode)
        missing = [r for r in wanted if r not in pi.retrievers]
        if missing:
            raise IndexMismatchError(f"collection {name!r} was indexed for mode {self.cfg.mode!r}, which has no "
                                     f"{missing} index; set retrieval.mode to 'hybrid' and run `rag reindex`")
        s2b = self.cfg.small_to_big
        k_hits = k * 3 if s2b.enabled and s2b.expand_to_parent else k
        fuse = len(wanted) * len(texts) > 1
        depth = {r: max(k_hits, self.cfg.fusion.depth.get(r, 100)) if fuse else k_hits for r in wanted}
        must = [self.analyzer(m) for m in must_terms or [] if self.analyzer(m)]
        rankings: dict[str, list[tuple[int, float]]] = {}
        for qi, text in enumerate(texts):
            suffix = "" if qi == 0 else f"@{qi}"
            if "bm25" in wanted:
                t = time.perf_counter()
                rankings["bm25" + suffix] = pi.bm25(self.analyzer(text), depth["bm25"], filters, must)
                timings["bm25"] = timings.get("bm25", 0.0) + _ms(t)
            if "dense" in wanted:
                t = time.perf_counter()
                rankings["dense" + suffix] = pi.dense(qvecs[qi], depth["dense"], filters, must)
                timings["dense"] = timings.get("dense", 0.0) + _ms(t)
        return self._candidates(name, rankings, self.cfg.fusion, fuse, k, k_hits, timings)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
