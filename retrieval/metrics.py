"""Retrieval metrics over ranked lists, following the trec_eval / BEIR conventions (the one copy).

Why our own implementation: pytrec_eval cannot be built offline and ranx pulls numba, which is
too heavy to import on every CLI call. The tests cross-check these functions against ranx to
4 decimals, so the numbers stay comparable with published BEIR tables.

Conventions (the same as trec_eval's defaults):
- graded relevance; a document is relevant when its judgement is >= 1 (`REL_THRESHOLD`);
- nDCG uses linear gain (gain = judgement) and a log2(rank + 1) discount; the ideal ranking is
  built from every judged document of the query, cut at k;
- Recall@k and MAP@k divide by the number of relevant documents of the query (not min(k, R));
- `all_gold@k` (not in trec_eval) is 1 when every relevant document of the query is in the top k:
  a multi-hop question (HotpotQA: two supporting paragraphs) is answerable only then, which
  Recall@k's average over the two hides;
- queries with no relevant document are not evaluated (BEIR drops them too); a query with
  relevant documents but no ranking scores 0;
- a run given as {docid: score} is ranked by score descending, ties broken by docid descending
  (trec_eval's order), so the same run always gives the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

Qrels = Mapping[str, Mapping[str, int]]
Run = Mapping[str, Mapping[str, float]]

REL_THRESHOLD = 1
METRIC_NAMES = ("ndcg", "recall", "mrr", "map", "hit", "precision", "all_gold")
DEFAULT_METRICS = ("ndcg", "recall", "mrr", "map", "hit")


def rank_scores(scores: Mapping[str, float]) -> list[str]:
    """Doc ids of a {docid: score} mapping in trec_eval order (score desc, then docid desc)."""
    return [d for d, _ in sorted(scores.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def doc_ranking(hits: Iterable[tuple[str, float]]) -> list[tuple[str, float]]:
    """Collapse a ranked list of chunk hits (doc_id, score) into a ranked list of documents.

    A document ranks where its best chunk ranks: the first occurrence wins and keeps that
    chunk's score, later chunks of the same document are dropped. Order is taken from the
    input, never re-sorted, because fused or reranked lists may carry scores from an earlier
    stage that do not agree with the final order.
    """
    seen: set[str] = set()
    out: list[tuple[str, float]] = []
    for doc_id, score in hits:
        if doc_id in seen:
            continue
        seen.add(doc_id)
        out.append((doc_id, float(score)))
    return out


def _relevant(rels: Mapping[str, int]) -> set[str]:
    return {d for d, r in rels.items() if r >= REL_THRESHOLD}


def dcg(gains: Sequence[float]) -> float:
    return sum(g / math.log2(i + 2) for i, g in enumerate(gains))


def ndcg_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    ideal = sorted((r for r in rels.values() if r > 0), reverse=True)[:k]
    idcg = dcg(ideal)
    if idcg == 0:
        return 0.0
    gains = [max(rels.get(d, 0), 0) for d in ranked[:k]]
    return dcg(gains) / idcg


def recall_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(rels)
    if not relevant:
        return 0.0
    return len(relevant.intersection(ranked[:k])) / len(relevant)


def precision_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(rels)
    return sum(1 for d in ranked[:k] if d in relevant) / k


def mrr_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(rels)
    for i, d in enumerate(ranked[:k]):
        if d in relevant:
            return 1.0 / (i + 1)
    return 0.0


def map_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    """Average precision cut at k, divided by the number of relevant docs (trec_eval map_cut)."""
    relevant = _relevant(rels)
    if not relevant:
        return 0.0
    found, total = 0, 0.0
    for i, d in enumerate(ranked[:k]):
        if d in relevant:
            found += 1
            total += found / (i + 1)
    return total / len(relevant)


def hit_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(rels)
    return 1.0 if any(d in relevant for d in ranked[:k]) else 0.0


def all_gold_at_k(ranked: Sequence[str], rels: Mapping[str, int], k: int) -> float:
    relevant = _relevant(rels)
    return 1.0 if relevant and relevant.issubset(ranked[:k]) else 0.0


def multi_gold(qrels: Qrels) -> bool:
    """Some query has more than one relevant document: `all_gold@k` then differs from `hit@k`
    and is reported (`eval.retrieval_eval`)."""
    return any(len(_relevant(r)) > 1 for r in qrels.values())


def by_type(per_query: Mapping[str, Mapping[str, float]], types: Mapping[str, str],
            keys: Sequence[str]) -> dict[str, dict[str, float]]:
    """Mean metrics per question type ({type: {metric: value}}), types as given by the QA file
    (HotpotQA: bridge / comparison); queries without a type are left out."""
    groups: dict[str, dict[str, Mapping[str, float]]] = {}
    for qid, m in per_query.items():
        if qid in types:
            groups.setdefault(types[qid], {})[qid] = m
    return {t: {**mean_metrics(g, keys), "n": float(len(g))} for t, g in sorted(groups.items())}


_FUNCS = {
    "ndcg": ndcg_at_k,
    "recall": recall_at_k,
    "precision": precision_at_k,
    "mrr": mrr_at_k,
    "map": map_at_k,
    "hit": hit_at_k,
    "all_gold": all_gold_at_k,
}


def metric_keys(ks: Sequence[int], names: Sequence[str] = DEFAULT_METRICS) -> list[str]:
    """Column names in a stable order: every metric at every k (e.g. 'ndcg@10')."""
    for n in names:
        if n not in _FUNCS:
            raise ValueError(f"unknown retrieval metric {n!r}; known: {', '.join(METRIC_NAMES)}")
    return [f"{n}@{k}" for n in names for k in ks]


def query_metrics(
    ranked: Sequence[str], rels: Mapping[str, int], ks: Sequence[int], names: Sequence[str] = DEFAULT_METRICS
) -> dict[str, float]:
    """Every metric at every k for one query's ranked doc ids."""
    metric_keys(ks, names)
    return {f"{n}@{k}": _FUNCS[n](ranked, rels, k) for n in names for k in ks}


def is_judged(rels: Mapping[str, int] | None) -> bool:
    """True when a query has at least one relevant document and can be evaluated."""
    return bool(rels) and bool(_relevant(rels))


def mean_metrics(per_query: Mapping[str, Mapping[str, float]], keys: Sequence[str]) -> dict[str, float]:
    n = len(per_query)
    if n == 0:
        return {k: 0.0 for k in keys}
    return {k: sum(m[k] for m in per_query.values()) / n for k in keys}


def evaluate_rankings(
    rankings: Mapping[str, Sequence[str]],
    qrels: Qrels,
    ks: Sequence[int] = (10,),
    names: Sequence[str] = DEFAULT_METRICS,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Mean and per-query metrics for ordered rankings {qid: [docid, ...]}.

    Every judged query in `qrels` is scored; one missing from `rankings` scores 0.
    """
    keys = metric_keys(ks, names)
    per_query = {
        qid: query_metrics(list(rankings.get(qid, ())), rels, ks, names)
        for qid, rels in qrels.items()
        if is_judged(rels)
    }
    return mean_metrics(per_query, keys), per_query


def evaluate_run(
    run: Run, qrels: Qrels, ks: Sequence[int] = (10,), names: Sequence[str] = DEFAULT_METRICS
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """Like `evaluate_rankings` for a score run {qid: {docid: score}} (trec_eval ordering)."""
    return evaluate_rankings({q: rank_scores(s) for q, s in run.items()}, qrels, ks, names)
