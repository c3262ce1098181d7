"""`rag index --ray`: distributed ingest into the Postgres backend with Ray Data.

The driver loads, cleans and de-duplicates (dedup needs one global view) and skips unchanged
documents, exactly as the single-process `Ingestor`; the documents that need work then flow through
Ray Data `map_batches`: chunking in tasks, then embedding and writing on actors that each hold one
embedding model and one database connection. Every document is still committed in its own
transaction (with its chunks, embeddings and BM25 postings written right after by the same actor),
so the result is the same rows, with the same chunk ids, as a single-process ingest; the driver's
final `sync` builds the HNSW index once and refreshes the BM25 statistics.

Ray runs where `RAY_ADDRESS` points (a cluster), or starts a local one for the duration of the call.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

import numpy as np

from indexing.pipeline import Ingestor
from indexing.report import IngestReport
from indexing.types import Document
from retrieval.collection_index import retrievers_for


class _Collecting(Ingestor):
    """The Ingestor's load/clean/dedup/skip, with the chunk+write step deferred to Ray."""

    def ingest(self, *args: Any, **kw: Any) -> IngestReport:
        self.pending: list[Document] = []
        return super().ingest(*args, **kw)

    def _flush(self, docs: list[Document], collection: str, report: IngestReport) -> None:
        self.pending.extend(docs)


class ChunkBatch:
    """Ray Data task: documents -> (document, chunks), with the configured chunkers."""

    def __init__(self, indexing_json: str):
        from indexing.config import IndexingConfig

        self.ing = Ingestor(None, IndexingConfig.model_validate_json(indexing_json))

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        docs = [pickle.loads(b) for b in batch["doc"]]
        chunks = self.ing.chunk(docs)
        return {"doc": batch["doc"], "chunks": np.array([pickle.dumps(c) for c in chunks], dtype=object)}


class EmbedWrite:
    """Ray Data actor: one embedder and one connection; commits each document, then its index rows."""

    def __init__(self, dsn: str, retrieval_json: str, embedder_json: str, collection: str, fingerprint: str,
                 cache_path: str):
        from indexing.pg_store import PgDocumentStore
        from retrieval.analyzer import Analyzer
        from retrieval.config import EmbedderConfig, RetrievalConfig
        from retrieval.embeddings import make_embedder
        from retrieval.pg_index import PgIndex

        cfg = RetrievalConfig.model_validate_json(retrieval_json)
        self.store = PgDocumentStore(dsn)
        self.embedder = make_embedder(EmbedderConfig.model_validate_json(embedder_json), cache_path)
        self.index = PgIndex(self.store, collection, cfg, lambda: self.embedder, Analyzer(cfg.bm25.analyzer))
        self.collection, self.fingerprint, self.gran = collection, fingerprint, cfg.index_granularity()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outcomes, grans, todo = [], [], []
        for doc_b, chunks_b in zip(batch["doc"], batch["chunks"], strict=True):
            doc, chunks = pickle.loads(doc_b), pickle.loads(chunks_b)
            outcomes.append(self.store.upsert(doc, chunks, self.collection, self.fingerprint))
            grans.append(pickle.dumps([c.granularity for c in chunks]))
            todo += [(c, c.int_id, c.content_hash) for c in chunks if self._indexed(c)]
        self.index._write(todo)
        return {"outcome": np.array(outcomes, dtype=object), "grans": np.array(grans, dtype=object),
                "embedder": np.array([self.embedder.name] * len(outcomes), dtype=object)}

    def _indexed(self, c: Any) -> bool:
        if self.gran is not None:
            return c.granularity == self.gran
        return c.metadata.get("role") != "parent"


def ingest_with_ray(cfg: Any, store: Any, retriever: Any, paths: list[str], collection: str = "default",
                    progress: bool = True, workers: int = 2, batch_size: int = 64) -> IngestReport:
    """Ingest `paths` into the Postgres store through Ray; returns the same report as `Ingestor.ingest`."""
    if not os.environ.get("RAY_ADDRESS"):  # a local Ray stays on loopback (read when ray is imported)
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    from .app import indexing_config

    if getattr(store, "backend", "sqlite") != "postgres":
        raise ValueError("rag index --ray writes to the postgres backend: set storage.backend: postgres")
    started = False
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS")
        ray.init(address=address or "local", include_dashboard=False, log_to_driver=False,
                 **({} if address else {"num_cpus": 2 * max(workers, 1), "object_store_memory": 256 << 20,
                                      "_node_ip_address": "127.0.0.1"}))
        started = True
    try:
        icfg = indexing_config(cfg)
        ing = _Collecting(store, icfg)
        report = ing.ingest(paths, collection, progress=progress)
        ecfg = cfg.retrieval.embedder
        if ecfg.model == "auto" and hasattr(retriever, "language_choice"):
            ecfg = retriever.language_choice(collection).cfg.embedder
        names: set[str] = set()
        if ing.pending:
            retriever.sync(collection)  # schema and vector column once, on the driver, before the actors
            ds = ray.data.from_items([{"doc": pickle.dumps(d)} for d in ing.pending])
            # Chunkers are light (half a CPU each); embedding actors take a whole one.
            ds = ds.map_batches(ChunkBatch, fn_constructor_args=(icfg.model_dump_json(),), batch_size=batch_size,
                                concurrency=workers, num_cpus=0.5, batch_format="numpy")
            ds = ds.map_batches(EmbedWrite, fn_constructor_args=(
                store.dsn, cfg.retrieval.model_dump_json(), ecfg.model_dump_json(), collection, ing.fingerprint,
                str(cfg.storage_path / "embeddings.sqlite")), batch_size=batch_size, concurrency=workers,
                num_cpus=1, batch_format="numpy")
            for row in ds.iter_rows():
                o = row["outcome"]
                report.new += o == "new"
                report.changed += o == "changed"
                report.unchanged += o == "unchanged"
                report.chunks.update(pickle.loads(row["grans"]))
                names.add(row["embedder"])
        if "dense" in retrievers_for(cfg.retrieval.mode) and names - {retriever.embedder().name}:
            raise RuntimeError(f"ray actors embedded with {sorted(names)} but the index expects "
                               f"{retriever.embedder().name!r}")
        return report
    finally:
        if started:
            ray.shutdown()
