"""Triton paged-attention decode kernel (CUDA only; imported lazily by `cuda_attention`).

One program per (sequence, query head). It walks the sequence's block table, loads each block's
K/V straight from the pool [num_blocks, block_size, kv_heads, head_dim] and keeps a running
(max, sum, accumulator) online softmax, so no padded gather of the context is ever built.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _paged_decode_kernel(Q, K, V, Out, BT, LENS, scale,
                         stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_ot, stride_oh,
                         BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    ctx = tl.load(LENS + b)
    d = tl.arange(0, HEAD_DIM)
    offs = tl.arange(0, BLOCK_SIZE)
    q = tl.load(Q + b * stride_qt + h * stride_qh + d).to(tl.float32)
    m = tl.sum(tl.zeros([BLOCK_SIZE], dtype=tl.float32), 0) - float("inf")
    lsum = tl.sum(tl.zeros([BLOCK_SIZE], dtype=tl.float32), 0)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    n_blocks = tl.cdiv(ctx, BLOCK_SIZE)
    for i in range(0, n_blocks):
        blk = tl.load(BT + b * stride_bt + i).to(tl.int64)
        valid = i * BLOCK_SIZE + offs < ctx
        base = blk * stride_kb + offs[:, None] * stride_ks + kvh * stride_kh + d[None, :]
        k = tl.load(K + base, mask=valid[:, None], other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], 1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, 0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(V + base, mask=valid[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, 0)
        lsum = lsum * alpha + tl.sum(p, 0)
        m = m_new
    tl.store(Out + b * stride_ot + h * stride_oh + d, (acc / lsum).to(Out.dtype.element_ty))


def paged_decode(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                 ctx_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """q: [B, Hq, D]; pools: [num_blocks, block_size, Hk, D]; returns [B, Hq, D]."""
    b, hq, d = q.shape
    hk = k_pool.shape[2]
    out = torch.empty_like(q)
    bt = block_tables.to(torch.int32).contiguous()
    lens = ctx_lens.to(torch.int32).contiguous()
    _paged_decode_kernel[(b, hq)](
        q, k_pool, v_pool, out, bt, lens, scale,
        q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2), bt.stride(0),
        out.stride(0), out.stride(1),
        BLOCK_SIZE=k_pool.shape[1], HEAD_DIM=d, GROUP=hq // hk)
    return out
