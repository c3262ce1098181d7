"""Reranker interface: score (query, passage) pairs, reorder candidates, cut by threshold/top_n.

Backends only implement `score`; how many candidates to fetch, depth, threshold, blending and
top_n live here once (the pipeline calls `fetch_depth` and `arank`, nothing else), so every
backend, `none` included, behaves the same in the pipeline and can be swapped by config.
`arank` is `rank` for an event loop: scoring blocks (a model's forward pass), so it runs in a
worker thread unless the backend awaits an engine instead (`ascore`, the LLM reranker).
"""

from __future__ import annotations

import asyncio
import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from retrieval.fusion import blend
from retrieval.types import Candidate

from .config import RerankerConfig
from .registry import Registry


def passage_text(c: Candidate) -> str:
    """What the reranker reads: the title helps (SciFact titles carry the claim's key terms)."""
    ch = c.chunk
    if ch.title and not ch.text.startswith(ch.title):
        return f"{ch.title}\n{ch.text}"
    return ch.text


class Reranker(ABC):
    type: str = ""

    def __init__(self, cfg: RerankerConfig, **_: object):
        self.cfg = cfg

    @abstractmethod
    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """Relevance of each passage to the query, higher is better (batched by `cfg.batch_size`)."""

    def fetch_depth(self, k: int) -> int:
        """How many retrieval candidates to ask for so that `k` remain after reranking."""
        return max(k, self.cfg.depth)

    def rank(self, query: str, candidates: Sequence[Candidate], top_n: int | None = None) -> list[Candidate]:
        """The first `cfg.depth` candidates reordered by rerank score (ties keep retrieval order),
        then the unscored rest in retrieval order, cut to `top_n`.

        The rest stays behind the reranked head unchanged: the reranker only vouches for what it
        scored, yet a deep evaluation (recall@100 behind a depth-50 reranker) must still see the
        retriever's tail. The retrieval score and rank of a reranked candidate are kept in
        `scores["retrieval"]` / `ranks["retrieval"]` so results stay explainable. With
        `fuse_weight > 0` the head's order (and `score`) is the reciprocal-rank blend of both
        orders; the threshold applies to the raw rerank score of scored candidates only.
        """
        head, tail = self._split(candidates)
        scores = self.score(query, [passage_text(c) for c in head]) if head else None
        return self._ranked(head, tail, scores, top_n)

    async def arank(self, query: str, candidates: Sequence[Candidate], top_n: int | None = None) -> list[Candidate]:
        """`rank` on an event loop: the scores from `ascore`, never computed on the loop itself."""
        head, tail = self._split(candidates)
        scores = await self.ascore(query, [passage_text(c) for c in head]) if head else None
        return self._ranked(head, tail, scores, top_n)

    async def ascore(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """`score` in a worker thread (a backend that awaits an engine overrides this)."""
        return await asyncio.to_thread(self.score, query, passages)

    def _split(self, candidates: Sequence[Candidate]) -> tuple[list[Candidate], list[Candidate]]:
        """The head the reranker scores (the first `depth`) and the tail it leaves in place."""
        cands = list(candidates)
        return cands[: self.cfg.depth], cands[self.cfg.depth :]

    def _ranked(self, head: list[Candidate], tail: list[Candidate], scores: Any, top_n: int | None
                ) -> list[Candidate]:
        out = self._rank_head(head, scores) + tail if head else []
        n = top_n if top_n is not None else self.cfg.top_n
        return out[:n] if n is not None else out

    def _rank_head(self, head: list[Candidate], raw_scores: Any) -> list[Candidate]:
        scores = np.asarray(raw_scores, dtype=np.float64)
        order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
        rerank_rank = {i: r for r, i in enumerate(order, 1)}
        final = scores
        w = self.cfg.fuse_weight
        if w > 0:
            final = np.asarray([blend(rerank_rank[i], i + 1, w, self.cfg.fuse_k) for i in range(len(head))])
            order = sorted(range(len(head)), key=lambda i: (-final[i], i))
        out: list[Candidate] = []
        for i in order:
            c, s = head[i], float(scores[i])
            if self.cfg.threshold is not None and s < self.cfg.threshold:
                continue
            extra = {"fused": float(final[i])} if w > 0 else {}
            out.append(dataclasses.replace(
                c, score=float(final[i]),
                scores={**c.scores, "retrieval": float(c.score), "rerank": s, **extra},
                ranks={**c.ranks, "retrieval": i + 1, "rerank": rerank_rank[i]}))
        return out

    def to_config(self) -> dict[str, Any]:
        return self.cfg.model_dump(mode="json")


def batched(items: Sequence, size: int):
    for i in range(0, len(items), size):
        yield items[i : i + size]


RERANKERS: Registry[Reranker] = Registry("reranker", {
    "none": "rerank.none", "cross-encoder": "rerank.cross_encoder", "bi-encoder": "rerank.bi_encoder",
    "llm": "rerank.llm"})
register = RERANKERS.register
