"""Retrieval result types shared with rerank/ and rag/.

A `Candidate` keeps the score of every retriever that saw it (and its 1-based rank there), so
hybrid results can be explained ("dense #3, bm25 #41") and rerankers can use the raw signals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from indexing.types import Chunk


@dataclass
class Candidate:
    chunk: Chunk
    score: float
    scores: dict[str, float] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)

    @property
    def chunk_id(self) -> str:
        return self.chunk.chunk_id

    @property
    def doc_id(self) -> str:
        return self.chunk.doc_id

    @property
    def text(self) -> str:
        return self.chunk.text

    def to_dict(self) -> dict[str, Any]:
        c = self.chunk
        meta: dict[str, Any] = {
            "source": c.source, "title": c.title, "date": c.date, "section": c.section, "page": c.page,
            "granularity": c.granularity, "parent_id": c.parent_id, "language": c.language,
            "scores": dict(self.scores), "ranks": dict(self.ranks),
        }
        meta.update(c.metadata)
        return {"chunk_id": c.chunk_id, "doc_id": c.doc_id, "score": float(self.score), "text": c.text,
                "metadata": meta}


@dataclass
class SearchResult:
    """Ranked candidates plus where the time went (ms per stage: embed, bm25, dense, fuse, fetch)."""

    candidates: list[Candidate]
    timings_ms: dict[str, float] = field(default_factory=dict)
    collections: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"results": [c.to_dict() for c in self.candidates],
                "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()}}
