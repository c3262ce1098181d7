"""Retrieval stage: embedders, FAISS dense, BM25 sparse, fusion, filters, small-to-big, routing.

Public API (imported lazily so `import retrieval` stays light):
    Retriever, RetrievalConfig, SearchResult, Candidate, Filters, IndexMismatchError
"""

from __future__ import annotations

from typing import Any

from .config import RetrievalConfig
from .filters import Filters
from .types import Candidate, SearchResult

__all__ = ["Candidate", "Filters", "IndexMismatchError", "RetrievalConfig", "Retriever", "SearchResult"]


def __getattr__(name: str) -> Any:
    if name == "Retriever":
        from .retriever import Retriever

        return Retriever
    if name == "IndexMismatchError":
        from .collection_index import IndexMismatchError

        return IndexMismatchError
    raise AttributeError(name)
