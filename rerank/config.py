"""Reranking and prompt-compression configuration (the `rerank:` and `compression:` stages).

`extra="forbid"` so a misspelt key in YAML is an error naming its path, not a silent default.
`rag/config.py` composes these models; each backend is rebuilt from exactly this dict
(`Reranker.to_config()` / `Compressor.to_config()` return it).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# For users with hub access: multilingual (the seed warns most rerankers don't handle Chinese).
DEFAULT_HUB_RERANKER = "BAAI/bge-reranker-v2-m3"
# What `make reranker` / `rag rerank train` builds offline, relative to the working directory.
DEFAULT_TRAINED_RERANKER = ".rag/models/reranker"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RerankerConfig(_Strict):
    type: Literal["none", "cross-encoder", "llm", "bi-encoder"] = "none"
    model: str = Field("", description=(
        "cross-encoder: HF id or local dir (default BAAI/bge-reranker-v2-m3); llm: engine model "
        "(default smollm2); bi-encoder: embedder alias/path (default: the pipeline's embedder)"))
    top_n: int | None = Field(None, ge=1, description="keep this many after reranking (None = all reranked)")
    depth: int = Field(50, ge=1, description="how many retrieved candidates are reranked; the rest are dropped")
    batch_size: int = Field(16, ge=1)
    max_length: int = Field(256, ge=16, description="tokens per (query, passage) pair")
    threshold: float | None = Field(None, description="drop candidates whose rerank score is below this")
    fuse_weight: float = Field(0.0, ge=0.0, le=1.0, description=(
        "blend the reranker's order with the retriever's by reciprocal ranks: weight of the retrieval "
        "rank (0 = reranker order only); a reranker weaker than the retriever on some queries then "
        "corrects instead of overriding it"))
    fuse_k: int = Field(60, ge=1, description="RRF constant of that blend")
    fp16: bool = Field(False, description="half precision on GPU (ignored on CPU)")
    bf16: bool = Field(False, description=(
        "cross-encoder, and llm when it loads its own engine: bf16 weights, on GPU or on CPUs with "
        "AVX512-BF16/AMX (~2-3x faster there); scores move by ~1e-2, orders rarely"))
    device: str = "auto"

    def model_name(self) -> str:
        """The configured model, or the backend's default when left empty."""
        if self.model:
            return self.model
        return {"cross-encoder": DEFAULT_HUB_RERANKER, "llm": "smollm2", "bi-encoder": "minilm"}.get(self.type, "")


class CompressorConfig(_Strict):
    type: Literal["off", "llmlingua", "engine"] = "off"
    model: str = Field("smollm2", description="small causal LM scoring token information (alias or HF dir)")
    target_tokens: int | None = Field(None, ge=1, description="token budget for the compressed contexts")
    ratio: float | None = Field(0.5, gt=0, le=1, description="keep this fraction of tokens when no budget is set")
    question_aware: bool = Field(True, description="LongLLMLingua: rank contexts by the question, then compress")
    keep_markers: bool = Field(True, description="never drop citation markers like [1] or source separators")
    keep_numbers: bool = Field(True, description="engine: never drop words containing digits (answers are often numbers)")
    force_tokens: list[str] = Field(default_factory=lambda: ["\n", ".", "?"],
                                    description="extra tokens always kept (markers are added when keep_markers)")
    device: str = "cpu"

    @model_validator(mode="after")
    def _budget(self) -> CompressorConfig:
        if self.type != "off" and self.target_tokens is None and self.ratio is None:
            raise ValueError("compression needs target_tokens or ratio")
        return self
