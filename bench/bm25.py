"""BM25 benchmark: our sparse-matrix core vs rank_bm25 on the SciFact corpus, same tokens.

Reports index build time, queries/s (top-10 per query), top-10 agreement and the largest score
difference, and the speed ratios. Run: `.venv/bin/python bench/bm25.py [--queries N] [--json OUT]`.
Needs ../shared/datasets/scifact.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from retrieval.analyzer import Analyzer  # noqa: E402
from retrieval.bm25 import BM25Index  # noqa: E402
from retrieval.config import BM25Config  # noqa: E402

DATA = REPO.parent / "shared" / "datasets" / "scifact"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=300, help="test queries to time (rank_bm25 is slow)")
    ap.add_argument("--variant", default="okapi", choices=["okapi", "bm25l", "bm25plus"])
    ap.add_argument("--json", type=Path, help="also write the figures as JSON here")
    a = ap.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent")
        return 0
    import rank_bm25

    ref_cls = {"okapi": rank_bm25.BM25Okapi, "bm25l": rank_bm25.BM25L, "bm25plus": rank_bm25.BM25Plus}[a.variant]
    an = Analyzer()
    docs = [json.loads(line) for line in (DATA / "corpus.jsonl").read_text().splitlines()]
    t = time.perf_counter()
    toks = [an(f"{d['title']}\n{d['text']}") for d in docs]
    t_tok = time.perf_counter() - t
    queries = [json.loads(line)["text"] for line in (DATA / "queries.jsonl").read_text().splitlines()]
    queries = queries[: a.queries]
    qtoks = [an(q) for q in queries]

    t = time.perf_counter()
    ref = ref_cls(toks, k1=1.5, b=0.75)
    t_build_ref = time.perf_counter() - t
    t = time.perf_counter()
    ours = BM25Index(BM25Config(variant=a.variant, k1=1.5, b=0.75))
    ours.add(range(len(toks)), toks)
    ours._refresh()  # weights are computed lazily; count them in the build
    t_build_ours = time.perf_counter() - t

    t = time.perf_counter()
    ref_top = [np.argsort(ref.get_scores(q))[::-1][:10] for q in qtoks]
    t_ref = time.perf_counter() - t
    reps = max(1, int(2000 / len(qtoks)))
    t = time.perf_counter()
    for _ in range(reps):
        our_top = [ours.search(q, 10)[0] for q in qtoks]
    t_ours = (time.perf_counter() - t) / reps

    agree = np.mean([len(set(a_.tolist()) & set(b_.tolist())) / 10 for a_, b_ in zip(ref_top, our_top, strict=True)])
    max_diff = max(float(np.abs(ours.get_scores(q) - ref.get_scores(q)).max()) for q in qtoks[:50])
    res = {
        "docs": len(docs), "queries": len(qtoks), "variant": a.variant, "tokenize_s": round(t_tok, 3),
        "build_s": {"ours": round(t_build_ours, 3), "rank_bm25": round(t_build_ref, 3)},
        "qps": {"ours": round(len(qtoks) / t_ours, 1), "rank_bm25": round(len(qtoks) / t_ref, 1)},
        "qps_ratio": round(t_ref / t_ours, 1), "build_ratio": round(t_build_ref / t_build_ours, 2),
        "top10_agreement": round(float(agree), 4), "max_abs_score_diff": max_diff,
    }
    print(f"SciFact {len(docs)} docs, {len(qtoks)} queries, BM25 {a.variant} (k1=1.5, b=0.75), same tokens")
    print(f"tokenize corpus        {t_tok:8.2f} s")
    print(f"build       ours {t_build_ours:8.3f} s   rank_bm25 {t_build_ref:8.3f} s   ratio {res['build_ratio']}x")
    print(f"queries/s   ours {res['qps']['ours']:8.1f}     rank_bm25 {res['qps']['rank_bm25']:8.1f}     "
          f"ratio {res['qps_ratio']}x")
    print(f"top-10 agreement {agree:.4f}   max |score diff| {max_diff:.2e}")
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
