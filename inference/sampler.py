"""Token selection from a batch of logits rows, one row per sequence.

Row-wise features (penalties, logits processors, per-request seeds) are applied only to the rows
that ask for them; temperature / top-k / top-p / min-p are vectorised over the batch. Sampling
uses the exponential-race trick (argmax of p / Exp(1) noise) so a per-request torch.Generator
gives reproducible draws regardless of which other requests share the batch.
"""

from __future__ import annotations

import torch

from inference.sequence import Sequence


def apply_penalties(logits: torch.Tensor, seq: Sequence) -> torch.Tensor:
    p = seq.params
    vocab = logits.shape[-1]
    out_ids = torch.tensor(seq.output_token_ids, dtype=torch.long, device=logits.device)
    out_ids = out_ids[out_ids < vocab]
    if p.repetition_penalty != 1.0:
        seen = torch.tensor(sorted(set(seq.token_ids)), dtype=torch.long, device=logits.device)
        seen = seen[seen < vocab]
        vals = logits[seen]
        logits[seen] = torch.where(vals > 0, vals / p.repetition_penalty, vals * p.repetition_penalty)
    if out_ids.numel() and (p.presence_penalty or p.frequency_penalty):
        counts = torch.bincount(out_ids, minlength=vocab).to(logits.dtype)
        logits -= p.frequency_penalty * counts + p.presence_penalty * (counts > 0).to(logits.dtype)
    return logits


def _filter(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """Mask tokens outside top-k / nucleus / min-p with -inf (rows where disabled are untouched)."""
    vocab = logits.shape[-1]
    if bool((top_k > 0).any()) or bool((top_p < 1).any()):
        sorted_logits, idx = logits.sort(dim=-1, descending=True)
        ranks = torch.arange(vocab, device=logits.device).expand_as(sorted_logits)
        k = torch.where(top_k > 0, top_k, torch.full_like(top_k, vocab))
        drop = ranks >= k[:, None]
        probs = sorted_logits.masked_fill(drop, float("-inf")).softmax(-1)
        cum = probs.cumsum(-1) - probs  # mass strictly before each token
        drop |= cum > top_p[:, None]
        logits = logits.scatter(-1, idx, sorted_logits.masked_fill(drop, float("-inf")))
    if bool((min_p > 0).any()):
        probs = logits.softmax(-1)
        thresh = probs.max(-1, keepdim=True).values * min_p[:, None]
        logits = logits.masked_fill(probs < thresh, float("-inf"))
    return logits


def sample(logits: torch.Tensor, seqs: list[Sequence], eos_token_ids: set[int]) -> list[int]:
    """Choose one token per row. `logits` is float32 [N, vocab] and may be modified."""
    for i, seq in enumerate(seqs):
        p = seq.params
        if p.needs_penalties:
            logits[i] = apply_penalties(logits[i], seq)
        for proc in p.logits_processors:
            logits[i] = proc(seq.output_token_ids, logits[i])
        if p.min_tokens and seq.num_output_tokens < p.min_tokens:
            for t in eos_token_ids | set(p.stop_token_ids):
                if t < logits.shape[-1]:
                    logits[i, t] = float("-inf")
    greedy = [s.params.greedy for s in seqs]
    choice = logits.argmax(-1)
    if all(greedy):
        return choice.tolist()
    dev = logits.device
    rows = [i for i, g in enumerate(greedy) if not g]
    sub = logits[rows]
    temp = torch.tensor([seqs[i].params.temperature for i in rows], device=dev, dtype=sub.dtype)
    sub = sub / temp[:, None]
    sub = _filter(
        sub,
        torch.tensor([seqs[i].params.top_k for i in rows], device=dev),
        torch.tensor([seqs[i].params.top_p for i in rows], device=dev, dtype=sub.dtype),
        torch.tensor([seqs[i].params.min_p for i in rows], device=dev, dtype=sub.dtype),
    )
    probs = sub.softmax(-1)
    noise = torch.empty_like(probs)
    for j, i in enumerate(rows):
        gen = seqs[i].generator
        noise[j].exponential_(generator=gen)
    picked = (probs / noise).argmax(-1)
    choice[rows] = picked
    return choice.tolist()


def token_logprobs(logits: torch.Tensor, chosen: list[int], top_n: list[int | None]) -> list[dict[int, float] | None]:
    """Logprob of the chosen token plus the top-N alternatives, from the raw model logits."""
    want = [i for i, n in enumerate(top_n) if n is not None]
    out: list[dict[int, float] | None] = [None] * len(chosen)
    if not want:
        return out
    lp = torch.log_softmax(logits[want].float(), dim=-1)
    k = max(top_n[i] for i in want)
    top_v, top_i = lp.topk(max(k, 1), dim=-1) if k else (None, None)
    for j, i in enumerate(want):
        d = {chosen[i]: float(lp[j, chosen[i]])}
        if top_n[i]:
            for v, t in zip(top_v[j, :top_n[i]].tolist(), top_i[j, :top_n[i]].tolist(), strict=True):
                d.setdefault(t, v)
        out[i] = d
    return out
