"""`type: none`: keeps the retrieval order, so the pipeline never needs a special case."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from retrieval.types import Candidate

from .base import Reranker, register


@register("none")
class NoReranker(Reranker):
    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        # Descending by position: retrieval order is the ranking.
        return -np.arange(len(passages), dtype=np.float64)

    def fetch_depth(self, k: int) -> int:
        return k  # nothing is rescored, so nothing beyond k is worth fetching

    def rank(self, query: str, candidates: Sequence[Candidate], top_n: int | None = None) -> list[Candidate]:
        """Candidates untouched (scores, ranks), only cut to `top_n`."""
        n = top_n if top_n is not None else self.cfg.top_n
        out = list(candidates)
        return out[:n] if n is not None else out

    async def arank(self, query: str, candidates: Sequence[Candidate], top_n: int | None = None) -> list[Candidate]:
        return self.rank(query, candidates, top_n)  # nothing is scored: no worker thread to wait for
