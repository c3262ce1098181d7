"""Resolve a model name to weights + tokenizer and build the torch module.

Accepts a catalogue short name ("smollm2", "qwen2.5-0.5b": see `inference.catalog`, installed by
`rag models install NAME`), a HF directory with safetensors, or a .gguf file. A GGUF is converted
once into a cached directory by `gguf_convert`: config + tokenizer always, float32 safetensors only
for the float paths; `quantization: gguf` reads its weights straight from the GGUF
(`inference.gguf_loader`).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import torch

from inference.catalog import ModelNotInstalledError, catalog_gguf, not_installed_message
from inference.gguf_convert import convert, convert_meta
from inference.models import build_model
from inference.tokenizer import FastTokenizer, hf_tokenizer

# what the decoders read without a default (inference/models)
_CONFIG_FIELDS = ("model_type", "hidden_size", "intermediate_size", "num_attention_heads", "num_hidden_layers",
                  "vocab_size", "rms_norm_eps", "max_position_embeddings")


def gguf_source(model: str) -> Path | None:
    """The GGUF file behind `model` (catalogue name, .gguf path, or a folder holding only a GGUF);
    None for a HF directory. Raises ModelNotInstalledError for an uninstalled catalogue name."""
    gguf = catalog_gguf(model)
    if gguf is not None:
        return gguf
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return path
    if path.is_dir() and not (path / "config.json").exists():
        ggufs = sorted(path.glob("*.gguf"))
        if ggufs:
            return ggufs[0]
    return None


def resolve_model_dir(model: str, weights: bool = True) -> Path:
    """Return a HF-style directory for `model`, converting a GGUF on first use. `weights=False`
    writes only config + tokenizer for a GGUF (the block loader reads the GGUF itself)."""
    gguf = gguf_source(model)
    if gguf is not None:
        return convert(gguf) if weights else convert_meta(gguf)
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    raise ModelNotInstalledError(not_installed_message(model))


def load_tokenizer(model_dir: Path):
    """The model's tokenizer: `FastTokenizer` for a GGUF conversion (no transformers import, 1.5-2 s
    less per process), else transformers' (`hf_tokenizer`)."""
    fast = FastTokenizer.load(model_dir)
    return fast if fast is not None else hf_tokenizer(model_dir)


def load_config(model_dir: Path):
    """The model's config: for a GGUF conversion its config.json as attributes (transformers wrote
    it whole, every field the model reads is there; the decoder reads them with getattr defaults),
    so that loading a GGUF model never imports transformers; `AutoConfig` for any other directory,
    whose config.json may leave fields to its class's defaults."""
    root = Path(model_dir)
    if (root / "source.json").is_file():
        try:
            data = json.loads((root / "config.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = None
        if isinstance(data, dict) and all(k in data for k in _CONFIG_FIELDS):
            return SimpleNamespace(**data)
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_dir))


def load_model(model_dir: Path, dtype: torch.dtype, device: str, quantization: str = "none",
               gguf_path: Path | None = None, gguf_strict: bool = True):
    """Build our decoder from config.json. Float paths fill it from *.safetensors;
    `quantization="int8"` converts the linear layers from the float32 weights (before any cast to
    `dtype`), CPU only; `quantization="gguf"` keeps `gguf_path`'s blocks (CPU, native kernels).
    `gguf_strict=False` (what `quantization: auto` asks for) dequantises a tensor of a type the
    kernels lack instead of refusing the model."""
    hf_config = load_config(model_dir)
    if quantization == "gguf":
        from inference.gguf_loader import load_gguf_model

        if gguf_path is None:
            raise ValueError("quantization: gguf needs the GGUF file (gguf_path)")
        if device != "cpu":
            raise ValueError("quantization: gguf runs on CPU only (the native kernels are CPU code)")
        model = load_gguf_model(gguf_path, hf_config, backend="kernels", mode="gguf" if gguf_strict else "auto")
        return model.to(dtype=dtype).eval(), hf_config
    from safetensors.torch import load_file

    model = build_model(hf_config)
    state: dict[str, torch.Tensor] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        state.update(load_file(str(f)))
    model.load_hf_state_dict(state)
    if quantization == "int8":
        if device != "cpu":
            raise ValueError("quantization: int8 runs on CPU only (fbgemm kernels); use dtype bfloat16 on CUDA")
        model.quantize_int8()
    model.to(device=device, dtype=dtype).eval()
    return model, hf_config
