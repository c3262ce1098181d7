"""Resolve a model name to weights + tokenizer and build the torch module.

Accepts a catalogue short name ("smollm2", "qwen2.5-0.5b": see `inference.catalog`, installed by
`rag models install NAME`), a HF directory with safetensors, or a .gguf file (converted once into a
cached directory by `gguf_convert`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from inference.catalog import ModelNotInstalledError, catalog_gguf, not_installed_message
from inference.gguf_convert import convert
from inference.models import build_model


def resolve_model_dir(model: str) -> Path:
    """Return a HF-style directory for `model`, converting a GGUF on first use."""
    gguf = catalog_gguf(model)
    if gguf is not None:
        return convert(gguf)
    path = Path(model).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return convert(path)
    if path.is_dir():
        ggufs = sorted(path.glob("*.gguf"))
        if not (path / "config.json").exists() and ggufs:
            return convert(ggufs[0])
        return path
    raise ModelNotInstalledError(not_installed_message(model))


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(model_dir))


def load_model(model_dir: Path, dtype: torch.dtype, device: str, quantization: str = "none"):
    """Build our decoder from config.json and fill it from *.safetensors. `quantization="int8"`
    converts the linear layers from the float32 weights (before any cast to `dtype`), CPU only."""
    from safetensors.torch import load_file
    from transformers import AutoConfig

    hf_config = AutoConfig.from_pretrained(str(model_dir))
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
