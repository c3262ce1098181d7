"""Scale evidence: synthetic chunks with 384-dim vectors into PostgreSQL (pgvector HNSW + BM25
postings) and into the in-process indexes (FAISS + our BM25), same data, same queries.

No model: vectors are drawn around 2,000 random unit centres (so neighbours exist, as in real
embeddings) and texts are 60 terms drawn from a Zipf(1.1) vocabulary of 50,000 words. Queries
are 4 mid-frequency terms (vocabulary ranks 100-20,000, as after stop-word removal) plus a vector
near a random chunk. Reports ingest rate, index build time, hybrid (BM25 depth 100 + dense depth 100
+ RRF) p50/p99 per query without embedding, and memory / on-disk size; both backends run in
this process against one local server, so the ratios are what to read on a shared machine.

Run: `.venv/bin/python bench/scale.py --n 100000` (1M: `--n 1000000`, ~1 h on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from indexing.pg_local import LocalPostgres  # noqa: E402
from indexing.pg_store import PgDocumentStore  # noqa: E402
from indexing.types import chunk_int_id  # noqa: E402
from retrieval.analyzer import Analyzer  # noqa: E402
from retrieval.bm25 import BM25Index  # noqa: E402
from retrieval.config import DenseConfig, RetrievalConfig  # noqa: E402
from retrieval.dense import DenseIndex  # noqa: E402
from retrieval.fusion import rrf  # noqa: E402
from retrieval.pg_index import PgIndex, vector_literal  # noqa: E402

DIM, VOCAB, DOC_LEN, CENTRES = 384, 50_000, 60, 2_000


class SyntheticEmbedder:
    """Only what PgIndex asks of an embedder when nothing is embedded (name and size)."""

    name, dim = "synthetic-384", DIM


def corpus(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    p /= p.sum()
    for start in range(0, n, 10_000):
        m = min(10_000, n - start)
        vecs = centres[rng.integers(0, CENTRES, m)] + 0.35 * rng.standard_normal((m, DIM)).astype(np.float32) / np.sqrt(DIM)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        terms = rng.choice(VOCAB, size=(m, DOC_LEN), p=p)
        yield start, vecs, terms


def queries(n: int, all_vecs: np.ndarray, seed: int = 1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = all_vecs[rng.integers(len(all_vecs))] + 0.3 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        out.append(([f"w{t}" for t in rng.integers(100, 20_000, 4)], q / np.linalg.norm(q)))
    return out


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "mean_ms": round(float(a.mean()), 2)}


def load_pg(store: PgDocumentStore, n: int) -> tuple[dict, np.ndarray]:
    cfg = RetrievalConfig(mode="hybrid", dense={"hnsw_m": 16, "hnsw_ef_construction": 64, "hnsw_ef_search": 100})
    pi = PgIndex(store, "scale", cfg, lambda: SyntheticEmbedder(), Analyzer(cfg.bm25.analyzer))
    keep = np.zeros((n, DIM), dtype=np.float32)
    t0 = time.perf_counter()
    with store.conn() as db:
        for start, vecs, terms in corpus(n):
            keep[start : start + len(vecs)] = vecs
            with db.transaction(), db.cursor() as cur:
                with cur.copy('COPY chunks (collection, chunk_id, int_id, doc_id, seq, granularity, start, "end", '
                              "text, content_hash, source, title, section, language, metadata, index_hash, doc_len, "
                              "embedding) FROM STDIN") as cp:
                    for j in range(len(vecs)):
                        cid = f"c{start + j}"
                        text = " ".join(f"w{t}" for t in terms[j])
                        cp.write_row(("scale", cid, chunk_int_id(cid), cid, 0, "default", 0, len(text), text, "h",
                                      "synthetic", "", "", "en", "{}", "h", DOC_LEN, vector_literal(vecs[j])))
                with cur.copy("COPY rag_postings (collection, term, int_id, tf, dl) FROM STDIN") as cp:
                    for j in range(len(vecs)):
                        iid = chunk_int_id(f"c{start + j}")
                        t, c = np.unique(terms[j], return_counts=True)
                        for term, tf in zip(t.tolist(), c.tolist(), strict=True):
                            cp.write_row(("scale", f"w{term}", iid, float(tf), float(DOC_LEN)))
        db.execute("INSERT INTO collections(name, version) VALUES ('scale', 1) ON CONFLICT DO NOTHING")
        db.execute("INSERT INTO rag_index_meta(collection, config) VALUES ('scale', %s) ON CONFLICT DO NOTHING",
                   (json.dumps(pi.expected()),))
    ingest_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    pi._ensure_hnsw()
    build_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    pi._refresh_stats(1)
    stats_s = time.perf_counter() - t2
    with store.conn() as db:
        db.execute("VACUUM ANALYZE chunks")
        db.execute("VACUUM ANALYZE rag_postings")
        sizes = {name: db.execute("SELECT pg_total_relation_size(%s)", (name,)).fetchone()[0]
                 for name in ("chunks", "rag_postings")}
        sizes["hnsw_index"] = db.execute("SELECT pg_relation_size('chunks_embedding_hnsw')").fetchone()[0]
    return {"ingest_s": round(ingest_s, 1), "ingest_chunks_per_s": round(n / ingest_s), "hnsw_build_s": round(build_s, 1),
            "bm25_stats_s": round(stats_s, 1), "bytes": sizes, "index": pi}, keep


def bench_pg(pi: PgIndex, qs: list) -> dict:
    times = {"bm25": [], "dense": [], "hybrid": []}
    for terms, qv in qs[:5]:  # warm the caches
        pi.bm25(terms, 100), pi.dense(qv, 100)
    for terms, qv in qs:
        t0 = time.perf_counter()
        b = pi.bm25(terms, 100)
        t1 = time.perf_counter()
        d = pi.dense(qv, 100)
        t2 = time.perf_counter()
        rrf({"bm25": b, "dense": d})[:10]
        t3 = time.perf_counter()
        times["bm25"].append((t1 - t0) * 1e3)
        times["dense"].append((t2 - t1) * 1e3)
        times["hybrid"].append((t3 - t0) * 1e3)
    return {k: pct(v) for k, v in times.items()}


def bench_local(n: int, vecs: np.ndarray, qs: list, kind: str) -> dict:
    import psutil

    rss0 = psutil.Process().memory_info().rss
    ids = np.array([chunk_int_id(f"c{i}") for i in range(n)], dtype=np.int64)
    t0 = time.perf_counter()
    bm = BM25Index()
    dense = DenseIndex(DIM, DenseConfig(index=kind, hnsw_m=16, hnsw_ef_construction=64, hnsw_ef_search=100))
    for start, _, terms in corpus(n):
        bm.add(ids[start : start + len(terms)].tolist(), [[f"w{t}" for t in row] for row in terms])
    bm_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    dense.add(ids, vecs)
    dense_s = time.perf_counter() - t1
    bm.search(["w100"], 10)  # builds the weight matrix
    times = {"bm25": [], "dense": [], "hybrid": []}
    for terms, qv in qs:
        t0 = time.perf_counter()
        bi, bs = bm.search(terms, 100)
        t1 = time.perf_counter()
        di, ds = dense.search(qv[None, :], 100)[0]
        t2 = time.perf_counter()
        rrf({"bm25": list(zip(bi.tolist(), bs.tolist(), strict=True)),
             "dense": list(zip(di.tolist(), ds.tolist(), strict=True))})[:10]
        t3 = time.perf_counter()
        times["bm25"].append((t1 - t0) * 1e3)
        times["dense"].append((t2 - t1) * 1e3)
        times["hybrid"].append((t3 - t0) * 1e3)
    return {"bm25_build_s": round(bm_s, 1), "dense_build_s": round(dense_s, 1),
            "rss_growth_bytes": psutil.Process().memory_info().rss - rss0,
            **{k: pct(v) for k, v in times.items()}}


def recall(pi: PgIndex, vecs: np.ndarray, qs: list, k: int = 10) -> float:
    """HNSW recall@10 of pgvector against exact inner product (first 50 queries)."""
    ids = np.array([chunk_int_id(f"c{i}") for i in range(len(vecs))])
    hits = 0
    for _, qv in qs[:50]:
        exact = set(ids[np.argsort(-(vecs @ qv))[:k]].tolist())
        hits += len(exact & {i for i, _ in pi.dense(qv, k)})
    return hits / (50 * k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "scale.json"))
    args = ap.parse_args()
    res: dict = {"n": args.n, "dim": DIM, "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0]}
    with LocalPostgres(settings={"shared_buffers": "2GB", "maintenance_work_mem": "2GB",
                                 "max_parallel_maintenance_workers": "2", "work_mem": "64MB"}) as pg:
        store = PgDocumentStore(pg.dsn, statement_timeout_ms=0)
        pg_res, vecs = load_pg(store, args.n)
        pi = pg_res.pop("index")
        qs = queries(args.queries, vecs)
        pg_res["search"] = bench_pg(pi, qs)
        pg_res["hnsw_recall_at_10"] = round(recall(pi, vecs, qs), 3)
        res["postgres"] = pg_res
        print(json.dumps(res, indent=1), flush=True)
        store.close()
    res["in_process_flat"] = bench_local(args.n, vecs, qs, "flat")
    res["in_process_hnsw"] = bench_local(args.n, vecs, qs, "hnsw")
    res["load_avg_end"] = os.getloadavg()[0]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
