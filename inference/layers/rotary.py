"""Rotary position embeddings with the rope scaling variants found in HF configs.

The cos/sin table is precomputed for every position up to max_model_len and indexed by the
flattened position ids, so mixed prefill/decode batches need no per-sequence work.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def rope_params(config) -> dict:
    """Merge transformers 5 `rope_parameters` and older `rope_theta` / `rope_scaling`."""
    params: dict = {}
    legacy = getattr(config, "rope_scaling", None)
    if isinstance(legacy, dict):
        params.update(legacy)
    new = getattr(config, "rope_parameters", None)
    if isinstance(new, dict):
        params.update(new)
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params["rope_type"] = params.get("rope_type") or params.get("type") or "default"
    return params


def inv_frequencies(dim: int, params: dict) -> torch.Tensor:
    base = float(params["rope_theta"])
    # explicit CPU: under a `torch.device("meta")` build these ops would go through torch._refs,
    # whose import pulls in torch._dynamo and triton (~100 MB of RSS for nothing)
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64, device="cpu").float() / dim))
    kind = params["rope_type"]
    if kind == "linear":
        inv = inv / float(params["factor"])
    elif kind == "llama3":
        factor = float(params["factor"])
        low = float(params.get("low_freq_factor", 1.0))
        high = float(params.get("high_freq_factor", 4.0))
        old_len = float(params.get("original_max_position_embeddings", 8192))
        low_wl, high_wl = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv
        scaled = torch.where(wavelen > low_wl, inv / factor, inv)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= high_wl) & (wavelen <= low_wl)
        inv = torch.where(medium, smoothed, scaled)
    elif kind not in ("default",):
        raise NotImplementedError(f"rope_type {kind!r} is not supported")
    return inv


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, max_positions: int, config) -> None:
        super().__init__()
        inv = inv_frequencies(head_dim, rope_params(config))
        t = torch.arange(max_positions, dtype=torch.float32, device=inv.device)
        freqs = torch.outer(t, inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, positions: torch.Tensor, q: torch.Tensor, k: torch.Tensor):
        """q: [T, Hq, D], k: [T, Hk, D]; rotate-half convention of HF checkpoints."""
        cos = self.cos[positions].unsqueeze(1).to(q.dtype)
        sin = self.sin[positions].unsqueeze(1).to(q.dtype)
        return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin

    def shift_keys(self, k: torch.Tensor, delta: torch.Tensor) -> torch.Tensor:
        """Move post-RoPE keys `k` [T, Hk, D] by `delta` [T] positions (may be negative).

        Rotations compose, R(p + d) = R(d) R(p), so a cached key placed `d` positions away needs
        only this rotation, not a recompute (exact up to float rounding; done in float32)."""
        d = delta.to(self.cos.device, torch.long)
        mag = d.abs()
        cos = self.cos[mag].unsqueeze(1)
        sin = (self.sin[mag] * d.sign().to(self.sin.dtype)[:, None]).unsqueeze(1)
        kf = k.float()
        return (kf * cos + _rotate_half(kf) * sin).to(k.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
