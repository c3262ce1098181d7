"""Config models of the answer step's generator (`generator.*` in the pipeline YAML).

They sit apart from the backends so that `rag.config` can compose them without importing a
backend (the engine pulls in torch, the remote backend httpx). The keys and defaults are a
contract: `configs/default.yaml` is their dump.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from inference.config import EngineConfig


class SamplingConfig(BaseModel):
    """Default decoding settings of the answer step (a subset of `inference.SamplingParams`)."""

    model_config = ConfigDict(extra="forbid")
    max_tokens: int = Field(128, ge=1)
    temperature: float = Field(0.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=0)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(1.05, gt=0.0)
    seed: int | None = 0
    stop: list[str] = Field(default_factory=list)
    no_repeat_ngram: int = Field(6, ge=0, description=(
        "ban exact repeats of this many generated tokens (stops loops); 0 disables"))

    def params(self, **overrides: Any):
        from inference.sampling_params import SamplingParams
        from inference.structured.no_repeat import NoRepeatNGram

        args = {**self.model_dump(), **overrides}
        n = args.pop("no_repeat_ngram")
        sp = SamplingParams(**args)
        if n >= 2:
            sp.logits_processors = [*sp.logits_processors, NoRepeatNGram(n)]
        return sp


class RemoteConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base_url: str | None = Field(None, description="OpenAI-compatible API root, e.g. http://127.0.0.1:8001/v1")
    api_key: str | None = Field(None, description="bearer token; null reads $api_key_env")
    api_key_env: str = Field("RAG_REMOTE_API_KEY", description="environment variable holding the API key")
    model: str = Field("", description="model name sent to the server; empty: the first of GET /models")
    tokenizer: str | None = Field(None, description=(
        "tokenizer for prompt budgets (HF name or directory); null: the tokenizer of generator.engine.model"))
    max_model_len: int = Field(4096, ge=64, description="the served model's context length")
    timeout_s: float = Field(120.0, gt=0, description="connect/read timeout of one request")


class GeneratorConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # model "auto": the largest installed catalogue model fast enough here (rag/generation/auto_model.py);
    # the passage KV cache on, with a region inside the 2 GiB K/V budget: passages recur across
    # questions, and with `answer.check_kv` resolving to shared (the 1.5B) the answerability checks
    # compute each passage once and the answer prompt reads it
    engine: EngineConfig = Field(default_factory=lambda: EngineConfig(
        model="auto", max_model_len=2048, kv_cache_memory=2.0, passage_cache={"enabled": True, "max_gb": 0.25}))
    sampling: SamplingConfig = Field(default_factory=SamplingConfig)
    context_shift: bool = Field(True, description=(
        "when a long answer fills the context, keep the system prompt, drop older tokens and go on "
        "(llama.cpp --keep) instead of stopping"))
    backend: Literal["engine", "remote"] = Field("engine", description=(
        "engine: the in-process engine; remote: an OpenAI-compatible server at generator.remote.base_url"))
    remote: RemoteConfig = Field(default_factory=RemoteConfig)
