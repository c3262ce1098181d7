"""BlockManager without a model, vLLM-style: exact block ids, ref counts, hash hits, eviction order.

Block size 4 and a 6-block pool so every id below can be worked out by hand.
"""

from __future__ import annotations

from inference.block_manager import BlockManager, block_hash
from inference.sampling_params import SamplingParams
from inference.sequence import Sequence

BS = 4


def seq(tokens: list[int]) -> Sequence:
    return Sequence("r", list(tokens), SamplingParams())


def computed(bm: BlockManager, s: Sequence, n: int) -> None:
    """What the scheduler does after a step: allocate, advance, commit."""
    assert bm.ensure(s, n)
    prev = s.num_computed_tokens
    s.num_computed_tokens = prev + n
    bm.commit(s, prev)


def refs(bm: BlockManager) -> list[int]:
    return [b.ref_count for b in bm.blocks]


def freed(n: int) -> tuple[BlockManager, Sequence]:
    """A 6-block pool after one sequence of tokens 0..n-1 was computed and freed: its full blocks
    stay cached (evictable), the rest is free."""
    bm = BlockManager(6, BS)
    a = seq(list(range(n)))
    bm.match_prefix(a)
    computed(bm, a, n)
    bm.free(a)
    return bm, a


def test_allocation_commit_and_hashing():
    bm = BlockManager(6, BS)
    a = seq(list(range(10)))
    assert bm.match_prefix(a) == 0
    computed(bm, a, 10)
    assert a.block_table == [0, 1, 2] and refs(bm) == [1, 1, 1, 0, 0, 0]
    assert bm.take_zeroes() == [0, 1, 2] and bm.take_zeroes() == []  # fresh memory zeroed once
    assert bm.num_cached == 2 and bm.num_free == 3 and bm.live_slots == 10  # 2 full blocks hashed
    h0 = block_hash(None, [0, 1, 2, 3])
    assert a.block_hashes == [h0, block_hash(h0, [4, 5, 6, 7])]
    assert [b.block_id for b in bm.cached_blocks()] == [0, 1] and bm.blocks[1].parent_hash == h0
    assert bm.blocks[2].hash is None and bm.blocks[2].filled == 2
    assert bm.is_cached([0, 1, 2, 3]) and not bm.is_cached([0, 1, 2, 9]) and not bm.is_cached([0, 1])


def test_free_keeps_hashed_blocks_evictable_tail_first_and_a_hit_adopts_them():
    bm, a = freed(10)
    assert a.block_table == [] and refs(bm) == [0] * 6 and bm.num_used == 0
    assert list(bm.evictable) == [1, 0]  # reverse order: the prefix's tail goes first
    assert list(bm.free_ids) == [3, 4, 5, 2]  # the unhashed partial block is plain free again
    b = seq(list(range(8)) + [99, 98, 97])
    assert bm.match_prefix(b) == 8 and b.block_table == [0, 1] and refs(bm)[:2] == [1, 1]
    assert not bm.evictable and bm.num_free == 4
    bm.record_query(b.num_prompt_tokens, 8)
    assert (bm.query_tokens, bm.hit_tokens) == (11, 8)


def test_hit_leaves_one_token_to_compute():
    """A prompt that is exactly cached still computes its last token (the step needs logits)."""
    bm, _ = freed(8)
    again = seq(list(range(8)))
    assert bm.match_prefix(again) == 4 and again.block_table == [0]


def test_eviction_is_lru_and_only_after_never_cached_blocks():
    bm, _ = freed(10)  # evictable [1, 0], free [3, 4, 5, 2]
    c = seq([50 + i for i in range(20)])
    bm.match_prefix(c)
    assert bm.ensure(c, 20)
    assert c.block_table == [3, 4, 5, 2, 1] and bm.evictions == 1  # free list first, then LRU block 1
    assert bm.num_cached == 1 and bm.is_cached([0, 1, 2, 3]) and bm.blocks[1].hash is None
    d = seq([70, 71, 72, 73])
    assert not bm.ensure(d, 8)  # needs 2, only block 0 is left: no change
    assert d.block_table == [] and bm.num_free == 1 and bm.evictions == 1


def test_fork_shares_blocks_and_copies_the_partial_one_on_write():
    bm = BlockManager(6, BS)
    p = seq(list(range(6)))
    bm.match_prefix(p)
    computed(bm, p, 6)  # block 0 full, block 1 holds 2 tokens
    child = Sequence("r", list(range(6)), SamplingParams(), index=1)
    bm.fork(p, child)
    assert child.block_table == [0, 1] and refs(bm)[:2] == [2, 2] and bm.num_used == 2
    assert bm.blocks_needed(child, 1) == 1  # copy-on-write of the shared partial block
    assert bm.ensure(child, 1)
    assert child.block_table == [0, 2] and refs(bm)[:3] == [2, 1, 1]
    assert bm.take_copies() == [(1, 2)] and bm.blocks[2].filled == 2
    assert bm.ensure(p, 1) and p.block_table == [0, 1]  # the parent owns block 1 alone now: no copy
    assert bm.take_copies() == []


def test_adopt_cached_uses_never_used_blocks_and_never_evicts():
    bm = BlockManager(3, BS)
    h = block_hash(None, [1, 2, 3, 4])
    assert bm.adopt_cached(h, None, [1, 2, 3, 4]) == 0
    assert bm.adopt_cached(h, None, [1, 2, 3, 4]) is None  # already cached
    assert list(bm.evictable) == [0] and bm.num_used == 0 and bm.blocks[0].filled == BS
    assert bm.take_zeroes() == []  # the caller overwrites the block: nothing to zero
    s = seq([1, 2, 3, 4, 5])
    assert bm.match_prefix(s) == 4 and s.block_table == [0]
    h2 = block_hash(h, [5, 6, 7, 8])
    assert bm.adopt_cached(h2, h, [5, 6, 7, 8]) == 1
    assert bm.adopt_cached(block_hash(None, [9, 9, 9, 9]), None, [9, 9, 9, 9]) == 2
    assert bm.adopt_cached(block_hash(None, [8, 8, 8, 8]), None, [8, 8, 8, 8]) is None  # pool full
    assert bm.evictions == 0 and bm.num_cached == 3


def test_clear_cache_drops_only_unused_cached_blocks():
    bm = BlockManager(6, BS)
    a, b = seq(list(range(8)) + [1]), seq([20 + i for i in range(9)])
    for s in (a, b):
        bm.match_prefix(s)
        computed(bm, s, 9)
    bm.free(a)
    assert bm.clear_cache() == 2 and bm.num_cached == 2  # b's two full blocks are in use
    assert not bm.is_cached(list(range(4))) and bm.is_cached([20, 21, 22, 23])
