"""Cost aggregation: per-stage latency percentiles, tokens, compression and prefix-cache hits.

Why a separate, dict-based record: every stage reports its own timings and counters, and the
evaluation must not depend on the pipeline's classes; one flat record per query is enough to
rebuild every cost number, and it round-trips through the JSONL caches unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

TOTAL = "total"


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), 0.0 for no values."""
    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else 0.0


def latency_summary(timings: Iterable[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """{stage: {"p50", "p95", "mean"}} in ms over per-query {stage: ms} mappings.

    A stage missing from some queries is summarised over the queries that report it (stages
    like reranking may be skipped on some queries). `total` comes first, stages stay in order
    of first appearance.
    """
    by_stage: dict[str, list[float]] = {}
    for t in timings:
        for stage, ms in t.items():
            by_stage.setdefault(stage, []).append(float(ms))
    order = sorted(by_stage, key=lambda s: s != TOTAL)
    return {
        s: {
            "p50": percentile(by_stage[s], 50),
            "p95": percentile(by_stage[s], 95),
            "mean": float(np.mean(by_stage[s])),
        }
        for s in order
    }


def aggregate_costs(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Summarise per-query cost records.

    Record keys (all optional): `timings_ms` {stage: ms}, `tokens_in`, `tokens_out`,
    `context_tokens_before` / `context_tokens_after` (prompt compression),
    `prefix_cached_tokens` (prompt tokens served from the prefix cache).
    The compression ratio is total before / total after (a ratio of sums, so long contexts
    weigh more, as they do in the bill); the hit rate is cached / total prompt tokens.
    """
    recs = list(records)
    tin = [float(r["tokens_in"]) for r in recs if r.get("tokens_in") is not None]
    tout = [float(r["tokens_out"]) for r in recs if r.get("tokens_out") is not None]
    before = sum(float(r.get("context_tokens_before") or 0) for r in recs)
    after = sum(float(r.get("context_tokens_after") or 0) for r in recs)
    cached = sum(float(r.get("prefix_cached_tokens") or 0) for r in recs)
    out: dict[str, Any] = {
        "latency_ms": latency_summary(r.get("timings_ms") or {} for r in recs),
        "n": len(recs),
    }
    if tin:
        out["tokens_in"] = {"total": sum(tin), "mean": sum(tin) / len(tin)}
    if tout:
        out["tokens_out"] = {"total": sum(tout), "mean": sum(tout) / len(tout)}
    if before and after:
        out["compression_ratio"] = before / after
    if tin and any(r.get("prefix_cached_tokens") is not None for r in recs):
        out["prefix_cache_hit_rate"] = cached / sum(tin) if sum(tin) else 0.0
    return out
