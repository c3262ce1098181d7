"""Glue between the evaluation runners and the RAG pipeline (eval drives rag, never the reverse).

A dataset's corpus is indexed into a throwaway store under `<storage>/eval/`, keyed by the
dataset content and the indexing config, so repeated runs reuse it; the derived indexes are
keyed by the retrieval settings that shape them, so variants never clash.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval.datasets import config_hash, dataset_fingerprint
from indexing.store import DocumentStore
from rag.answering.policy import Policies
from rag.commands._progress import index_progress
from rag.config import RagConfig
from rag.pipeline import Pipeline

# Retrieval settings that only change how a query is run, not what the indexes hold.
_QUERY_TIME = {"mode", "k", "fusion", "router", "granularity", "small_to_big", "collections", "default_collection"}


def eval_dir(dataset: str | Path, cfg: RagConfig) -> Path:
    ds = Path(dataset)
    corpus = ds / "corpus.jsonl"
    key = config_hash({"corpus": dataset_fingerprint(corpus if corpus.exists() else ds),
                       "indexing": cfg.indexing.model_dump(mode="json")})
    return cfg.storage_path / "eval" / f"{ds.name}-{key}"


def index_key(cfg: RagConfig) -> str:
    """Hash of what the index holds. `mode` decides which retrievers get built (a BM25-only index
    has no vectors), and the embedder and dense settings matter only when vectors are built, so a
    bm25 run and a dense run over one dataset get separate index directories."""
    from retrieval.collection_index import graph_build_settings, retrievers_for

    kinds = retrievers_for(cfg.retrieval.mode, cfg.retrieval.graph_built())
    r = cfg.retrieval.model_dump(mode="json")
    # the graph key only when a graph is built (so the index dirs of graph-less configs keep their
    # key), and only its build settings (PPR damping etc. are query time)
    r["graph"] = graph_build_settings(cfg.retrieval.graph)
    dropped = _QUERY_TIME | ({"bm25"} if "bm25" not in kinds else set()) | (
        {"embedder", "dense"} if "dense" not in kinds else set()) | ({"graph"} if "graph" not in kinds else set())
    return config_hash({"retrievers": kinds, **{k: v for k, v in r.items() if k not in dropped}})


def open_eval_pipeline(dataset: str | Path, cfg: RagConfig, progress: bool = True,
                       policies: Policies | None = None) -> Pipeline:
    """A pipeline over the dataset's corpus, ingesting it first unless a finished store exists.
    `policies`: the short-answer policies to answer with (`rag eval calibrate` records signals)."""
    base = eval_dir(dataset, cfg)
    base.mkdir(parents=True, exist_ok=True)
    if cfg.storage.backend == "postgres":
        return _open_pg_pipeline(dataset, cfg, base, progress, policies)
    store = DocumentStore(base / "store.sqlite")
    done = base / "ingested.ok"
    if not done.exists():
        from indexing.pipeline import Ingestor
        from rag.app import indexing_config

        corpus = Path(dataset) / "corpus.jsonl"
        if not corpus.exists():
            raise FileNotFoundError(f"{corpus} not found: a dataset needs a BEIR corpus.jsonl")
        report = Ingestor(store, indexing_config(cfg)).ingest([corpus], progress=progress)
        if report.failed:
            raise RuntimeError(f"ingesting {corpus} failed: {report.summary()}")
        done.write_text(report.summary())
    from retrieval.retriever import Retriever

    retriever = Retriever.from_config(cfg.retrieval, store, base / f"indexes-{index_key(cfg)}")
    with index_progress(f"embedding/indexing {Path(dataset).name}", progress) as bar:
        retriever.sync(cfg.retrieval.default_collection, on_progress=bar)  # minutes on a big corpus: show it
    return Pipeline(cfg, store=store, retriever=retriever, policies=policies)


def _open_pg_pipeline(dataset: str | Path, cfg: RagConfig, base: Path, progress: bool,
                      policies: Policies | None = None) -> Pipeline:
    """Postgres backend: the corpus goes into a collection of the configured database named after the
    eval dir and the index key (one index config per collection there); re-ingest is a no-op."""
    from indexing.pg_store import PgDocumentStore
    from indexing.pipeline import Ingestor
    from rag.app import indexing_config
    from retrieval.pg_retriever import PgRetriever

    collection = f"eval-{base.name}-{index_key(cfg)}"
    cfg = cfg.model_copy(deep=True)
    cfg.retrieval.default_collection = collection
    store = PgDocumentStore(cfg.storage.resolved_dsn(), cfg.storage.statement_timeout_ms,
                            read_dsn=cfg.storage.resolved_read_dsn())
    corpus = Path(dataset) / "corpus.jsonl"
    report = Ingestor(store, indexing_config(cfg)).ingest([corpus], collection=collection, progress=progress)
    if report.failed:
        raise RuntimeError(f"ingesting {corpus} failed: {report.summary()}")
    retriever = PgRetriever.from_config(cfg.retrieval, store, base / "indexes-pg", cache_path=base / "embeddings.sqlite")
    with index_progress(f"embedding/indexing {Path(dataset).name}", progress) as bar:
        retriever.sync(collection, on_progress=bar)
    return Pipeline(cfg, store=store, retriever=retriever, policies=policies)


def search_fn(pipe: Pipeline, depth: int, oversample: int = 3) -> Any:
    """Chunks collapse to documents, so ask for `oversample`x more chunks than documents scored."""

    def run(query: str):
        return pipe.search(query, k=depth * oversample)

    run.close = pipe.close  # type: ignore[attr-defined]
    return run


def answer_fn(pipe: Pipeline, mode: str | None = None, filters: dict[str, dict[str, str]] | None = None) -> Any:
    """Question -> `Answer`; `mode` short/long overrides `answer.mode` (EM/F1 sets use short).
    `filters`: question -> its retrieval filter (a generated set's group; others: the whole corpus)."""

    def run(question: str):
        return pipe.ask(question, filters=(filters or {}).get(question), mode=mode)

    run.close = pipe.close  # type: ignore[attr-defined]
    return run


# Engine counters of K/V reuse (`inference.LLMEngine.stats`) a QA run reports as deltas over the run.
ENGINE_COUNTERS = ("prompt_tokens", "prefix_cache_hits", "passage_cache_hits", "passage_cache_misses",
                   "passage_cache_disk_hits", "passage_cache_tokens_reused", "recomputed_tokens",
                   "kv_shift_reused_tokens", "passage_prefix_hits", "passage_prefix_tokens", "reuse_prefills")


def engine_counters(pipe: Pipeline) -> dict[str, float]:
    """The generator's K/V reuse counters now ({} for a backend without them, e.g. remote): call
    before and after a run and subtract (`counter_delta`). Loads the generator if it is not yet."""
    stats = pipe.generator.stats()
    return {k: float(stats[k]) for k in ENGINE_COUNTERS if isinstance(stats.get(k), int | float)}


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """`after - before` per counter, with `passage_cache_hit_rate` (hits / lookups) when any passage
    was looked up; {} when the backend reported nothing."""
    out = {k: after[k] - before.get(k, 0.0) for k in after}
    looked_up = out.get("passage_cache_hits", 0.0) + out.get("passage_cache_misses", 0.0)
    if looked_up:
        out["passage_cache_hit_rate"] = out["passage_cache_hits"] / looked_up
    return out
