"""BERT's encoder forward in plain torch, for the sentence-embedding models of that architecture.

Why: transformers' `AutoModel` imports `transformers.modeling_utils` before it reads a weight, 2.5 s
of a fresh process on a 2-core EPYC (Zen 4), and every `rag ask`, `rag search` and `rag index`
embeds: the engine itself never imports it. The packaged MiniLM and the converted multilingual E5
are both `BertModel`s (absolute positions, post-LayerNorm, GELU), which is a few dozen lines: the
same ops in the same order as transformers' SDPA path, so the hidden states equal its own bit for
bit (tests/retrieval/test_bert_encoder.py). Any other architecture or setting returns None from
`load`, and the caller uses transformers as before.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings",
         "type_vocab_size", "vocab_size", "layer_norm_eps")


def _config(path: Path) -> SimpleNamespace | None:
    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict) or cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu":
        return None
    if cfg.get("position_embedding_type", "absolute") != "absolute" or cfg.get("is_decoder"):
        return None
    if not all(isinstance(cfg.get(k), (int, float)) for k in _KEYS):
        return None
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        return None
    return SimpleNamespace(**{k: cfg[k] for k in _KEYS})


class _Layer(nn.Module):
    def __init__(self, c: SimpleNamespace):
        super().__init__()
        h = c.hidden_size
        self.heads = c.num_attention_heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attn_out, self.attn_norm = nn.Linear(h, h), nn.LayerNorm(h, eps=c.layer_norm_eps)
        self.inter, self.out = nn.Linear(h, c.intermediate_size), nn.Linear(c.intermediate_size, h)
        self.out_norm = nn.LayerNorm(h, eps=c.layer_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, n, h = x.shape
        shape = (b, n, self.heads, h // self.heads)
        q, k, v = (lin(x).view(shape).transpose(1, 2) for lin in (self.query, self.key, self.value))
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0,
                                           scale=(h // self.heads) ** -0.5)
        a = a.transpose(1, 2).reshape(b, n, h).contiguous()
        x = self.attn_norm(self.attn_out(a) + x)
        return self.out_norm(self.out(F.gelu(self.inter(x))) + x)


class BertEncoder(nn.Module):
    """`last_hidden_state` of a `BertModel` (no pooler: sentence embeddings pool it themselves)."""

    def __init__(self, c: SimpleNamespace):
        super().__init__()
        self.config = c
        self.word = nn.Embedding(c.vocab_size, c.hidden_size)
        self.position = nn.Embedding(c.max_position_embeddings, c.hidden_size)
        self.token_type = nn.Embedding(c.type_vocab_size, c.hidden_size)
        self.norm = nn.LayerNorm(c.hidden_size, eps=c.layer_norm_eps)
        self.layers = nn.ModuleList(_Layer(c) for _ in range(c.num_hidden_layers))

    @classmethod
    def load(cls, path: str | Path) -> BertEncoder | None:
        """The model in `path` (config.json + model.safetensors), or None when it is not a plain
        BERT encoder or its weights are not all there under BERT's names."""
        root = Path(path)
        c = _config(root)
        if c is None or not (root / "model.safetensors").is_file():
            return None
        from safetensors.torch import load_file

        weights = load_file(str(root / "model.safetensors"))
        weights = {k.removeprefix("bert."): w for k, w in weights.items()}
        model = cls(c)
        state = {}
        for ours, theirs in model._names().items():
            if theirs not in weights:
                return None
            state[ours] = weights[theirs]
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError:  # a shape that is not the config's
            return None
        return model.eval()

    def _names(self) -> dict[str, str]:
        """Our parameter names -> BertModel's."""
        names = {"word.weight": "embeddings.word_embeddings.weight",
                 "position.weight": "embeddings.position_embeddings.weight",
                 "token_type.weight": "embeddings.token_type_embeddings.weight"}
        for p in ("weight", "bias"):
            names[f"norm.{p}"] = f"embeddings.LayerNorm.{p}"
            for i in range(len(self.layers)):
                pre = f"encoder.layer.{i}."
                names.update({f"layers.{i}.query.{p}": pre + f"attention.self.query.{p}",
                              f"layers.{i}.key.{p}": pre + f"attention.self.key.{p}",
                              f"layers.{i}.value.{p}": pre + f"attention.self.value.{p}",
                              f"layers.{i}.attn_out.{p}": pre + f"attention.output.dense.{p}",
                              f"layers.{i}.attn_norm.{p}": pre + f"attention.output.LayerNorm.{p}",
                              f"layers.{i}.inter.{p}": pre + f"intermediate.dense.{p}",
                              f"layers.{i}.out.{p}": pre + f"output.dense.{p}",
                              f"layers.{i}.out_norm.{p}": pre + f"output.LayerNorm.{p}"})
        return names

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, **_: Any) -> SimpleNamespace:
        n = input_ids.shape[1]
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        positions = torch.arange(n, device=input_ids.device).unsqueeze(0)
        x = self.word(input_ids) + self.token_type(token_type_ids)
        x = self.norm(x + self.position(positions))
        mask = None  # as transformers: no mask when every token is attended
        if attention_mask is not None and not bool(attention_mask.all()):
            mask = attention_mask.bool()[:, None, None, :].expand(-1, 1, n, -1)
        for layer in self.layers:
            x = layer(x, mask)
        return SimpleNamespace(last_hidden_state=x)
