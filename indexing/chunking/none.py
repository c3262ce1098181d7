"""One document, one chunk, whatever `max_tokens` says.

`type: none` used to split documents over `max_tokens` (256), so it meant "whole documents"
only when `max_tokens` was raised too. Now the chunk is always the whole document; a document
longer than the embedder's window is embedded by windows and pooled (`retrieval.embedder.
long_text`), and BM25 scores it whole.
"""

from __future__ import annotations

from ..config import NoneSpec
from ..tokens import DocTokens, TokenCounter
from ..types import Chunk, Document
from .base import Chunker, make_chunks, strip_span


class WholeDocChunker(Chunker):
    def __init__(self, spec: NoneSpec, counter: TokenCounter, limit: int | None = None,
                 reserve_title: bool = False):
        super().__init__(counter, limit, reserve_title)
        self.granularity = spec.granularity

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_many([doc])[0]

    def chunk_many(self, docs: list[Document], tokens: list[DocTokens] | None = None) -> list[list[Chunk]]:
        spans = [[(a, b)] if b > a else [] for a, b in (strip_span(d.text, 0, len(d.text)) for d in docs)]
        return [make_chunks(d, sp, self.granularity) for d, sp in zip(docs, spans, strict=True)]
