"""What every chunker shares: spans -> Chunk objects with full metadata, and the token guard.

Chunkers only decide character spans; this module turns spans into chunks (stable ids, section,
page, language, user metadata) and enforces the embedder's token limit, re-splitting any span
that would be truncated instead of letting it through.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ..language import detect_language
from ..tokens import DocTokens, TokenCounter
from ..types import Chunk, Document
from .windows import token_windows

Span = tuple[int, int]
# Estimated counts this close to the limit are verified by re-tokenising the chunk alone.
MARGIN = 16
# Smallest chunk a very long title can squeeze a chunk down to (beyond that the title itself is cut).
MIN_SIZE = 32


def strip_span(text: str, a: int, b: int) -> Span:
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def chunk_id(doc_id: str, granularity: str, n: int) -> str:
    return f"{doc_id}#{granularity}#{n}"


def make_chunks(
    doc: Document,
    spans: list[Span],
    granularity: str,
    parent_ids: list[str | None] | None = None,
    extra: dict[str, Any] | None = None,
) -> list[Chunk]:
    """Chunks for the given spans; `text == doc.text[start:end]` exactly (spans are stripped)."""
    out: list[Chunk] = []
    for i, (a0, b0) in enumerate(spans):
        a, b = strip_span(doc.text, a0, b0)
        if b <= a:
            continue
        text = doc.text[a:b]
        meta = dict(doc.metadata)
        if extra:
            meta.update(extra)
        page = doc.page_at(a)
        if page is not None and (last := doc.page_at(b - 1)) != page:
            meta["page_end"] = last  # the chunk runs over a page break; `page` is where it starts
        out.append(Chunk(
            chunk_id=chunk_id(doc.doc_id, granularity, len(out)),
            doc_id=doc.doc_id,
            text=text,
            start=a,
            end=b,
            granularity=granularity,
            parent_id=parent_ids[i] if parent_ids else None,
            source=doc.source,
            title=doc.title,
            date=doc.date,
            section=doc.section_at(a),
            page=page,
            language=detect_language(text, sample=600),
            metadata=meta,
        ))
    return out


class Chunker(ABC):
    """One chunking strategy; `granularity` names the chunks it makes (several may run at once)."""

    granularity: str = "default"

    def __init__(self, counter: TokenCounter, limit: int | None = None, reserve_title: bool = False):
        self.counter = counter
        # Content tokens allowed per chunk: the embedder budget unless a caller (parents) says so.
        self.limit = counter.budget if limit is None else limit
        self.reserve_title = reserve_title

    def use_spec(self, spec) -> None:
        """Common setup of the windowed chunkers: name, target size within the token limit."""
        self.spec = spec
        self.granularity = spec.granularity
        self.size = min(spec.chunk_size, self.limit)
        self.limit = max(self.limit, self.size)

    def chunk_sized(self, docs: list[Document], tokens: list[DocTokens] | None, spans_of) -> list[list[Chunk]]:
        """Batch driver of the windowed chunkers: per-document size (title room), raw spans from
        `spans_of(doc, tokens, size)`, then the hard token limit."""
        texts = [d.text for d in docs]
        tokens = tokens or self.counter.doc_tokens_many(texts)
        sizes = [self.size_for(d, self.size) for d in docs]
        raw = [spans_of(d, t, n) for d, t, n in zip(docs, tokens, sizes, strict=True)]
        spans = self.enforce_limits(texts, raw, sizes, tokens)
        return [make_chunks(d, sp, self.granularity) for d, sp in zip(docs, spans, strict=True)]

    def size_for(self, doc: Document, size: int) -> int:
        """Content tokens for this document's chunks: `size`, less what the title takes when the
        retriever prepends it ("title\ntext") and the two would not fit the embedder together."""
        if not self.reserve_title or not doc.title:
            return size
        room = self.counter.budget - self.counter.count(doc.title) - 1
        return max(MIN_SIZE, min(size, room))

    @abstractmethod
    def chunk(self, doc: Document) -> list[Chunk]:
        """Chunks of one (cleaned) document."""

    def chunk_many(self, docs: list[Document], tokens: list[DocTokens] | None = None) -> list[list[Chunk]]:
        """Chunks of several documents; backends override this to batch tokenizer calls and reuse
        `tokens` (whole-text token maps shared by all chunkers of a multi-granularity run)."""
        return [self.chunk(d) for d in docs]

    def enforce_limit(self, text: str, spans: list[Span], limit: int | None = None,
                      tokens: DocTokens | None = None) -> list[Span]:
        return self.enforce_limits([text], [spans], limit, [tokens] if tokens else None)[0]

    def enforce_limits(self, texts: list[str], spans: list[list[Span]], limit: int | list[int] | None = None,
                       tokens: list[DocTokens] | None = None) -> list[list[Span]]:
        """Strip spans and re-split any whose real token count (re-tokenised alone) is over the limit.

        With whole-text token maps only spans estimated within MARGIN of the limit are re-counted
        (in one batched call); the rest are provably far enough below it.
        """
        limit = self.limit if limit is None else limit
        limits = limit if isinstance(limit, list) else [limit] * len(texts)
        stripped = [[strip_span(t, a, b) for a, b in sp] for t, sp in zip(texts, spans, strict=True)]
        stripped = [[(a, b) for a, b in sp if b > a] for sp in stripped]
        suspects, over = [], set()
        for d, sp in enumerate(stripped):
            for i, (a, b) in enumerate(sp):
                if tokens is None:
                    suspects.append((d, i))
                    continue
                est = tokens[d].count_span(a, b)
                if self.counter.span_is_exact(texts[d], a, b):
                    if est > limits[d]:
                        over.add((d, i))
                elif est > limits[d] - MARGIN:
                    suspects.append((d, i))
        counts = self.counter.count_many([texts[d][slice(*stripped[d][i])] for d, i in suspects])
        over |= {(d, i) for (d, i), n in zip(suspects, counts, strict=True) if n > limits[d]}
        if not over:
            return stripped
        return [
            [piece for i, (a, b) in enumerate(sp)
             for piece in (self.split_to_fit(texts[d], a, b, limits[d], tokens[d] if tokens else None)
                           if (d, i) in over else [(a, b)])]
            for d, sp in enumerate(stripped)
        ]

    def split_to_fit(self, text: str, a: int, b: int, limit: int, tokens: DocTokens | None = None) -> list[Span]:
        """Token windows over text[a:b], each verified (or exact) and shrunk until it fits."""
        if tokens is not None:
            offsets = [(s - a, e - a) for s, e in tokens.within(a, b)]
        else:
            offsets = self.counter.offsets_many([text[a:b]])[0]
        piece = text[a:b]
        size = limit
        while True:
            spans = [(a + s, a + e) for s, e in token_windows(piece, offsets, size)]
            check = [(s, e) for s, e in spans if not (tokens and self.counter.span_is_exact(text, s, e))]
            if all(n <= limit for n in self.counter.count_many([text[s:e] for s, e in check])):
                return spans
            size -= max(1, size // 16)  # word-piece effects at cut points: retry a bit smaller
            if size < 1:
                raise RuntimeError("cannot split text under the token limit")
