"""K/V reuse bookkeeping without a model: cached-run search (cache_reuse), the prefix-cache limit
for reused K/V, and how the scheduler admits a sequence for the reuse pass."""

from __future__ import annotations

from inference.block_manager import BlockManager
from inference.sampling_params import SamplingParams
from inference.scheduler import Scheduler
from inference.sequence import Sequence

BS = 4


def seq(rid: str, tokens: list[int]) -> Sequence:
    return Sequence(rid, tokens, SamplingParams())


def computed(bm: BlockManager, s: Sequence) -> Sequence:
    """`s` with every token computed and committed (its full blocks are now cached)."""
    assert bm.ensure(s, len(s.token_ids))
    s.num_computed_tokens = len(s.token_ids)
    bm.commit(s, 0)
    return s


def test_find_runs_finds_cached_blocks_at_another_position():
    """Bug: runs only found block-aligned, or chained past a block the new prompt does not hold."""
    bm = BlockManager(16, BS, track_content=True)
    a = computed(bm, seq("a", list(range(16))))
    bm.free(a)  # cached, evictable
    new = [100, 101] + list(range(4, 12)) + [99, 98, 97]  # blocks 1-2 of `a`, at offset 2
    runs = bm.find_runs(new, [(0, len(new))], 8)
    assert [(r.dst_start, r.src_start, len(r.block_ids)) for r in runs] == [(2, 4, 2)]
    assert bm.find_runs(new, [(0, len(new))], 12) == []  # shorter than N
    assert bm.find_runs(new, [(3, len(new))], 4)[0].dst_start == 6  # only inside the regions asked
    bm.clear_cache()
    assert bm.find_runs(new, [(0, len(new))], 4) == []  # evicted blocks leave the content index


def test_reused_kv_is_not_registered_in_the_prefix_cache():
    """Bug: blocks holding shifted (approximate) K/V become prefix-cache hits for other requests."""
    bm = BlockManager(16, BS)
    s = seq("a", list(range(12)))
    s.hash_limit = 5  # K/V from token 5 on was reused
    computed(bm, s)
    assert bm.num_cached == 1  # block 0 only; block 1 holds token 5
    bm.free(s)
    assert s.hash_limit is None  # a recompute after preemption starts exact again
    again = seq("b", list(range(12)) + [1])
    assert bm.match_prefix(again) == BS


def test_reused_kv_is_registered_on_a_salted_branch_only_its_own_salt_matches():
    """Bug: blended blocks served to an exact prompt (no salt) or to a prompt blended another way
    (other spans or settings); or the same blended prompt resubmitted recomputed instead of hit."""
    bm = BlockManager(16, BS)
    s = seq("a", list(range(12)))
    s.hash_limit, s.reuse_salt = 5, b"spans-1"
    computed(bm, s)
    assert bm.num_cached == 3  # block 0 exact, blocks 1-2 on the salted branch
    bm.free(s)
    tokens = list(range(12)) + [1]
    assert bm.match_prefix(seq("exact", tokens)) == BS
    other = seq("other", tokens)
    other.reuse_salt = b"spans-2"
    assert bm.match_prefix(other) == BS
    same = seq("same", tokens)
    same.reuse_salt = b"spans-1"
    assert bm.match_prefix(same) == 12
    # what the salted prompt computes after the hit chains on from the salted branch
    for t in (7, 8, 9):
        same.append(t)
    assert bm.ensure(same, 4)
    same.num_computed_tokens = 16
    bm.commit(same, 12)
    bm.free(same)
    longer = seq("longer", tokens + [7, 8, 9, 10])
    assert bm.match_prefix(longer) == BS  # unsalted: still only the exact block
    longer2 = seq("longer2", tokens + [7, 8, 9, 10])
    longer2.reuse_salt = b"spans-1"
    assert bm.match_prefix(longer2) == 16


def test_scheduler_admits_a_reuse_sequence_whole_with_its_last_token_in_the_batch():
    """Bug: the reuse pass chunked (it is one pass), or prev_computed not saying the pass computed
    prompt[:-1] (the commit would skip or double-count tokens)."""
    bm = BlockManager(32, BS)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=64, reuse=lambda s: s.request_id == "r")
    r = seq("r", list(range(10)))
    sched.add(r)
    batch = sched.schedule()
    assert batch.blends == [r] and batch.num_tokens == [1] and batch.prev_computed == [9]
    assert len(r.block_table) == 3  # blocks for all 10 prompt tokens


def test_scheduler_falls_back_to_chunked_prefill_without_room():
    """Bug: a long reuse prompt waits forever behind running decodes (the budget never frees up)."""
    bm = BlockManager(32, BS)
    sched = Scheduler(bm, max_num_seqs=4, max_num_batched_tokens=8, reuse=lambda s: s.request_id == "r")
    d = seq("d", [1, 2, 3])
    sched.add(d)
    batch = sched.schedule()
    sched.commit(batch)
    d.append(5)
    r = seq("r", list(range(100, 120)))
    sched.add(r)
    batch = sched.schedule()
    assert batch.blends == [] and [s.request_id for s in batch.seqs] == ["d", "r"] and batch.num_tokens == [1, 7]
