"""Text analyzer for BM25: one pass that handles English words and CJK runs in the same string.

Whitespace tokenisers give one giant token per Chinese sentence, so BM25 scores 0 on Chinese
queries (the failure reported in llama_index #13866). Here CJK runs become overlapping character
bigrams plus unigrams (the CJKAnalyzer approach): no dictionary needed, and a two-character word
in the query matches the same bigram in the document.

Traditional and Simplified Chinese write many of the same words with different characters (學/学,
語/语), so a Simplified query shares few bigrams with a Traditional document (DRCD dev with its
queries converted to Simplified: BM25 nDCG@10 0.96 -> 0.85). `cjk_fold: simplified` maps every
Han character to its Simplified form before the bigrams are built, in documents and queries
alike, the way `lowercase` folds case. Chosen over converting the query to "the collection's
script" because folding needs no guess of which script a collection (or a mixed one, or one
chunk) is written in, treats both directions the same, and costs one `str.translate`. Folding goes
to Simplified because that direction is many-to-one and needs no context (後/后 -> 后, 乾/幹 -> 干);
Simplified -> Traditional is one-to-many (发 -> 發 or 髮) and would need a phrase dictionary. The
table is the character part of zhconv's zh2Hans table (8,505 one-character entries, no chains:
a folded character never folds again, so a query already in Simplified is left as written).
The merged characters cost nothing measurable on Traditional DRCD (docs/results.md).
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

from indexing.language import CJK_RANGES as _CJK

from .config import AnalyzerConfig

_WORD = rf"[^\W_{_CJK}]+(?:['’][^\W_{_CJK}]+)*"
_TOKEN_RE = re.compile(rf"([{_CJK}]+)|({_WORD})")
_WORD_RE = re.compile(_WORD)
_HAS_CJK = re.compile(rf"[{_CJK}]")

ENGLISH_STOPWORDS = frozenset([
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "as",
    "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can",
    "could", "did", "do", "does", "doing", "down", "during", "each", "few", "for", "from", "further",
    "had", "has", "have", "having", "he", "her", "here", "hers", "herself", "him", "himself", "his",
    "how", "i", "if", "in", "into", "is", "it", "its", "itself", "just", "me", "more", "most", "my",
    "myself", "no", "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "our",
    "ours", "ourselves", "out", "over", "own", "same", "she", "should", "so", "some", "such", "than",
    "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this",
    "those", "through", "to", "too", "under", "until", "up", "very", "was", "we", "were", "what",
    "when", "where", "which", "while", "who", "whom", "why", "will", "with", "would", "you", "your",
    "yours", "yourself", "yourselves",
])


@lru_cache(maxsize=1)
def simplified_table() -> dict[int, str]:
    """Traditional -> Simplified, one character to one character (for `str.translate`)."""
    import json
    import pkgutil

    data = pkgutil.get_data("zhconv", "zhcdict.json")
    if data is None:
        raise FileNotFoundError("zhconv's zhcdict.json is missing (pip install zhconv)")
    table = json.loads(data.decode("utf-8"))["zh2Hans"]
    return {ord(k): v for k, v in table.items() if len(k) == 1 and len(v) == 1 and k != v}


@lru_cache(maxsize=4)
def _stemmer(lang: str):
    import Stemmer  # PyStemmer: C snowball stemmer, ~50x faster than nltk's

    return Stemmer.Stemmer(lang)


class Analyzer:
    """Turns text into index terms. Deterministic and picklable by config, so the index can
    check on load that it is read with the analyzer it was built with (`fingerprint`)."""

    def __init__(self, cfg: AnalyzerConfig | None = None):
        self.cfg = cfg or AnalyzerConfig()
        self._stem = _stemmer(self.cfg.stemming) if self.cfg.stemming else None
        self._stop = ENGLISH_STOPWORDS if self.cfg.stopwords == "english" else frozenset()
        self._fold = simplified_table() if self.cfg.cjk_fold == "simplified" else None

    @property
    def fingerprint(self) -> str:
        return self.cfg.model_dump_json()

    def __call__(self, text: str) -> list[str]:
        return self.analyze(text)

    def analyze(self, text: str) -> list[str]:
        cfg = self.cfg
        text = unicodedata.normalize("NFKC", text)
        if cfg.lowercase:
            text = text.lower()
        if _HAS_CJK.search(text) is None:  # fast path: one C-level findall, no per-token branching
            words = [w for w in _WORD_RE.findall(text) if w not in self._stop and len(w) >= cfg.min_token_len]
            return self._stem.stemWords(words) if self._stem is not None and words else words
        if self._fold is not None:
            text = text.translate(self._fold)
        out: list[str] = []
        words: list[str] = []
        word_pos: list[int] = []
        for cjk, word in _TOKEN_RE.findall(text):
            if cjk:
                out.extend(self._cjk_terms(cjk))
            elif len(word) >= cfg.min_token_len and word not in self._stop:
                word_pos.append(len(out))
                out.append(word)
                words.append(word)
        if self._stem is not None and words:
            for pos, stemmed in zip(word_pos, self._stem.stemWords(words), strict=True):
                out[pos] = stemmed
        return out

    def _cjk_terms(self, run: str) -> list[str]:
        mode = self.cfg.cjk
        if len(run) == 1 or mode == "unigram":
            return list(run)
        bigrams = [run[i : i + 2] for i in range(len(run) - 1)]
        if mode == "bigram":
            return bigrams
        return list(run) + bigrams
