"""Hard negatives and evaluation runs from our own retrieval components over a BEIR corpus.

Hard negatives must come from the retriever the reranker will sit behind: a reranker trained on
random negatives learns to separate topics, which the retriever already does, instead of the
near-misses it is actually shown. The index here is in memory and document-level (BEIR judges
documents), built from `retrieval`'s BM25 index and embedder and fused with reciprocal ranks like
the hybrid retriever (k=60, depth 100 per side).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np

from retrieval.analyzer import Analyzer
from retrieval.bm25 import BM25Index
from retrieval.config import BM25Config

Run = dict[str, dict[str, float]]  # query id -> {doc id: score}


class CorpusRetriever:
    """BM25, dense or RRF-hybrid search over a fixed list of documents."""

    def __init__(self, doc_ids: Sequence[str], texts: Sequence[str], embedder=None,
                 bm25: BM25Config | None = None, rrf_k: int = 60, depth: int = 100):
        self.doc_ids = list(doc_ids)
        self.texts = list(texts)
        self.embedder = embedder
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
                fused: dict[int, float] = {}
                for lst in (self._bm25(queries[qid], self.depth), self._dense(qvecs[n], self.depth)):
                    for rank, (i, _) in enumerate(lst, 1):
                        fused[i] = fused.get(i, 0.0) + 1.0 / (self.rrf_k + rank)
                hits = sorted(fused.items(), key=lambda x: (-x[1], x[0]))[:k]
            else:
                raise ValueError(f"unknown mode {mode!r}")
            run[qid] = {self.doc_ids[i]: s for i, s in hits}
        return run


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
    """Mean nDCG@k over the judged queries (a query absent from the run scores 0), BEIR-style."""
    total, count = 0.0, 0
    for qid, rels in qrels.items():
        if not any(g > 0 for g in rels.values()):
            continue
        count += 1
        hits = sorted(run.get(qid, {}).items(), key=lambda x: -x[1])[:k]
        dcg = sum((2 ** rels.get(d, 0) - 1) / np.log2(i + 2) for i, (d, _) in enumerate(hits))
        ideal = sorted((g for g in rels.values() if g > 0), reverse=True)[:k]
        idcg = sum((2 ** g - 1) / np.log2(i + 2) for i, g in enumerate(ideal))
        total += dcg / idcg if idcg else 0.0
    return total / count if count else 0.0
