"""nDCG@10 of a retrieval run before and after reranking, on a BEIR split.

The run comes from `mining.CorpusRetriever` (document-level hybrid over the split's corpus), the
same candidates the reranker is trained behind. Reranker scores are appended to a JSONL cache per
query as they are computed, so a long CPU evaluation that is interrupted resumes where it stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tqdm import tqdm

from retrieval.beir import BeirDataset
from retrieval.fusion import blend

from ..base import Reranker
from .mining import Chooser, Run, corpus_retriever, ndcg_at_k


def retrieval_runs(data: BeirDataset, embedder, modes=("bm25", "dense", "hybrid"), k: int = 100,
                   chooser: Chooser | None = None) -> dict[str, Run]:
    texts = data.texts()
    retriever = corpus_retriever(list(texts), list(texts.values()), embedder, chooser)
    return {m: retriever.search_many(data.queries, k=k, mode=m) for m in modes}


def rerank_run(data: BeirDataset, run: Run, reranker: Reranker, depth: int = 50,
               cache: str | Path | None = None, progress: bool = True) -> tuple[Run, float]:
    """Rerank the top `depth` of every query; returns the reranked run and seconds spent scoring."""
    done: Run = {}
    if cache and Path(cache).is_file():
        for line in Path(cache).read_text().splitlines():
            rec = json.loads(line)
            done[rec["qid"]] = rec["scores"]
    spent = 0.0
    out: Run = {}
    texts = data.texts()
    fh = open(cache, "a", encoding="utf-8") if cache else None  # noqa: SIM115 (closed below)
    try:
        for qid in tqdm(sorted(run), disable=not progress, desc="rerank"):
            top = sorted(run[qid], key=lambda d: -run[qid][d])[:depth]
            if qid not in done:
                t = time.perf_counter()
                scores = reranker.score(data.queries[qid], [texts[d] for d in top])
                spent += time.perf_counter() - t
                done[qid] = {d: float(s) for d, s in zip(top, scores, strict=True)}
                if fh:
                    fh.write(json.dumps({"qid": qid, "scores": done[qid]}) + "\n")
                    fh.flush()
            out[qid] = {d: done[qid][d] for d in top if d in done[qid]}
    finally:
        if fh:
            fh.close()
    return out, spent


def fuse_ranks(first: Run, second: Run, weight: float = 0.5, k: int = 60) -> Run:
    """Reciprocal-rank blend of the reranker's order with the retriever's (score-scale free)."""
    out: Run = {}
    for qid, scores in second.items():
        r2 = {d: i for i, d in enumerate(sorted(scores, key=lambda d: -scores[d]), 1)}
        r1 = {d: i for i, d in enumerate(sorted(first[qid], key=lambda d: -first[qid][d]), 1)}
        out[qid] = {d: blend(r2[d], r1.get(d, 1000), weight, k) for d in scores}
    return out


def report(data: BeirDataset, runs: dict[str, Run]) -> dict[str, float]:
    return {name: round(ndcg_at_k(run, data.qrels, 10), 4) for name, run in runs.items()}
