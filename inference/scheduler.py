"""Iteration-level scheduler: continuous batching, chunked prefill, priorities, preemption.

Each step: running sequences first (decodes cost one token, unfinished prefills continue in
chunks), then waiting ones are admitted while the token budget, `max_num_seqs` and free blocks
allow. When a running sequence cannot get a block, the lowest-priority / latest-arrived running
sequence is preempted by recompute: its blocks are freed (full ones stay in the prefix cache) and
it goes back to the front of the queue with all its tokens, so nothing is lost. A waiting request
of higher priority preempts lower-priority running ones the same way when it finds no seat.

A newly admitted sequence that `reuse` says can reuse K/V at shifted positions (passage cache,
cache_reuse) gets blocks for its whole prompt and is listed in `batch.blends`: the engine's
`KVReuse.prefill` computes all its prompt tokens but the last before the forward pass, and the
last one runs in the batch like a decode row (so it needs no special logits path).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from inference.block_manager import BlockManager
from inference.sequence import Sequence, Status


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    num_tokens: list[int]  # tokens each sequence computes this step (decodes first)
    prev_computed: list[int] = field(default_factory=list)  # num_computed_tokens when scheduled
    # admitted with K/V reuse: prompt[:-1] is computed by the engine's KVReuse before the forward
    # pass (prev_computed already says so), the last prompt token is their row in this batch
    blends: list[Sequence] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.seqs


class Scheduler:
    def __init__(self, block_manager: BlockManager, max_num_seqs: int, max_num_batched_tokens: int,
                 reuse: Callable[[Sequence], bool] | None = None) -> None:
        self.bm = block_manager
        self.reuse = reuse  # seq -> True when its prompt can reuse shifted K/V (KVReuse.wants)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.num_preemptions = 0

    def add(self, seq: Sequence) -> None:
        seq.status = Status.WAITING
        self.waiting.append(seq)
        self.waiting.sort(key=lambda s: s.sort_key)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def remove(self, seq: Sequence) -> None:
        """Drop a sequence wherever it is and free its blocks (finish or abort)."""
        if seq in self.running:
            self.running.remove(seq)
        elif seq in self.waiting:
            self.waiting.remove(seq)
        self.bm.free(seq)

    def finish(self, seq: Sequence) -> None:
        """A sequence is done (stop, length): out of the schedule, its blocks freed."""
        self.remove(seq)
        seq.status = Status.FINISHED

    def admit_fork(self, child: Sequence) -> None:
        """An n > 1 sample that already holds its parent's blocks joins the running set."""
        child.status = Status.RUNNING
        self.running.append(child)

    def commit(self, batch: ScheduledBatch) -> None:
        """After the runner computed a batch: advance each sequence's computed tokens and let the
        block manager fill and hash the blocks just written (outputs, prompt log-probs included,
        are the output processor's)."""
        for seq, p, n in zip(batch.seqs, batch.prev_computed, batch.num_tokens, strict=True):
            seq.num_computed_tokens = p + n
            self.bm.commit(seq, p)

    def _preempt(self, victim: Sequence) -> None:
        self.requeue(victim)
        victim.num_preemptions += 1
        self.num_preemptions += 1

    def requeue(self, seq: Sequence) -> None:
        """Free a running sequence's blocks and put it back in the queue to be recomputed."""
        self.running.remove(seq)
        self.bm.free(seq)
        seq.status = Status.WAITING
        self.waiting.append(seq)
        self.waiting.sort(key=lambda s: s.sort_key)

    def _prefix_in_flight(self, seq: Sequence) -> bool:
        """True when a running sequence is still prefilling the same first block as `seq`.
        Admitting both at once would compute (and store) the shared prefix twice; waiting one
        step turns it into a prefix-cache hit and lets their decodes share it (cascade attention)."""
        if not self.bm.caching or seq.first_block_key is None:
            return False
        if self.bm.is_cached(seq.token_ids[: self.bm.block_size]):
            return False  # the prefix is already cached: admit now and share it
        return any(r.first_block_key == seq.first_block_key and r.num_uncomputed > 1 for r in self.running)

    def _make_room_for_priority(self) -> None:
        """A waiting request of strictly higher priority than a running one takes its place: the
        lowest-priority running sequences are preempted (by recompute, nothing lost) until the
        newcomer has a seat and blocks for its prompt. Equal priorities never preempt (FCFS)."""
        while self.waiting and self.running:
            head = self.waiting[0]
            worst = max(self.running, key=lambda s: s.sort_key)
            if head.priority >= worst.priority:
                return
            need = -(-len(head.token_ids) // self.bm.block_size)
            if len(self.running) < self.max_num_seqs and need <= self.bm.num_free:
                return
            self._preempt(worst)

    def schedule(self) -> ScheduledBatch:
        self._make_room_for_priority()
        budget = self.max_num_batched_tokens
        decodes: list[Sequence] = []
        blends: list[Sequence] = []
        prefills: list[tuple[Sequence, int]] = []
        self.running.sort(key=lambda s: s.sort_key)
        i = 0
        while i < len(self.running) and budget > 0:
            seq = self.running[i]
            n = min(seq.num_uncomputed, budget)
            while not self.bm.ensure(seq, n):
                victim = self.running[-1]
                self._preempt(victim)
                if victim is seq:
                    break
            if seq.status != Status.RUNNING:
                continue  # preempted itself; the loop index now points at the next one
            (decodes.append(seq) if n == 1 else prefills.append((seq, n)))
            budget -= n
            i += 1
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            if self._prefix_in_flight(seq):
                break  # its prefix is being computed right now: admit it next step as a cache hit
            hit = self.bm.match_prefix(seq) if seq.params.prompt_logprobs is None else 0
            blend = self.reuse is not None and seq.params.prompt_logprobs is None and self.reuse(seq)
            if blend and seq.num_uncomputed > budget and (decodes or prefills):
                blend = False  # the reuse pass is not chunked: without room, a plain chunked prefill
            n = seq.num_uncomputed if blend else min(seq.num_uncomputed, budget)
            if not self.bm.ensure(seq, n):
                self.bm.free(seq)  # give back the prefix blocks; retry when others finish
                break
            self.waiting.pop(0)
            seq.status = Status.RUNNING
            if seq.first_scheduled_time is None:
                seq.first_scheduled_time = time.monotonic()
                seq.num_cached_tokens = min(hit, seq.num_prompt_tokens)
                self.bm.record_query(seq.num_prompt_tokens, seq.num_cached_tokens)
            self.running.append(seq)
            if blend:
                blends.append(seq)
            (decodes.append(seq) if n == 1 or blend else prefills.append((seq, n)))
            budget -= n
        seqs = decodes + [s for s, _ in prefills]
        blended = set(map(id, blends))
        return ScheduledBatch(seqs=seqs, num_tokens=[1] * len(decodes) + [n for _, n in prefills],
                              prev_computed=[len(s.token_ids) - 1 if id(s) in blended else s.num_computed_tokens
                                             for s in seqs], blends=blends)
