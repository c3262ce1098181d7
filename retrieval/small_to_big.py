"""Small-to-big: match on small chunks, return the bigger context they belong to.

Small chunks embed and match precisely; generation wants the surrounding context. Child hits are
mapped to their parent chunk (`parent_id`), parents are deduplicated keeping the best child's score
(and the best per-retriever ranks). Sentence-window expansion instead widens a hit by N sentences
on each side, cut from the stored document text with the chunk's character offsets.
"""

from __future__ import annotations

import dataclasses
import re

from indexing.store_protocol import DocumentStoreProtocol

from .types import Candidate

_SENT_END = re.compile(r"[.!?]+[\"')\]”’]*(?=\s|$)|[。！？]+[」』”]?|\n{2,}")


def expand_to_parents(cands: list[Candidate], store: DocumentStoreProtocol, collection: str) -> list[Candidate]:
    parent_ids = list(dict.fromkeys(c.chunk.parent_id for c in cands if c.chunk.parent_id))
    parents = {p.chunk_id: p for p in store.get_chunks(parent_ids, collection)}
    out: dict[str, Candidate] = {}
    for c in cands:  # best first, so the first child seen gives the parent its score
        parent = parents.get(c.chunk.parent_id or "")
        if parent is None:
            key, chunk = c.chunk.chunk_id, c.chunk
        else:
            key = parent.chunk_id
            chunk = dataclasses.replace(parent, metadata={**parent.metadata, "matched_child": c.chunk.chunk_id})
        if key not in out:
            out[key] = Candidate(chunk=chunk, score=c.score, scores=dict(c.scores), ranks=dict(c.ranks))
        else:
            best = out[key]
            for r, s in c.scores.items():
                best.scores[r] = max(best.scores.get(r, s), s)
            for r, rk in c.ranks.items():
                best.ranks[r] = min(best.ranks.get(r, rk), rk)
    return sorted(out.values(), key=lambda c: -c.score)


def sentence_spans(text: str) -> list[tuple[int, int]]:
    """Character spans of sentences (end punctuation in Latin or CJK text, or a blank line)."""
    spans, start = [], 0
    for m in _SENT_END.finditer(text):
        if text[start : m.end()].strip():
            spans.append((start, m.end()))
        start = m.end()
    if text[start:].strip():
        spans.append((start, len(text)))
    return spans


def sentence_window(cands: list[Candidate], store: DocumentStoreProtocol, collection: str, n: int) -> list[Candidate]:
    """Replace each hit's text by the hit plus `n` sentences before and after it in its document."""
    if n <= 0:
        return cands
    docs: dict[str, str] = {}
    out = []
    for c in cands:
        ch = c.chunk
        if ch.doc_id not in docs:
            d = store.get_document(ch.doc_id, collection)
            docs[ch.doc_id] = d["text"] if d else ""
        text = docs[ch.doc_id]
        spans = sentence_spans(text)
        inside = [i for i, (s, e) in enumerate(spans) if e > ch.start and s < ch.end]
        if not text or not inside:
            out.append(c)
            continue
        lo, hi = max(0, inside[0] - n), min(len(spans) - 1, inside[-1] + n)
        start, end = min(spans[lo][0], ch.start), max(spans[hi][1], ch.end)
        meta = {**ch.metadata, "matched_text": ch.text, "window": [start, end]}
        new = dataclasses.replace(ch, text=text[start:end], start=start, end=end, metadata=meta)
        out.append(Candidate(chunk=new, score=c.score, scores=c.scores, ranks=c.ranks))
    return out
