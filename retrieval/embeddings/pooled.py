"""Sentence-transformers model directories of the common shape, run without sentence-transformers.

Why: `import sentence_transformers` pulls in scikit-learn, its trainers and ONNX/OpenVINO
exporters before a model is even read, and every `rag ask`, `rag index` or `rag search` paid it:
a fresh process's first query vector took 6.2-6.7 s with it and 4.6-4.9 s without (Zen 4,
2 cores). The packaged MiniLM and the converted multilingual E5 are directories in the classic
format (`sentence_bert_config.json` with `max_seq_length`) holding a transformer, a mean or CLS
pooling and an optional L2 normalisation: a tokenizer call (transformers' own Rust tokenizer from
its snapshot, `encoder_tokenizer.py`), a forward and a masked mean. The forward is `bert.BertEncoder` (plain torch) for BERT models, both packaged ones included, and
transformers' `AutoModel` for any other architecture.
`PooledEncoder.load` takes such a directory and returns None for anything else (dense layers,
other poolings, lower-casing, a default prompt, sentence-transformers' current save format, hub
ids), which sentence-transformers then loads as before. The vectors match
sentence-transformers' own to float rounding (tests/retrieval/test_pooled_encoder.py), so the
embedder's name, and every index built with it, stays the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

# module types as the classic format names them (newer saves name their own classes and configs)
_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_OTHER_MODES = ("pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens",
                "pooling_mode_lasttoken")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def plain_layout(path: str | Path) -> tuple[str, int, bool] | None:
    """(pooling "mean" | "cls", max_seq_length, normalised) for a local transformer -> pooling
    [-> normalize] directory; None for any other model."""
    root = Path(path)
    modules = _read_json(root / "modules.json")
    if not isinstance(modules, list) or len(modules) not in (2, 3) or not all(isinstance(m, dict) for m in modules):
        return None  # malformed: sentence-transformers loads it and says what is wrong
    types = [m.get("type") for m in modules]
    if types[0] != _TRANSFORMER or modules[0].get("path") not in ("", None) or types[1] != _POOLING:
        return None
    if len(types) == 3 and types[2] != _NORMALIZE:
        return None
    st_cfg = _read_json(root / "config_sentence_transformers.json") or {}
    if not isinstance(st_cfg, dict) or st_cfg.get("default_prompt_name"):
        return None  # sentence-transformers would put a prompt before every text
    pool = _read_json(root / str(modules[1].get("path", "")) / "config.json")
    st = _read_json(root / "sentence_bert_config.json")
    if not isinstance(pool, dict) or not isinstance(st, dict) or st.get("do_lower_case"):
        return None
    if any(pool.get(k) for k in _OTHER_MODES) or pool.get("include_prompt") is False:
        return None
    mean, cls = bool(pool.get("pooling_mode_mean_tokens")), bool(pool.get("pooling_mode_cls_token"))
    if mean == cls or not isinstance(st.get("max_seq_length"), int):
        return None
    return ("mean" if mean else "cls"), int(st["max_seq_length"]), len(types) == 3


class PooledEncoder:
    """The part of `SentenceTransformer` the embedder uses: `tokenizer`, `max_seq_length`,
    `encode`, `to`, `get_sentence_embedding_dimension`."""

    def __init__(self, path: str | Path, pooling: str, max_seq_length: int, normalize: bool, device: str = "cpu"):
        from .bert import BertEncoder
        from .encoder_tokenizer import EncoderTokenizer

        self.tokenizer = EncoderTokenizer(path)  # transformers' tokenizer, without importing it
        # plain BERT (both packaged models) without importing transformers' model code (2.5 s)
        model = BertEncoder.load(path)
        if model is None:
            from transformers import AutoModel

            model = AutoModel.from_pretrained(str(path))
        self.model = model.to(device).eval()
        limit = getattr(self.model.config, "max_position_embeddings", None)
        # as sentence-transformers caps it: never past the positions the model has
        self.max_seq_length = min(max_seq_length, limit) if isinstance(limit, int) and limit > 0 else max_seq_length
        self.tokenizer.model_max_length = self.max_seq_length  # as sentence-transformers sets it
        self.pooling = pooling
        self.normalize = normalize  # the directory's own Normalize module (applied whatever the caller asks)
        self.device = device

    @classmethod
    def load(cls, path: str | Path, device: str = "cpu") -> PooledEncoder | None:
        layout = plain_layout(path) if Path(path).is_dir() else None
        return None if layout is None else cls(path, *layout, device=device)

    def to(self, dtype: Any) -> PooledEncoder:
        self.model.to(dtype)
        return self

    def get_sentence_embedding_dimension(self) -> int:
        return int(self.model.config.hidden_size)

    def encode(self, texts: Sequence[str], batch_size: int = 32, **_: Any) -> np.ndarray:
        """Rows in input order; longest texts batched together first, as sentence-transformers does
        (the same batches, so the same padding and the same float sums)."""
        import torch

        order = np.argsort([-len(t) for t in texts])
        out: list[np.ndarray] = [np.empty(0)] * len(texts)
        with torch.inference_mode():
            for start in range(0, len(texts), batch_size):
                idx = order[start:start + batch_size]
                feats = self.tokenizer([texts[i] for i in idx], padding=True, truncation="longest_first",
                                       max_length=self.max_seq_length, return_tensors="pt").to(self.device)
                hidden = self.model(**feats).last_hidden_state
                if self.pooling == "cls":
                    vecs = hidden[:, 0]
                else:
                    mask = feats["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                    vecs = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                if self.normalize:
                    vecs = torch.nn.functional.normalize(vecs, p=2, dim=1)
                vecs = vecs.float().cpu().numpy()
                for j, i in enumerate(idx):
                    out[i] = vecs[j]
        return np.stack(out) if texts else np.zeros((0, self.get_sentence_embedding_dimension()), dtype=np.float32)
