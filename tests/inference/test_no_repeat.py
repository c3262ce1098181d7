"""No-repeat n-gram ban: loops are cut, everything else is untouched."""

from __future__ import annotations

import torch

from inference.structured.no_repeat import NoRepeatNGram


def test_bans_only_the_token_that_would_repeat_an_ngram():
    """Catches a ban that misses the loop, or one that also hits unrelated tokens."""
    p = NoRepeatNGram(3)
    out = p([1, 2, 3, 1, 2], torch.zeros(10))
    assert torch.isinf(out[3]) and int(torch.isinf(out).sum()) == 1
    assert not torch.isinf(p([1, 2, 3, 1, 2, 4], torch.zeros(10))).any()


def test_greedy_loop_is_broken():
    """Catches a processor that lets a greedy model cycle forever."""
    p = NoRepeatNGram(4)
    ids: list[int] = []
    for _ in range(40):
        logits = torch.zeros(8)
        logits[len(ids) % 3] = 5.0  # the model "wants" 0 1 2 0 1 2 ...
        logits[7] = 1.0
        ids.append(int(p(ids, logits).argmax()))
    grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    assert len(grams) == len(set(grams))
