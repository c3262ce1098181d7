"""Boundary-aware recursive splitting (langchain-text-splitters) with a token length function.

langchain tries paragraph, line, sentence (CJK and Latin), clause and word separators in turn;
keeping each separator at the end of its piece makes every chunk a verbatim slice of the text,
so exact character spans can be recovered. Lengths come from one tokenisation of the whole
document (a bisection per piece instead of a tokenizer call); chunks near the limit are then
re-counted for real and re-split if needed.
"""

from __future__ import annotations

from collections.abc import Callable

from langchain_text_splitters import RecursiveCharacterTextSplitter

from ..config import RecursiveSpec
from ..tokens import DocTokens, TokenCounter
from ..types import Chunk, Document
from .base import Chunker, Span
from .sentences import RECURSIVE_SEPARATORS


class RecursiveChunker(Chunker):
    def __init__(self, spec: RecursiveSpec, counter: TokenCounter, limit: int | None = None,
                 reserve_title: bool = False):
        super().__init__(counter, limit, reserve_title)
        self.use_spec(spec)
        self.overlap = min(spec.overlap, self.size - 1)
        self.separators = spec.separators or RECURSIVE_SEPARATORS
        self.regex = spec.separators_are_regex if spec.separators else True

    def splitter(self, length: Callable[[str], int], size: int | None = None) -> RecursiveCharacterTextSplitter:
        size = size or self.size
        return RecursiveCharacterTextSplitter(
            chunk_size=size,
            chunk_overlap=self.overlap if size >= self.size else self.overlap * size // self.size,
            length_function=length,
            separators=self.separators,
            keep_separator="end",
            is_separator_regex=self.regex,
            strip_whitespace=True,
        )

    def _length_fn(self, text: str, tokens: DocTokens, base: int = 0) -> Callable[[str], int]:
        """Token length of a piece of `text`, located by search (pieces arrive roughly in order)."""
        cache: dict[str, int] = {}
        hint = [base]

        def length(piece: str) -> int:
            n = cache.get(piece)
            if n is None:
                at = text.find(piece, hint[0])
                if at < 0:
                    at = text.find(piece)
                if at < 0:
                    n = self.counter.count(piece)
                else:
                    hint[0] = at
                    n = tokens.count_span(at, at + len(piece))
                    if n == 0 and piece.strip():
                        n = self.counter.count(piece)
                cache[piece] = n
            return n

        return length

    def raw_spans(self, text: str, tokens: DocTokens, base: int = 0, end: int | None = None,
                  size: int | None = None) -> list[Span]:
        """Spans of langchain's pieces of text[base:end], as offsets into `text` (not yet verified)."""
        end = len(text) if end is None else end
        piece = text[base:end]
        spans: list[Span] = []
        cursor = 0
        splitter = self.splitter(self._length_fn(text, tokens, base), size)
        overlap = splitter._chunk_overlap
        for part in splitter.split_text(piece):
            at = piece.find(part, cursor)
            if at < 0:  # cannot happen with keep_separator="end"; fall back to a global search
                at = piece.find(part)
                if at < 0:
                    raise RuntimeError("recursive splitter returned text not found in the document")
            elif spans and piece.find(part, at + 1) >= 0:
                at = self._locate_repeated(piece, part, cursor, spans[-1][0] - base, spans[-1][1] - base,
                                           at, tokens, base, overlap)
            spans.append((base + at, base + at + len(part)))
            cursor = at + 1
        tail = piece.rstrip()
        if spans and spans[-1][1] - base < len(tail) and tail.endswith(part):
            # Repeated text misplaced the last piece; the splitter always ends at the text's end.
            spans[-1] = (base + len(tail) - len(part), base + len(tail))
        return spans

    def _locate_repeated(self, piece: str, part: str, cursor: int, prev_a: int, prev_b: int, first: int,
                         tokens: DocTokens, base: int, overlap: int) -> int:
        """Repeated text: take the occurrence that overlaps the previous chunk by at most `overlap`
        tokens (langchain's merge never carries more), not an earlier copy inside it."""
        min_start = prev_b
        if overlap:
            inside = tokens.within(base + prev_a, base + prev_b)
            if inside:
                min_start = inside[max(0, len(inside) - overlap)][0] - base
        at = piece.find(part, max(cursor, min_start))
        return at if at >= 0 else first

    def spans_of(self, text: str, tokens: DocTokens | None = None, base: int = 0, end: int | None = None,
                 size: int | None = None) -> list[Span]:
        tokens = tokens or self.counter.doc_tokens_many([text])[0]
        size = size or self.size
        return self.enforce_limit(text, self.raw_spans(text, tokens, base, end, size), size, tokens)

    def chunk(self, doc: Document) -> list[Chunk]:
        return self.chunk_many([doc])[0]

    def chunk_many(self, docs: list[Document], tokens: list[DocTokens] | None = None) -> list[list[Chunk]]:
        return self.chunk_sized(docs, tokens, lambda d, tk, n: self.raw_spans(d.text, tk, size=n))
