"""Post-retrieval: rerankers and prompt compressors, each built from its config dict.

    reranker = build_reranker({"type": "cross-encoder", "model": ".rag/models/reranker"})
    ranked = reranker.rank(query, candidates, top_n=5)
    compressor = build_compressor({"type": "llmlingua", "target_tokens": 300})
    result = compressor.compress(question, [c.text for c in ranked])
"""

from __future__ import annotations

from typing import Any

from .base import RERANKERS, Reranker
from .config import CompressorConfig, RerankerConfig


def build_reranker(cfg: RerankerConfig | dict[str, Any], embedder=None, engine=None) -> Reranker:
    """`embedder` is reused by the bi-encoder, `engine` (an `inference.LLM`) by the llm reranker."""
    cfg = cfg if isinstance(cfg, RerankerConfig) else RerankerConfig.model_validate(cfg)
    return RERANKERS.build(cfg.type, cfg, embedder=embedder, engine=engine)


def build_compressor(cfg: CompressorConfig | dict[str, Any], engine=None, model=None):
    """`model`: an already loaded (transformers) causal LM + tokenizer pair to share; see compress/."""
    from .compress import build

    cfg = cfg if isinstance(cfg, CompressorConfig) else CompressorConfig.model_validate(cfg)
    return build(cfg, engine=engine, model=model)


__all__ = ["CompressorConfig", "Reranker", "RerankerConfig", "build_compressor", "build_reranker"]
