"""Sentence and word boundaries shared by the chunkers (Latin and CJK punctuation).

A boundary after CJK punctuation needs no following space; after Latin punctuation it does,
so "3.5", "e.g.x" and URLs are not split.
"""

from __future__ import annotations

import re

CJK_TERMINATORS = "。！？；．"
LATIN_TERMINATORS = ".!?;"
TERMINATORS = frozenset(CJK_TERMINATORS + LATIN_TERMINATORS + "!?;")
CLOSERS = frozenset("\"'”’)]}»」』】")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef\u3000-\u303f]")

# End of a sentence: terminators, optional closers, then whitespace/end (Latin) or anything (CJK).
_SENT_END = re.compile(
    r"(?:[.!?;]+[\"'”’)\]}»]*(?=\s|$)|[。！？；．]+[\"'”’)\]}»」』】]*|\n\s*\n)"
)

_ABBREV = re.compile(r"\b(?:e\.g|i\.e|et al|vs|cf|fig|figs|eq|dr|mr|mrs|ms|prof|vol|approx)\.$", re.I)

# Separators for langchain's recursive splitter (regular expressions), coarsest first:
# paragraph, line, sentence, clause, word, character. All sentence terminators share one level
# (CJK 。！？；and full-width ．, Latin . ! ? ; followed by a space, ASCII !?; right after CJK as
# NFKC leaves them), so a text mixing them is cut at every sentence end, not only at the first kind.
_CJK_CHARS = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af"
RECURSIVE_SEPARATORS = [
    r"\n\s*\n",
    r"\n",
    r"[。！？；．]+[”’」』）)]*|[.!?;]+[\"'”’)\]]*\s+|(?<=[" + _CJK_CHARS + r"])[!?;]+",
    r"[，、]|,\s+|(?<=[" + _CJK_CHARS + r"]),",
    r"\s+",
    "",
]


def is_cjk(ch: str) -> bool:
    return bool(_CJK.match(ch))


def sentence_spans(text: str, start: int = 0, end: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each sentence in text[start:end], whitespace trimmed, none empty."""
    end = len(text) if end is None else end
    spans, pos = [], start
    for m in _SENT_END.finditer(text, start, end):
        if m.group().startswith(".") and _ABBREV.search(text, max(start, m.start() - 8), m.start() + 1):
            continue  # "e.g." / "et al." / "Fig." do not end a sentence
        spans.append((pos, m.end()))
        pos = m.end()
    spans.append((pos, end))
    out = []
    for a, b in spans:
        while a < b and text[a].isspace():
            a += 1
        while b > a and text[b - 1].isspace():
            b -= 1
        if b > a:
            out.append((a, b))
    return out


def sentence_ends(text: str) -> set[int]:
    """Character offsets right after each sentence (where a cut keeps sentences whole)."""
    return {b for _, b in sentence_spans(text)}
