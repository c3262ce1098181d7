"""Ablation grid files: named config variants as dotted-key overrides.

Two forms, combinable in one YAML file:

    base: {retrieval.top_k: 100}          # applied to every variant
    variants:                             # explicit list, one row each
      - {name: bm25, set: {retrieval.mode: bm25}}
      - {name: hybrid+rerank, set: {retrieval.mode: hybrid, rerank.enabled: true}}
    axes:                                 # and/or a product of axes
      retrieval.mode: [bm25, dense]
      chunking.size: [256, 512]

Why dotted keys: they are exactly what `--set k=v` takes on the CLI, so a variant can be
reproduced by hand, and `apply_overrides` turns them into the nested dict the config models read.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class Variant(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str = Field(min_length=1)
    set: dict[str, Any] = {}


class Grid(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base: dict[str, Any] = {}
    variants: list[Variant] = []
    axes: dict[str, list[Any]] = {}

    @model_validator(mode="after")
    def _check(self) -> Grid:
        if not self.variants and not self.axes:
            raise ValueError("a grid needs 'variants' and/or 'axes'")
        for key, values in self.axes.items():
            if not values:
                raise ValueError(f"axes.{key}: needs at least one value")
        return self

    def expand(self) -> list[Variant]:
        """Every variant with the base merged in (variant keys win), in file order, names unique."""
        out = [Variant(name=v.name, set={**self.base, **v.set}) for v in self.variants]
        keys = list(self.axes)
        for combo in itertools.product(*(self.axes[k] for k in keys)) if keys else ():
            overrides = dict(zip(keys, combo, strict=True))
            name = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in overrides.items())
            out.append(Variant(name=name, set={**self.base, **overrides}))
        seen: set[str] = set()
        for v in out:
            if v.name in seen:
                raise ValueError(f"duplicate variant name {v.name!r}")
            seen.add(v.name)
        return out


def load_grid(path: str | Path) -> Grid:
    from rag.config_loader import load_yaml_text  # the same YAML rules as configs and --set

    data = load_yaml_text(Path(path).read_text(encoding="utf-8")) or {}
    if isinstance(data, list):  # a bare list of variants
        data = {"variants": data}
    return Grid.model_validate(data)


def apply_overrides(config: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """A deep copy of `config` with each dotted key set (intermediate dicts are created)."""
    out = _deep_copy(config)
    for dotted, value in overrides.items():
        node = out
        parts = dotted.split(".")
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                nxt = node[p] = {}
            node = nxt
        node[parts[-1]] = value
    return out


def _deep_copy(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in d.items()}


def slug(name: str) -> str:
    """A file-name-safe, collision-free form of a variant name (for its cache file)."""
    s = re.sub(r"[^A-Za-z0-9._=+-]+", "_", name).strip("_")[:60] or "variant"
    return f"{s}-{hashlib.sha256(name.encode('utf-8')).hexdigest()[:8]}"
