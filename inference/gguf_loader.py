"""Build the engine's decoder straight from a GGUF, weights kept in their block formats.

Why: `gguf_convert.convert` dequantises to float32 (~7x the file); this loader keeps every 2-D
weight as the file's raw rows (`inference.layers.gguf_linear`), so a loaded model holds about its
file size. The model is built on the meta device and its linear layers, embedding and head are
replaced by GGUF modules, so no float32 copy of a quantised weight is ever materialised; norms
and biases are read as float32. Config and tokenizer still come from the cached conversion
directory (`gguf_convert.convert_meta`, no weights written), and so does the tensor index
(`gguf_convert.cached_tensor_table`: `gguf.GGUFReader`'s view of the header, saved once, because
the reader re-parses the whole vocabulary on every open); the bytes are read through a memory map.

llama.cpp's converter permutes the Q/K rows of llama/mistral checkpoints for its RoPE layout.
Each GGUF row is independent blocks along K, so undoing it is a gather of whole rows of the
quantised data: `unpermute` applied to a row-index array gives the order, exactly.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from inference.gguf_convert import _PERMUTED_ARCHS, cached_tensor_table, hf_name, unpermute
from inference.layers.gguf_linear import (
    F32,
    Backend,
    GGUFEmbedding,
    GGUFLinear,
    RowGroup,
    dequantize_np,
    kernel_types,
    torch_types,
    type_name,
)
from inference.models import build_model


class UnsupportedTensorType(ValueError):
    """A GGUF tensor whose type the block kernels cannot multiply (one line: tensor, type, list)."""


def unsupported_message(tensor: str, qtype: int, supported: frozenset[int]) -> str:
    names = ", ".join(sorted(type_name(t) for t in supported)) or "none"
    return f"GGUF tensor {tensor} has type {type_name(qtype)}, which the kernels do not support (supported: {names})"


class _Tensor:
    """One tensor of the file: its GGUF name, type, shape (GGUF order: K first) and raw bytes (a
    read-only slice of the memory map)."""

    def __init__(self, entry: dict, mm: np.memmap) -> None:
        self.name: str = entry["name"]
        self.qtype: int = entry["type"]
        self.shape: list[int] = entry["shape"]
        self.raw = mm[entry["offset"]: entry["offset"] + entry["n_bytes"]]


class _Tensors:
    """The GGUF's tensors by HF name, read into groups under one type policy."""

    def __init__(self, path: Path, backend: Backend, strict: bool, supported: frozenset[int] | None) -> None:
        table = cached_tensor_table(path)
        self.arch, self.n_head, self.n_kv = table["arch"], table["n_head"], table["n_kv"]
        mm = np.memmap(path, mode="r")
        self.by_name: dict[str, _Tensor] = {}
        for entry in table["tensors"]:
            name = hf_name(entry["name"])
            if name is not None:
                self.by_name[name] = _Tensor(entry, mm)
        if supported is None:
            supported = kernel_types() if backend == "kernels" else torch_types()
        self.supported = supported | {F32}
        self.strict = strict
        self.fallbacks: list[str] = []  # "tensor: TYPE" dequantised to float32 under `auto`

    def has(self, name: str) -> bool:
        return name in self.by_name

    def _row_order(self, name: str, n_rows: int) -> np.ndarray | None:
        if self.arch not in _PERMUTED_ARCHS:
            return None
        if ".q_proj." in name:
            return unpermute(np.arange(n_rows), self.n_head)
        if ".k_proj." in name:
            return unpermute(np.arange(n_rows), self.n_kv)
        return None

    def group(self, name: str) -> RowGroup:
        """One 2-D weight as a row group: raw rows for a supported block type, float32 for F32 and
        (under `auto`) for a type the kernels lack."""
        t = self.by_name[name]
        k = int(t.shape[0])
        n = int(np.prod(t.shape[1:]))
        order = self._row_order(name, n)
        if t.qtype == F32:
            return RowGroup(torch.from_numpy(_own_rows(t.raw.view(np.float32).reshape(n, k), order)), F32, k)
        rows = torch.from_numpy(_own_rows(t.raw.reshape(n, -1), order))
        if t.qtype in self.supported:
            return RowGroup(rows, t.qtype, k)
        message = unsupported_message(t.name, t.qtype, self.supported)
        if self.strict or t.qtype not in torch_types():
            raise UnsupportedTensorType(message)
        self.fallbacks.append(f"{t.name}: {type_name(t.qtype)}")
        return RowGroup(dequantize_np(rows, t.qtype), F32, k)

    def vector(self, name: str) -> torch.Tensor:
        """A 1-D tensor (norm weight, bias) as float32, Q/K biases in the unpermuted order."""
        t = self.by_name[name]
        if t.qtype == F32:
            arr = t.raw.view(np.float32)
        else:
            arr = dequantize_np(torch.from_numpy(np.array(t.raw).reshape(1, -1)), t.qtype).numpy().reshape(-1)
        return torch.from_numpy(_own_rows(arr, self._row_order(name, arr.shape[0])))


def _own_rows(data: np.ndarray, order: np.ndarray | None) -> np.ndarray:
    """Rows in `order` (or as stored), copied once out of the read-only memory map."""
    return np.ascontiguousarray(data[order]) if order is not None else np.array(data, copy=True)


def load_gguf_model(gguf_path: str | Path, hf_config, backend: Backend = "kernels",
                    mode: Literal["gguf", "auto"] = "gguf", supported: frozenset[int] | None = None) -> nn.Module:
    """Our decoder with GGUF-block linear layers, embedding and head (float32 activations).

    `mode="gguf"` refuses a tensor of a type the backend cannot multiply (`UnsupportedTensorType`);
    `mode="auto"` dequantises that tensor alone to float32 and warns once, naming it. `supported`
    narrows the accepted types (default: the kernels' `SUPPORTED_TYPES`, or every type gguf-py can
    dequantise for the torch backend).
    """
    src = _Tensors(Path(gguf_path), backend, mode == "gguf", supported)
    model = build_model(hf_config, device="meta")
    for i, layer in enumerate(model.layers):
        p = f"model.layers.{i}."
        attn, mlp = layer.self_attn, layer.mlp
        qkv = [p + f"self_attn.{n}_proj" for n in "qkv"]
        bias = None
        if attn.qkv_proj.bias is not None:
            bias = torch.cat([src.vector(n + ".bias") for n in qkv])
        attn.qkv_proj = GGUFLinear([src.group(n + ".weight") for n in qkv], bias, backend)
        o_bias = src.vector(p + "self_attn.o_proj.bias") if attn.o_proj.bias is not None else None
        attn.o_proj = GGUFLinear([src.group(p + "self_attn.o_proj.weight")], o_bias, backend)
        if attn.qk_norm:
            _set_norm(attn.q_norm, src.vector(p + "self_attn.q_norm.weight"))
            _set_norm(attn.k_norm, src.vector(p + "self_attn.k_norm.weight"))
        mlp.gate_up_proj = GGUFLinear([src.group(p + "mlp.gate_proj.weight"), src.group(p + "mlp.up_proj.weight")],
                                      None, backend)
        mlp.down_proj = GGUFLinear([src.group(p + "mlp.down_proj.weight")], None, backend)
        _set_norm(layer.input_layernorm, src.vector(p + "input_layernorm.weight"))
        _set_norm(layer.post_attention_layernorm, src.vector(p + "post_attention_layernorm.weight"))
    model.embed_tokens = GGUFEmbedding(src.group("model.embed_tokens.weight"), backend)
    _set_norm(model.norm, src.vector("model.norm.weight"))
    # a tied head multiplies against the embedding's own rows; either way the head is `lm_head`
    model.lm_head = (GGUFLinear([src.group("lm_head.weight")], None, backend) if src.has("lm_head.weight")
                     else model.embed_tokens.as_head())
    model.tied = False
    left = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if left:
        raise ValueError(f"{gguf_path}: weights missing from the GGUF: {left[:5]}")
    if src.fallbacks:
        warnings.warn(f"quantization: auto: {len(src.fallbacks)} GGUF tensor(s) have types the kernels do not "
                      f"support ({'; '.join(src.fallbacks[:4])}{' ...' if len(src.fallbacks) > 4 else ''}); "
                      "those tensors only are dequantised to float32, the rest stay in their GGUF blocks",
                      RuntimeWarning, stacklevel=2)
    if backend == "kernels":
        model.enable_fused_ops()
    return model.eval()


def _set_norm(norm: nn.Module, weight: torch.Tensor) -> None:
    if norm.weight.shape != weight.shape:
        raise ValueError(f"norm weight has shape {tuple(weight.shape)}, expected {tuple(norm.weight.shape)}")
    norm.weight = nn.Parameter(weight, requires_grad=False)
