"""Chunkers by config `type`, built from a ChunkingConfig; several may run on each document."""

from __future__ import annotations

from ..config import ChunkingConfig, NoneSpec, RecursiveSpec, SlidingSpec, SmallToBigSpec
from ..tokens import TokenCounter
from ..types import Chunk, Document
from .base import Chunker, chunk_id, make_chunks
from .none import WholeDocChunker
from .recursive import RecursiveChunker
from .sliding import SlidingChunker
from .small_to_big import SmallToBigChunker

CHUNKERS: dict[str, type[Chunker]] = {
    "sliding": SlidingChunker,
    "recursive": RecursiveChunker,
    "small_to_big": SmallToBigChunker,
    "none": WholeDocChunker,
}

__all__ = [
    "CHUNKERS", "Chunker", "NoneSpec", "RecursiveSpec", "SlidingSpec", "SmallToBigSpec", "build_chunkers",
    "chunk_documents", "chunk_id", "make_chunks", "token_counter",
]


def token_counter(cfg: ChunkingConfig) -> TokenCounter:
    return TokenCounter(cfg.tokenizer, cfg.max_tokens)


def build_chunkers(cfg: ChunkingConfig, counter: TokenCounter | None = None) -> list[Chunker]:
    counter = counter or token_counter(cfg)
    return [CHUNKERS[spec.type](spec, counter, reserve_title=cfg.reserve_title)  # type: ignore[call-arg]
            for spec in cfg.chunkers]


def chunk_documents(docs: list[Document], chunkers: list[Chunker]) -> list[list[Chunk]]:
    """All chunks of each document, every chunker's output concatenated (multi-granularity)."""
    out: list[list[Chunk]] = [[] for _ in docs]
    # One tokenisation per batch, shared by every chunker using the same tokenizer.
    shared = chunkers[0].counter.doc_tokens_many([d.text for d in docs]) if chunkers else None
    if any(ch.reserve_title for ch in chunkers):
        chunkers[0].counter.count_many([d.title for d in docs if d.title])  # batch the title costs
    for ch in chunkers:
        tokens = shared if ch.counter is chunkers[0].counter else None
        for acc, chunks in zip(out, ch.chunk_many(docs, tokens), strict=True):
            acc.extend(chunks)
    return out
