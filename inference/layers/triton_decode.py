"""Triton paged-attention decode kernels (CUDA only; imported lazily by `cuda_attention`).

One program per (sequence, query head). It walks the sequence's block table, loads each block's
K/V straight from the pool [num_blocks, block_size, kv_heads, head_dim] and keeps a running
(max, sum, accumulator) online softmax, so no padded gather of the context is ever built.

QUEST (`inference.layers.quest` is the torch reference): `quest_scores` computes each block's
upper-bound score from the pool's key bounds, `sparse_decode` is the same online softmax over only
the selected blocks (chosen by `torch.topk` between the two).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _decode_start(Q, LENS, stride_qt, stride_qh, BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr,
                  GROUP: tl.constexpr):
    """Where the dense and QUEST decode kernels start: this program's sequence, query head and KV
    head, the context length, the head-dim and slot offsets, the query row, an empty online softmax."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + b * stride_qt + h * stride_qh + d).to(tl.float32)
    m = tl.sum(tl.zeros([BLOCK_SIZE], dtype=tl.float32), 0) - float("inf")
    lsum = tl.sum(tl.zeros([BLOCK_SIZE], dtype=tl.float32), 0)
    acc = tl.zeros([HEAD_DIM], dtype=tl.float32)
    return b, h, h // GROUP, tl.load(LENS + b), d, tl.arange(0, BLOCK_SIZE), q, m, lsum, acc


@triton.jit
def _attend_block(q, K, V, blk, offs, d, kvh, stride_kb, stride_ks, stride_kh, valid, scale, m, lsum, acc):
    """One pool block `blk` of the online softmax shared by the dense and QUEST kernels: the scores
    of its valid slots, then the running max, sum and output rescaled."""
    base = blk * stride_kb + offs[:, None] * stride_ks + kvh * stride_kh + d[None, :]
    k = tl.load(K + base, mask=valid[:, None], other=0.0).to(tl.float32)
    s = tl.sum(k * q[None, :], 1) * scale
    s = tl.where(valid, s, float("-inf"))
    m_new = tl.maximum(m, tl.max(s, 0))
    m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # a block wholly past the context
    p = tl.exp(s - m_safe)
    alpha = tl.exp(m - m_safe)
    v = tl.load(V + base, mask=valid[:, None], other=0.0).to(tl.float32)
    return m_new, lsum * alpha + tl.sum(p, 0), acc * alpha + tl.sum(p[:, None] * v, 0)


@triton.jit
def _paged_decode_kernel(Q, K, V, Out, BT, LENS, scale,
                         stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_ot, stride_oh,
                         BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr):
    b, h, kvh, ctx, d, offs, q, m, lsum, acc = _decode_start(Q, LENS, stride_qt, stride_qh, BLOCK_SIZE, HEAD_DIM,
                                                             GROUP)
    n_blocks = tl.cdiv(ctx, BLOCK_SIZE)
    for i in range(0, n_blocks):
        blk = tl.load(BT + b * stride_bt + i).to(tl.int64)
        valid = i * BLOCK_SIZE + offs < ctx
        m, lsum, acc = _attend_block(q, K, V, blk, offs, d, kvh, stride_kb, stride_ks, stride_kh, valid, scale,
                                     m, lsum, acc)
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


@triton.jit
def _quest_scores_kernel(Q, KMIN, KMAX, BT, LENS, S,
                         stride_qt, stride_qh, stride_mb, stride_mh, stride_bt, stride_sb, stride_sh, n_table,
                         BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr, TILE: tl.constexpr):
    """QUEST bounds: one program per (sequence, query head, TILE logical blocks)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    kvh = h // GROUP
    n_blocks = tl.cdiv(tl.load(LENS + b), BLOCK_SIZE)
    i = tl.program_id(2) * TILE + tl.arange(0, TILE)
    in_table = i < n_table
    valid = i < n_blocks
    d = tl.arange(0, HEAD_DIM)
    blk = tl.load(BT + b * stride_bt + i, mask=in_table, other=0).to(tl.int64)
    q = tl.load(Q + b * stride_qt + h * stride_qh + d).to(tl.float32)
    base = blk[:, None] * stride_mb + kvh * stride_mh + d[None, :]
    kmin = tl.load(KMIN + base, mask=valid[:, None], other=0.0).to(tl.float32)
    kmax = tl.load(KMAX + base, mask=valid[:, None], other=0.0).to(tl.float32)
    s = tl.sum(tl.maximum(q[None, :] * kmin, q[None, :] * kmax), 1)
    s = tl.where(valid, s, float("-inf"))
    s = tl.where((i == 0) | (i == n_blocks - 1), float("inf"), s)  # the sink and current blocks always
    tl.store(S + b * stride_sb + h * stride_sh + i, s, mask=in_table)


@triton.jit
def _sparse_decode_kernel(Q, K, V, Out, BT, SEL, LENS, scale, n_sel,
                          stride_qt, stride_qh, stride_kb, stride_ks, stride_kh, stride_bt, stride_sb, stride_sh,
                          stride_ot, stride_oh,
                          BLOCK_SIZE: tl.constexpr, HEAD_DIM: tl.constexpr, GROUP: tl.constexpr):
    """`_paged_decode_kernel` over the QUEST selection: block j of (sequence, KV head) is logical
    block SEL[b, kvh, j] of the sequence's table; its slots past the context are masked."""
    b, h, kvh, ctx, d, offs, q, m, lsum, acc = _decode_start(Q, LENS, stride_qt, stride_qh, BLOCK_SIZE, HEAD_DIM,
                                                             GROUP)
    for j in range(0, n_sel):
        li = tl.load(SEL + b * stride_sb + kvh * stride_sh + j).to(tl.int64)
        blk = tl.load(BT + b * stride_bt + li).to(tl.int64)
        valid = li * BLOCK_SIZE + offs < ctx
        m, lsum, acc = _attend_block(q, K, V, blk, offs, d, kvh, stride_kb, stride_ks, stride_kh, valid, scale,
                                     m, lsum, acc)
    tl.store(Out + b * stride_ot + h * stride_oh + d, (acc / lsum).to(Out.dtype.element_ty))


def quest_scores(q: torch.Tensor, k_min: torch.Tensor, k_max: torch.Tensor, block_tables: torch.Tensor,
                 ctx_lens: torch.Tensor, block_size: int, tile: int = 16) -> torch.Tensor:
    """q: [B, Hq, D]; bounds: [num_blocks, Hk, D] -> [B, Hk, nb] float32, as `quest.block_scores`
    (the group's max over its query heads)."""
    b, hq, d = q.shape
    hk = k_min.shape[1]
    bt = block_tables.to(torch.int32).contiguous()
    lens = ctx_lens.to(torch.int32).contiguous()
    nb = bt.shape[1]
    s = torch.empty(b, hq, nb, dtype=torch.float32, device=q.device)
    _quest_scores_kernel[(b, hq, triton.cdiv(nb, tile))](
        q, k_min, k_max, bt, lens, s,
        q.stride(0), q.stride(1), k_min.stride(0), k_min.stride(1), bt.stride(0), s.stride(0), s.stride(1), nb,
        BLOCK_SIZE=block_size, HEAD_DIM=d, GROUP=hq // hk, TILE=tile)
    return s.view(b, hk, hq // hk, nb).amax(2)


def sparse_decode(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, block_tables: torch.Tensor,
                  selected: torch.Tensor, ctx_lens: torch.Tensor, scale: float) -> torch.Tensor:
    """q: [B, Hq, D]; selected: [B, Hk, K] logical block indices -> [B, Hq, D]."""
    b, hq, d = q.shape
    hk = k_pool.shape[2]
    out = torch.empty_like(q)
    bt = block_tables.to(torch.int32).contiguous()
    sel = selected.to(torch.int32).contiguous()
    lens = ctx_lens.to(torch.int32).contiguous()
    _sparse_decode_kernel[(b, hq)](
        q, k_pool, v_pool, out, bt, sel, lens, scale, sel.shape[2],
        q.stride(0), q.stride(1), k_pool.stride(0), k_pool.stride(1), k_pool.stride(2), bt.stride(0),
        sel.stride(0), sel.stride(1), out.stride(0), out.stride(1),
        BLOCK_SIZE=k_pool.shape[1], HEAD_DIM=d, GROUP=hq // hk)
    return out
