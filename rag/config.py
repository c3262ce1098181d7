"""The pipeline config: one pydantic model composed of each stage's own config.

The defaults below ARE the embedded defaults; `configs/default.yaml` is their dump (a test keeps
the two equal). Each stage's package owns its config model; this file only composes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

from indexing.config import IndexingConfig
from retrieval.config import RetrievalConfig

from .config_loader import apply_overrides, deep_merge, read_yaml, validate


class StorageConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".rag", description="directory for the SQLite store, indexes and caches")


class RagConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    storage: StorageConfig = Field(default_factory=StorageConfig)
    indexing: IndexingConfig = Field(default_factory=IndexingConfig)
    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)

    @property
    def storage_path(self) -> Path:
        return Path(self.storage.path).expanduser()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)


def load_config(path: str | Path | None = None, overrides: list[str] | None = None) -> RagConfig:
    """Read a pipeline YAML (or the embedded defaults), apply `--set` overrides and validate."""
    data = read_yaml(path) if path else {}
    if overrides:
        # Overrides may address keys the file leaves to defaults (e.g. chunkers.0.chunk_size).
        data = apply_overrides(deep_merge(RagConfig().to_dict(), data), overrides)
    origin = str(path) if path else "embedded defaults"
    if overrides:
        origin += " + --set " + " ".join(overrides)
    return validate(RagConfig, data, origin)  # type: ignore[return-value]
