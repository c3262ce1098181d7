"""Float32 linear layers at decode on every intra-op thread, with F.linear's exact results.

torch's float32 `F.linear` with a few activation rows (a decode step) runs MKL's GEMV on one
thread: it reads the weights at one thread's DRAM bandwidth while the other threads wait (Zen 4,
2 threads: SmolLM2's 113 MB head at 11.0 GB/s with 2 threads as with 1; `torch.sum` over the same
bytes 31.9 GB/s). `linear` hands each thread a contiguous block of output rows, a multiple of
`ALIGN` rows from the start (csrc/float_rows.cpp), and each runs the same F.linear on its block.
Measured rule: the first call for a (weight shape and strides, bias, activation rows) compares the
split with F.linear on random activations and keeps the split only when they are bit-identical,
so greedy output and the HF parity of the float32 path do not move (Zen 4, MKL: splits at
multiples of 16 weight rows matched at 1-4 and 8 activation rows, not at 5-7, nor odd cuts at
any). Contiguous 2-D activations only (the engine's flattened batch; 3-D ones take another torch
path).
Without the native kernels, on one thread, with gradients, on CUDA or for bf16: F.linear.
`RAG_ROW_SPLIT=0` turns it off (for comparisons).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

ALIGN = 64  # rows per block handed to a thread: a multiple of any GEMV row blocking seen so far
MAX_ROWS = 8  # activation rows up to which torch's GEMV path runs on one thread (decode, small batches)
MIN_BYTES = 1 << 20  # smaller weights: a thread hand-off (~5-10 us) costs about what the split saves

ENABLED = os.environ.get("RAG_ROW_SPLIT", "1").strip().lower() not in ("0", "false", "no", "off")
# (weight shape and strides, bias, activation rows) -> the split gave F.linear's bits
_same: dict[tuple, bool] = {}


def _eligible(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if not ENABLED:
        return False
    if weight.dtype != torch.float32 or x.dtype != torch.float32 or weight.device.type != "cpu":
        return False
    if weight.numel() * 4 < MIN_BYTES or weight.shape[0] < 2 * ALIGN or torch.get_num_threads() < 2:
        return False
    if torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad):
        return False
    if x.dim() != 2 or not 0 < x.shape[0] <= MAX_ROWS or not x.is_contiguous():
        return False
    from inference.kernels import ops

    return ops.available()


def _split(x2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.ragk.linear_rows_split.default(x2, weight, bias, ALIGN)


def _matches(weight: torch.Tensor, bias: torch.Tensor | None, m: int) -> bool:
    """The split gives F.linear's bits for `m` activation rows (random ones: another summation
    order would change nearly every output)."""
    x = torch.randn(m, weight.shape[1], generator=torch.Generator().manual_seed(m))
    return torch.equal(_split(x, weight, bias), F.linear(x, weight, bias))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, on every thread where that is faster and gives the same bits."""
    if not _eligible(x, weight):
        return F.linear(x, weight, bias)
    key = (*weight.shape, *weight.stride(), bias is not None, x.shape[0])
    ok = _same.get(key)
    if ok is None:
        ok = _same[key] = _matches(weight, bias, x.shape[0])
    return _split(x, weight, bias) if ok else F.linear(x, weight, bias)


class RowSplitLinear(nn.Linear):
    """`nn.Linear` whose decode-sized calls go through `linear` (same weights, same results)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight, self.bias)
