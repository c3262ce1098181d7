"""Engine configuration: one pydantic model so a typo in a config file is an error, not a no-op."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    import torch

    from inference.quant_mode import QuantPlan


class PassageCacheConfig(BaseModel):
    """`generator.engine.passage_cache`: KV of retrieved passages computed once, reused at any
    position of later prompts (see `inference.kv_reuse`).

    `max_gb` is the passage region of the KV pool (its own LRU, separate from the prefix cache, so
    a full passage cache never takes blocks a request needs). It is part of `kv_cache_memory`: the
    pool for requests gets the rest of that budget (with an explicit `num_blocks` it comes on top).
    `recompute_ratio` of the reused passage tokens (those whose K/V on `check_layer`, 0-based, deviate most from a full prefill)
    are recomputed on the later layers: 1.0 is a full prefill, 0 pure reuse (the default: on the
    1.5B, SQuAD dev 100 with a warm cache at hit rate 0.95 kept F1 and refusals at 0, and 0 gives
    the 5.7x TTFT where 0.15 gives 2.5x; docs/results.md). `disk_path` keeps
    one keyed file per passage (write-through), read back after a restart.

    `miss_compute` says how a passage that is not cached yet gets its K/V: `prompt` (default)
    computes it inside the request's own prefill, exact for that request and no dearer than a
    plain prefill, and stores it re-rotated to the position after the prefix (a passage that was
    not first keeps what it attended to of its neighbours there); `alone` computes it in an extra
    forward on its own after the prefix (K/V independent of neighbours, the request then blends
    it like a hit: costlier on a cold cache).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    max_gb: float = Field(0.5, gt=0)
    disk_path: str | None = None
    recompute_ratio: float = Field(0.0, ge=0.0, le=1.0)
    check_layer: int = Field(1, ge=0)
    miss_compute: Literal["prompt", "alone"] = "prompt"


class SparseAttentionConfig(BaseModel):
    """`generator.engine.sparse_attention`: query-aware block-sparse decode attention (QUEST).

    `method: quest` keeps per-block min/max of the keys beside the KV pool and, for each decode
    token, attends exactly over only the KV blocks whose upper-bound score is highest, at most
    `token_budget` tokens (whole blocks; the first and the current block always among them). Prefill and the
    first `dense_layers` layers stay dense, as in the paper (the first layers' attention is not
    sparse enough to skip blocks). `none` (or null) is plain dense attention.
    """

    model_config = ConfigDict(extra="forbid")

    method: Literal["none", "quest"] = "none"
    token_budget: int = Field(1024, ge=1)
    dense_layers: int = Field(2, ge=0)

    @field_validator("method", mode="before")
    @classmethod
    def _method(cls, v: object) -> object:
        if v is None:
            return "none"
        if v not in ("none", "quest"):
            raise ValueError(f"unknown sparse_attention.method {v!r}: use 'quest', or 'none' (or null) for dense "
                             "attention")
        return v

    @property
    def enabled(self) -> bool:
        return self.method == "quest"


class EngineConfig(BaseModel):
    """Knobs of the paged-KV engine.

    `quantization` (see `inference.quant_mode`): `auto` keeps a GGUF model in its block formats
    with the native kernels on CPU (float path with one warning when they cannot load), float for
    safetensors models; `none` always float; `int8` CPU int8 GEMMs (VNNI/AMX CPUs only); `gguf`
    GGUF blocks or an error.

    `kv_cache_memory` is a budget for the K/V pools: a value <= 1 is a fraction of free memory
    (RAM on CPU, GPU memory on CUDA), a value > 1 is GiB. `num_blocks` overrides the budget
    (tests use it to force a tiny pool and hence preemption).

    `passage_cache` and `cache_reuse` reuse K/V at shifted positions (RoPE models only; the engine
    refuses them at start for a model without rotary embeddings).

    `sparse_attention` (QUEST) makes long-context decode read only the most relevant KV blocks
    (`inference.layers.quest`).
    """

    model_config = ConfigDict(extra="forbid")

    model: str = "smollm2"
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    quantization: Literal["auto", "none", "int8", "gguf"] = "auto"
    block_size: int = Field(16, ge=1, le=256)
    kv_cache_memory: float = Field(0.25, gt=0)
    num_blocks: int | None = Field(None, ge=1)
    max_num_seqs: int = Field(64, ge=1)
    max_num_batched_tokens: int = Field(2048, ge=1)
    max_model_len: int | None = Field(None, ge=1)
    enable_prefix_caching: bool = True
    kv_cache_dtype: Literal["auto", "int8"] = "auto"
    device: Literal["auto", "cpu", "cuda"] = "auto"
    seed: int = 0
    enforce_eager: bool = True
    num_threads: int | None = Field(None, ge=1)
    # CPU: allocations below this many MiB come from the heap and freed ones stay there for the next
    # forward pass instead of fresh page-faulting mmaps (inference.cpu_alloc; 0 = glibc's defaults)
    cpu_alloc_reuse_mb: int = Field(256, ge=0)
    passage_cache: PassageCacheConfig = Field(default_factory=PassageCacheConfig)
    # llama.cpp --cache-reuse: reuse runs of >= N cached tokens found at another position of a new
    # prompt, K re-rotated by the position delta (0 = off; runs are whole cached blocks)
    cache_reuse: int = Field(0, ge=0)
    sparse_attention: SparseAttentionConfig = Field(default_factory=SparseAttentionConfig)

    @model_validator(mode="after")
    def _sparse_budget(self) -> EngineConfig:
        sa = self.sparse_attention
        if sa.enabled and sa.token_budget < self.block_size:
            raise ValueError(f"sparse_attention.token_budget {sa.token_budget} is smaller than one KV block "
                             f"(block_size {self.block_size}): QUEST attends whole blocks, so the budget must "
                             "hold at least one")
        return self

    @field_validator("model")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("model must name an alias, a HF directory or a .gguf file")
        return v

    def resolved_device(self) -> str:
        import torch

        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device

    def resolved_quantization(self, device: str) -> QuantPlan:
        """The `QuantPlan` for this model on this machine (raises for an impossible request)."""
        from inference.quant_mode import plan_quantization

        return plan_quantization(self.quantization, self.model, device)

    def resolved_dtype(self, device: str, plan: QuantPlan | None = None) -> torch.dtype:
        """`dtype: auto`: bf16 on CUDA and on CPUs with native bf16 GEMMs for float weights;
        float32 activations for int8 and GGUF-block layers (their kernels take float32; a GGUF
        layer switches to a transient bf16 GEMM by itself for >= 128-row prompt chunks, where that
        measured faster, so the model dtype stays float32).
        `plan` (a `QuantPlan`) avoids deciding `auto` twice."""
        import torch

        from inference.cpu_features import has_fast_bf16

        if self.dtype != "auto":
            return getattr(torch, self.dtype)
        if device == "cuda":
            return torch.bfloat16
        mode = self.quantization
        if mode == "auto":
            mode = (plan or self.resolved_quantization(device)).mode
        if mode == "none" and has_fast_bf16():
            return torch.bfloat16
        return torch.float32

