"""Model registry: HF `model_type` -> our decoder class."""

from __future__ import annotations

from inference.models.llama import LlamaForCausalLM

_ARCHS = {"llama": LlamaForCausalLM, "mistral": LlamaForCausalLM, "qwen2": LlamaForCausalLM,
          "qwen3": LlamaForCausalLM}


def build_model(hf_config):
    kind = getattr(hf_config, "model_type", "")
    if kind not in _ARCHS:
        raise NotImplementedError(f"model_type {kind!r} not supported (have: {', '.join(sorted(_ARCHS))})")
    return _ARCHS[kind](hf_config)
