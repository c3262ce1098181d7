"""Preallocated K/V pools, one pair per layer, shaped [num_blocks, block_size, kv_heads, head_dim].

Sizing: the pool takes a memory budget (fraction of free memory or GiB) so the engine can report
how many tokens fit. The int8 variant stores one absmax scale per (block, kv head); writing into a
block whose scale is too small rescales that block's existing values first, so appends never clip.

With sparse attention (QUEST) a layer's pool also keeps each block's element-wise key minimum
and maximum [num_blocks, kv_heads, head_dim], updated by every `write` (so prefill, decode and
reused K/V alike), reset when the block manager hands a block to a new owner (`reset_bounds`),
copied with copy-on-write and recomputed from the pool where K is overwritten in place
(`refresh_bounds`: prefix-cache restore, the passage cache's blend).
"""

from __future__ import annotations

import torch


def bytes_per_block(num_layers: int, block_size: int, kv_heads: int, head_dim: int, int8: bool,
                    dtype: torch.dtype, bounded_layers: int = 0) -> int:
    """Bytes one block costs across all layers; `bounded_layers` of them also keep key bounds."""
    width = torch.empty((), dtype=dtype).element_size()
    elem = 1 if int8 else width
    per_layer = 2 * block_size * kv_heads * head_dim * elem
    if int8:
        per_layer += 2 * kv_heads * 4
    return num_layers * per_layer + bounded_layers * 2 * kv_heads * head_dim * width


def free_memory_bytes(device: str) -> int:
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info()
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 4 << 30


class LayerKVCache:
    """K/V storage of one layer. `write` puts new tokens into slots, `gather_*` read them back."""

    def __init__(self, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
                 dtype: torch.dtype, device: str, int8: bool, key_bounds: bool = False,
                 quest_blocks: int = 0) -> None:
        self.block_size = block_size
        self.int8 = int8
        self.dtype = dtype
        shape = (num_blocks, block_size, kv_heads, head_dim)
        store = torch.int8 if int8 else dtype
        # empty, not zeros: a large CPU pool then costs RAM only as blocks get used. Each block
        # is zeroed when first handed out (`zero_blocks`), since padded attention reads masked
        # slots and garbage NaNs would leak through zero attention weights (0 * NaN = NaN).
        self.k = torch.empty(shape, dtype=store, device=device)
        self.v = torch.empty(shape, dtype=store, device=device)
        if int8:
            self.k_scale = torch.zeros(num_blocks, kv_heads, dtype=torch.float32, device=device)
            self.v_scale = torch.zeros(num_blocks, kv_heads, dtype=torch.float32, device=device)
        # QUEST: decode attends at most `quest_blocks` blocks of this layer, chosen by the bounds
        # (0: dense). Bounds of a block nobody wrote are (+inf, -inf), the identity of min/max.
        self.quest_blocks = quest_blocks
        self.k_min: torch.Tensor | None = None
        self.k_max: torch.Tensor | None = None
        if key_bounds:
            self.k_min = torch.full((num_blocks, kv_heads, head_dim), float("inf"), dtype=dtype, device=device)
            self.k_max = torch.full((num_blocks, kv_heads, head_dim), float("-inf"), dtype=dtype, device=device)

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        if self.k_min is not None and slots.numel():
            kc = k.to(self.dtype)  # int8 pools: the bounds of the keys as written, before quantisation
            blocks = torch.div(slots, self.block_size, rounding_mode="floor")[:, None, None].expand_as(kc)
            self.k_min.scatter_reduce_(0, blocks, kc, "amin")
            self.k_max.scatter_reduce_(0, blocks, kc, "amax")
        if not self.int8:
            self.k.view(-1, *self.k.shape[2:]).index_copy_(0, slots, k.to(self.dtype))
            self.v.view(-1, *self.v.shape[2:]).index_copy_(0, slots, v.to(self.dtype))
            return
        self._write_int8(self.k, self.k_scale, slots, k)
        self._write_int8(self.v, self.v_scale, slots, v)

    def _write_int8(self, pool: torch.Tensor, scale: torch.Tensor, slots: torch.Tensor,
                    x: torch.Tensor) -> None:
        bs = self.block_size
        blocks = torch.div(slots, bs, rounding_mode="floor")
        # a write at offset 0 starts a fresh block: forget the scale left by its previous owner
        fresh = blocks[slots % bs == 0]
        if fresh.numel():
            scale[fresh] = 0.0
        uniq, inv = torch.unique(blocks, return_inverse=True)
        amax = x.float().abs().amax(-1)  # [T, kvh]
        block_amax = torch.zeros(uniq.numel(), amax.shape[1], device=x.device)
        block_amax.scatter_reduce_(0, inv[:, None].expand_as(amax), amax, reduce="amax")
        old = scale[uniq]
        new = torch.maximum(old, block_amax / 127.0).clamp_min(1e-8)
        grow = (old > 0) & (new > old)
        if bool(grow.any()):
            ratio = torch.where(old > 0, old / new, torch.ones_like(old))
            touched = pool[uniq].float() * ratio[:, None, :, None]
            pool[uniq] = touched.round().clamp(-127, 127).to(torch.int8)
        scale[uniq] = new
        q = (x.float() / new[inv][:, :, None]).round().clamp(-127, 127).to(torch.int8)
        pool.view(-1, *pool.shape[2:]).index_copy_(0, slots, q)

    def gather_slots(self, slots: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """K, V of the given flat slots: [n, kv_heads, head_dim] in the compute dtype."""
        kf = self.k.view(-1, *self.k.shape[2:]).index_select(0, slots)
        vf = self.v.view(-1, *self.v.shape[2:]).index_select(0, slots)
        if not self.int8:
            return kf, vf
        blocks = torch.div(slots, self.block_size, rounding_mode="floor")
        ks = self.k_scale.index_select(0, blocks)[:, :, None]
        vs = self.v_scale.index_select(0, blocks)[:, :, None]
        return (kf.float() * ks).to(self.dtype), (vf.float() * vs).to(self.dtype)

    def gather_blocks(self, block_tables: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Whole blocks for a padded [B, nb] table: [B, nb*block_size, kv_heads, head_dim]."""
        b, nb = block_tables.shape
        flat = block_tables.reshape(-1)
        kf = self.k.index_select(0, flat)
        vf = self.v.index_select(0, flat)
        if self.int8:
            kf = (kf.float() * self.k_scale.index_select(0, flat)[:, None, :, None]).to(self.dtype)
            vf = (vf.float() * self.v_scale.index_select(0, flat)[:, None, :, None]).to(self.dtype)
        return kf.view(b, nb * self.block_size, *kf.shape[2:]), vf.view(b, nb * self.block_size, *vf.shape[2:])

    def zero_blocks(self, ids: torch.Tensor) -> None:
        self.k.index_fill_(0, ids, 0)
        self.v.index_fill_(0, ids, 0)

    def copy_block(self, src: int, dst: int) -> None:
        self.k[dst].copy_(self.k[src])
        self.v[dst].copy_(self.v[src])
        if self.int8:
            self.k_scale[dst] = self.k_scale[src]
            self.v_scale[dst] = self.v_scale[src]
        if self.k_min is not None:
            self.k_min[dst] = self.k_min[src]
            self.k_max[dst] = self.k_max[src]

    def reset_bounds(self, ids: torch.Tensor) -> None:
        """Blocks handed to a new owner: forget the previous owner's key bounds."""
        if self.k_min is not None and ids.numel():
            self.k_min.index_fill_(0, ids, float("inf"))
            self.k_max.index_fill_(0, ids, float("-inf"))

    def refresh_bounds(self, ids: torch.Tensor, fills: torch.Tensor) -> None:
        """Recompute the bounds of blocks `ids` from their first `fills` slots as stored (after
        K was overwritten in place, where a running min/max would only widen)."""
        if self.k_min is None or not ids.numel():
            return
        k = self.k.index_select(0, ids)
        if self.int8:
            k = k.float() * self.k_scale.index_select(0, ids)[:, None, :, None]
        k = k.to(self.dtype)
        used = (torch.arange(self.block_size, device=k.device)[None, :] < fills.to(k.device)[:, None])[..., None, None]
        self.k_min[ids] = k.masked_fill(~used, float("inf")).amin(1)
        self.k_max[ids] = k.masked_fill(~used, float("-inf")).amax(1)


def allocate(num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
             dtype: torch.dtype, device: str, int8: bool, dense_layers: int | None = None,
             quest_blocks: int = 0) -> list[LayerKVCache]:
    """One pool per layer; with `dense_layers` set (QUEST on), the layers after the first
    `dense_layers` keep key bounds and decode over at most `quest_blocks` blocks."""
    sparse = dense_layers is not None
    return [LayerKVCache(num_blocks, block_size, kv_heads, head_dim, dtype, device, int8,
                         key_bounds=sparse and i >= dense_layers,
                         quest_blocks=quest_blocks if sparse and i >= dense_layers else 0)
            for i in range(num_layers)]
