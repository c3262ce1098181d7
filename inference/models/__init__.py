"""Model registry: HF `model_type` -> our decoder class, and the one way loaders build it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from inference.models.llama import LlamaForCausalLM

_ARCHS = {"llama": LlamaForCausalLM, "mistral": LlamaForCausalLM, "qwen2": LlamaForCausalLM,
          "qwen3": LlamaForCausalLM}


def build_model(hf_config, device: str = "cpu") -> nn.Module:
    """The decoder for `hf_config` with its weights uninitialised on `device` and its RoPE table
    computed: the caller loads every weight (`load_hf_state_dict` refuses a missing one; the GGUF
    loader replaces the layers and refuses a weight left on "meta", which holds no storage).

    Why not the modules' own initialisation: nn.Linear / nn.Embedding draw random weights the load
    then overwrites (3.1 s of `uniform_` / `normal_` per Qwen2.5-0.5B build on Zen 4, ~0.8 s for
    SmolLM2), and on "meta" their init imports torch._refs (~143 MB resident, for nothing)."""
    kind = getattr(hf_config, "model_type", "")
    if kind not in _ARCHS:
        raise NotImplementedError(f"model_type {kind!r} not supported (have: {', '.join(sorted(_ARCHS))})")
    with torch.device("meta"), _no_param_init():
        model = _ARCHS[kind](hf_config)
    if device != "meta":
        model.to_empty(device=device)
    _fill_rotary(model, hf_config)
    return model


@contextlib.contextmanager
def _no_param_init() -> Iterator[None]:
    """Skip nn.Linear / nn.Embedding random initialisation while building on the meta device."""
    saved = [(cls, cls.reset_parameters) for cls in (nn.Linear, nn.Embedding)]
    try:
        for cls, _ in saved:
            cls.reset_parameters = lambda self: None
        yield
    finally:
        for cls, fn in saved:
            cls.reset_parameters = fn


def _fill_rotary(model: nn.Module, hf_config) -> None:
    """The meta build left the RoPE table empty: compute it for real (on the CPU, as an eager build
    would). Every attention layer holds the same module, so setting its buffers fixes them all."""
    from inference.layers.rotary import RotaryEmbedding

    max_positions, head_dim = model.rotary.cos.shape
    fresh = RotaryEmbedding(head_dim, max_positions, hf_config)
    model.rotary.cos, model.rotary.sin = fresh.cos, fresh.sin
