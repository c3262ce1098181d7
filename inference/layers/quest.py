"""QUEST query-aware block-sparse decode attention, torch reference (Tang et al., 2024).

A decode token's attention is dominated by few keys. For each KV block the pool keeps the
element-wise min and max of its keys (`LayerKVCache.k_min/k_max`, maintained on every write), so
for a query q no key k in the block can score more than

    sum_d max(q_d * min_d, q_d * max_d)  =  relu(q) . max + min(q, 0) . min

(two matmuls instead of an element-wise max). Decode then attends exactly over the
`quest_blocks` blocks with the highest bound, always including the sequence's last block (the
current token's; its own keys are the most recent context) and its first block (the attention
sink: SmolLM2 passkeys at 1.5k tokens, budget 128/256, 3 and 4 of 12 right without it, 9 and 9
with it, 12 dense). Under GQA every query head of a KV
head's group reads the same K/V, so the group's blocks are chosen by the largest bound of any of
its heads (a block one head needs is read for all of them). Which layers are sparse (not the
first `dense_layers`) and how many blocks is set on each layer's pool; prefill stays dense.

The Triton path (`triton_decode.quest_scores` / `sparse_decode`) computes the same bounds and
attends over the same selection; tests compare it with this module under TRITON_INTERPRET=1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from inference.kv_cache import LayerKVCache
from inference.layers.metadata import AttentionMetadata


def active(cache: LayerKVCache, meta: AttentionMetadata) -> bool:
    """Is this layer's decode sparse this step? Only when some row has more blocks than the budget;
    otherwise QUEST would select every block and dense attention is the same, exactly."""
    return bool(cache.quest_blocks) and meta.decode_block_tables is not None \
        and meta.decode_block_tables.shape[1] > cache.quest_blocks


def upper_bounds(q: torch.Tensor, k_min: torch.Tensor, k_max: torch.Tensor) -> torch.Tensor:
    """q: [..., g, D], k_min/k_max: [..., nb, D] -> [..., g, nb]: the largest q.k any key of each
    block can reach (unscaled)."""
    qp = q.clamp_min(0)
    return qp @ k_max.transpose(-1, -2) + (q - qp) @ k_min.transpose(-1, -2)


def block_scores(qd: torch.Tensor, cache: LayerKVCache, tables: torch.Tensor, ctx_lens: torch.Tensor
                 ) -> torch.Tensor:
    """qd: [B, Hk, g, D] -> [B, Hk, nb] bound per (row, KV head, logical block): the max over the
    group's query heads; blocks past a row's context are -inf, its first and last +inf (always kept)."""
    b, nb = tables.shape
    hk, d = cache.k_min.shape[1:]
    flat = tables.reshape(-1)
    kmin = cache.k_min.index_select(0, flat).view(b, nb, hk, d).transpose(1, 2)
    kmax = cache.k_max.index_select(0, flat).view(b, nb, hk, d).transpose(1, 2)
    ub = upper_bounds(qd, kmin.to(qd.dtype), kmax.to(qd.dtype)).amax(2)  # [B, Hk, nb]
    n_blocks = -(-ctx_lens // cache.block_size)
    idx = torch.arange(nb, device=ub.device)[None, :]
    ub = ub.masked_fill((idx >= n_blocks[:, None])[:, None, :], float("-inf"))
    keep = (idx == 0) | (idx == n_blocks[:, None] - 1)
    return ub.masked_fill(keep[:, None, :], float("inf"))


def select_blocks(scores: torch.Tensor, k: int) -> torch.Tensor:
    """[B, Hk, nb] scores -> [B, Hk, k] logical block indices of the top-k (a row with fewer
    blocks than k also gets some past its context; attention masks them)."""
    return scores.topk(min(k, scores.shape[-1]), dim=-1).indices


def quest_decode(qd: torch.Tensor, cache: LayerKVCache, meta: AttentionMetadata) -> torch.Tensor:
    """qd: [B, Hk, g, D] decode queries (GQA-folded) -> [B, Hk, g, D], exact attention over each
    (row, KV head)'s selected blocks, gathered straight from the pool (one index_select)."""
    tables, lens = meta.decode_block_tables, meta.decode_ctx_lens
    b, hk, _g, d = qd.shape
    bs = cache.block_size
    sel = select_blocks(block_scores(qd, cache, tables, lens), cache.quest_blocks)  # [B, Hk, K]
    n_sel = sel.shape[-1]
    phys = tables.gather(1, sel.reshape(b, -1)).view(b, hk, n_sel)
    heads = torch.arange(hk, device=qd.device)[None, :, None, None]
    offs = torch.arange(bs, device=qd.device)
    rows = ((phys[..., None] * bs + offs) * hk + heads).reshape(-1)  # rows of the pool as [slots*Hk, D]
    k = cache.k.view(-1, d).index_select(0, rows)
    v = cache.v.view(-1, d).index_select(0, rows)
    if cache.int8:
        blocks = (phys[..., None] * hk + heads).reshape(-1)
        ks = cache.k_scale.view(-1).index_select(0, blocks).view(b, hk, n_sel, 1, 1)
        vs = cache.v_scale.view(-1).index_select(0, blocks).view(b, hk, n_sel, 1, 1)
        k = (k.view(b, hk, n_sel, bs, d).float() * ks).to(cache.dtype)
        v = (v.view(b, hk, n_sel, bs, d).float() * vs).to(cache.dtype)
    k = k.reshape(b, hk, n_sel * bs, d)
    v = v.reshape(b, hk, n_sel * bs, d)
    pos = sel[..., None] * bs + offs  # logical positions of the gathered keys
    mask = (pos < lens[:, None, None, None]).reshape(b, hk, 1, n_sel * bs)
    return F.scaled_dot_product_attention(qd, k.to(qd.dtype), v.to(qd.dtype), attn_mask=mask)


def skipped_blocks(ctx_lens: list[int], block_size: int, quest_blocks: int) -> int:
    """Blocks one sparse layer's KV head does not read this step, summed over the decode rows."""
    n = [-(-c // block_size) for c in ctx_lens]
    if not n or max(n) <= quest_blocks:
        return 0
    return sum(max(0, x - quest_blocks) for x in n)
