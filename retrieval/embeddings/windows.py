"""Documents longer than the embedder's window: embed them by windows, score them by the mean.

sentence-transformers silently truncates at `max_seq_length`, so the end of a long document
(`chunkers: [{type: none}]`) never reaches the dense index. Instead we split it into consecutive
token windows that fit, embed each, and store the mean of the (unit) window vectors without
re-normalising: a query's dot product with that mean is exactly the mean of its cosine scores
with the windows (`retrieval.embedder.long_text: mean`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def split_windows(tokenizer: Any, texts: Sequence[str], budget: int) -> tuple[list[str], np.ndarray]:
    """(pieces, owner): every text cut into spans of at most `budget` content tokens (specials and
    prefix excluded by the caller); owner[i] is the index of the text piece i came from."""
    pieces: list[str] = []
    owner: list[int] = []
    # Cheap pre-check: a text with fewer characters than the budget cannot exceed it in tokens.
    long_idx = [i for i, t in enumerate(texts) if len(t) > budget]
    offsets: dict[int, list[tuple[int, int]]] = {}
    if long_idx:
        enc = tokenizer([texts[i] for i in long_idx], add_special_tokens=False, truncation=False,
                        return_offsets_mapping=True)
        for i, offs in zip(long_idx, enc["offset_mapping"], strict=True):
            if len(offs) > budget:
                offsets[i] = [tuple(o) for o in offs]
    for i, t in enumerate(texts):
        offs = offsets.get(i)
        if offs is None:
            pieces.append(t)
            owner.append(i)
            continue
        for s in range(0, len(offs), budget):
            window = offs[s : s + budget]
            pieces.append(t[window[0][0] : window[-1][1]])
            owner.append(i)
    return pieces, np.asarray(owner, dtype=np.int64)


def mean_by_owner(vecs: np.ndarray, owner: np.ndarray, n: int) -> np.ndarray:
    """Row-wise mean of the window vectors of each text (a single-window text keeps its vector)."""
    if len(owner) == n:
        return vecs
    out = np.zeros((n, vecs.shape[1]), dtype=np.float32)
    np.add.at(out, owner, vecs)
    counts = np.bincount(owner, minlength=n).astype(np.float32)
    return out / counts[:, None]
