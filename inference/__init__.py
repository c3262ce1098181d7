"""In-process paged-KV LLM engine (PagedAttention-style blocks, automatic prefix caching,
continuous batching). Stands alone: imports nothing from the other ragstack packages.

The engine classes load lazily: `from inference import EngineConfig` (what every config model
needs) must not import torch, which costs a command line ~1.4 s before it does anything."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from inference.config import EngineConfig
from inference.outputs import CompletionOutput, RequestMetrics, RequestOutput
from inference.sampling_params import SamplingParams

if TYPE_CHECKING:
    from inference.async_engine import AsyncEngine
    from inference.llm import LLM
    from inference.llm_engine import LLMEngine

_LAZY = {"AsyncEngine": "inference.async_engine", "AsyncLLM": "inference.async_engine",
         "LLM": "inference.llm", "LLMEngine": "inference.llm_engine"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'inference' has no attribute {name!r}")
    value = getattr(import_module(module), "AsyncEngine" if name == "AsyncLLM" else name)
    globals()[name] = value
    return value


__all__ = ["LLM", "AsyncEngine", "AsyncLLM", "EngineConfig", "LLMEngine", "SamplingParams", "RequestOutput",
           "CompletionOutput", "RequestMetrics"]
