"""In-process paged-KV LLM engine (PagedAttention-style blocks, automatic prefix caching,
continuous batching). Stands alone: imports nothing from the other ragstack packages."""

from inference.async_engine import AsyncEngine
from inference.config import EngineConfig
from inference.llm import LLM
from inference.llm_engine import LLMEngine
from inference.outputs import CompletionOutput, RequestMetrics, RequestOutput
from inference.sampling_params import SamplingParams

AsyncLLM = AsyncEngine

__all__ = ["LLM", "AsyncEngine", "AsyncLLM", "EngineConfig", "LLMEngine", "SamplingParams", "RequestOutput",
           "CompletionOutput", "RequestMetrics"]
