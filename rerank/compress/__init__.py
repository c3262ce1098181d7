"""Prompt compressors chosen by `CompressorConfig.type`: off, llmlingua, engine."""

from __future__ import annotations

from ..config import CompressorConfig
from .base import COMPRESSORS, CompressionResult, Compressor, NoCompressor


def build(cfg: CompressorConfig, engine=None, model=None) -> Compressor:
    """`engine`: the pipeline's engine, which the engine compressor scores with when given;
    `model`: else a (tokenizer, transformers causal LM) pair to share."""
    return COMPRESSORS.build(cfg.type, cfg, engine=engine, model=model)


__all__ = ["COMPRESSORS", "CompressionResult", "Compressor", "NoCompressor", "build"]
