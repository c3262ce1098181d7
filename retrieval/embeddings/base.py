"""Embedder interface: every backend turns queries and documents into L2-normalised float32 rows.

Queries and documents are separate calls because instruction-tuned models (E5, BGE, Instructor)
want different prefixes on each side.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import numpy as np

from ..config import EmbedderConfig


class Embedder(ABC):
    name: str  # identity of the vector space: model + prefixes + length (indexes and caches key on it)
    dim: int

    @abstractmethod
    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    @abstractmethod
    def encode_documents(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_query(self, text: str) -> np.ndarray:
        return self.encode_queries([text])[0]


EMBEDDERS: dict[str, Callable[[EmbedderConfig], Embedder]] = {}


def register(backend: str):
    def deco(factory: Callable[[EmbedderConfig], Embedder]):
        EMBEDDERS[backend] = factory
        return factory

    return deco


def l2_normalize(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return (x / np.maximum(n, 1e-12)).astype(np.float32)
