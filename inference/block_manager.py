"""Block allocation, reference counts and automatic prefix caching.

Each FULL block is keyed by a hash chained from its parent block's hash and its own token ids, so
equal keys mean equal whole prefixes; hits are still verified against the stored token ids.
Blocks nobody uses but that hold a cached prefix stay reusable until the allocator runs out of
never-cached blocks and evicts them least-recently-used first. Shared blocks that a sequence must
write into (the partial last block after an n>1 fork) are copied first (copy-on-write).

Blocks whose K/V was reused at a shifted position (`Sequence.hash_limit`, see
`inference.kv_reuse`) are not what a full prefill computes, so an exact prompt must never hit
them. They are registered on a salted branch of the chain instead: the first such block's hash is
taken from its parent's hash mixed with the sequence's `reuse_salt` (the engine's reuse settings
and the prompt's passage spans). A later request with the same salt, i.e. one that would itself be
blended the same way (the per-passage candidate decodes of one short answer resubmit the same
prompt), matches them; any other request cannot.

With `track_content` (engine `cache_reuse`), cached blocks are also indexed by their own tokens,
unchained, so `find_runs` can find a cached run of blocks at another position of a new prompt
(llama.cpp's --cache-reuse); their K/V is then copied there re-rotated, never shared.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict, deque
from typing import NamedTuple

import numpy as np

from inference.sequence import Sequence


class Run(NamedTuple):
    """Cached blocks `block_ids` (chain positions from `src_start`) hold the tokens of a new
    prompt's [dst_start, dst_start + len(block_ids) * block_size)."""

    dst_start: int
    src_start: int
    block_ids: list[int]


def block_hash(parent: bytes | None, tokens) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    if parent is not None:
        h.update(parent)
    h.update(np.asarray(tokens, dtype=np.int64).tobytes())
    return h.digest()


def salted(parent: bytes | None, salt: bytes) -> bytes:
    """The parent hash a block starting a salted (blended) branch of the chain is hashed from."""
    return hashlib.blake2b((parent or b"") + b"\x00blend\x00" + salt, digest_size=16).digest()


class Block:
    __slots__ = ("block_id", "ref_count", "hash", "parent_hash", "token_ids", "filled")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.hash: bytes | None = None
        self.parent_hash: bytes | None = None
        self.token_ids: tuple[int, ...] | None = None
        self.filled = 0


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, enable_prefix_caching: bool = True,
                 track_content: bool = False, track_fresh: bool = False) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_ids: deque[int] = deque(range(num_blocks))
        self.evictable: OrderedDict[int, None] = OrderedDict()  # ref 0 + hashed, LRU first
        self.hash_to_block: dict[bytes, int] = {}
        self.num_used = 0
        self.live_slots = 0
        self.pending_copies: list[tuple[int, int]] = []
        # blocks handed out for the first time: their pool memory is uninitialised and must be
        # zeroed before use (padded attention reads stale slots; garbage NaNs would leak through)
        self.high_water = 0
        self.pending_zero: list[int] = []
        self.query_tokens = 0
        self.hit_tokens = 0
        self.evictions = 0
        # token tuple of a cached block -> ids of cached blocks holding it (cache_reuse only)
        self.by_content: dict[tuple[int, ...], set[int]] | None = {} if track_content else None
        # blocks handed to a new owner since the last `take_fresh` (QUEST resets their key bounds)
        self.pending_fresh: list[int] | None = [] if track_fresh else None

    # ---- accounting -------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        return len(self.free_ids) + len(self.evictable)

    @property
    def num_cached_free(self) -> int:
        return len(self.evictable)

    def _ref(self, b: Block) -> None:
        if b.ref_count == 0:
            self.num_used += 1
            self.live_slots += b.filled
            self.evictable.pop(b.block_id, None)
        b.ref_count += 1

    def _unref(self, b: Block) -> None:
        b.ref_count -= 1
        if b.ref_count == 0:
            self.num_used -= 1
            self.live_slots -= b.filled
            if b.hash is not None:
                self.evictable[b.block_id] = None
            else:
                self.free_ids.append(b.block_id)

    def _take(self) -> Block:
        if self.free_ids:
            b = self.blocks[self.free_ids.popleft()]
        else:
            bid, _ = self.evictable.popitem(last=False)
            b = self.blocks[bid]
            self._forget(b)
            self.evictions += 1
        b.filled = 0
        self.mark_touched(b.block_id, zero=True)
        if self.pending_fresh is not None:
            self.pending_fresh.append(b.block_id)
        self._ref(b)
        return b

    def mark_touched(self, block_id: int, zero: bool) -> None:
        """Fresh ids are handed out in ascending order; zero each one's memory on first use
        unless the caller is about to overwrite the whole block (prefix-cache restore)."""
        if block_id >= self.high_water:
            self.pending_zero.extend(range(self.high_water, block_id + int(zero)))
            self.high_water = block_id + 1

    # ---- sequence lifecycle -----------------------------------------------------------
    def match_prefix(self, seq: Sequence) -> int:
        """On admission: adopt cached blocks for the longest cached prefix. At least one token is
        left to compute so the step produces logits. Returns the number of tokens reused. With a
        `reuse_salt`, a block missing from the exact chain may continue on its salted branch."""
        assert not seq.block_table and seq.num_computed_tokens == 0
        if not self.caching:
            return 0
        bs = self.block_size
        parent = None
        hashes: list[bytes] = []
        for i in range((len(seq.token_ids) - 1) // bs):
            tokens = seq.token_ids[i * bs:(i + 1) * bs]
            bid = self._cached(h := block_hash(parent, tokens), tokens)
            if bid is None and seq.reuse_salt is not None:
                bid = self._cached(h := block_hash(salted(parent, seq.reuse_salt), tokens), tokens)
            if bid is None:
                break
            self._ref(self.blocks[bid])
            seq.block_table.append(bid)
            hashes.append(h)
            parent = h
        seq.block_hashes = hashes
        seq.num_hashed_blocks = len(hashes)
        seq.num_computed_tokens = len(hashes) * bs
        return seq.num_computed_tokens

    def _cached(self, h: bytes, tokens) -> int | None:
        """The cached block under hash `h`, if it really holds `tokens` (hits are verified)."""
        bid = self.hash_to_block.get(h)
        return bid if bid is not None and self.blocks[bid].token_ids == tuple(tokens) else None

    def is_cached(self, first_block_tokens: list[int]) -> bool:
        """Is a block holding exactly these leading tokens in the prefix cache?"""
        if len(first_block_tokens) < self.block_size:
            return False
        return self._cached(block_hash(None, first_block_tokens), first_block_tokens) is not None

    def record_query(self, num_prompt_tokens: int, num_hit: int) -> None:
        self.query_tokens += num_prompt_tokens
        self.hit_tokens += num_hit

    def blocks_needed(self, seq: Sequence, num_new: int) -> int:
        bs = self.block_size
        need = -(-(seq.num_computed_tokens + num_new) // bs) - len(seq.block_table)
        idx = seq.num_computed_tokens // bs
        if idx < len(seq.block_table) and self.blocks[seq.block_table[idx]].ref_count > 1:
            need += 1  # copy-on-write of the shared partial block
        return max(need, 0)

    def ensure(self, seq: Sequence, num_new: int) -> bool:
        """Give `seq` room for `num_new` more tokens; False (and no change) if the pool is short."""
        if self.blocks_needed(seq, num_new) > self.num_free:
            return False
        bs = self.block_size
        idx = seq.num_computed_tokens // bs
        if idx < len(seq.block_table):
            old = self.blocks[seq.block_table[idx]]
            if old.ref_count > 1:
                new = self._take()
                new.filled = old.filled
                self.live_slots += new.filled
                self.pending_copies.append((old.block_id, new.block_id))
                self._unref(old)
                seq.block_table[idx] = new.block_id
        while len(seq.block_table) * bs < seq.num_computed_tokens + num_new:
            seq.block_table.append(self._take().block_id)
        return True

    def commit(self, seq: Sequence, prev_computed: int) -> None:
        """After a step computed tokens [prev_computed, num_computed): update fill levels and
        register newly completed blocks in the prefix cache (from `hash_limit` on, on the salted
        branch; without a salt not at all)."""
        bs = self.block_size
        done = seq.num_computed_tokens
        for i in range(prev_computed // bs, -(-done // bs)):
            b = self.blocks[seq.block_table[i]]
            fill = min(bs, done - i * bs)
            self.live_slots += fill - b.filled
            b.filled = fill
        if not self.caching:
            return
        hashes = seq.block_hashes
        limit, salt = seq.hash_limit, seq.reuse_salt
        upto = done if limit is None or salt is not None else min(done, limit)
        branch = limit // bs if limit is not None else -1  # the first block holding reused K/V
        for i in range(seq.num_hashed_blocks, upto // bs):
            tokens = seq.token_ids[i * bs:(i + 1) * bs]
            parent = hashes[i - 1] if i else None
            h = block_hash(salted(parent, salt) if i == branch and salt is not None else parent, tokens)
            if len(hashes) > i:
                hashes[i] = h
            else:
                hashes.append(h)
            b = self.blocks[seq.block_table[i]]
            if h not in self.hash_to_block and b.hash is None:
                self._register(b, h, hashes[i - 1] if i else None, tokens)
        seq.num_hashed_blocks = max(seq.num_hashed_blocks, upto // bs)

    def free(self, seq: Sequence) -> None:
        """Release every block of `seq` (finish, abort or preemption). Reverse order so a
        prefix's tail is evicted before its head."""
        for bid in reversed(seq.block_table):
            self._unref(self.blocks[bid])
        seq.block_table = []
        seq.num_computed_tokens = 0
        seq.num_hashed_blocks = 0
        seq.block_hashes = []
        seq.hash_limit = None

    def fork(self, parent: Sequence, child: Sequence) -> None:
        """Share all of parent's blocks with child (copy-on-write on the next write)."""
        for bid in parent.block_table:
            self._ref(self.blocks[bid])
        child.block_table = list(parent.block_table)
        child.num_computed_tokens = parent.num_computed_tokens
        child.block_hashes = list(parent.block_hashes)
        child.num_hashed_blocks = parent.num_hashed_blocks
        child.hash_limit = parent.hash_limit
        child.reuse_salt = parent.reuse_salt

    def take_zeroes(self) -> list[int]:
        out, self.pending_zero = self.pending_zero, []
        return out

    def take_fresh(self) -> list[int]:
        """Blocks given a new owner since the last call (each at most once); [] unless tracked."""
        if not self.pending_fresh:
            return []
        out, self.pending_fresh = list(dict.fromkeys(self.pending_fresh)), []
        return out

    def take_copies(self) -> list[tuple[int, int]]:
        out, self.pending_copies = self.pending_copies, []
        return out

    # ---- prefix cache maintenance -----------------------------------------------------
    @property
    def num_cached(self) -> int:
        """Blocks registered in the prefix cache (in use or evictable)."""
        return len(self.hash_to_block)

    def cached_blocks(self) -> list[Block]:
        """Every block registered in the prefix cache, by block id (persistence, introspection)."""
        return [self.blocks[i] for i in sorted(self.hash_to_block.values())]

    def adopt_cached(self, h: bytes, parent_hash: bytes | None, token_ids: list[int] | tuple[int, ...]
                     ) -> int | None:
        """Register a restored full block as cached-but-unused (evictable, LRU last) in a
        never-used free block; returns its id for the caller to fill with K/V, or None when the
        hash is already cached or no free block is left (restoring never evicts anything)."""
        if h in self.hash_to_block or not self.free_ids:
            return None
        bid = self.free_ids.popleft()
        self.mark_touched(bid, zero=False)  # the caller overwrites the whole block
        b = self.blocks[bid]
        self._register(b, h, parent_hash, token_ids)
        b.filled = self.block_size
        self.evictable[bid] = None
        return bid

    def clear_cache(self) -> int:
        """Forget every unused cached block; returns how many were dropped."""
        n = len(self.evictable)
        for bid in list(self.evictable):
            b = self.blocks[bid]
            self._forget(b)
            b.filled = 0
            self.free_ids.append(bid)
        self.evictable.clear()
        return n

    def _register(self, b: Block, h: bytes, parent_hash: bytes | None, tokens) -> None:
        b.hash, b.parent_hash, b.token_ids = h, parent_hash, tuple(tokens)
        self.hash_to_block[h] = b.block_id
        if self.by_content is not None:
            self.by_content.setdefault(b.token_ids, set()).add(b.block_id)

    def _forget(self, b: Block) -> None:
        del self.hash_to_block[b.hash]
        if self.by_content is not None:
            ids = self.by_content.get(b.token_ids)
            if ids is not None:
                ids.discard(b.block_id)
                if not ids:
                    del self.by_content[b.token_ids]
        b.hash, b.parent_hash, b.token_ids = None, None, None

    def _chain_index(self, b: Block) -> int | None:
        """Which block of its sequence `b` is (walks the parent hashes); None if a parent is gone."""
        n = 0
        while b.parent_hash is not None:
            bid = self.hash_to_block.get(b.parent_hash)
            if bid is None:
                return None
            b = self.blocks[bid]
            n += 1
        return n

    def find_runs(self, tokens: list[int], regions: list[tuple[int, int]], min_tokens: int) -> list[Run]:
        """Runs of >= `min_tokens` tokens (whole cached blocks, consecutive in their cached chain)
        inside `regions` ([start, end) of `tokens`), longest candidate first at each position.
        Cheap: one dict lookup per position, then hash-chained extension."""
        if self.by_content is None or not self.by_content:
            return []
        bs = self.block_size
        runs: list[Run] = []
        for start, end in regions:
            i = start
            while i + bs <= end:
                cands = self.by_content.get(tuple(tokens[i:i + bs]))
                best: list[int] = []
                for bid in cands or ():
                    chain = [bid]
                    while i + (len(chain) + 1) * bs <= end:
                        nxt = tokens[i + len(chain) * bs:i + (len(chain) + 1) * bs]
                        cid = self.hash_to_block.get(block_hash(self.blocks[chain[-1]].hash, nxt))
                        if cid is None or self.blocks[cid].token_ids != tuple(nxt):
                            break
                        chain.append(cid)
                    if len(chain) > len(best):
                        best = chain
                idx = self._chain_index(self.blocks[best[0]]) if best and len(best) * bs >= min_tokens else None
                if idx is None:
                    i += 1
                    continue
                runs.append(Run(i, idx * bs, best))
                i += len(best) * bs
        return runs

    def kv_efficiency(self) -> float:
        held = self.num_used * self.block_size
        return self.live_slots / held if held else 1.0
