"""Llama-family decoder over a flattened mixed batch (Llama, Mistral, Qwen2, Qwen3).

Variants differ only in small switches read from the HF config: Qwen2 has biases on q/k/v,
Qwen3 normalises q and k per head before RoPE. Q/K/V and gate/up are fused into single matmuls
(fewer kernel launches and Python hops per layer, which dominate small-model decode on CPU).

`enable_fused_ops()` (the GGUF-block loader calls it) swaps the elementwise torch ops of each
layer for the native kernels' fused ones (RMSNorm with the residual add, in-place RoPE on the
qkv rows, SiLU-and-multiply): ~60 small torch ops per layer become ~10 calls. Float32 HF weights
keep the torch ops, which match transformers bit for bit; their linear layers split decode-sized
calls across the intra-op threads where that gives F.linear's bits (inference/layers/row_split.py).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

from inference.layers.attention import paged_attention
from inference.layers.metadata import AttentionMetadata
from inference.layers.norm import RMSNorm
from inference.layers.rotary import RotaryEmbedding
from inference.layers.row_split import RowSplitLinear, linear


def _ops():
    from inference.kernels import ops

    return ops


class Attention(nn.Module):
    def __init__(self, cfg, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        qkv_bias = cfg.model_type == "qwen2" or bool(getattr(cfg, "attention_bias", False))
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.qkv_proj = RowSplitLinear(cfg.hidden_size, self.q_size + 2 * self.kv_size, bias=qkv_bias)
        self.o_proj = RowSplitLinear(self.q_size, cfg.hidden_size,
                                     bias=bool(getattr(cfg, "attention_bias", False)) and cfg.model_type != "qwen2")
        self.qk_norm = cfg.model_type == "qwen3"
        if self.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps)
        self.rotary = rotary
        self.kv_cache = None  # set by the runner: LayerKVCache
        self.fused = False  # native fused ops (enable_fused_ops)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        t = x.shape[0]
        if self.fused and not self.qk_norm and x.dtype == torch.float32:
            qkv = self.qkv_proj(x)
            _ops().rope_qk_(qkv, positions, self.rotary.cos, self.rotary.sin, self.num_heads + self.num_kv_heads,
                            self.head_dim)
            q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
            o = paged_attention(q.view(t, self.num_heads, self.head_dim), k.view(t, self.num_kv_heads, self.head_dim),
                                v.view(t, self.num_kv_heads, self.head_dim), self.kv_cache, meta, native=True)
            return self.o_proj(o.reshape(t, self.q_size))
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        if self.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = self.rotary(positions, q, k)
        o = paged_attention(q, k, v, self.kv_cache, meta)
        return self.o_proj(o.reshape(t, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg) -> None:
        super().__init__()
        self.inter = cfg.intermediate_size
        self.gate_up_proj = RowSplitLinear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down_proj = RowSplitLinear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # One native op (SIMD exp per ISA) instead of torch's split, SiLU, multiply, written over
        # the gate half (no new buffer to fault in): 6-13x faster for batched decode on Zen 5,
        # ~2x for a prompt chunk, where it is memory-bound.
        if self.fused and x.dtype == torch.float32:
            return self.down_proj(_ops().silu_mul_(self.gate_up_proj(x)))
        gate, up = self.gate_up_proj(x).split(self.inter, dim=-1)
        return self.down_proj(F.silu(gate) * up)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, rotary: RotaryEmbedding) -> None:
        super().__init__()
        self.self_attn = Attention(cfg, rotary)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata) -> torch.Tensor:
        h = h + self.self_attn(self.input_layernorm(h), positions, meta)
        return h + self.mlp(self.post_attention_layernorm(h))


class LlamaForCausalLM(nn.Module):
    def __init__(self, cfg, max_positions: int | None = None) -> None:
        super().__init__()
        self.config = cfg
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.rotary = RotaryEmbedding(head_dim, max_positions or cfg.max_position_embeddings, cfg)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg, self.rotary) for _ in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.tied = bool(getattr(cfg, "tie_word_embeddings", False))
        if not self.tied:
            self.lm_head = RowSplitLinear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @property
    def num_kv_heads(self) -> int:
        return self.layers[0].self_attn.num_kv_heads

    @property
    def head_dim(self) -> int:
        return self.layers[0].self_attn.head_dim

    def set_kv_caches(self, caches) -> None:
        for layer, cache in zip(self.layers, caches, strict=True):
            layer.self_attn.kv_cache = cache

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                capture: dict[int, torch.Tensor] | None = None, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Final normed hidden states; `capture` (layer k -> None) is filled with the residual
        stream after decoder layer k (1-based), for probes. `keep` (row indices, fused path only):
        only those rows' final states are wanted (returned in that order), so the last layer's MLP
        runs on them alone; elsewhere all rows are returned and the caller selects."""
        h = self.embed_tokens(input_ids)
        if self.fused and h.dtype == torch.float32:
            return self._fused_forward(h, positions, meta, capture, keep)
        for i, layer in enumerate(self.layers, 1):
            h = layer(h, positions, meta)
            if capture is not None and i in capture:
                capture[i] = h
        return self.norm(h)

    fused = False

    def enable_fused_ops(self) -> None:
        """Run the layers with the native fused ops (CPU, float32 activations; see the module
        docstring). A no-op where the kernels are not available, or with RAG_FUSED_OPS=0 (the
        torch ops, for comparisons)."""
        if not _ops().available() or os.environ.get("RAG_FUSED_OPS") == "0":
            return
        self.fused = True
        for layer in self.layers:
            layer.self_attn.fused = True
            layer.mlp.fused = True

    def _fused_forward(self, h: torch.Tensor, positions: torch.Tensor, meta: AttentionMetadata,
                       capture: dict[int, torch.Tensor] | None, keep: torch.Tensor | None = None) -> torch.Tensor:
        """Same layers as `forward`; each residual add is fused with the next norm (the residual
        stream `h` is updated in place, so captured states are copies). With `keep`, the last
        layer's MLP runs on the kept rows only: no later layer reads the other rows' output (their
        K/V of every layer, the last included, is written before it), so a prompt chunk skips
        ~1/num_layers of its MLP work (decode keeps every row: nothing is skipped)."""
        ops = _ops()
        h = h.contiguous()
        first = self.layers[0].input_layernorm
        x = ops.rms_norm(h, first.weight, first.eps)
        n = len(self.layers)
        if keep is not None and (keep.numel() == h.shape[0] or (capture is not None and n in capture)):
            keep = None  # every row wanted, or the last layer's residual captured: nothing to skip
        for i, layer in enumerate(self.layers, 1):
            post = layer.post_attention_layernorm
            x = ops.add_rms_norm_(h, layer.self_attn(x, positions, meta), post.weight, post.eps)
            if i == n and keep is not None:
                if keep.numel() == 0:  # a prompt chunk that samples nothing: its K/V is all it gives
                    return x[:0]
                h, x = h[keep], x[keep]
            nxt = self.layers[i].input_layernorm if i < n else self.norm
            x = ops.add_rms_norm_(h, layer.mlp(x), nxt.weight, nxt.eps)
            if capture is not None and i in capture:
                capture[i] = h.clone()
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.tied:
            return linear(hidden, self.embed_tokens.weight).float()
        return self.lm_head(hidden).float()

    def compute_logits_rows(self, hidden: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """Logits of vocabulary rows `rows` only: [..., len(rows)] (a head whose caller needs a few
        tokens' logits, e.g. a yes/no check, skips the rest of the vocabulary)."""
        if self.tied:
            return F.linear(hidden, self.embed_tokens.weight[rows]).float()
        head = self.lm_head
        if hasattr(head, "forward_rows"):
            return head.forward_rows(hidden, rows).float()
        if isinstance(head, nn.Linear):
            return F.linear(hidden, head.weight[rows], None if head.bias is None else head.bias[rows]).float()
        return head(hidden).float()[..., rows]

    @property
    def vocab_rows(self) -> int:
        """Rows of the output head (the logits' width)."""
        return self.embed_tokens.weight.shape[0] if self.tied else self.lm_head.out_features

    def quantize_int8(self) -> int:
        """int8 weights for every linear layer and the output head (a tied head gets its own int8
        copy; the embedding lookup stays in float). Returns the number of layers converted."""
        from inference.layers.quant import quantize_linears

        if self.tied:
            self.lm_head = nn.Linear(self.config.hidden_size, self.config.vocab_size, bias=False, device="meta")
            self.lm_head.weight = self.embed_tokens.weight
            self.tied = False
        return quantize_linears(self)

    def load_hf_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Map HF names onto our fused layout; refuse silently-missing weights."""
        own = dict(self.named_parameters())
        done: set[str] = set()

        def put(name: str, value: torch.Tensor) -> None:
            own[name].data.copy_(value)
            done.add(name)

        for i in range(len(self.layers)):
            p = f"model.layers.{i}."
            a = f"layers.{i}.self_attn."
            put(a + "qkv_proj.weight", torch.cat([state[p + f"self_attn.{n}_proj.weight"] for n in "qkv"]))
            if a + "qkv_proj.bias" in own:
                put(a + "qkv_proj.bias", torch.cat([state[p + f"self_attn.{n}_proj.bias"] for n in "qkv"]))
            put(a + "o_proj.weight", state[p + "self_attn.o_proj.weight"])
            if a + "o_proj.bias" in own:
                put(a + "o_proj.bias", state[p + "self_attn.o_proj.bias"])
            if a + "q_norm.weight" in own:
                put(a + "q_norm.weight", state[p + "self_attn.q_norm.weight"])
                put(a + "k_norm.weight", state[p + "self_attn.k_norm.weight"])
            m = f"layers.{i}.mlp."
            put(m + "gate_up_proj.weight",
                torch.cat([state[p + "mlp.gate_proj.weight"], state[p + "mlp.up_proj.weight"]]))
            put(m + "down_proj.weight", state[p + "mlp.down_proj.weight"])
            put(f"layers.{i}.input_layernorm.weight", state[p + "input_layernorm.weight"])
            put(f"layers.{i}.post_attention_layernorm.weight", state[p + "post_attention_layernorm.weight"])
        put("embed_tokens.weight", state["model.embed_tokens.weight"])
        put("norm.weight", state["model.norm.weight"])
        if not self.tied:
            put("lm_head.weight", state.get("lm_head.weight", state["model.embed_tokens.weight"]))
        missing = set(own) - done
        if missing:
            raise ValueError(f"weights missing from checkpoint: {sorted(missing)[:5]}")
