"""Per-collection indexes on disk, kept in line with the SQLite store.

Layout: `<index_root>/<collection>/manifest.json` plus one generation directory `gen-N/` holding
`bm25/` (npy arrays, memory-mapped on load), `dense.faiss`, `ids.npy` and `hashes.npy`. With
`retrieval.graph` the entity graph lives in the document store's own tables (retrieval/graph/,
indexing/graph_rows.py), written in one transaction per sync before the files. A save writes
a complete new generation, then atomically replaces the manifest (temp file + rename) to point at
it, then deletes older generations: a crash at any point leaves the previous consistent index.

`sync(store)` diffs (int id, hash of indexed text) pairs between the store and the index, so
updated chunks that keep their id are re-indexed too, and deleted ones disappear from both
retrievers. Unchanged chunks are not re-embedded (and new ones hit the embedding cache when they
were embedded before).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from indexing.store_protocol import DocumentStoreProtocol
from indexing.types import Chunk, content_hash

from .analyzer import Analyzer
from .bm25 import BM25Index
from .config import RetrievalConfig
from .dense import DenseIndex
from .embeddings.base import Embedder
from .filters import Filters, allowed_ids
from .graph import GraphIndex, GraphLLM, graph_build_settings
from .text import indexed_text

log = logging.getLogger(__name__)
FORMAT = 1


class IndexMismatchError(RuntimeError):
    """The index on disk does not match the configuration (or is incomplete)."""


def retrievers_for(mode: str, graph: bool = False) -> list[str]:
    """Indexes a mode searches. `graph` (retrieval.graph.enabled) adds the entity graph to any
    mode's fusion; mode graph ranks by the graph alone and keeps the hybrid's indexes for the
    questions (or corpora) the graph cannot answer."""
    base = {"bm25": ["bm25"], "dense": ["dense"], "hybrid": ["bm25", "dense"], "graph": ["bm25", "dense"]}[mode]
    return [*base, "graph"] if graph or mode == "graph" else base

__all__ = ["CollectionIndex", "IndexMismatchError", "graph_build_settings", "retrievers_for"]


class CollectionIndex:
    def __init__(self, root: Path, collection: str, cfg: RetrievalConfig,
                 embedder: Callable[[], Embedder], analyzer: Analyzer, store: DocumentStoreProtocol | None = None,
                 graph_llm: GraphLLM | None = None):
        self.dir = Path(root) / collection
        self.store, self.graph_llm = store, graph_llm  # the graph's tables live in the store
        self.collection, self.cfg = collection, cfg
        self._embedder, self.analyzer = embedder, analyzer
        self.retrievers = retrievers_for(cfg.mode, cfg.graph_built())
        self.bm25: BM25Index | None = None
        self.dense: DenseIndex | None = None
        self.graph: GraphIndex | None = None
        self.hashes: dict[int, str] = {}
        self.manifest: dict[str, Any] = {}
        self._fields: tuple[int, list[Chunk]] | None = None
        self._allowed_cache: dict[tuple[int, str], np.ndarray] = {}
        self._mask_cache: dict[tuple[int, str], np.ndarray] = {}

    # ---- manifest ---------------------------------------------------------------------
    def expected(self) -> dict[str, Any]:
        """What the config implies; any difference with the manifest means the index is stale."""
        exp: dict[str, Any] = {"format": FORMAT, "collection": self.collection, "granularity":
                               self.cfg.index_granularity(), "include_title": self.cfg.include_title}
        if "bm25" in self.retrievers:
            exp["bm25"] = json.loads(self.cfg.bm25.model_dump_json())
        if "dense" in self.retrievers:
            emb = self._embedder()
            exp["embedding_model"], exp["dim"] = emb.name, emb.dim
            exp["dense_index"] = self.cfg.dense.index
        if "graph" in self.retrievers:
            exp["graph"] = graph_build_settings(self.cfg.graph)
        return exp

    def _check(self, manifest: dict[str, Any]) -> None:
        hint = f"run `rag reindex --collection {self.collection}` to rebuild it"
        for key, want in self.expected().items():
            have = manifest.get(key)
            if have != want:
                raise IndexMismatchError(
                    f"index of collection {self.collection!r} at {self.dir} was built with {key}={have!r} "
                    f"but the configuration asks for {want!r}; {hint}")
        gen = self.dir / manifest["generation_dir"]
        needed = ["ids.npy", "hashes.npy"] + (["bm25/bm25.json"] if "bm25" in self.retrievers else []) + (
            ["dense.faiss"] if "dense" in self.retrievers else [])
        missing = [n for n in needed if not (gen / n).exists()]
        if missing:
            raise IndexMismatchError(f"index of collection {self.collection!r} is missing {missing} in {gen}; {hint}")

    def exists(self) -> bool:
        return (self.dir / "manifest.json").exists()

    def load(self) -> None:
        """Load from disk; raises IndexMismatchError when the files don't fit the configuration."""
        manifest = json.loads((self.dir / "manifest.json").read_text())
        self._check(manifest)
        gen = self.dir / manifest["generation_dir"]
        ids = np.load(gen / "ids.npy")
        hashes = np.load(gen / "hashes.npy")
        self.hashes = {int(i): h.decode() for i, h in zip(ids, hashes, strict=False)}
        self.bm25 = BM25Index.load(gen / "bm25") if "bm25" in self.retrievers else None
        self.graph = None
        if "graph" in self.retrievers:
            if self.store is None:
                raise ValueError("the entity graph is read from the document store: pass store= to CollectionIndex")
            self.graph = GraphIndex.load(self.store, self.collection, self.cfg.graph)
            if self.graph is None:  # built before the graph moved into the store, or other settings: sync builds it
                self.graph = GraphIndex(self.cfg.graph)
                manifest = {**manifest, "store_version": None}
        if "dense" in self.retrievers:
            self.dense = DenseIndex.load(gen / "dense.faiss", manifest["dim"], self.cfg.dense,
                                         self.cfg.embedder.fp16_storage)
            if self.dense.ntotal != len(self.hashes):
                raise IndexMismatchError(
                    f"dense index of {self.collection!r} holds {self.dense.ntotal} vectors but the manifest lists "
                    f"{len(self.hashes)} chunks; run `rag reindex --collection {self.collection}`")
        self.manifest = manifest

    def save(self, store_version: int) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        # Never reuse a directory the current manifest may point at (a rebuild starts from gen 0).
        existing = [int(p.name.split("-")[1]) for p in self.dir.glob("gen-*") if p.name.split("-")[1].isdigit()]
        gen_no = max([int(self.manifest.get("generation", 0)), *existing]) + 1
        final = self.dir / f"gen-{gen_no}"
        tmp = self.dir / f".gen-{gen_no}.tmp-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        ids = np.fromiter(self.hashes.keys(), dtype=np.int64, count=len(self.hashes))
        np.save(tmp / "ids.npy", ids)
        np.save(tmp / "hashes.npy", np.array([self.hashes[int(i)] for i in ids], dtype="S32"))
        if self.bm25 is not None:
            self.bm25.save(tmp / "bm25")
        if self.dense is not None:
            self.dense.save(tmp / "dense.faiss")
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        manifest = {**self.expected(), "generation": gen_no, "generation_dir": final.name,
                    "store_version": store_version, "n_chunks": len(self.hashes), "saved_at": time.time(),
                    "dense_kind": self.dense.kind if self.dense else None, "retrievers": self.retrievers}
        mtmp = self.dir / f"manifest.json.tmp-{os.getpid()}"
        mtmp.write_text(json.dumps(manifest, indent=1))
        os.replace(mtmp, self.dir / "manifest.json")
        self.manifest = manifest
        for old in self.dir.glob("gen-*"):
            if old.name != final.name:
                shutil.rmtree(old, ignore_errors=True)

    # ---- sync ---------------------------------------------------------------------------
    def _empty(self) -> None:
        self.bm25 = BM25Index(self.cfg.bm25) if "bm25" in self.retrievers else None
        if "dense" in self.retrievers:
            emb = self._embedder()
            self.dense = DenseIndex(emb.dim, self.cfg.dense, self.cfg.embedder.fp16_storage)
        self.graph = GraphIndex(self.cfg.graph) if "graph" in self.retrievers else None
        self.hashes, self.manifest = {}, {}

    def copy(self) -> CollectionIndex:
        """An independent copy to sync into while searches keep reading this one (copy-on-write:
        the retriever swaps the synced copy in only when it is complete and saved)."""
        new = CollectionIndex(self.dir.parent, self.collection, self.cfg, self._embedder, self.analyzer, self.store,
                              self.graph_llm)
        new.bm25 = copy.deepcopy(self.bm25)
        new.graph = copy.deepcopy(self.graph)
        if self.dense is not None:
            new.dense = copy.copy(self.dense)
            new.dense.index, new.dense._gpu = faiss.clone_index(self.dense.index), None
        new.hashes, new.manifest = dict(self.hashes), dict(self.manifest)
        return new

    def sync(self, store: DocumentStoreProtocol, rebuild: bool = False, batch: int = 256,
             on_progress: Callable[[int, int], None] | None = None) -> dict[str, int]:
        """Bring the index in line with the store; returns counts of added/removed/kept chunks.

        `on_progress(done, total)` is called once before the first batch (so a bar shows the total
        while the first batch embeds) and after each batch of chunks (re)indexed, so a long rebuild
        shows its progress (server `/ready`, CLI progress bar). 256 chunks a batch: seconds of embedding
        on a 2-core CPU; with 2048 the bar of `rag eval` on SciFact appeared only after the first batch
        and then moved every few minutes.
        """
        version = store.version(self.collection)
        self.store = store
        if rebuild:
            self._empty()
        elif not self.manifest:
            if self.exists():
                self.load()
            else:
                self._empty()
        if not rebuild and self.manifest.get("store_version") == version:
            return {"added": 0, "removed": 0, "kept": len(self.hashes), "store_version": version}
        current: dict[int, str] = {}
        todo: list[tuple[int, str]] = []
        graph_in: list[tuple[int, str, str]] = []  # the graph's inputs (all chunks: it diffs its own hashes)
        for ch in self.iter_indexed(store):
            text = indexed_text(ch, self.cfg.include_title)
            h = content_hash(text)
            current[ch.int_id] = h
            if self.hashes.get(ch.int_id) != h:
                todo.append((ch.int_id, text))
            if self.graph is not None:
                graph_in.append((ch.int_id, ch.text, ch.title))
        stale = [i for i, h in self.hashes.items() if current.get(i) != h]
        if stale:
            arr = np.asarray(stale, dtype=np.int64)
            if self.bm25 is not None:
                self.bm25.delete(stale)
            if self.dense is not None:
                self.dense.remove(arr)
            for i in stale:
                del self.hashes[i]
        if on_progress is not None and todo:
            on_progress(0, len(todo))
        for s in range(0, len(todo), batch):
            part = todo[s : s + batch]
            ids = np.array([i for i, _ in part], dtype=np.int64)
            texts = [t for _, t in part]
            if self.bm25 is not None:
                self.bm25.add(ids.tolist(), [self.analyzer(t) for t in texts])
            if self.dense is not None:
                self.dense.add(ids, self._embedder().encode_documents(texts))
            for i, _ in part:
                self.hashes[i] = current[i]
            if on_progress is not None:
                on_progress(min(s + batch, len(todo)), len(todo))
        graph_stats = None
        if self.graph is not None:
            t0 = time.perf_counter()
            graph_stats = self.graph.sync(store, self.collection, graph_in, version, rebuild=rebuild,
                                          embedder=self._embedder, llm=self.graph_llm)
            if not self.graph.chunks_of and self.hashes:
                log.warning("collection %r: no entities found in %d chunks, the graph is empty; graph search "
                            "returns the other retrievers' results", self.collection, len(self.hashes))
            if graph_stats.skipped_replies:
                log.warning("collection %r: %d graph extraction replies were not valid output and were skipped",
                            self.collection, graph_stats.skipped_replies)
            log.info("graph of %s: %s (sync %.2fs)", self.collection,
                     {k: v for k, v in self.graph.stats().items() if k != "largest_communities"},
                     time.perf_counter() - t0)
        self.save(version)
        self._fields, self._allowed_cache, self._mask_cache = None, {}, {}
        log.info("synced %s: +%d -%d (%d chunks)", self.collection, len(todo), len(stale), len(self.hashes))
        out = {"added": len(todo), "removed": len(stale), "kept": len(self.hashes) - len(todo),
               "store_version": version}
        if graph_stats is not None and graph_stats.skipped_replies:
            out["graph_skipped_replies"] = graph_stats.skipped_replies
        return out

    def iter_indexed(self, store: DocumentStoreProtocol) -> Iterator[Chunk]:
        """The chunks this index holds: the configured granularity, else everything but parents."""
        gran = self.cfg.index_granularity()
        for ch in store.iter_chunks(self.collection, gran):
            if gran is None and ch.metadata.get("role") == "parent":
                continue
            yield ch

    def is_current(self, store: DocumentStoreProtocol) -> bool:
        return bool(self.manifest) and self.manifest.get("store_version") == store.version(self.collection)

    # ---- filters -------------------------------------------------------------------------
    def allowed(self, store: DocumentStoreProtocol, filters: Filters) -> np.ndarray:
        """Int ids passing the filters, cached per (store version, filter)."""
        version = store.version(self.collection)
        key = (version, filters.key())
        if key not in self._allowed_cache:
            if self._fields is None or self._fields[0] != version:
                light = []
                for c in self.iter_indexed(store):
                    c.text = ""  # only fields are needed; keep memory flat on big collections
                    light.append(c)
                self._fields = (version, light)
            if len(self._allowed_cache) > 64:
                self._allowed_cache.clear()
            self._allowed_cache[key] = allowed_ids(self._fields[1], filters)
        return self._allowed_cache[key]

    def bm25_mask(self, store: DocumentStoreProtocol, filters: Filters) -> np.ndarray:
        """BM25 row mask for the filters (cached: np.isin over 100k rows costs ~10 ms)."""
        key = (store.version(self.collection), filters.key())
        if key not in self._mask_cache:
            if len(self._mask_cache) > 64:
                self._mask_cache.clear()
            self._mask_cache[key] = self.bm25.mask_for_ids(self.allowed(store, filters))
        return self._mask_cache[key]
