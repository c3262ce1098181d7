"""The attention paths without a GPU: the torch reference, the CUDA backends' prefill helper and
dispatch on CPU tensors, and the Triton paged-decode kernel under Triton's CPU interpreter.

Still needs a GPU: compiled (non-interpreted) Triton, flash-attn's paged kernel (block sizes that
are multiples of 256), SDPA's CUDA kernels for prefill, CUDA graphs (bench/device_check.py).
"""

from __future__ import annotations

import pytest
import torch

from inference.layers import attention, cuda_attention
from inference.layers.paged_ops import torch_paged_attention
from tests.inference.attention_case import build, needs_triton, oracle, run_interpreted


def test_torch_reference_matches_oracle():
    q, cache, meta = build()
    torch.testing.assert_close(torch_paged_attention(q, cache, meta), oracle(q, cache), atol=1e-5, rtol=1e-5)


def test_cuda_prefill_helper_runs_on_cpu_tensors():
    # was: `_prefill(qs, cache, span.slots, span.mask)` against a 3-argument `_prefill`: TypeError
    q, cache, meta = build()
    out = torch.zeros_like(q)
    cuda_attention._prefills(q, cache, meta, out)
    n_dec = meta.num_decodes
    torch.testing.assert_close(out[n_dec:], oracle(q, cache)[n_dec:], atol=1e-5, rtol=1e-5)


def test_dispatch_keeps_cpu_tensors_on_torch(monkeypatch):
    assert cuda_attention.select_backend() is None or torch.cuda.is_available()

    def gpu_only(*a, **k):
        raise AssertionError("CPU tensors reached a CUDA kernel")

    monkeypatch.setattr(attention, "_CUDA_BACKEND", gpu_only)
    q, cache, meta = build()
    k = v = torch.zeros(0, cache.k.shape[2], cache.k.shape[3])
    out = attention.paged_attention(q, k, v, cache, meta)
    torch.testing.assert_close(out, oracle(q, cache), atol=1e-5, rtol=1e-5)


CHILD = """
import json, math, torch
from inference.layers import cuda_attention
from inference.layers.triton_decode import paged_decode
from tests.inference.attention_case import build, oracle
q, cache, meta = build(seed=3)
ref = oracle(q, cache)
n = meta.num_decodes
qd = q.index_select(0, meta.decode_idx)
kernel = paged_decode(qd, cache.k, cache.v, meta.decode_block_tables, meta.decode_ctx_lens, 1 / math.sqrt(q.shape[-1]))
bf = paged_decode(qd.bfloat16(), cache.k.bfloat16(), cache.v.bfloat16(), meta.decode_block_tables,
                  meta.decode_ctx_lens, 1 / math.sqrt(q.shape[-1]))
print(json.dumps({
    "kernel": (kernel - ref[:n]).abs().max().item(),
    "kernel_bf16": (bf.float() - ref[:n]).abs().max().item(),
    "triton_forward": (cuda_attention._triton_forward(q, cache, meta) - ref).abs().max().item(),
    "flash_fallback": (cuda_attention._flash_attn_forward(q, cache, meta) - ref).abs().max().item(),
}))
"""


@needs_triton
def test_triton_paged_decode_under_interpreter():
    err = run_interpreted(CHILD)
    assert err["kernel"] < 1e-5 and err["triton_forward"] < 1e-5
    assert err["flash_fallback"] < 1e-5  # block size 8: flash-attn cannot page it, Triton takes over
    assert err["kernel_bf16"] < 5e-2


def _masked_oracle(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    g = q.shape[1] // k.shape[1]
    ke = k.repeat_interleave(g, 1).transpose(0, 1)[None].double()
    ve = v.repeat_interleave(g, 1).transpose(0, 1)[None].double()
    o = torch.nn.functional.scaled_dot_product_attention(q.transpose(0, 1)[None].double(), ke, ve, attn_mask=mask)
    return o[0].transpose(0, 1).float()


@pytest.mark.parametrize("kind", ["cached_prefix", "reused_passages"])
def test_blocked_prefill_matches_masked_attention(kind):
    # catches a block that drops keys its widest row sees (wrong `lim`), a bias row misaligned
    # with its folded query head, and blocks written back to the wrong rows
    from inference.layers.paged_ops import blocked_prefill, prefill_blocks

    gen = torch.Generator().manual_seed(5)
    n, ctx, hq, hk, d = 301, 420, 6, 2, 16
    if kind == "cached_prefix":  # a chunk on ctx - n cached tokens: prefix, then causal
        pos = torch.arange(ctx - n, ctx)
    else:  # kv_reuse: recomputed tokens scattered over the prompt, in position order
        pos = torch.sort(torch.randperm(ctx, generator=gen)[:n]).values
    mask = torch.arange(ctx)[None, :] <= pos[:, None]
    q = torch.randn(n, hq, d, generator=gen)
    k = torch.randn(ctx, hk, d, generator=gen)
    v = torch.randn(ctx, hk, d, generator=gen)
    blocks = prefill_blocks(mask, hq // hk, torch.float32, block=64)
    assert len(blocks) == 5 and blocks[0][2] < ctx  # the first block really skips keys
    torch.testing.assert_close(blocked_prefill(q, k, v, blocks), _masked_oracle(q, k, v, mask),
                               atol=2e-5, rtol=2e-5)
