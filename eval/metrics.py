"""Retrieval metrics: re-exported from `retrieval.metrics`, the one implementation.

They live in `retrieval/` so reranker training (`rerank/training/`) scores runs with exactly the
definitions evaluation reports (rerank may not import eval).
"""

from retrieval.metrics import (  # noqa: F401 (re-exported for eval callers)
    DEFAULT_METRICS,
    METRIC_NAMES,
    REL_THRESHOLD,
    Qrels,
    Run,
    all_gold_at_k,
    by_type,
    dcg,
    doc_ranking,
    evaluate_rankings,
    evaluate_run,
    hit_at_k,
    is_judged,
    map_at_k,
    mean_metrics,
    metric_keys,
    mrr_at_k,
    multi_gold,
    ndcg_at_k,
    precision_at_k,
    query_metrics,
    rank_scores,
    recall_at_k,
)
