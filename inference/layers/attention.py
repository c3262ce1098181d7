"""Paged attention: write new K/V into the block pool, then attend through block tables.

The torch path (`paged_ops`) is the reference and runs everywhere; on CUDA `cuda_attention`
takes over when a kernel (flash-attn, Triton) is available.
"""

from __future__ import annotations

import torch

from inference.kv_cache import LayerKVCache
from inference.layers import cuda_attention
from inference.layers.metadata import AttentionMetadata
from inference.layers.paged_ops import torch_paged_attention

_CUDA_BACKEND = None


def _cuda_backend():
    global _CUDA_BACKEND
    if _CUDA_BACKEND is None:
        _CUDA_BACKEND = cuda_attention.select_backend()
    return _CUDA_BACKEND


def uses_cuda_backend(q: torch.Tensor, cache: LayerKVCache) -> bool:
    """CUDA kernels handle float pools on CUDA tensors; int8 pools and CPU tensors stay on torch."""
    return q.is_cuda and not cache.int8


def paged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: LayerKVCache,
                    meta: AttentionMetadata, native: bool = False) -> torch.Tensor:
    """q: [T, Hq, D], k/v: [T, Hk, D] for the flattened batch; returns [T, Hq, D]. `native`: the
    model runs the native fused ops (GGUF blocks), so prefill and decode use the native kernel (it
    differs from SDPA in the last bits; the float32 path that must match HF keeps SDPA)."""
    cache.write(meta.slot_mapping, k, v)
    if uses_cuda_backend(q, cache):
        backend = _cuda_backend()
        if backend is not None:
            return backend(q, cache, meta)
    return torch_paged_attention(q, cache, meta, native)
