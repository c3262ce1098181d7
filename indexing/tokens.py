"""Token counting with the embedder's own tokenizer.

Chunk limits are enforced in exactly the units the embedder truncates in, special tokens
included, so no chunk is silently cut at embedding time.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_left, bisect_right
from collections import OrderedDict

from .models import load_tokenizer


class DocTokens:
    """Token spans of one text: counts any character span by bisection, without re-tokenising.

    Exact when the span's ends fall between tokens of the whole-text tokenisation (always the
    case at whitespace, punctuation and CJK boundaries for WordPiece); chunks close to the limit
    are re-counted for real anyway.
    """

    def __init__(self, offsets: list[tuple[int, int]]):
        offs = [o for o in offsets if o[1] > o[0]]
        self.offsets = offs
        self.starts = [o[0] for o in offs]
        self.ends = [o[1] for o in offs]

    def __len__(self) -> int:
        return len(self.offsets)

    def count_span(self, a: int, b: int) -> int:
        return max(0, bisect_right(self.ends, b) - bisect_left(self.starts, a))

    def within(self, a: int, b: int) -> list[tuple[int, int]]:
        """Offsets of the tokens inside [a, b)."""
        return self.offsets[bisect_left(self.starts, a) : bisect_right(self.ends, b)]


def _splits_words(ch: str) -> bool:
    """Characters BERT's pre-tokenizer always cuts around: whitespace, punctuation, CJK ideographs."""
    if ch.isspace():
        return True
    o = ord(ch)
    if 33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126:
        return True
    if 0x4E00 <= o <= 0x9FFF or 0x3400 <= o <= 0x4DBF or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2FA1F:
        return True
    return unicodedata.category(ch).startswith("P")


def bert_boundary(text: str, pos: int) -> bool:
    """True when BERT pre-tokenisation of the whole text has a word break at `pos`, so a chunk
    cut there tokenises exactly as that part of the whole text did."""
    if pos <= 0 or pos >= len(text):
        return True
    return _splits_words(text[pos - 1]) or _splits_words(text[pos])


class TokenCounter:
    """Counts and locates tokens; `budget` is what a chunk may hold once [CLS]/[SEP] are added."""

    def __init__(self, tokenizer: str = "minilm", max_tokens: int = 256, cache_size: int = 200_000):
        self.name = tokenizer
        self.tok = load_tokenizer(tokenizer)
        self.max_tokens = max_tokens
        self.n_special = self.tok.num_special_tokens_to_add(False)
        self.budget = max_tokens - self.n_special
        # WordPiece behind a BERT pre-tokenizer with a per-character normaliser: a span cut at word
        # breaks has exactly the tokens the whole-text tokenisation gave it, no re-count needed.
        self.exact_spans = type(self.tok.pre_tokenizer).__name__ == "BertPreTokenizer"
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size

    def count(self, text: str) -> int:
        """Tokens of `text` without special tokens (memoised: splitters ask about the same pieces often)."""
        n = self._cache.get(text)
        if n is None:
            n = len(self.tok.encode(text, add_special_tokens=False).ids)
            self._cache[text] = n
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return n

    def count_many(self, texts: list[str]) -> list[int]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for t, enc in zip(missing, self.tok.encode_batch(missing, add_special_tokens=False), strict=True):
                self._cache[t] = len(enc.ids)
        return [self._cache[t] if t in self._cache else self.count(t) for t in texts]

    def offsets_many(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Character span of every token, one list per text (one batched tokenizer call)."""
        return [enc.offsets for enc in self.tok.encode_batch(texts, add_special_tokens=False)]

    def doc_tokens_many(self, texts: list[str]) -> list[DocTokens]:
        return [DocTokens(o) for o in self.offsets_many(texts)]

    def span_is_exact(self, text: str, a: int, b: int) -> bool:
        return self.exact_spans and bert_boundary(text, a) and bert_boundary(text, b)

    def fits(self, text: str) -> bool:
        return self.count(text) <= self.budget

    def full_length(self, text: str) -> int:
        """Length the embedder sees, special tokens included."""
        return self.count(text) + self.n_special
