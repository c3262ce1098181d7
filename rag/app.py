"""Builds the stage objects from a RagConfig; the one place that wires packages together."""

from __future__ import annotations

from pathlib import Path

from indexing.config import IndexingConfig
from indexing.store import DocumentStore
from indexing.store_protocol import DocumentStoreProtocol

from .config import RagConfig


def store_path(cfg: RagConfig) -> Path:
    return cfg.storage_path / "store.sqlite"


def open_store(cfg: RagConfig) -> DocumentStoreProtocol:
    """The configured store: SQLite or Postgres, one interface (`indexing.store_protocol`)."""
    if cfg.storage.backend == "postgres":
        from indexing.pg_store import PgDocumentStore

        return PgDocumentStore(cfg.storage.resolved_dsn(), cfg.storage.statement_timeout_ms,
                               read_dsn=cfg.storage.resolved_read_dsn(),
                               connect_wait_s=cfg.storage.connect_wait_s)
    return DocumentStore(store_path(cfg))


def indexing_config(cfg: RagConfig) -> IndexingConfig:
    """Chunk lengths are measured with the embedder's tokenizer: `chunking.tokenizer: embedder`
    (the default) follows `retrieval.embedder.model`, so changing the embedder keeps chunks in
    its real sequence limit."""
    ic = cfg.indexing.model_copy(deep=True)
    if ic.chunking.tokenizer in ("", "embedder"):
        ic.chunking.tokenizer = cfg.retrieval.embedder.resolved_model()
    return ic


def build_ingestor(cfg: RagConfig, store: DocumentStoreProtocol):
    from indexing.pipeline import Ingestor

    return Ingestor(store, indexing_config(cfg))


def build_retriever(cfg: RagConfig, store: DocumentStoreProtocol, generator=None):
    """The retriever of the configured backend; with `retrieval.graph.extractor: llm|both` or
    `summaries: true` it gets the engine for the graph (rag/graph_llm.py), built on first use
    unless `generator` (a callable returning one to share) is given."""
    from indexing.pg_store import PgDocumentStore

    from .graph_llm import graph_llm_for

    graph_llm = graph_llm_for(cfg, generator)
    if isinstance(store, PgDocumentStore):
        from retrieval.pg_retriever import PgRetriever

        return PgRetriever.from_config(cfg.retrieval, store, cfg.storage_path / "indexes", graph_llm=graph_llm)
    from retrieval.retriever import Retriever

    return Retriever.from_config(cfg.retrieval, store, cfg.storage_path / "indexes", graph_llm=graph_llm)
