"""Indexing: loaders, cleaning, chunkers and the SQLite document store (imports no other package).

Names are exported lazily so that `from indexing.types import Chunk` (used by every other
package) does not pay for importing tokenizers, langchain and numpy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ChunkingConfig": "config", "CleaningConfig": "config", "IndexingConfig": "config",
    "LoaderConfig": "config", "NoneSpec": "config", "RecursiveSpec": "config", "SlidingSpec": "config",
    "SmallToBigSpec": "config",
    "LoaderError": "loaders", "iter_documents": "loaders",
    "Ingestor": "pipeline", "ingest": "pipeline",
    "IngestReport": "report",
    "DocumentStore": "store",
    "Chunk": "types", "Document": "types", "Page": "types", "Section": "types",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'indexing' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
