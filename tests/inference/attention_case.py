"""One mixed attention step built by hand (two decode rows, a plain prefill, a prefill on top of a
cached prefix) and a naive per-row oracle, shared by the CPU and Triton-interpreter tests."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from inference.kv_cache import LayerKVCache
from inference.layers.metadata import AttentionMetadata, PrefillSpan

REPO = Path(__file__).resolve().parents[2]
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

BS, HK, HQ, D = 8, 2, 4, 16
# (kind, blocks, context length, new tokens)
ROWS = [("decode", [1, 2, 3], 20, 1), ("decode", [4, 5], 9, 1),
        ("prefill", [6], 5, 5), ("prefill", [7, 8], 12, 4)]


def slots_of(blocks: list[int], n: int) -> torch.Tensor:
    return torch.tensor([blocks[i // BS] * BS + i % BS for i in range(n)])


def build(seed: int = 0) -> tuple[torch.Tensor, LayerKVCache, AttentionMetadata]:
    g = torch.Generator().manual_seed(seed)
    cache = LayerKVCache(16, BS, HK, D, torch.float32, "cpu", False)
    cache.k.copy_(torch.randn(cache.k.shape, generator=g))
    cache.v.copy_(torch.randn(cache.v.shape, generator=g))
    n_tokens = sum(r[3] for r in ROWS)
    q = torch.randn(n_tokens, HQ, D, generator=g)
    decodes = [r for r in ROWS if r[0] == "decode"]
    width = max(len(r[1]) for r in decodes)
    table = torch.zeros(len(decodes), width, dtype=torch.long)
    for i, r in enumerate(decodes):
        table[i, : len(r[1])] = torch.tensor(r[1])
    lens = torch.tensor([r[2] for r in decodes])
    meta = AttentionMetadata(slot_mapping=torch.zeros(0, dtype=torch.long))
    meta.decode_idx = torch.arange(len(decodes))
    meta.decode_block_tables, meta.decode_ctx_lens = table, lens
    meta.decode_mask = (torch.arange(width * BS)[None, :] < lens[:, None])[:, None, None, :]
    meta.decode_contiguous = True
    start = len(decodes)
    for _, blocks, ctx, new in (r for r in ROWS if r[0] == "prefill"):
        cached = ctx - new
        mask = None if cached == 0 else torch.arange(ctx)[None, :] <= cached + torch.arange(new)[:, None]
        meta.prefills.append(PrefillSpan(q_start=start, q_len=new, ctx_len=ctx, slots=slots_of(blocks, ctx),
                                         mask=mask, block_table=torch.tensor(blocks, dtype=torch.int32)))
        start += new
    return q, cache, meta


def oracle(q: torch.Tensor, cache: LayerKVCache) -> torch.Tensor:
    """Softmax attention row by row straight from the pool: no padding, no folding, no kernels."""
    out = torch.empty_like(q)
    t = 0
    for _, blocks, ctx, new in ROWS:
        slots = slots_of(blocks, ctx)
        k = cache.k.view(-1, HK, D)[slots].repeat_interleave(HQ // HK, 1)  # [ctx, HQ, D]
        v = cache.v.view(-1, HK, D)[slots].repeat_interleave(HQ // HK, 1)
        for j in range(new):
            visible = ctx - new + j + 1
            s = torch.einsum("hd,lhd->hl", q[t], k[:visible]) / math.sqrt(D)
            out[t] = torch.einsum("hl,lhd->hd", s.softmax(-1), v[:visible])
            t += 1
    return out


def run_interpreted(child: str) -> Any:
    """Run the Python source `child` in a fresh process under Triton's CPU interpreter
    (`TRITON_INTERPRET=1` only counts before triton is imported) and return the JSON its last
    output line prints."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    res = subprocess.run([sys.executable, "-c", child], cwd=REPO, env=env, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])
