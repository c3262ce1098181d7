"""Prompt compressors chosen by `CompressorConfig.type`: off, llmlingua, engine."""

from __future__ import annotations

from ..config import CompressorConfig
from .base import CompressionResult, Compressor, NoCompressor


def build(cfg: CompressorConfig, engine=None, model=None) -> Compressor:
    """`engine`: the pipeline's engine, which the engine compressor scores with when given;
    `model`: else a (tokenizer, transformers causal LM) pair to share."""
    if cfg.type == "off":
        return NoCompressor(cfg)
    if cfg.type == "llmlingua":
        from .llmlingua import LLMLinguaCompressor

        return LLMLinguaCompressor(cfg)
    from .engine import EngineCompressor

    return EngineCompressor(cfg, model=model, engine=engine)


__all__ = ["CompressionResult", "Compressor", "NoCompressor", "build"]
