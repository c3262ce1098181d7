"""Sliding windows measured in the embedder's tokens, with overlap.

All documents of a batch are tokenised in one call (offsets included); windows are then cut
from the offsets, snapped to sentence/word ends, and each is re-counted alone as a guard.
"""

from __future__ import annotations

from ..config import SlidingSpec
from ..tokens import DocTokens, TokenCounter
from ..types import Chunk, Document
from .base import Chunker
from .windows import token_windows


class SlidingChunker(Chunker):
    def __init__(self, spec: SlidingSpec, counter: TokenCounter, limit: int | None = None,
                 reserve_title: bool = False):
        super().__init__(counter, limit, reserve_title)
        self.use_spec(spec)

    def spans(self, doc: Document, tokens: DocTokens, size: int | None = None) -> list[tuple[int, int]]:
        size = size or self.size
        overlap = self.spec.overlap if size >= self.size else self.spec.overlap * size // self.size
        return token_windows(doc.text, tokens.offsets, size, overlap)

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_many([doc])[0]

    def chunk_many(self, docs: list[Document], tokens: list[DocTokens] | None = None) -> list[list[Chunk]]:
        return self.chunk_sized(docs, tokens, self.spans)
