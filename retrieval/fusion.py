"""Fusion of ranked lists from several retrievers.

Weighted Reciprocal Rank Fusion: score(d) = sum_r w_r / (k + rank_r(d)), ranks 1-based; a document
missing from a list contributes nothing from it. RRF needs no score calibration, which is why it
is the default. Convex fusion normalises each list's scores (min-max or z-score over the list)
and takes the weighted sum; it can beat RRF when the score distributions are informative.
`blend` is the two-list special case the rerankers use (their order against the retriever's);
`fuse_searches` is multi-query fusion (query variants, HyDE) of whole search results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .types import Candidate, SearchResult

Ranking = Sequence[tuple[int, float]]  # (int id, score), best first


def rrf(rankings: Mapping[str, Ranking], k: int = 60, weights: Mapping[str, float] | None = None
        ) -> list[tuple[int, float]]:
    fused: dict[int, float] = {}
    for name, ranking in rankings.items():
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        if w == 0:
            continue
        for rank, (doc, _) in enumerate(ranking, start=1):
            fused[doc] = fused.get(doc, 0.0) + w / (k + rank)
    return sorted(fused.items(), key=lambda x: (-x[1], x[0]))


def blend(rerank_rank: int, retrieval_rank: int, weight: float, k: int = 60) -> float:
    """Reciprocal-rank blend of two orders, `weight` on the retrieval rank (scale-free, so any
    reranker's scores can be fused); equal to `rrf` over the two lists with weights 1-w and w."""
    return (1.0 - weight) / (k + rerank_rank) + weight / (k + retrieval_rank)


def normalize(scores: np.ndarray, how: str = "minmax") -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if len(s) == 0:
        return s
    if how == "zscore":
        sd = s.std()
        return (s - s.mean()) / sd if sd > 0 else np.zeros_like(s)
    lo, hi = s.min(), s.max()
    return (s - lo) / (hi - lo) if hi > lo else np.ones_like(s)


def convex(rankings: Mapping[str, Ranking], weights: Mapping[str, float] | None = None,
           how: str = "minmax") -> list[tuple[int, float]]:
    fused: dict[int, float] = {}
    for name, ranking in rankings.items():
        if not ranking:
            continue
        w = 1.0 if weights is None else float(weights.get(name, 1.0))
        norm = normalize(np.array([s for _, s in ranking]), how)
        for (doc, _), s in zip(ranking, norm, strict=False):
            fused[doc] = fused.get(doc, 0.0) + w * float(s)
    return sorted(fused.items(), key=lambda x: (-x[1], x[0]))


def fuse_searches(results: Sequence[SearchResult], weights: Sequence[float], k: int = 60) -> list[Candidate]:
    """Multi-query fusion: one search keeps its own ranking; several (query variants, HyDE, ...)
    are fused by weighted RRF over chunk ids, each chunk keeping its first search's per-retriever
    scores and ranks."""
    if len(results) == 1:
        return list(results[0].candidates)
    by_id: dict[int, Candidate] = {}
    rankings: dict[str, Ranking] = {}
    for i, r in enumerate(results):
        rankings[str(i)] = [(c.chunk.int_id, c.score) for c in r.candidates]
        for c in r.candidates:
            by_id.setdefault(c.chunk.int_id, c)
    fused = rrf(rankings, k=k, weights={str(i): w for i, w in enumerate(weights)})
    return [Candidate(chunk=by_id[cid].chunk, score=score, scores=dict(by_id[cid].scores),
                      ranks=dict(by_id[cid].ranks)) for cid, score in fused]
