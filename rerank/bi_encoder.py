"""`type: bi-encoder`: cosine between query and passage embeddings from the retrieval embedder.

Cheap re-scoring where a cross-encoder is too slow, e.g. parents in small-to-big retrieval that
were never embedded themselves. Pass the pipeline's embedder to share the loaded model (and its
embedding cache); a `model` set in the config wins over it (e.g. an embedder fine-tuned with
`rag embed train` re-scoring the candidates of a retriever that uses the stock one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Reranker, register
from .config import RerankerConfig


@register("bi-encoder")
class BiEncoderReranker(Reranker):
    def __init__(self, cfg: RerankerConfig, embedder=None, **_: object):
        super().__init__(cfg)
        if embedder is None or cfg.model:
            from retrieval.config import EmbedderConfig
            from retrieval.embeddings import make_embedder

            embedder = make_embedder(EmbedderConfig(model=cfg.model_name(), batch_size=cfg.batch_size, cache=False))
        self.embedder = embedder

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0)
        q = np.asarray(self.embedder.encode_queries([query]), dtype=np.float32)[0]
        d = np.asarray(self.embedder.encode_documents(list(passages)), dtype=np.float32)
        q /= max(float(np.linalg.norm(q)), 1e-12)
        d /= np.maximum(np.linalg.norm(d, axis=1, keepdims=True), 1e-12)
        return (d @ q).astype(np.float64)
