"""The output half of an engine step: what happens to the logits `ModelRunner.run` returned.

nano-vllm's step is schedule -> run -> postprocess; this is the postprocess. In order: the
prompt log-probs the runner computed are recorded (output bookkeeping, so the scheduler only
schedules), n > 1 samples fork off their parent once its prompt is computed (sharing its blocks,
copy-on-write), first-token candidate log-probs are read, one token per row is sampled (penalties, logits
processors such as the JSON-schema / grounded-span constraints, seeds: `sampler.sample`),
requested log-probs are attached, and each sequence either finishes (stop token, stop string,
length), shifts its context (requeued, recomputed) or stays running. Sequence placement goes
through the scheduler's methods, never its lists.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from inference import prompt_logprobs
from inference.block_manager import BlockManager
from inference.model_runner import RunOutput
from inference.outputs import RequestOutput
from inference.request_state import RequestState
from inference.sampler import sample, token_logprobs
from inference.scheduler import ScheduledBatch, Scheduler
from inference.sequence import Sequence


class OutputProcessor:
    def __init__(self, scheduler: Scheduler, block_manager: BlockManager, requests: dict[str, RequestState],
                 eos_token_ids: set[int], seed: Callable[[Sequence], None]) -> None:
        self.scheduler = scheduler
        self.bm = block_manager
        self.requests = requests  # the engine's live requests (shared dict)
        self.eos_token_ids = eos_token_ids
        self.seed = seed
        self.total_generated_tokens = 0

    def postprocess(self, batch: ScheduledBatch, out: RunOutput) -> list[RequestOutput]:
        # Before anything can finish this step: a finished request returns its prompt log-probs.
        for i, entries in out.prompt_logprobs.items():
            prompt_logprobs.record(batch.seqs[i], entries)
        rows_seqs: list[Sequence] = []
        rows: list[int] = []
        for r, i in enumerate(out.owners):
            seq = batch.seqs[i]
            rows_seqs.append(seq)
            rows.append(r)
            for child in self._fork(seq):
                rows_seqs.append(child)
                rows.append(r)
        touched: dict[str, RequestState] = {}
        if rows_seqs:
            logits = out.logits
            logits = logits[rows] if len(rows) != logits.shape[0] else logits
            self._candidate_logprobs(logits, rows_seqs)
            if out.hidden is not None:
                self._hidden_states({k: h[rows] for k, h in out.hidden.items()}, rows_seqs)
            want_lp = [s.params.logprobs for s in rows_seqs]
            raw = logits.clone() if any(x is not None for x in want_lp) else None
            tokens = sample(logits, rows_seqs, self.eos_token_ids)
            lps = token_logprobs(raw, tokens, want_lp) if raw is not None else [None] * len(tokens)
            for s, tok, lp in zip(rows_seqs, tokens, lps, strict=True):
                state = self.requests[s.request_id]
                if lp is not None:
                    s.logprobs.append(lp)
                self.total_generated_tokens += 1
                if state.on_token(s, tok):
                    self.scheduler.finish(s)
                elif s.needs_shift:
                    s.needs_shift = False
                    self.scheduler.requeue(s)  # free first: block hashes describe the old tokens
                    s.shift_context(s.params.context_shift_keep)
                touched[s.request_id] = state
        outs = []
        for rid, state in touched.items():
            outs.append(state.output())
            if state.finished:
                del self.requests[rid]
        return outs

    @staticmethod
    def _candidate_logprobs(logits: torch.Tensor, seqs: list[Sequence]) -> None:
        """log P(candidate) at the first generated position, before any processor or penalty."""
        for r, s in enumerate(seqs):
            if s.params.candidate_token_ids and s.num_output_tokens == 0 and s.candidate_logprobs is None:
                lp = torch.log_softmax(logits[r], -1)
                s.candidate_logprobs = {t: float(lp[t]) for t in s.params.candidate_token_ids}

    @staticmethod
    def _hidden_states(hidden: dict[int, torch.Tensor], seqs: list[Sequence]) -> None:
        """The last prompt token's hidden state at the asked layer (the row that predicts the first
        output token)."""
        for r, s in enumerate(seqs):
            if s.params.hidden_state and s.num_output_tokens == 0 and s.hidden_state is None:
                s.hidden_state = hidden[s.params.hidden_state_layer][r].clone()

    def _fork(self, parent: Sequence) -> list[Sequence]:
        """n > 1: once the prompt is computed, the other samples share its blocks (COW)."""
        if not parent.pending_forks:
            return []
        children = []
        state = self.requests[parent.request_id]
        for k in range(1, parent.pending_forks + 1):
            child = Sequence(parent.request_id, parent.prompt_token_ids, parent.params,
                             priority=parent.priority, arrival_time=parent.arrival_time, index=k)
            child.first_scheduled_time = parent.first_scheduled_time
            child.num_cached_tokens = parent.num_cached_tokens
            self.seed(child)
            self.bm.fork(parent, child)
            self.scheduler.admit_fork(child)
            state.add_fork(child)
            children.append(child)
        parent.pending_forks = 0
        return children
