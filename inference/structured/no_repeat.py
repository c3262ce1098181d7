"""Ban any token that would complete an n-gram already present in the output (HF's
`no_repeat_ngram_size`).

Why: small models fall into loops ("1. The answer is: 1. The answer is: ..."); a repetition
penalty only discourages single tokens, and a strong one also discourages copying the passage
words a grounded answer needs. Banning an exact repeat of a long-enough n-gram stops loops and
leaves normal answers alone (a real answer rarely repeats six tokens verbatim).
"""

from __future__ import annotations

import torch


class NoRepeatNGram:
    """Per-request logits processor over the generated tokens only (the prompt may repeat)."""

    def __init__(self, n: int):
        if n < 2:
            raise ValueError("no_repeat_ngram must be at least 2")
        self.n = n
        self._seen: dict[tuple[int, ...], set[int]] = {}
        self._next_end = 0  # n-grams ending before this index are recorded

    def __call__(self, token_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
        n = self.n
        ids = list(token_ids)
        for end in range(max(self._next_end, n), len(ids) + 1):
            gram = ids[end - n:end]
            self._seen.setdefault(tuple(gram[:-1]), set()).add(gram[-1])
        self._next_end = max(self._next_end, len(ids) + 1)
        if len(ids) < n - 1:
            return logits
        banned = self._seen.get(tuple(ids[len(ids) - n + 1:]))
        if not banned:
            return logits
        idx = torch.tensor([t for t in banned if t < logits.shape[-1]], dtype=torch.long, device=logits.device)
        return logits.index_fill(-1, idx, float("-inf")) if idx.numel() else logits
