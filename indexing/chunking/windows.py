"""Token windows over a document, cut at the best boundary inside each window.

Offsets come from one tokenizer call over the whole text, so a window is a run of real tokens
and never holds more than `size`; the cut moves back to the last sentence end (else word end)
in the second half of the window, so sentences stay whole whenever one fits.
"""

from __future__ import annotations

from .sentences import TERMINATORS, is_cjk, sentence_ends


def _word_gap(text: str, offsets: list[tuple[int, int]], k: int) -> bool:
    """True when a cut between token k-1 and token k falls between words (space or CJK)."""
    a, b = offsets[k - 1][1], offsets[k][0]
    if b > a:
        return True  # whitespace (or dropped characters) between the tokens
    return is_cjk(text[a - 1 : a]) or is_cjk(text[b : b + 1])


def _after_punct(text: str, offsets: list[tuple[int, int]], k: int) -> bool:
    """Weaker break: right after punctuation and before a word ("x-|y", "a,|b"), never before it."""
    a = offsets[k - 1][1]
    prev, nxt = text[a - 1 : a], text[offsets[k][0] : offsets[k][0] + 1]
    return bool(prev) and not prev.isalnum() and nxt.isalnum()


def token_windows(
    text: str,
    offsets: list[tuple[int, int]],
    size: int,
    overlap: int = 0,
    snap: bool = True,
) -> list[tuple[int, int]]:
    """Character spans of windows of at most `size` tokens with about `overlap` tokens shared."""
    offsets = [o for o in offsets if o[1] > o[0]]
    n = len(offsets)
    if n == 0:
        return []
    ends = sentence_ends(text) if snap else set()
    spans: list[tuple[int, int]] = []
    i = 0
    while i < n:
        j = min(i + size, n)
        k = j
        if snap and j < n:
            lo = i + max(1, size // 2)
            window = range(j, lo - 1, -1)
            k = (next((c for c in window if _sentence_cut(text, offsets, c, ends)), None)
                 or next((c for c in window if _word_gap(text, offsets, c)), None)
                 or next((c for c in window if _after_punct(text, offsets, c)), None)
                 or j)
        spans.append((offsets[i][0], offsets[k - 1][1]))
        if k >= n:
            break
        i = _next_start(text, offsets, i, k, overlap, size, ends) if snap else max(k - overlap, i + 1)
    return spans


def _next_start(text: str, offsets: list[tuple[int, int]], i: int, k: int, overlap: int, size: int,
                ends: set[int]) -> int:
    """Where the next window opens: about `overlap` tokens back, on a sentence or word start."""
    raw = max(k - overlap, i + 1)
    if overlap == 0:
        return raw
    # Prefer the longest overlap that starts a sentence, then the nearest whole word.
    for c in range(raw, k):
        if c > i and _sentence_cut(text, offsets, c, ends):
            return c
    c = raw
    while c > i + 1 and k - c <= overlap + size // 4:
        if offsets[c - 1][1] < offsets[c][0] or is_cjk(text[offsets[c][0]]):
            return c
        c -= 1
    return raw


def _sentence_cut(text: str, offsets: list[tuple[int, int]], k: int, ends: set[int]) -> bool:
    end = offsets[k - 1][1]
    if end in ends:
        return True
    return text[end - 1 : end] in TERMINATORS and is_cjk(text[end - 1 : end])
