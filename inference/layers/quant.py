"""int8 linear layers for CPU: int8 weights with one scale per output channel, activations quantised
per token on the fly, int8 x int8 -> int32 GEMM (`torch._int_mm`, VNNI `vpdpbusd` on this CPU).

Why this scheme (docs/performance.md, "int8 kernels", Qwen2.5-0.5B, same runs):
- fbgemm's dynamic linear (`quantized.linear_dynamic`) quantises activations per tensor: Qwen's
  outlier channels then cost most of the 8 bits (top-1 agreement with fp32 0.80, perplexity +15%),
  and its quantized-tensor API is deprecated in torch 2.13;
- weight-only int8 (`_weight_int8pack_mm`) is the most accurate but dequantises into a bf16 GEMM
  per call: prefill runs slower than plain bf16;
- per-token activation scales keep agreement at ~0.98 and make prefill and batched decode int8
  GEMMs.
"""

from __future__ import annotations

import torch
from torch import nn


def per_channel_int8(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 rows: a row's largest |w| maps to 127. Returns (int8 [N, K], fp32 scales [N])."""
    w = weight.detach().float()
    scale = (w.abs().amax(dim=1) / 127.0).clamp(min=1e-12)
    return (w / scale[:, None]).round_().clamp_(-127, 127).to(torch.int8), scale


class Int8Linear(nn.Module):
    """Drop-in for `nn.Linear` (or a tied embedding used as the output head): float in, float out."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.shape
        q, scale = per_channel_int8(weight)
        # plain attributes, not buffers: `model.to(bfloat16)` must not round the scales (int8 is
        # CPU-only, so nothing needs to follow a device move)
        self.weight_t = q.t()  # [K, N] view of the row-major int8 weight, as _int_mm takes it
        self.scale = scale
        self.bias = None if bias is None else bias.detach().float()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        xf = x.reshape(-1, self.in_features).float()
        xs = xf.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127.0)
        xq = (xf / xs).round_().to(torch.int8)
        out = torch._int_mm(xq, self.weight_t).float().mul_(xs).mul_(self.scale)
        if self.bias is not None:
            out.add_(self.bias)
        return out.reshape(*shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8 per-channel"


def quantize_linears(model: nn.Module) -> int:
    """Replace every `nn.Linear` under `model` by an `Int8Linear` in place; returns how many.
    Shapes `_int_mm` cannot take (a dimension not a multiple of 8) stay in float."""
    count = 0
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear) and child.in_features % 8 == 0 and child.out_features % 8 == 0:
                setattr(parent, name, Int8Linear(child.weight, child.bias))
                count += 1
    return count
