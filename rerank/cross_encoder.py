"""`type: cross-encoder`: sentence-transformers CrossEncoder, any HF id or local directory.

Scores are the model's activated output (sigmoid for one-logit rerankers such as bge-reranker and
the ones `rag rerank train` builds), so `threshold` reads as a probability of relevance.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .base import Reranker, register
from .config import RerankerConfig
from .models import hub_error, looks_local, resolve_cross_encoder


def pick_device(device: str) -> str:
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@register("cross-encoder")
class CrossEncoderReranker(Reranker):
    def __init__(self, cfg: RerankerConfig, **_: object):
        super().__init__(cfg)
        from sentence_transformers import CrossEncoder

        path = resolve_cross_encoder(cfg.model_name())
        self.device = pick_device(cfg.device)
        try:
            self.model = CrossEncoder(path, max_length=cfg.max_length, device=self.device)
        except OSError as e:
            if looks_local(cfg.model_name()):
                raise
            raise hub_error(cfg.model_name(), e) from e
        if cfg.fp16 and self.device.startswith("cuda"):
            self.model.model.half()
        elif cfg.bf16:
            import torch

            self.model.model.to(torch.bfloat16)
        self.model.model.eval()

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        if not passages:
            return np.zeros(0)
        pairs = [(query, p) for p in passages]
        s = self.model.predict(pairs, batch_size=self.cfg.batch_size, show_progress_bar=False,
                               convert_to_numpy=True)
        return np.asarray(s, dtype=np.float64).reshape(len(passages), -1)[:, -1]
