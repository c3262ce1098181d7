"""CUDA attention backends, chosen at run time (never imported on CPU-only machines).

Order of preference:
1. flash-attn's `flash_attn_with_kvcache(block_table=...)` when installed and the block size is
   one its paged kernel accepts (multiples of 256 in upstream flash-attn 2);
2. our Triton paged-decode kernel (one program per (sequence, query head), online softmax over the
   sequence's blocks read straight from the pool: no gather, no padding);
3. otherwise None, and the caller uses the torch gather+SDPA path, which also runs on CUDA.
QUEST sparse decode layers take the Triton kernels (`quest_scores`, `sparse_decode`) even when
flash-attn is installed, or the torch reference (`quest.py`) without Triton.
Prefill spans go through torch SDPA (flash / memory-efficient kernels on CUDA) in all cases.
"""

from __future__ import annotations

import importlib.util
import math

import torch

from inference.kv_cache import LayerKVCache
from inference.layers import quest
from inference.layers.metadata import AttentionMetadata
from inference.layers.paged_ops import prefill_attention, torch_paged_attention


def select_backend():
    if not torch.cuda.is_available():
        return None
    if importlib.util.find_spec("flash_attn") is not None:
        try:
            from flash_attn import flash_attn_with_kvcache  # noqa: F401

            return _flash_attn_forward
        except ImportError:
            pass
    if importlib.util.find_spec("triton") is not None:
        try:
            from inference.layers import triton_decode  # noqa: F401

            return _triton_forward
        except Exception:  # triton present but unusable (e.g. no compiler): fall back to torch
            return None
    return None


def _prefills(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, out: torch.Tensor) -> None:
    for span in meta.prefills:
        qs = q[span.q_start:span.q_start + span.q_len]
        out[span.q_start:span.q_start + span.q_len] = prefill_attention(qs, cache, span)


def _triton_forward(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata) -> torch.Tensor:
    from inference.layers.triton_decode import paged_decode, quest_scores, sparse_decode

    out = torch.empty_like(q)
    if meta.num_decodes:
        qd = q.index_select(0, meta.decode_idx)
        scale = 1.0 / math.sqrt(q.shape[-1])
        if quest.active(cache, meta):  # QUEST: bounds kernel, top-k, attention over the selection only
            scores = quest_scores(qd, cache.k_min, cache.k_max, meta.decode_block_tables, meta.decode_ctx_lens,
                                  cache.block_size)
            sel = quest.select_blocks(scores, cache.quest_blocks)
            od = sparse_decode(qd, cache.k, cache.v, meta.decode_block_tables, sel, meta.decode_ctx_lens, scale)
        else:
            od = paged_decode(qd, cache.k, cache.v, meta.decode_block_tables, meta.decode_ctx_lens, scale)
        out.index_copy_(0, meta.decode_idx, od)
    _prefills(q, cache, meta, out)
    return out


def _flash_attn_forward(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata) -> torch.Tensor:
    # flash-attn's paged kernel cannot read these blocks, nor a QUEST selection
    if cache.block_size % 256 or quest.active(cache, meta):
        return _triton_forward(q, cache, meta) if importlib.util.find_spec("triton") else _torch(q, cache, meta)
    from flash_attn import flash_attn_with_kvcache

    out = torch.empty_like(q)
    if meta.num_decodes:
        qd = q.index_select(0, meta.decode_idx).unsqueeze(1)  # [B, 1, H, D]
        od = flash_attn_with_kvcache(qd, cache.k, cache.v, cache_seqlens=meta.decode_ctx_lens.to(torch.int32),
                                     block_table=meta.decode_block_tables.to(torch.int32), causal=True)
        out.index_copy_(0, meta.decode_idx, od.squeeze(1))
    for span in meta.prefills:
        if span.block_table is None:  # a custom layout (K/V reuse): context slots + mask, torch path
            out[span.q_start:span.q_start + span.q_len] = prefill_attention(
                q[span.q_start:span.q_start + span.q_len], cache, span)
            continue
        qs = q[span.q_start:span.q_start + span.q_len].unsqueeze(0)
        o = flash_attn_with_kvcache(qs, cache.k, cache.v,
                                    cache_seqlens=torch.tensor([span.ctx_len], dtype=torch.int32, device=q.device),
                                    block_table=span.block_table.unsqueeze(0), causal=True)
        out[span.q_start:span.q_start + span.q_len] = o[0]
    return out


def _torch(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata) -> torch.Tensor:
    return torch_paged_attention(q, cache, meta)
