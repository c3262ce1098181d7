"""Paged attention: write new K/V into the block pool, then attend through block tables.

CPU path (the reference): decode rows are gathered block-wise into one padded batch and run as a
single SDPA call, with the query heads of each KV head folded into the query-length axis so GQA
needs no K/V expansion. Prefill chunks gather their own context and use SDPA with a causal mask
offset by the cached prefix. On CUDA `cuda_attention` takes over when a kernel is available.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inference.kv_cache import LayerKVCache
from inference.layers.metadata import AttentionMetadata

_CUDA_BACKEND = None


def _cuda_backend():
    global _CUDA_BACKEND
    if _CUDA_BACKEND is None:
        from inference.layers import cuda_attention

        _CUDA_BACKEND = cuda_attention.select_backend()
    return _CUDA_BACKEND


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: LayerKVCache,
                    meta: AttentionMetadata) -> torch.Tensor:
    """q: [T, Hq, D], k/v: [T, Hk, D] for the flattened batch; returns [T, Hq, D]."""
    cache.write(meta.slot_mapping, k, v)
    if q.is_cuda and not cache.int8:
        backend = _cuda_backend()
        if backend is not None:
            return backend(q, cache, meta)
    return torch_paged_attention(q, cache, meta)


def torch_paged_attention(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata) -> torch.Tensor:
    out = torch.empty_like(q)
    if meta.num_decodes:
        _decode(q, cache, meta, out)
    for span in meta.prefills:
        qs = q[span.q_start:span.q_start + span.q_len]
        out[span.q_start:span.q_start + span.q_len] = _prefill(qs, cache, span.slots, span.mask)
    return out


def _decode(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, out: torch.Tensor) -> None:
    hq, d = q.shape[1], q.shape[2]
    k, v = cache.gather_blocks(meta.decode_block_tables)  # [B, L, Hk, D]
    hk = k.shape[2]
    b = k.shape[0]
    if meta.decode_contiguous:
        qd = q[:b]
    else:
        qd = q.index_select(0, meta.decode_idx)
    qd = qd.view(b, hk, hq // hk, d)  # query heads of one KV head share its K/V
    o = F.scaled_dot_product_attention(qd, k.transpose(1, 2), v.transpose(1, 2), attn_mask=meta.decode_mask)
    o = o.reshape(b, hq, d)
    if meta.decode_contiguous:
        out[:b] = o
    else:
        out.index_copy_(0, meta.decode_idx, o)


def _prefill(q: torch.Tensor, cache: LayerKVCache, slots: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    k, v = cache.gather_slots(slots)  # [ctx, Hk, D]
    qt = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, n, D]
    kt = k.transpose(0, 1).unsqueeze(0)
    vt = v.transpose(0, 1).unsqueeze(0)
    if mask is None:
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
    else:
        o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask, enable_gqa=True)
    return o[0].transpose(0, 1)
