"""Scheduler without a model, vLLM-style: batch composition, chunked prefill, priority order,
which sequence is preempted, and that a preempted one comes back with nothing lost."""

from __future__ import annotations

from inference.block_manager import BlockManager
from inference.sampling_params import SamplingParams
from inference.scheduler import ScheduledBatch, Scheduler
from inference.sequence import Sequence, Status

BS = 4


def seq(rid: str, n: int, priority: int = 0, arrival: float = 0.0, base: int = 0) -> Sequence:
    return Sequence(rid, [base + i for i in range(n)], SamplingParams(), priority=priority, arrival_time=arrival)


def step(sched: Scheduler, new_tokens: dict[str, int] | None = None) -> ScheduledBatch:
    """schedule, then what the engine does: commit computed tokens and append a sampled token to
    every sequence whose tokens are now all computed."""
    batch = sched.schedule()
    sched.commit(batch)
    for s in batch.seqs:
        if s.num_uncomputed == 0:
            s.append((new_tokens or {}).get(s.request_id, 7))
    return batch


def ids(batch: ScheduledBatch) -> list[str]:
    return [s.request_id for s in batch.seqs]


def test_decodes_first_then_chunked_prefill_within_the_token_budget():
    sched = Scheduler(BlockManager(32, BS), max_num_seqs=8, max_num_batched_tokens=8)
    a, b = seq("a", 3, arrival=1), seq("b", 10, arrival=2, base=100)
    sched.add(a)
    sched.add(b)
    first = step(sched)
    assert ids(first) == ["a", "b"] and first.num_tokens == [3, 5]  # b's prefill is cut at the budget
    assert first.prev_computed == [0, 0] and b.num_computed_tokens == 5 and a.num_computed_tokens == 3
    second = step(sched)
    assert ids(second) == ["a", "b"] and second.num_tokens == [1, 5]  # a decodes, b finishes its prompt
    assert second.prev_computed == [3, 5] and len(b.token_ids) == 11


def test_waiting_queue_is_priority_then_arrival():
    sched = Scheduler(BlockManager(32, BS), max_num_seqs=2, max_num_batched_tokens=64)
    for rid, prio, t in (("late", 0, 3), ("early", 0, 1), ("urgent", -1, 5), ("low", 2, 0)):
        sched.add(seq(rid, 4, prio, t, base=10 * t))
    assert [s.request_id for s in sched.waiting] == ["urgent", "early", "late", "low"]
    assert ids(step(sched)) == ["urgent", "early"]  # max_num_seqs seats, in queue order
    assert [s.request_id for s in sched.waiting] == ["late", "low"]


def test_out_of_blocks_preempts_the_last_running_and_requeues_it_intact():
    sched = Scheduler(BlockManager(4, BS), max_num_seqs=4, max_num_batched_tokens=64)
    a, b = seq("a", 4, arrival=1), seq("b", 4, arrival=2, base=50)
    sched.add(a)
    sched.add(b)
    step(sched)  # each holds one full block; a and b now have 5 tokens
    step(sched)  # each takes a second block: the pool (4) is full
    assert [len(s.block_table) for s in (a, b)] == [2, 2] and sched.bm.num_free == 0
    for _ in range(3):
        step(sched)  # both fill their second block (8 computed tokens each)
    assert b.status == Status.RUNNING and sched.num_preemptions == 0
    step(sched)  # a (first in order) needs a third block: the last running one, b, is preempted
    assert b.status == Status.WAITING and b.num_preemptions == 1 and sched.num_preemptions == 1
    assert b.block_table == [] and b.num_computed_tokens == 0 and len(b.token_ids) == 9  # nothing lost
    assert [s.request_id for s in sched.running] == ["a"] and len(a.block_table) == 3
    assert sched.waiting == [b]


def test_higher_priority_arrival_preempts_the_worst_running_one():
    sched = Scheduler(BlockManager(16, BS), max_num_seqs=2, max_num_batched_tokens=64)
    low, mid = seq("low", 4, priority=5, arrival=1), seq("mid", 4, priority=1, arrival=2, base=40)
    sched.add(low)
    sched.add(mid)
    step(sched)
    same = seq("same", 4, priority=5, arrival=3, base=80)
    sched.add(same)
    assert ids(step(sched)) == ["mid", "low"]  # equal to the worst running: FCFS, no preemption
    urgent = seq("urgent", 4, priority=0, arrival=4, base=120)
    sched.add(urgent)
    batch = step(sched)
    assert low.status == Status.WAITING and low.num_preemptions == 1  # the lowest priority goes
    assert ids(batch) == ["mid", "urgent"]
    assert [s.request_id for s in sched.waiting] == ["low", "same"]  # low arrived first


def test_prefix_in_flight_waits_one_step_then_hits_the_cache():
    bm = BlockManager(32, BS)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=64)
    prompt = list(range(20))
    a = Sequence("a", prompt + [100, 101], SamplingParams(), arrival_time=1)
    b = Sequence("b", prompt + [200, 201], SamplingParams(), arrival_time=2)
    sched.add(a)
    sched.add(b)
    sched.max_num_batched_tokens = 8  # a's prefill spans several steps
    assert ids(step(sched)) == ["a"]  # b shares a's first block, which is still being computed
    sched.max_num_batched_tokens = 64
    batch = step(sched)  # a's first 8 tokens are cached now: b is admitted and reuses them
    assert ids(batch) == ["a", "b"] and batch.num_tokens == [14, 14] and b.num_cached_tokens == 8
    assert b.block_table[:2] == a.block_table[:2] and bm.hit_tokens == 8
    assert [bm.blocks[i].ref_count for i in a.block_table[:2]] == [2, 2]


def test_finish_and_admit_fork_are_the_only_placement_paths():
    bm = BlockManager(8, BS)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=64)
    p = seq("p", 6)
    sched.add(p)
    step(sched)
    child = Sequence("p", p.prompt_token_ids, SamplingParams(), index=1)
    bm.fork(p, child)
    sched.admit_fork(child)
    assert child.status == Status.RUNNING and sched.running == [p, child]
    sched.finish(p)
    assert p.status == Status.FINISHED and sched.running == [child] and p.block_table == []
    assert [bm.blocks[i].ref_count for i in child.block_table] == [1, 1]
