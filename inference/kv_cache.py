"""Preallocated K/V pools, one pair per layer, shaped [num_blocks, block_size, kv_heads, head_dim].

Sizing: the pool takes a memory budget (fraction of free memory or GiB) so the engine can report
how many tokens fit. The int8 variant stores one absmax scale per (block, kv head); writing into a
block whose scale is too small rescales that block's existing values first, so appends never clip.
"""

from __future__ import annotations

import torch


def bytes_per_block(num_layers: int, block_size: int, kv_heads: int, head_dim: int, int8: bool,
                    dtype: torch.dtype) -> int:
    elem = 1 if int8 else torch.empty((), dtype=dtype).element_size()
    per_layer = 2 * block_size * kv_heads * head_dim * elem
    if int8:
        per_layer += 2 * kv_heads * 4
    return num_layers * per_layer


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
                 dtype: torch.dtype, device: str, int8: bool) -> None:
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

    def write(self, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
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


def allocate(num_layers: int, num_blocks: int, block_size: int, kv_heads: int, head_dim: int,
             dtype: torch.dtype, device: str, int8: bool) -> list[LayerKVCache]:
    return [LayerKVCache(num_blocks, block_size, kv_heads, head_dim, dtype, device, int8)
            for _ in range(num_layers)]
