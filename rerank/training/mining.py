"""Hard negatives and evaluation runs from our own retrieval components over a BEIR corpus.

Hard negatives must come from the retriever the reranker will sit behind: a reranker trained on
random negatives learns to separate topics, which the retriever already does, instead of the
near-misses it is actually shown. The index here is in memory and document-level (BEIR judges
documents), built from `retrieval`'s BM25 index and embedder and fused with reciprocal ranks like
the hybrid retriever (k=60, depth 100 per side).

Which embedder and fusion weights a corpus gets is the pipeline's per-collection rule
(`retrieval.language_choice`, `embedder.model: auto`): a Chinese corpus is searched with the
multilingual embedder and BM25-leaning weights, an English one with MiniLM at 1/1. Mining and
evaluating a Chinese set behind an English-only embedder (half its query pieces `[UNK]`) would
train and measure the reranker behind a retriever nobody deploys.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from retrieval.analyzer import Analyzer
from retrieval.bm25 import BM25Index
from retrieval.config import BM25Config, RetrievalConfig
from retrieval.fusion import rrf
from retrieval.metrics import evaluate_rankings

log = logging.getLogger(__name__)
Run = dict[str, dict[str, float]]  # query id -> {doc id: score}
# corpus texts -> (embedder or None for BM25 only, fusion weights or None for 1/1, description)
Chooser = Callable[[Sequence[str]], tuple[object | None, dict[str, float] | None, str]]


def language_aware(cfg: RetrievalConfig, cache_path: str | Path | None = None,
                   sample: int = 500) -> Chooser:
    """Per corpus, the embedder and fusion weights `rag index` would pick for it (language mix of
    the first `sample` texts); each embedder is built once and shared between corpora."""
    from indexing.language import detect_language
    from retrieval.embeddings import make_embedder
    from retrieval.language_choice import choose

    built: dict[str, object] = {}

    def pick(texts: Sequence[str]) -> tuple[object | None, dict[str, float] | None, str]:
        counts = Counter(detect_language(t) for t in list(texts)[:sample])
        choice = choose(cfg, dict(counts), collection=f"corpus-{id(texts)}")
        if choice.cfg.mode == "bm25":
            return None, None, choice.summary()
        ecfg = choice.cfg.embedder
        key = ecfg.model_dump_json()
        if key not in built:
            built[key] = make_embedder(ecfg, cache_path)
        return built[key], dict(choice.cfg.fusion.weights) or None, choice.summary()

    return pick


class CorpusRetriever:
    """BM25, dense or RRF-hybrid search over a fixed list of documents."""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str], embedder=None,
                 bm25: BM25Config | None = None, rrf_k: int = 60, depth: int = 100,
                 weights: dict[str, float] | None = None):
        self.doc_ids = list(doc_ids)
        self.texts = list(texts)
        self.embedder = embedder
        self.weights = weights  # RRF weights per side (None: 1/1)
        self.rrf_k, self.depth = rrf_k, depth
        cfg = bm25 or BM25Config()
        self.analyzer = Analyzer(cfg.analyzer)
        self.bm25 = BM25Index(cfg)
        self.bm25.add(range(len(self.texts)), (self.analyzer(t) for t in self.texts))
        self._doc_vecs: np.ndarray | None = None

    def doc_vectors(self) -> np.ndarray:
        if self._doc_vecs is None:
            if self.embedder is None:
                raise ValueError("dense/hybrid search needs an embedder")
            self._doc_vecs = np.asarray(self.embedder.encode_documents(self.texts), dtype=np.float32)
        return self._doc_vecs

    def _bm25(self, query: str, k: int) -> list[tuple[int, float]]:
        ids, scores = self.bm25.search(self.analyzer(query), k)
        return [(int(i), float(s)) for i, s in zip(ids, scores, strict=True)]

    def _dense(self, qvec: np.ndarray, k: int) -> list[tuple[int, float]]:
        sims = self.doc_vectors() @ qvec
        top = np.argpartition(-sims, min(k, len(sims)) - 1)[:k]
        top = top[np.argsort(-sims[top], kind="stable")]
        return [(int(i), float(sims[i])) for i in top]

    def search_many(self, queries: dict[str, str], k: int = 100, mode: str = "hybrid") -> Run:
        """One run for all queries (queries are embedded in one batch)."""
        qids = list(queries)
        qvecs = None
        if mode in ("dense", "hybrid"):
            qvecs = np.asarray(self.embedder.encode_queries([queries[q] for q in qids]), dtype=np.float32)
        run: Run = {}
        for n, qid in enumerate(qids):
            if mode == "bm25":
                hits = self._bm25(queries[qid], k)
            elif mode == "dense":
                hits = self._dense(qvecs[n], k)
            elif mode == "hybrid":
                lists = {"bm25": self._bm25(queries[qid], self.depth), "dense": self._dense(qvecs[n], self.depth)}
                hits = rrf(lists, k=self.rrf_k, weights=self.weights)[:k]
            else:
                raise ValueError(f"unknown mode {mode!r}")
            run[qid] = {self.doc_ids[i]: s for i, s in hits}
        return run


def corpus_retriever(ids: Sequence[str], texts: Sequence[str], embedder=None,
                     chooser: Chooser | None = None) -> CorpusRetriever:
    """A retriever over one corpus: the chooser's embedder and weights when given, else `embedder` at 1/1."""
    weights = None
    if chooser is not None:
        embedder, weights, why = chooser(texts)
        log.info("corpus of %d documents: %s", len(texts), why)
    return CorpusRetriever(ids, texts, embedder=embedder, weights=weights)


def mine_negatives(run: Run, qrels: dict[str, dict[str, int]], n: int, skip_top: int = 0,
                   seed: int = 42, pool: int = 30) -> dict[str, list[str]]:
    """Per query, `n` negatives sampled from the top `pool` non-relevant hits.

    Sampling from a pool rather than taking the very top hits: the highest-ranked "negatives" are
    often unjudged positives (false negatives), which teach the model the wrong thing.
    """
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    for qid, hits in run.items():
        rel = {d for d, g in qrels.get(qid, {}).items() if g > 0}
        ranked = [d for d in sorted(hits, key=lambda d: -hits[d]) if d not in rel][skip_top : skip_top + pool]
        out[qid] = rng.sample(ranked, min(n, len(ranked)))
    return out


def ndcg_at_k(run: Run, qrels: dict[str, dict[str, int]], k: int = 10) -> float:
    """Mean nDCG@k of a run with the shared definition (`retrieval.metrics`: linear gain, as
    trec_eval/BEIR/ranx). Ties keep the run's own order (it is built best first), not docid order."""
    rankings = {q: sorted(s, key=lambda d: -s[d]) for q, s in run.items()}
    return evaluate_rankings(rankings, qrels, ks=(k,), names=("ndcg",))[0][f"ndcg@{k}"]
