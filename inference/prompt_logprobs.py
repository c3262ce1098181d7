"""Log-probabilities of the prompt's own tokens (vLLM's `prompt_logprobs`).

A prefill row at position p holds the model's prediction for position p + 1, so the scoring of a
whole prompt costs nothing beyond the LM head on its rows. Scorers use it (token surprisal for
prompt compression, perplexity) without a second copy of the model. Rows go through the LM head in
slices so a long prompt never materialises a [tokens, vocab] matrix at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from inference.sampling_params import SamplingParams

if TYPE_CHECKING:  # the batch shape only; the output processor records through this module
    from inference.scheduler import ScheduledBatch

ROWS_PER_SLICE = 256
Entry = tuple[int, dict[int, float]]  # (position, {token id: logprob}); the real token is always in
# one generated token is the least a request can ask for; only the prompt's scores are wanted
PROMPT_SCORING = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)


def prompt_token_logprobs(outputs) -> list[list[float]]:
    """Per output of a PROMPT_SCORING request: the logprob of each prompt token after the first."""
    return [[d[t] for t, d in zip(o.prompt_token_ids[1:], o.prompt_logprobs[1:], strict=True)] for o in outputs]


def wants_prompt_logprobs(seq) -> bool:
    return seq.params.prompt_logprobs is not None and seq.prompt_logprobs is not None


def collect(model, hidden: torch.Tensor, batch: ScheduledBatch) -> dict[int, list[Entry]]:
    """Per batch entry that asked for them: the prompt-token logprobs its rows produced this step."""
    out: dict[int, list[Entry]] = {}
    row = 0
    for i, (seq, n) in enumerate(zip(batch.seqs, batch.num_tokens, strict=True)):
        start = seq.num_computed_tokens
        m = min(start + n, seq.num_prompt_tokens - 1) - start  # rows that predict a prompt token
        if wants_prompt_logprobs(seq) and m > 0:
            out[i] = _rows(model, hidden[row: row + m], seq.token_ids[start + 1: start + 1 + m],
                           start + 1, seq.params.prompt_logprobs)
        row += n
    return out


def _rows(model, hidden: torch.Tensor, targets: list[int], first_pos: int, top_n: int) -> list[Entry]:
    entries: list[Entry] = []
    for a in range(0, len(targets), ROWS_PER_SLICE):
        h = hidden[a: a + ROWS_PER_SLICE]
        lp = torch.log_softmax(model.compute_logits(h).float(), -1).cpu()
        tgt = torch.tensor(targets[a: a + len(h)])
        own = lp.gather(1, tgt[:, None])[:, 0].tolist()
        tops = lp.topk(top_n, -1) if top_n else None
        for j, (t, v) in enumerate(zip(tgt.tolist(), own, strict=True)):
            d = {int(k): float(x) for k, x in zip(tops.indices[j].tolist(), tops.values[j].tolist(),
                                                    strict=True)} if tops is not None else {}
            d[int(t)] = float(v)
            entries.append((first_pos + a + j, d))
    return entries


def record(seq, entries: list[Entry]) -> None:
    """Append in position order; a recompute after preemption repeats positions, which are skipped."""
    for pos, d in entries:
        if pos == len(seq.prompt_logprobs):
            seq.prompt_logprobs.append(d)
