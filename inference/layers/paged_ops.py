"""Paged attention in plain torch: the reference path, and the pieces the CUDA backends reuse.

Both `attention` (the dispatcher) and `cuda_attention` (the CUDA kernels) import this module and
neither imports the other's internals, so there is no import cycle and no private helper whose
signature can drift under one caller (a CUDA prefill once called a stale 4-argument form).

Decode rows are gathered block-wise into one padded batch and run as a single SDPA call, with the
query heads of each KV head folded into the query-length axis so GQA needs no K/V expansion.
With QUEST on (`quest.py`) a sparse layer's decode reads only its selected blocks instead.
Prefill chunks gather their own context; a chunk on top of a cached prefix folds GQA the same way
and runs the CPU flash kernel with the offset causal mask as a bias (~13% faster than SDPA's GQA
path at 465 x 1,465, same numbers). On GGUF blocks (`native`) prefill spans go to the native kernel
instead (`native_prefill`): decode's numerics, per-row bits independent of chunking and cache.
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F

from inference.kernels import ops as kernel_ops
from inference.kv_cache import LayerKVCache
from inference.layers import quest
from inference.layers.metadata import AttentionMetadata, PrefillSpan


def torch_paged_attention(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata,
                          native: bool = False) -> torch.Tensor:
    out = torch.empty_like(q)
    if meta.num_decodes:
        decode_attention(q, cache, meta, out, native)
    for span in meta.prefills:
        qs = q[span.q_start:span.q_start + span.q_len]
        if native and native_decode_ok(q, cache):
            out[span.q_start:span.q_start + span.q_len] = native_prefill(qs, cache, span)
        else:
            out[span.q_start:span.q_start + span.q_len] = prefill_attention(qs, cache, span)
    return out


def span_limits(span: PrefillSpan) -> torch.Tensor:
    """How many context tokens each row of the span sees (its position + 1): every row sees a
    prefix of the context, a plain chunk the tokens up to its own, a reuse prefill (`mask`) the
    positions at or before its own."""
    if span.lims is None:
        if span.mask is None:
            start = span.ctx_len - span.q_len
            span.lims = torch.arange(start + 1, span.ctx_len + 1, dtype=torch.long)
        else:
            span.lims = span.mask.sum(1).to(device="cpu", dtype=torch.long)
    return span.lims


def native_prefill(q: torch.Tensor, cache: LayerKVCache, span: PrefillSpan) -> torch.Tensor:
    """The span's rows through the native kernel (K/V read in place), with the numerics of
    native decode: a token's attention output, and so its K/V on the next layer and its logits,
    do not depend on how its prompt was chunked, on prefix-cache hits or on the rest of the step.
    The GGUF kernels' 8-bit activations turn SDPA's chunk-dependent last bits into log-probability
    differences of up to ~0.27 (docs/performance.md, session 40)."""
    slots = span.slots if span.slots.device.type == "cpu" else span.slots.cpu()
    return kernel_ops.paged_prefill(_rows(q), cache.k, cache.v, slots, span_limits(span), q.shape[-1] ** -0.5)


def _rows(q: torch.Tensor) -> torch.Tensor:
    """q as the native kernels take it: each row's [Hq, D] contiguous, rows at any stride (a view
    of the fused qkv output passes without a copy; the kernel copies it scaled anyway)."""
    return q if q.stride(2) == 1 and q.stride(1) == q.shape[2] else q.contiguous()


def native_decode_ok(q: torch.Tensor, cache: LayerKVCache) -> bool:
    """The native kernel's domain: float32 CPU pools, head_dim % 8 == 0, <= 16 query heads per
    KV head (ragk::paged_decode checks the same)."""
    hq, d, hk = q.shape[1], q.shape[2], cache.k.shape[2]
    return (q.device.type == "cpu" and q.dtype == torch.float32 and cache.k.dtype == torch.float32
            and not cache.int8 and d % 8 == 0 and hq % hk == 0 and hq // hk <= 16 and kernel_ops.available())


def decode_attention(q: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata, out: torch.Tensor,
                     native: bool = False) -> None:
    hq, d = q.shape[1], q.shape[2]
    hk = cache.k.shape[2]
    b = meta.num_decodes
    qd = q[:b] if meta.decode_contiguous else q.index_select(0, meta.decode_idx)
    sparse = quest.active(cache, meta)
    if native and not sparse and native_decode_ok(q, cache):
        # K/V read from the pool in place: no gather, no transpose (x86_attn.inc)
        o = kernel_ops.paged_decode(_rows(qd), cache.k, cache.v, meta.decode_block_tables,
                                    meta.decode_ctx_lens, d ** -0.5)
        if meta.decode_contiguous:
            out[:b] = o
        else:
            out.index_copy_(0, meta.decode_idx, o)
        return
    qd = qd.view(b, hk, hq // hk, d)  # query heads of one KV head share its K/V
    if sparse:  # sparse layer, context over the budget: top blocks only
        o = quest.quest_decode(qd, cache, meta)
    elif meta.shared_blocks is not None:
        o = cascade_decode(qd, cache, meta)
    else:
        k, v = cache.gather_blocks(meta.decode_block_tables)  # [B, L, Hk, D]
        # SDPA on CPU is ~2.5x faster on contiguous [B, H, L, D] than on the transposed view
        k, v = k.transpose(1, 2).contiguous(), v.transpose(1, 2).contiguous()
        o = F.scaled_dot_product_attention(qd, k, v, attn_mask=meta.decode_mask)
    o = o.reshape(b, hq, d)
    if meta.decode_contiguous:
        out[:b] = o
    else:
        out.index_copy_(0, meta.decode_idx, o)


def cascade_decode(qd: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata) -> torch.Tensor:
    """Attention split at the shared prefix and merged with log-sum-exp weights.

    The shared part is one [Hk, B*g, P] problem (a real matmul instead of B memory-bound
    matrix-vector products, and the prefix K/V is read once, not B times); the suffix part is
    the usual padded gather over the rows' own blocks.
    """
    b, hk, g, d = qd.shape
    kp, vp = cache.gather_blocks(meta.shared_blocks[None])  # [1, P*bs, Hk, D]
    qp = qd.permute(1, 0, 2, 3).reshape(1, hk, b * g, d)
    o1, l1 = flash_cpu(qp, kp.transpose(1, 2).contiguous(), vp.transpose(1, 2).contiguous(), None)
    o1 = o1.view(hk, b, g, d).permute(1, 0, 2, 3)
    l1 = l1.view(hk, b, g).permute(1, 0, 2)
    ks, vs = cache.gather_blocks(meta.suffix_block_tables)
    o2, l2 = flash_cpu(qd, ks.transpose(1, 2).contiguous(), vs.transpose(1, 2).contiguous(),
                        meta.suffix_bias.to(qd.dtype))
    lse = torch.logaddexp(l1, l2)
    return o1 * torch.exp(l1 - lse)[..., None] + o2 * torch.exp(l2 - lse)[..., None]


def flash_cpu(q, k, v, bias):
    """CPU flash attention that also returns the log-sum-exp needed to merge partial results."""
    out = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, attn_mask=bias)
    return out[0], out[1].to(q.dtype)


def prefill_attention(q: torch.Tensor, cache: LayerKVCache, span: PrefillSpan) -> torch.Tensor:
    k, v = cache.gather_slots(span.slots)  # [ctx, Hk, D]
    n, hq, d = q.shape
    hk = k.shape[1]
    kt = k.transpose(0, 1).unsqueeze(0)
    vt = v.transpose(0, 1).unsqueeze(0)
    if span.mask is None:
        qt = q.transpose(0, 1).unsqueeze(0)  # [1, Hq, n, D]
        o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
        return o[0].transpose(0, 1)
    g = hq // hk
    if q.device.type == "cpu" and n > PREFILL_Q_BLOCK and BLOCKED_PREFILL:
        if span.blocks is None or span.blocks[0][3].dtype != q.dtype:
            span.blocks = prefill_blocks(span.mask, g, q.dtype)
        return blocked_prefill(q, k, v, span.blocks)
    if span.bias is None or span.bias.dtype != q.dtype:
        bias = torch.zeros(span.mask.shape, dtype=q.dtype, device=q.device).masked_fill_(~span.mask, float("-inf"))
        span.bias = bias.repeat(g, 1)[None, None]  # rows: (query head within group, position)
    qf = q.transpose(0, 1).reshape(1, hk, g * n, d)
    o = flash_cpu(qf, kt.contiguous(), vt.contiguous(), span.bias)[0] if q.device.type == "cpu" else \
        F.scaled_dot_product_attention(qf, kt, vt, attn_mask=span.bias)
    return o.view(hq, n, d).transpose(0, 1)



PREFILL_Q_BLOCK = 128  # query rows per block of `blocked_prefill`
BLOCKED_PREFILL = os.environ.get("RAG_BLOCKED_PREFILL", "1") != "0"  # read once, not per layer call


def prefill_blocks(mask: torch.Tensor, g: int, dtype: torch.dtype,
                   block: int = PREFILL_Q_BLOCK) -> list[tuple[int, int, int, torch.Tensor]]:
    """(row start, row end, keys seen, GQA-folded bias) per block of `block` query rows.

    Every row sees a prefix of the context (positions in order: a chunk on a cached prefix, or
    reused passages with recomputed tokens), so a block needs only keys [0, its widest row)."""
    vis = mask.sum(1)
    out = []
    for r0 in range(0, mask.shape[0], block):
        r1 = min(mask.shape[0], r0 + block)
        lim = int(vis[r0:r1].max())
        m = mask[r0:r1, :lim]
        bias = torch.zeros(m.shape, dtype=dtype, device=mask.device).masked_fill_(~m, float("-inf"))
        out.append((r0, r1, lim, bias.repeat(g, 1)[None, None]))
    return out


def blocked_prefill(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    blocks: list[tuple[int, int, int, torch.Tensor]]) -> torch.Tensor:
    """Query blocks that attend only to the keys they can see: the masked upper part of the offset
    causal triangle is never scored (one bias over n x ctx scores all of it). Each block keeps the
    folded-GQA form (the query heads of a KV head share one matmul). q: [n, Hq, D]; k, v:
    [ctx, Hk, D]."""
    n, hq, d = q.shape
    hk = k.shape[1]
    g = hq // hk
    kt = k.transpose(0, 1).unsqueeze(0)
    vt = v.transpose(0, 1).unsqueeze(0)
    out = torch.empty_like(q)
    for r0, r1, lim, bias in blocks:
        qf = q[r0:r1].transpose(0, 1).reshape(1, hk, g * (r1 - r0), d)
        o = flash_cpu(qf, kt[:, :, :lim].contiguous(), vt[:, :, :lim].contiguous(), bias)[0]
        out[r0:r1] = o.view(hq, r1 - r0, d).transpose(0, 1)
    return out
