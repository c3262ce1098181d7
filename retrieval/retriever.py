"""Public entry point of the retrieval stage.

    r = Retriever.from_config(cfg, store, index_root)      # index_root = <storage>/indexes
    r.sync()                                              # bring indexes in line with the store
    res = r.search("query", k=10, mode="hybrid", filters=["source^=docs/"])
    res.candidates[0].to_dict(); res.timings_ms

Every candidate carries the score and 1-based rank it got from each retriever that returned it,
plus the fused score. `search_many` embeds all queries in one batch (for evaluation).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from indexing.store_protocol import DocumentStoreProtocol

from .analyzer import Analyzer
from .collection_index import CollectionIndex, IndexMismatchError, retrievers_for
from .config import FusionConfig, RetrievalConfig
from .embeddings import Embedder, make_embedder
from .filters import Filters
from .fusion import convex, rrf
from .graph import GraphLLM
from .language_choice import LanguageChoice, choose
from .router import LLMRouter, Router
from .small_to_big import expand_to_parents, sentence_window
from .types import Candidate, SearchResult

FilterSpec = Filters | str | Sequence[str] | Mapping[str, Any] | None
Progress = Callable[[int, int], None] | None


class Retriever:
    def __init__(self, cfg: RetrievalConfig, store: DocumentStoreProtocol, index_root: str | Path,
                 embedder: Embedder | None = None, cache_path: str | Path | None = None,
                 llm_router: LLMRouter | None = None, graph_llm: GraphLLM | None = None):
        self.cfg, self.store, self.index_root = cfg, store, Path(index_root)
        self.graph_llm = graph_llm  # extractor llm/both and community summaries (rag/graph_llm.py)
        self._emb = embedder
        self._cache_path = Path(cache_path) if cache_path else self.index_root.parent / "embeddings.sqlite"
        self.analyzer = Analyzer(cfg.bm25.analyzer)
        self._indexes: dict[str, CollectionIndex] = {}
        self._sync_locks: dict[str, threading.Lock] = {}
        self._choices: dict[str, tuple[int, LanguageChoice]] = {}
        self._embs: dict[str, Embedder] = {}
        self._lock = threading.RLock()  # a server thread may search while another syncs
        self.router = Router(cfg.collections, cfg.router, self.embedder, llm_router)

    @classmethod
    def from_config(cls, cfg: RetrievalConfig | Mapping[str, Any], store: DocumentStoreProtocol, index_root: str | Path,
                    embedder: Embedder | None = None, **kw: Any) -> Retriever:
        if not isinstance(cfg, RetrievalConfig):
            cfg = RetrievalConfig.model_validate(dict(cfg))
        return cls(cfg, store, index_root, embedder=embedder, **kw)

    def to_config(self) -> dict[str, Any]:
        return self.cfg.model_dump(mode="json")

    def embedder(self) -> Embedder:
        """Loaded on first use: a BM25-only pipeline never loads a model. With `embedder.model:
        auto` it is the default collection's choice (queries are embedded before routing)."""
        if self._emb is None:
            if self.cfg.embedder.model == "auto":
                return self.embedder_for(self.cfg.default_collection)
            self._emb = make_embedder(self.cfg.embedder, self._cache_path)
        return self._emb

    def language_choice(self, collection: str) -> LanguageChoice:
        """Effective settings of a collection from its language mix, recomputed when the store changes."""
        version = self.store.version(collection)
        with self._lock:
            hit = self._choices.get(collection)
            if hit is None or hit[0] != version:
                counts = getattr(self.store, "language_counts", lambda c: {})(collection)
                hit = self._choices[collection] = (version, choose(self.cfg, counts, collection))
            return hit[1]

    def embedder_for(self, collection: str) -> Embedder:
        """The collection's embedder (one instance per distinct embedder config, shared)."""
        if self._emb is not None:
            return self._emb
        ecfg = self.language_choice(collection).cfg.embedder
        key = ecfg.model_dump_json()
        with self._lock:
            if key not in self._embs:
                self._embs[key] = make_embedder(ecfg, self._cache_path)
            return self._embs[key]

    def _new_index(self, name: str) -> CollectionIndex:
        return CollectionIndex(self.index_root, name, self.language_choice(name).cfg,
                               lambda: self.embedder_for(name), self.analyzer, self.store, self.graph_llm)

    # ---- indexes ----------------------------------------------------------------------------
    def collection_names(self) -> list[str]:
        return [c.name for c in self.cfg.collections] or [self.cfg.default_collection]

    def index(self, collection: str) -> CollectionIndex:
        """The collection's index, synced when `auto_sync` asks for it. While another thread is
        syncing the collection, the last complete index answers instead of waiting for it."""
        with self._lock:
            ci = self._indexes.get(collection)
            if ci is None or not ci.manifest:
                probe = ci or self._new_index(collection)
                if probe.exists() and not self._stale_choice(probe):
                    probe.load()
                    ci = self._indexes[collection] = probe
        if ci is not None and ci.manifest and (not self.cfg.auto_sync or ci.is_current(self.store)
                                               or self._sync_lock(collection).locked()):
            return ci
        self._sync_one(collection, rebuild=False)
        with self._lock:
            return self._indexes[collection]

    def sync(self, collection: str | None = None, on_progress: Progress = None) -> dict[str, dict[str, int]]:
        """Add missing / remove stale chunks in the indexes of one collection (or all)."""
        return self._sync_all(collection, rebuild=False, on_progress=on_progress)

    def reindex(self, collection: str | None = None, on_progress: Progress = None) -> dict[str, dict[str, int]]:
        """Rebuild from the store, ignoring what is on disk (the fix for IndexMismatchError)."""
        return self._sync_all(collection, rebuild=True, on_progress=on_progress)

    def _sync_all(self, collection: str | None, rebuild: bool, on_progress: Progress = None
                  ) -> dict[str, dict[str, int]]:
        return {name: self._sync_one(name, rebuild, on_progress)
                for name in ([collection] if collection else self.collection_names())}

    def _sync_lock(self, name: str) -> threading.Lock:
        with self._lock:
            return self._sync_locks.setdefault(name, threading.Lock())

    def _sync_one(self, name: str, rebuild: bool, on_progress: Progress = None) -> dict[str, int]:
        """Copy-on-write sync: the work happens on a copy while searches keep reading the last
        complete index; the copy is swapped in once it is saved. One sync per collection at a time."""
        with self._sync_lock(name):
            with self._lock:
                cur = self._indexes.get(name)
                if cur is not None and not rebuild and not cur.manifest and cur.exists():
                    cur.load()
            fresh = self._new_index(name)
            if cur is not None and cur.cfg != fresh.cfg or cur is None and self._stale_choice(fresh):
                rebuild = True  # the language mix changed the embedder: re-embed everything
            work = cur.copy() if cur is not None and cur.manifest and not rebuild else fresh
            stats = work.sync(self.store, rebuild=rebuild, on_progress=on_progress)
            with self._lock:
                self._indexes[name] = work
            return stats

    def _stale_choice(self, ci: CollectionIndex) -> bool:
        """An auto-chosen embedder differs from the one the index on disk was built with."""
        if not self._auto_embedder() or not ci.exists() or "dense" not in ci.retrievers:
            return False
        return self._choice_changed(ci.collection, json.loads((ci.dir / "manifest.json").read_text()))

    def _auto_embedder(self) -> bool:
        return self._emb is None and self.cfg.embedder.model == "auto"

    def _choice_changed(self, name: str, built: Mapping[str, Any]) -> bool:
        """The index described by `built` (manifest / index meta) holds vectors of another model
        than the one `embedder.model: auto` now picks for the collection: re-embed, don't refuse."""
        model = built.get("embedding_model")
        return self._auto_embedder() and model is not None and model != self.embedder_for(name).name

    # ---- search -------------------------------------------------------------------------------
    def search(self, query: str, k: int | None = None, mode: str | None = None, filters: FilterSpec = None,
               collection: str | Sequence[str] | None = None, must_terms: Sequence[str] | None = None
               ) -> SearchResult:
        """One query. Several queries (variants, HyDE) are fused by `fusion.fuse_searches` over
        one search each, so every variant keeps its own mode and weight."""
        t0 = time.perf_counter()
        mode = mode or self.cfg.mode
        texts = [query]
        timings: dict[str, float] = {}
        qvecs = None
        if "dense" in retrievers_for(mode) or self._needs_routing_embedding(collection):
            qvecs = self.embedder().encode_queries(texts)
            timings["embed"] = _ms(t0)
        res = self._search(texts, qvecs, k or self.cfg.k, mode, Filters.parse(filters), collection,
                           must_terms, timings)
        res.timings_ms["total"] = _ms(t0)
        return res

    def search_many(self, queries: Sequence[str], k: int | None = None, mode: str | None = None,
                    filters: FilterSpec = None, collection: str | Sequence[str] | None = None,
                    on_result: Callable[[int, SearchResult], None] | None = None) -> list[SearchResult]:
        """Batched: all query embeddings in one model call, then one search per query."""
        mode = mode or self.cfg.mode
        t0 = time.perf_counter()
        qvecs = None
        if "dense" in retrievers_for(mode) or self._needs_routing_embedding(collection):
            qvecs = self.embedder().encode_queries(list(queries))
        embed_ms = _ms(t0) / max(len(queries), 1)
        flt = Filters.parse(filters)
        out = []
        for i, q in enumerate(queries):
            t1 = time.perf_counter()
            timings = {"embed": embed_ms} if qvecs is not None else {}
            res = self._search([q], None if qvecs is None else qvecs[i : i + 1], k or self.cfg.k, mode, flt,
                               collection, None, timings)
            res.timings_ms["total"] = _ms(t1) + embed_ms
            if on_result:
                on_result(i, res)
            out.append(res)
        return out

    def global_search(self, query: str, k: int | None = None, collection: str | None = None,
                      chunks_per: int = 3) -> list[dict[str, Any]]:
        """Global mode, for corpus-level questions ("What are the main themes?"): the top community
        summaries of the entity graph (`retrieval.graph.summaries`) with their member chunks.
        Raises IndexMismatchError when the collection has no graph or summaries are off."""
        name = collection or self.cfg.default_collection
        graph = self.index(name).graph if self.cfg.graph_built() else None
        if graph is None or not self.cfg.graph.summaries:
            raise IndexMismatchError(
                f"mode global reads the community summaries of the entity graph, which collection {name!r} does "
                "not have: set retrieval.graph.enabled: true and retrieval.graph.summaries: true (e.g. --config "
                f"configs/graph.yaml --set retrieval.graph.summaries=true) and run `rag reindex --collection {name}`")
        emb = self.embedder_for(name) if graph.vectors else None
        out = graph.global_search(query, k or self.cfg.k, chunks_per, embed=emb)
        for item in out:
            item["chunks"] = [{"chunk_id": c.chunk_id, "doc_id": c.doc_id, "title": c.title, "source": c.source,
                               "text": c.text} for c in self.read_store.get_chunks_by_int(item["chunks"], name)]
        return out

    def _needs_routing_embedding(self, collection: Any) -> bool:
        return collection is None and len(self.cfg.collections) > 1 and "embedding" in self.cfg.router.method

    def _search(self, texts: list[str], qvecs: np.ndarray | None, k: int, mode: str, filters: Filters,
                collection: str | Sequence[str] | None, must_terms: Sequence[str] | None,
                timings: dict[str, float]) -> SearchResult:
        if not collection:
            collection = None  # an empty list from a planner means "route it"
        if collection is None and not self.cfg.collections:
            names = [self.cfg.default_collection]
        elif collection is None:
            t = time.perf_counter()
            names = self.router.route(texts[0], None if qvecs is None else qvecs[0])
            timings["route"] = _ms(t)
        else:
            names = [collection] if isinstance(collection, str) else list(collection)
        cands: list[Candidate] = []
        for name in names:
            cands.extend(self._search_collection(name, texts, qvecs, k, mode, filters, must_terms, timings))
        cands.sort(key=lambda c: (-c.score, c.chunk.chunk_id))
        return SearchResult(candidates=cands[:k], timings_ms=timings, collections=names)

    def _search_collection(self, name: str, texts: list[str], qvecs: np.ndarray | None, k: int, mode: str,
                           filters: Filters, must_terms: Sequence[str] | None,
                           timings: dict[str, float]) -> list[Candidate]:
        ci = self.index(name)
        wanted, qvecs, k_hits, fuse, depth = self._plan(name, ci.retrievers, texts, qvecs, k, mode)
        t = time.perf_counter()
        allowed = ci.allowed(self.store, filters) if filters else None
        must = [self.analyzer(m) for m in must_terms or [] if self.analyzer(m)]
        mask = None
        if ci.bm25 is not None and (allowed is not None or must):
            mask = ci.bm25_mask(self.store, filters) if allowed is not None else np.ones(len(ci.bm25.ids), bool)
            if must:
                mask = mask & ci.bm25.must_mask(must)  # never in place: the filter mask is cached
                allowed = ci.bm25.ids[mask & ci.bm25.alive]
        if filters or must:
            timings["filter"] = timings.get("filter", 0.0) + _ms(t)
        def bm25(text: str, depth: int) -> list[tuple[int, float]]:
            ids, scores = ci.bm25.search(self.analyzer(text), depth, mask)
            return list(zip(ids.tolist(), scores.tolist(), strict=False))

        def dense(qi: int, depth: int) -> list[tuple[int, float]]:
            ids, scores = ci.dense.search(qvecs[qi : qi + 1], depth, allowed)[0]
            return list(zip(ids.tolist(), scores.tolist(), strict=False))

        graph = ci.graph if "graph" in wanted else None
        rankings = self._rank(name, texts, wanted, depth, mode, graph, allowed, bm25, dense, timings)
        return self._candidates(name, rankings, ci.cfg.fusion, fuse and len(rankings) > 1, k, k_hits, timings)

    def _rank(self, name: str, texts: list[str], wanted: Sequence[str], depth: Mapping[str, int], mode: str,
              graph: Any, allowed: Any, bm25: Callable[[str, int], list[tuple[int, float]]],
              dense: Callable[[int, int], list[tuple[int, float]]],
              timings: dict[str, float]) -> dict[str, list[tuple[int, float]]]:
        """Each wanted retriever's ranking of each query text (the question, then its rewrites as
        `name@i`), timed per retriever: the loop every storage backend shares. `graph` (None: not
        wanted) searches within `allowed`; `bm25(text, depth)` and `dense(text index, depth)` run
        the backend's own index with its filters."""
        rankings: dict[str, list[tuple[int, float]]] = {}
        for qi, text in enumerate(texts):
            suffix = "" if qi == 0 else f"@{qi}"
            if graph is not None:
                t = time.perf_counter()
                embed = self.embedder_for(name) if graph.vectors else None  # entity linking by embedding
                hits = graph.search(text, depth["graph"], allowed, embed=embed)
                timings["graph"] = timings.get("graph", 0.0) + _ms(t)
                if hits:
                    rankings["graph" + suffix] = hits
                    if mode == "graph":
                        continue  # the graph alone answers
            if "bm25" in wanted:
                t = time.perf_counter()
                rankings["bm25" + suffix] = bm25(text, depth["bm25"])
                timings["bm25"] = timings.get("bm25", 0.0) + _ms(t)
            if "dense" in wanted:
                t = time.perf_counter()
                rankings["dense" + suffix] = dense(qi, depth["dense"])
                timings["dense"] = timings.get("dense", 0.0) + _ms(t)
        return rankings

    def _plan(self, name: str, indexed: Sequence[str], texts: list[str], qvecs: np.ndarray | None, k: int,
              mode: str) -> tuple[list[str], np.ndarray | None, int, bool, dict[str, int]]:
        """Retrievers to run on a collection (indexed: what its index holds), the query vectors of
        the collection's own embedder, hits to fetch, whether to fuse and the depth per retriever:
        the steps every storage backend shares before it computes its rankings."""
        wanted = retrievers_for(mode, self.cfg.graph.enabled and "graph" in indexed)
        if "dense" in wanted and "dense" not in indexed and self.cfg.embedder.model == "auto":
            # CJK collection without a multilingual embedder (language_choice warned once)
            wanted = [r for r in wanted if r != "dense"]
            wanted = wanted if "bm25" in wanted else ["bm25", *wanted]
        if "dense" in wanted and self.embedder_for(name) is not self.embedder():
            qvecs = self.embedder_for(name).encode_queries(texts)
        missing = [r for r in wanted if r not in indexed]
        if missing:
            raise IndexMismatchError(f"collection {name!r} was indexed for mode {self.cfg.mode!r}, which has no "
                                     f"{missing} index; set retrieval.mode to 'hybrid' and run `rag reindex`")
        s2b = self.cfg.small_to_big
        k_hits = k * 3 if s2b.enabled and s2b.expand_to_parent else k
        fuse = len(wanted) * len(texts) > 1
        # mode graph falls back to the hybrid's lists, which are fused, so they fetch fusion depth
        depth = {r: max(k_hits, self.cfg.fusion.depth.get(r, 100)) if fuse else k_hits for r in wanted}
        return wanted, qvecs, k_hits, fuse, depth

    def _candidates(self, name: str, rankings: dict[str, list[tuple[int, float]]], fusion: FusionConfig,
                    fuse: bool, k: int, k_hits: int, timings: dict[str, float]) -> list[Candidate]:
        """Fuse per-retriever rankings, fetch the chunks, attach each retriever's rank and score and
        expand small-to-big: the steps every storage backend shares once it has its rankings."""
        s2b = self.cfg.small_to_big
        t = time.perf_counter()
        fused = self._fuse(rankings, fusion) if fuse else next(iter(rankings.values()))
        top = fused[:k_hits]
        timings["fuse"] = timings.get("fuse", 0.0) + _ms(t)
        t = time.perf_counter()
        store = self.read_store
        chunks = {c.int_id: c for c in store.get_chunks_by_int([i for i, _ in top], name)}
        per_retriever: dict[str, dict[int, tuple[int, float]]] = {}
        for rname, ranking in rankings.items():  # best (rank, score) per base retriever over query variants
            best = per_retriever.setdefault(rname.split("@")[0], {})
            for rank, (j, s) in enumerate(ranking, start=1):
                if j not in best or rank < best[j][0]:
                    best[j] = (rank, s)
        cands = []
        for i, score in top:
            if i not in chunks:
                continue  # deleted from the store after the last sync
            cand = Candidate(chunk=chunks[i], score=float(score))
            for base, best in per_retriever.items():
                if i in best:
                    cand.ranks[base], cand.scores[base] = best[i][0], float(best[i][1])
            cands.append(cand)
        if s2b.enabled and s2b.expand_to_parent:
            cands = expand_to_parents(cands, store, name)[:k]
        if s2b.sentence_window:
            cands = sentence_window(cands, store, name, s2b.sentence_window)
        timings["fetch"] = timings.get("fetch", 0.0) + _ms(t)
        return cands

    @property
    def read_store(self) -> DocumentStoreProtocol:
        """Where search-time chunk reads go: the store itself here, a read replica on Postgres."""
        return self.store

    def _fuse(self, rankings: dict[str, list[tuple[int, float]]], f: FusionConfig) -> list[tuple[int, float]]:
        weights = {n: f.weights.get(n.split("@")[0], 1.0) for n in rankings}
        if f.method == "convex":
            return convex(rankings, weights, f.normalization)
        return rrf(rankings, f.k, weights)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0
