"""Small-to-big: small children are embedded and matched, their parent is sent to the generator.

"parent" mode cuts parents with a flat chunker (exempt from the embedder limit: parents are
never embedded) and children inside each parent, so a child span always lies in its parent's.
"sentence_window" mode makes each sentence a child whose parent is the sentence with `window`
neighbours on each side.
"""

from __future__ import annotations

from ..config import RecursiveSpec, SmallToBigSpec
from ..tokens import DocTokens, TokenCounter
from ..types import Chunk, Document
from .base import Chunker, Span, make_chunks
from .recursive import RecursiveChunker
from .sentences import sentence_spans
from .sliding import SlidingChunker


class SmallToBigChunker(Chunker):
    def __init__(self, spec: SmallToBigSpec, counter: TokenCounter, limit: int | None = None,
                 reserve_title: bool = False):
        super().__init__(counter, limit, reserve_title)
        self.spec = spec
        self.granularity = spec.granularity
        self.parent_granularity = spec.parent_granularity
        child = RecursiveSpec(chunk_size=spec.child_size, overlap=min(spec.child_overlap, spec.child_size - 1))
        self.child = RecursiveChunker(child, counter, reserve_title=reserve_title)
        if spec.mode == "parent":
            p = spec.parent
            big = max(p.chunk_size, self.limit)
            self.parent: RecursiveChunker | SlidingChunker = (
                RecursiveChunker(p, counter, limit=big) if p.type == "recursive" else SlidingChunker(p, counter, big)
            )

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_many([doc])[0]

    def chunk_many(self, docs: list[Document], tokens: list[DocTokens] | None = None) -> list[list[Chunk]]:
        tokens = tokens or self.counter.doc_tokens_many([d.text for d in docs])
        if self.spec.mode == "sentence_window":
            return [self._sentence_window(d, t) for d, t in zip(docs, tokens, strict=True)]
        return [self._parent_child(d, t) for d, t in zip(docs, tokens, strict=True)]

    def _parent_child(self, doc: Document, tokens: DocTokens) -> list[Chunk]:
        if isinstance(self.parent, RecursiveChunker):
            parent_spans = self.parent.spans_of(doc.text, tokens)
        else:
            parent_spans = self.parent.enforce_limit(doc.text, self.parent.spans(doc, tokens), None, tokens)
        parents = make_chunks(doc, parent_spans, self.parent_granularity, extra={"role": "parent"})
        child_spans: list[Span] = []
        owners: list[str | None] = []
        size = self.child.size_for(doc, self.child.size)
        for p in parents:
            spans = self.child.spans_of(doc.text, tokens, p.start, p.end, size)
            child_spans.extend(spans)
            owners.extend([p.chunk_id] * len(spans))
        children = make_chunks(doc, child_spans, self.granularity, owners, extra={"role": "child"})
        return parents + children

    def _sentence_window(self, doc: Document, tokens: DocTokens) -> list[Chunk]:
        limit = self.size_for(doc, self.limit)
        sentences: list[Span] = self.enforce_limit(doc.text, sentence_spans(doc.text), limit, tokens)
        w = self.spec.window
        windows = [
            (sentences[max(0, i - w)][0], sentences[min(len(sentences) - 1, i + w)][1])
            for i in range(len(sentences))
        ]
        parents = make_chunks(doc, windows, self.parent_granularity, extra={"role": "parent"})
        owners: list[str | None] = [p.chunk_id for p in parents]
        children = make_chunks(doc, sentences, self.granularity, owners, extra={"role": "child"})
        return parents + children
