"""Per-query graph weight (issue 26): dump each query's per-retriever rankings once, then score
fusion rules offline, so a weight rule is chosen on train/dev splits of two corpora together.

Step 1 (`dump`) runs the graph config's searches over a split and writes, per query, the BM25,
dense and graph rankings the retriever fused (chunk int ids), the linked entities with the number
of chunks mentioning each, and the chunk -> document map. Step 2 (`score`) fuses those rankings
with weighted RRF under a grid of rules (a fixed graph weight, or one scaled by how specific the
linked entities are) and prints nDCG@10 / all_gold@10 per dump. The fusion is `retrieval.fusion.rrf`,
the same function the retriever calls, so the offline figures equal `rag eval retrieval`'s.

    .venv/bin/python bench/graph_weight.py dump --dataset ../shared/datasets/hotpotqa_pooled --split dev --out hp.pkl
    .venv/bin/python bench/graph_weight.py dump --dataset ../shared/datasets/scifact --split train --out sf.pkl
    .venv/bin/python bench/graph_weight.py score hp.pkl sf.pkl
"""

from __future__ import annotations

import argparse
import itertools
import math
import pickle
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def dump(a: argparse.Namespace) -> int:
    from eval.datasets import load_beir
    from eval.runner import open_eval_pipeline
    from rag.config import load_config

    cfg = load_config(REPO / "configs" / "graph.yaml", list(a.set))
    ds = load_beir(a.dataset, a.split, a.limit, a.limit is not None, 0, with_corpus=False)
    pipe = open_eval_pipeline(a.dataset, cfg, progress=True)
    r = pipe.retriever
    captured: dict[str, Any] = {}
    fuse = r._fuse

    def spy(rankings, f):  # the rankings the retriever fuses: what a weight rule re-fuses offline
        captured["rankings"] = {k: list(v) for k, v in rankings.items()}
        return fuse(rankings, f)

    r._fuse = spy
    name = cfg.retrieval.default_collection
    graph = r.index(name).graph
    emb = r.embedder_for(name) if graph.vectors else None
    graph._build_matrix()
    out: dict[str, Any] = {"dataset": str(a.dataset), "split": a.split, "n_chunks": len(graph.mentions),
                           "qrels": ds.qrels, "types": ds.types, "queries": {}}
    ids: set[int] = set()
    for i, (qid, text) in enumerate(ds.queries.items()):
        if not ds.qrels.get(qid):
            continue
        captured.clear()
        pipe.search(text, k=30)
        seeds = graph.link(text, emb)
        dfs = [len(graph.chunks_of.get(s, ())) for s in seeds]
        rk = captured.get("rankings", {})
        out["queries"][qid] = {"rankings": rk, "seeds": seeds, "dfs": dfs}
        for v in rk.values():
            ids.update(c for c, _ in v)
        if i % 50 == 0:
            print(f"{i}/{len(ds.queries)}", flush=True)
    out["doc_of"] = {c.int_id: c.doc_id for c in r.store.get_chunks_by_int(sorted(ids), name)}
    pipe.close()
    Path(a.out).write_bytes(pickle.dumps(out))
    print(f"wrote {a.out}: {len(out['queries'])} queries")
    return 0


def specificity(dfs: list[int], n: int, how: str = "max") -> float:
    """How specific the linked entities are: idf of a chunk count over log(n), in [0, 1], of the
    most specific one (`max`) or averaged over all (`mean`); 0 when the question links to nothing."""
    if not dfs:
        return 0.0
    idf = [math.log(n / max(d, 1)) / math.log(n) for d in dfs]
    return max(idf) if how == "max" else sum(idf) / len(idf)


def evaluate(d: dict[str, Any], weight_of) -> dict[str, float]:
    from retrieval.fusion import rrf
    from retrieval.metrics import all_gold_at_k, doc_ranking, ndcg_at_k

    doc_of = d["doc_of"]
    tot: dict[str, float] = {"ndcg@10": 0.0, "all_gold@10": 0.0}
    by_type: dict[str, list[float]] = {}
    for qid, q in d["queries"].items():
        w = weight_of(q, d["n_chunks"])
        fused = rrf(q["rankings"], 60, {"bm25": 1.0, "dense": 1.0, "graph": w})
        docs = [x for x, _ in doc_ranking((doc_of[c], s) for c, s in fused if c in doc_of)]
        rels = d["qrels"][qid]
        tot["ndcg@10"] += ndcg_at_k(docs, rels, 10)
        ag = all_gold_at_k(docs, rels, 10)
        tot["all_gold@10"] += ag
        t = (d["types"] or {}).get(qid)
        if t:
            by_type.setdefault(t, []).append(ag)
    n = len(d["queries"])
    out = {k: v / n for k, v in tot.items()}
    out.update({f"all_gold@10 {t}": sum(v) / len(v) for t, v in by_type.items()})
    return out


def score(a: argparse.Namespace) -> int:
    dumps = [pickle.loads(Path(p).read_bytes()) for p in a.dumps]
    rules: list[tuple[str, Any]] = [("off", lambda q, n: 0.0)]
    for w in (0.1, 0.3, 0.5):
        rules.append((f"fixed {w}", lambda q, n, w=w: w))
    grid = [("max", w, lo, hi) for w, lo, hi in itertools.product((0.5, 0.7, 1.0), (0.5, 0.6, 0.7), (0.8, 0.9, 1.0))]
    grid += [("mean", w, lo, hi) for w, lo, hi in itertools.product((0.5, 0.7), (0.75, 0.8, 0.85), (0.85, 0.9, 0.95))]
    for how, w, lo, hi in grid:
        if hi <= lo:
            continue
        # weight ramps from 0 at specificity lo to w at hi: generic entities leave the graph out

        def ramp(q, n, how=how, w=w, lo=lo, hi=hi):
            s = specificity(q["dfs"], n, how)
            return w * min(1.0, max(0.0, (s - lo) / (hi - lo)))

        rules.append((f"ramp {how} w={w} {lo}->{hi}", ramp))
    for d in dumps:
        s = sorted(specificity(q["dfs"], d["n_chunks"]) for q in d["queries"].values())
        print(f"{Path(d['dataset']).name} {d['split']}: specificity quartiles "
              f"{[round(s[int(len(s) * f)], 3) for f in (0.1, 0.25, 0.5, 0.75, 0.9)]}")
    for label, rule in rules:
        cells = []
        for d in dumps:
            m = evaluate(d, rule)
            cells.append(" ".join(f"{k}={v:.4f}" for k, v in m.items()))
        print(f"{label:24s} | " + " | ".join(cells))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("dump")
    p.add_argument("--dataset", type=Path, required=True)
    p.add_argument("--split", required=True)
    p.add_argument("--limit", type=int)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--out", required=True)
    s = sub.add_parser("score")
    s.add_argument("dumps", nargs="+")
    a = ap.parse_args()
    return dump(a) if a.cmd == "dump" else score(a)


if __name__ == "__main__":
    raise SystemExit(main())
