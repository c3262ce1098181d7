"""Run every query of a dataset through a search function and score the rankings.

Why a search *function*: the evaluation must not know how retrieval is built (BM25, dense,
hybrid, reranked, through the full pipeline or a bare index), so it takes a callable from query
text to ranked hits. It accepts what a `retrieval` Retriever returns (an object with
`.candidates`, each with `.chunk.doc_id` and `.score`, and `.timings_ms`), a `(hits, timings)`
pair, or a bare list of `(id, score)` hits. Chunk hits are collapsed to documents (a document
ranks where its best chunk ranks), so the search function must return at least max(ks) chunks,
preferably more.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.cache import QueryCache, run_resumable
from eval.cost import TOTAL, latency_summary
from eval.metrics import (
    DEFAULT_METRICS,
    Qrels,
    by_type,
    doc_ranking,
    is_judged,
    mean_metrics,
    metric_keys,
    multi_gold,
    query_metrics,
)
from retrieval.types import Candidate, SearchResult

SearchFn = Callable[[str], Any]
DEFAULT_KS = (1, 3, 5, 10, 100)


@dataclass
class SearchOutput:
    ranking: list[tuple[str, float]]  # document level, best first
    timings_ms: dict[str, float] = field(default_factory=dict)


def mean_doc_ranking(hits: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    """Documents scored by the mean of their retrieved chunks' scores (`--doc-score mean`):
    a document that matches everywhere beats one with a single lucky chunk."""
    sums: dict[str, list[float]] = {}
    for doc_id, score in hits:
        sums.setdefault(doc_id, []).append(score)
    return sorted(((d, sum(v) / len(v)) for d, v in sums.items()), key=lambda x: (-x[1], x[0]))


def normalise_output(out: Any, to_doc_id: Callable[[str], str] | None = None,
                     doc_score: str = "max") -> SearchOutput:
    """Turn any supported search-function return value into a document ranking + timings."""
    timings: Mapping[str, float] = {}
    if isinstance(out, SearchResult):
        hits, timings = out.candidates, out.timings_ms or {}
    elif isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], Mapping):
        hits, timings = out
    else:
        hits = out
    pairs: list[tuple[str, float]] = []
    for h in hits:
        if isinstance(h, Candidate):
            doc_id, score = h.chunk.doc_id, h.score
        elif isinstance(h, str):
            doc_id, score = h, 0.0
        else:
            doc_id, score = h[0], h[1]
            if to_doc_id is not None:
                doc_id = to_doc_id(doc_id)
        pairs.append((str(doc_id), float(score)))
    ranking = mean_doc_ranking(pairs) if doc_score == "mean" else doc_ranking(pairs)
    return SearchOutput(ranking, {str(k): float(v) for k, v in timings.items()})


@dataclass
class EvalResult:
    dataset: str
    split: str
    config: dict[str, Any]
    metrics: dict[str, float]
    latency_ms: dict[str, dict[str, float]]
    n_queries: int
    name: str = ""
    per_query: dict[str, dict[str, float]] = field(default_factory=dict)
    rankings: dict[str, list[tuple[str, float]]] = field(default_factory=dict)
    executed: int = 0  # queries actually searched in this call (the rest came from the cache)
    metrics_by_type: dict[str, dict[str, float]] = field(default_factory=dict)  # {type: {metric: value}}
    long_grounding: dict[str, int] = field(default_factory=dict)  # QA, long mode: sentences per grounding path
    comparisons: dict[str, int] = field(default_factory=dict)  # QA: comparison questions asked / decided
    two_hop: dict[str, int] = field(default_factory=dict)  # QA: refusals tried in two steps / answered
    # QA: the engine's K/V reuse over the run (`eval.runner.engine_counters`): shows a passage-cache
    # run really reused passages (hits, reused and recomputed tokens), not only that it was configured
    engine: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The published result shape (no per-query detail)."""
        return {
            "dataset": self.dataset,
            "split": self.split,
            "config": self.config,
            "metrics": self.metrics,
            "latency_ms": self.latency_ms,
            "n_queries": self.n_queries,
            **({"metrics_by_type": self.metrics_by_type} if self.metrics_by_type else {}),
            **({"long_grounding": self.long_grounding} if self.long_grounding else {}),
            **({"comparisons": self.comparisons} if self.comparisons else {}),
            **({"two_hop": self.two_hop} if self.two_hop else {}),
            **({"engine": self.engine} if self.engine else {}),
        }

    def save_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        return path


def save_per_query(result: EvalResult, path: str | Path, top: int = 10) -> Path:
    """One JSON line per query: its metrics and its top documents, for error analysis
    (which queries fail, and what was retrieved instead)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for qid, m in result.per_query.items():
            row = {"qid": qid, **m}
            if qid in result.rankings:
                row["top"] = [[d, round(s, 6)] for d, s in result.rankings[qid][:top]]
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def evaluate_retrieval(
    queries: Mapping[str, str],
    qrels: Qrels,
    search_fn: SearchFn,
    ks: Sequence[int] = DEFAULT_KS,
    progress: bool = True,
    cache: QueryCache | None = None,
    *,
    dataset: str = "",
    split: str = "",
    config: Mapping[str, Any] | None = None,
    name: str = "",
    metrics: Sequence[str] = DEFAULT_METRICS,
    to_doc_id: Callable[[str], str] | None = None,
    warmup: bool = True,
    doc_score: str = "max",
    types: Mapping[str, str] | None = None,
) -> EvalResult:
    """Search every judged query, score document rankings at each k, summarise latency.

    Queries without a relevant judgement are skipped (they cannot be scored). With a `cache`,
    queries already in it are not searched again and each new one is stored as soon as it
    finishes, so an interrupted evaluation resumes where it stopped. Latency per stage comes from
    the search function's timings; `total` is the wall time of the call unless it reports one.
    With `warmup`, one untimed search runs first, so lazy model loading does not land in p95.
    `types` ({qid: type}, from a QA file's `type`: multi-hop sets) adds `metrics_by_type` and,
    when some query has several supporting documents, `all_gold@k`; other datasets keep exactly
    the metric keys they always had.
    """
    ks = sorted(set(int(k) for k in ks))
    if types and multi_gold(qrels) and "all_gold" not in metrics:
        metrics = (*metrics, "all_gold")
    keys = metric_keys(ks, metrics)
    depth = max(ks)
    qids = [q for q in queries if is_judged(qrels.get(q))]

    def search(q: str) -> tuple[list[tuple[str, float]], dict[str, float]]:
        t0 = time.perf_counter()
        raw = search_fn(queries[q])
        wall = (time.perf_counter() - t0) * 1000.0
        out = normalise_output(raw, to_doc_id, doc_score)
        out.timings_ms.setdefault(TOTAL, wall)
        return out.ranking[:depth], out.timings_ms

    done, executed = run_resumable(
        qids, search, cache, to_record=lambda r: {"ranking": r[0], "timings_ms": r[1]},
        from_record=lambda rec: ([(d, s) for d, s in rec["ranking"]], rec["timings_ms"]),
        desc=f"eval {name or dataset}".strip(), progress=progress,
        warmup=(lambda q: search_fn(queries[q])) if warmup else None)
    rankings = {q: r for q, (r, _) in done.items()}
    timings = {q: t for q, (_, t) in done.items()}
    per_query = {q: query_metrics([d for d, _ in rankings[q]], qrels[q], ks, metrics) for q in qids}
    return EvalResult(
        dataset=dataset,
        split=split,
        config=dict(config or {}),
        metrics=mean_metrics(per_query, keys),
        latency_ms=latency_summary(timings[q] for q in qids),
        n_queries=len(qids),
        name=name,
        per_query=per_query,
        rankings={q: rankings[q] for q in qids},
        executed=executed,
        metrics_by_type=by_type(per_query, types, keys) if types else {},
    )


def format_table(results: EvalResult | Sequence[EvalResult], columns: Sequence[str] | None = None) -> str:
    """A fixed-width text table: one row per result, chosen metric columns, total latency."""
    rows = [results] if isinstance(results, EvalResult) else list(results)
    if not rows:
        return ""
    cols = list(columns or _default_columns(rows[0].metrics))
    header = ["variant", "n", *cols, "p50 ms", "p95 ms"]
    body = []
    for r in rows:
        lat = r.latency_ms.get(TOTAL, {})
        body.append([r.name or r.dataset or "-", str(r.n_queries),
                     *(f"{r.metrics.get(c, float('nan')):.4f}" for c in cols),
                     f"{lat.get('p50', 0.0):.1f}", f"{lat.get('p95', 0.0):.1f}"])
    widths = [max(len(x) for x in col) for col in zip(header, *body, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    lines = [fmt.format(*header), "  ".join("-" * w for w in widths)]
    lines += [fmt.format(*b) for b in body]
    # long QA answers: which path each sentence took (rag/answering/long.py), under the table
    lines += [f"long_grounding {r.name or r.dataset or '-'}: " + ", ".join(f"{k} {v}" for k, v in r.long_grounding.items())
              for r in rows if r.long_grounding]
    lines += [f"comparisons {r.name or r.dataset or '-'}: asked {r.comparisons['asked']}, decided "
              f"{r.comparisons['used']}" + _by_kind(r.comparisons) for r in rows if r.comparisons]
    lines += [f"two_hop {r.name or r.dataset or '-'}: tried {r.two_hop['asked']}, answered {r.two_hop['used']}"
              for r in rows if r.two_hop]
    # passage KV cache / KV shifting runs: what the engine reused
    lines += [f"engine {r.name or r.dataset or '-'}: " + ", ".join(f"{k} {v:g}" for k, v in r.engine.items())
              for r in rows if r.engine.get("passage_cache_hits", 0) + r.engine.get("passage_cache_misses", 0)
              + r.engine.get("kv_shift_reused_tokens", 0)]
    return "\n".join(lines)


def _default_columns(metrics: Mapping[str, float]) -> list[str]:
    preferred = ["ndcg@10", "recall@10", "recall@100", "mrr@10", "map@10", "hit@10", "all_gold@10"]
    cols = [c for c in preferred if c in metrics]
    # QA runs: what a user would ask first (right answers, refusals, inventions), then F1/EM
    qa = ["accuracy", "f1", "em", "refusal_acc", "false_refusal", "cited_invention_rate", "answer_recall",
          "supported_sentence_rate"]
    if not cols and "f1" in metrics:
        cols = [c for c in qa if c in metrics]
    return cols or list(metrics)[:6]


def _by_kind(counts: dict[str, int]) -> str:
    """" (both 8/10, which 7/8)": decided / asked per kind, when the counts say their kinds."""
    kinds = [k.removesuffix("_asked") for k in counts if k.endswith("_asked")]
    if not kinds:
        return ""
    return " (" + ", ".join(f"{k} {counts.get(k + '_used', 0)}/{counts[k + '_asked']}" for k in kinds) + ")"
