"""Ablations: the same queries through every config variant of a grid, one result row each.

Why a factory: building a variant (indexing with another chunk size, loading a reranker) is the
expensive part and belongs to the pipeline, so the caller passes
`make_search_fn(overrides) -> search_fn` and this module only decides *when* to call it. It is
called lazily, only for variants that still have queries to run, so resuming a finished grid
costs no index builds. Per-query results go to one cache file per variant, appended as each
query finishes: an interrupted run continues where it stopped.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.answers import Mode, RefusalConfig
from eval.cache import QueryCache
from eval.datasets import QAItem, config_hash
from eval.grid import Grid, Variant, slug
from eval.metrics import DEFAULT_METRICS, Qrels
from eval.qa_eval import evaluate_qa
from eval.retrieval_eval import DEFAULT_KS, EvalResult, SearchFn, evaluate_retrieval

MakeSearchFn = Callable[[dict[str, Any]], SearchFn]  # also used for answer functions


class _LazySearch:
    """Builds the variant's search function on first use and closes it afterwards if it can."""

    def __init__(self, factory: MakeSearchFn, overrides: dict[str, Any]):
        self.factory, self.overrides = factory, overrides
        self.fn: SearchFn | None = None

    def __call__(self, query: str) -> Any:
        if self.fn is None:
            self.fn = self.factory(dict(self.overrides))
        return self.fn(query)

    def close(self) -> None:
        close = getattr(self.fn, "close", None)
        if callable(close):
            close()


def ablation_fingerprint(dataset_fingerprint: str, base_config: dict[str, Any]) -> str:
    """Cache key of an ablation run: the dataset version and the base configuration the grid's
    overrides apply to (the same grid over `bm25.yaml` and `dense.yaml` must not share results).
    Where files go (`storage`) and how the server runs (`server`) do not change results."""
    cfg = {k: v for k, v in base_config.items() if k not in ("storage", "server")}
    return config_hash({"dataset": dataset_fingerprint, "base": cfg})


def variant_cache(out_dir: str | Path, variant: Variant, fingerprint: str, depth: int, kind: str = "retrieval") -> QueryCache:
    """The cache of one variant; its key changes with the dataset, the overrides, the depth and
    the kind of run (retrieval and QA records have different shapes)."""
    key = config_hash({"kind": kind, "dataset": fingerprint, "set": variant.set, "depth": depth})
    suffix = "" if kind == "retrieval" else f".{kind}"
    return QueryCache(Path(out_dir) / "cache" / f"{slug(variant.name)}{suffix}.jsonl", key)


EvaluateVariant = Callable[[Variant, Callable[[str], Any], QueryCache], EvalResult]


def run_variants(
    variants: Sequence[Variant],
    factory: MakeSearchFn,
    out_dir: str | Path,
    evaluate_variant: EvaluateVariant,
    cache_for: Callable[[Variant], QueryCache],
    on_result: Callable[[EvalResult], None] | None = None,
) -> list[EvalResult]:
    """The shared loop: lazy factory per variant, its cache, results.json rewritten after each."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results: list[EvalResult] = []
    for v in variants:
        fn = _LazySearch(factory, v.set)
        try:
            res = evaluate_variant(v, fn, cache_for(v))
        finally:
            fn.close()
        results.append(res)
        save_results(results, out / "results.json")
        if on_result is not None:
            on_result(res)
    return results


def run_ablation(
    grid: Grid | Sequence[Variant],
    queries: Mapping[str, str],
    qrels: Qrels,
    make_search_fn: MakeSearchFn,
    out_dir: str | Path,
    ks: Sequence[int] = DEFAULT_KS,
    progress: bool = True,
    *,
    dataset: str = "",
    split: str = "",
    fingerprint: str = "",
    metrics: Sequence[str] = DEFAULT_METRICS,
    to_doc_id: Callable[[str], str] | None = None,
    on_result: Callable[[EvalResult], None] | None = None,
    warmup: bool = True,
) -> list[EvalResult]:
    """Evaluate the retrieval of every variant on the same queries; one `EvalResult` each.

    `out_dir/results.json` is rewritten after each variant, so finished rows survive a crash
    in a later one. `fingerprint` (see `datasets.dataset_fingerprint`) keys the caches: results
    of another dataset version are never reused.
    """
    variants = grid.expand() if isinstance(grid, Grid) else list(grid)
    depth = max(ks)

    def evaluate(v: Variant, fn: Callable[[str], Any], cache: QueryCache) -> EvalResult:
        return evaluate_retrieval(queries, qrels, fn, ks, progress, cache, dataset=dataset, split=split,
                                  config={"variant": v.name, "set": v.set}, name=v.name, metrics=metrics,
                                  to_doc_id=to_doc_id, warmup=warmup)

    return run_variants(variants, make_search_fn, out_dir, evaluate,
                        lambda v: variant_cache(out_dir, v, fingerprint or dataset, depth), on_result)


def run_qa_ablation(
    grid: Grid | Sequence[Variant],
    items: Sequence[QAItem],
    make_answer_fn: MakeSearchFn,
    out_dir: str | Path,
    progress: bool = True,
    *,
    dataset: str = "",
    split: str = "",
    fingerprint: str = "",
    mode: Mode = "auto",
    refusal: RefusalConfig | None = None,
    on_result: Callable[[EvalResult], None] | None = None,
    warmup: bool = True,
) -> list[EvalResult]:
    """Like `run_ablation` for answers (variants such as +compression only show up here):
    `make_answer_fn(overrides) -> answer_fn`, scored by `qa_eval.evaluate_qa`."""
    variants = grid.expand() if isinstance(grid, Grid) else list(grid)

    def evaluate(v: Variant, fn: Callable[[str], Any], cache: QueryCache) -> EvalResult:
        return evaluate_qa(items, fn, mode=mode, refusal=refusal, progress=progress, cache=cache, dataset=dataset,
                           split=split, config={"variant": v.name, "set": v.set}, name=v.name, warmup=warmup)

    return run_variants(variants, make_answer_fn, out_dir, evaluate,
                        lambda v: variant_cache(out_dir, v, fingerprint or dataset, 0, kind="qa"), on_result)


def save_results(results: Sequence[EvalResult], path: str | Path) -> Path:
    """A JSON list of result rows, each the published shape plus its variant name."""
    path = Path(path)
    rows = [{"name": r.name, **r.to_dict()} for r in results]
    path.write_text(json.dumps(rows, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path
