"""One document, one chunk; a document over the token limit is split, never truncated."""

from __future__ import annotations

from ..config import NoneSpec
from ..tokens import DocTokens, TokenCounter
from ..types import Chunk, Document
from .base import Chunker, make_chunks


class WholeDocChunker(Chunker):
    def __init__(self, spec: NoneSpec, counter: TokenCounter, limit: int | None = None,
                 reserve_title: bool = False):
        super().__init__(counter, limit, reserve_title)
        self.granularity = spec.granularity

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_many([doc])[0]

    def chunk_many(self, docs: list[Document], tokens: list[DocTokens] | None = None) -> list[list[Chunk]]:
        texts = [d.text for d in docs]
        tokens = tokens or self.counter.doc_tokens_many(texts)
        limits = [self.size_for(d, self.limit) for d in docs]
        spans = self.enforce_limits(texts, [[(0, len(t))] for t in texts], limits, tokens)
        return [make_chunks(d, sp, self.granularity) for d, sp in zip(docs, spans, strict=True)]
