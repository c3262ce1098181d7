"""Embedder model names: resolved by the one encoder resolver, `indexing.models`.

Kept as this module's names because embedder code and benches import them from here.
"""

from __future__ import annotations

from indexing.models import canonical_name as canonical_model_name
from indexing.models import resolve_model as resolve_embedding_model

__all__ = ["canonical_model_name", "resolve_embedding_model"]
