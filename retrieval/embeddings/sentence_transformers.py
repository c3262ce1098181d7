"""sentence-transformers backend: batching, L2 normalisation, device auto-selection, prefixes.

Texts longer than the model's window are silently truncated by sentence-transformers; we count
them (`truncated`) and warn once per call, because a silently truncated corpus is a common cause
of "dense retrieval misses the answer at the end of the chunk".
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from ..config import EmbedderConfig
from .base import Embedder, l2_normalize, register
from .models import canonical_model_name, resolve_embedding_model
from .pooled import PooledEncoder
from .windows import mean_by_owner, split_windows

log = logging.getLogger(__name__)


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    if torch.cuda.is_available():
        return "cuda"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return "mps"
    return "cpu"


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, cfg: EmbedderConfig):
        self.cfg = cfg
        self.device = pick_device(cfg.device)
        path = resolve_embedding_model(cfg.resolved_model())
        # the common transformer + pooling layout runs without importing sentence-transformers (pooled.py)
        self.model = PooledEncoder.load(path, self.device)
        if self.model is None:
            from sentence_transformers import SentenceTransformer

            self.model = SentenceTransformer(path, device=self.device)
        if cfg.max_seq_length:
            self.model.max_seq_length = cfg.max_seq_length
        if cfg.dtype != "float32":
            import torch

            self.model.to(getattr(torch, cfg.dtype))
        dim_fn = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim_fn())
        self.query_prefix, self.document_prefix = cfg.prefixes()
        model_id = canonical_model_name(cfg.resolved_model())
        self.name = (f"st:{model_id}|q={self.query_prefix}|d={self.document_prefix}"
                     f"|len={self.model.max_seq_length}|norm={int(cfg.normalize)}"
                     + (f"|dtype={cfg.dtype}" if cfg.dtype != "float32" else "")
                     + ("|long=truncate" if cfg.long_text == "truncate" else ""))
        self.truncated = 0
        self.windowed = 0  # documents embedded as the mean of several windows (long_text: mean)

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        self._count_truncated(texts)
        vecs = self.model.encode(list(texts), batch_size=self.cfg.batch_size, convert_to_numpy=True,
                                 normalize_embeddings=False, show_progress_bar=False)
        vecs = np.asarray(vecs, dtype=np.float32)
        return l2_normalize(vecs) if self.cfg.normalize else vecs

    def _count_truncated(self, texts: Sequence[str]) -> None:
        limit = self.model.max_seq_length
        # Cheap pre-check: a text of fewer characters than the limit cannot exceed it in tokens.
        long = [t for t in texts if len(t) > limit]
        if not long:
            return
        lens = self.model.tokenizer(long, add_special_tokens=True, truncation=False)["input_ids"]
        n = sum(1 for ids in lens if len(ids) > limit)
        if n:
            self.truncated += n
            log.warning("%d of %d texts exceed %d tokens and were truncated by %s",
                        n, len(texts), limit, self.cfg.resolved_model())

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        texts = [self.query_prefix + t for t in texts]
        n = self.cfg.query_threads
        if not n or self.device != "cpu" or len(texts) > 16:
            return self._encode(texts)
        import torch

        before = torch.get_num_threads()
        torch.set_num_threads(n)
        try:
            return self._encode(texts)
        finally:
            torch.set_num_threads(before)

    def document_windows(self, texts: Sequence[str]) -> tuple[list[str], np.ndarray]:
        """Window pieces of the documents (prefix added later) and which document each belongs to."""
        specials = len(self.model.tokenizer("", add_special_tokens=True)["input_ids"])
        prefix = len(self.model.tokenizer(self.document_prefix, add_special_tokens=False)["input_ids"])
        budget = max(8, self.model.max_seq_length - specials - prefix - 2)  # 2: joins at window edges
        return split_windows(self.model.tokenizer, texts, budget)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        if self.cfg.long_text == "truncate" or not texts:
            return self._encode([self.document_prefix + t for t in texts])
        pieces, owner = self.document_windows(texts)
        vecs = self._encode([self.document_prefix + p for p in pieces])
        if len(pieces) > len(texts):
            self.windowed += int((np.bincount(owner) > 1).sum())
        return mean_by_owner(vecs, owner, len(texts))


@register("sentence-transformers")
def _make(cfg: EmbedderConfig) -> Embedder:
    return SentenceTransformerEmbedder(cfg)
