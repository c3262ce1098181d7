"""Scale evidence: synthetic chunks with 384-dim vectors into PostgreSQL (pgvector HNSW + BM25
postings) and into the in-process indexes (FAISS + our BM25), same data, same queries.

No model: vectors are drawn around 2,000 random unit centres (so neighbours exist, as in real
embeddings) and texts are 60 terms drawn from a Zipf(1.1) vocabulary of 50,000 words. Queries
are 4 mid-frequency terms (vocabulary ranks 100-20,000, as after stop-word removal) plus a vector
near a random chunk. Reports ingest rate, index build time, hybrid (BM25 depth 100 + dense depth 100
+ RRF) p50/p99 per query without embedding, and memory / on-disk size; both backends run in
this process against one local server, so the ratios are what to read on a shared machine.

The Postgres load is a bulk import: keys, foreign key and indexes are dropped, chunks (with their
vectors in pgvector's binary form) and postings go in by binary COPY built with numpy (no Python per
row), then keys and indexes are re-created and HNSW is built once. `--replica` starts a streaming
replica before the load and reports its replay lag and the same queries through it.

Run: `.venv/bin/python bench/scale.py --n 100000 [--replica]` (1M: `--n 1000000 --peers flat`).
"""

from __future__ import annotations

import argparse
import contextlib
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
from retrieval.pg_index import PgIndex  # noqa: E402

DIM, VOCAB, DOC_LEN, CENTRES, BATCH = 384, 50_000, 60, 2_000, 10_000


class SyntheticEmbedder:
    """Only what PgIndex asks of an embedder when nothing is embedded (name and size)."""

    name, dim = "synthetic-384", DIM


def corpus(n: int, seed: int = 0):
    """Batches of (start, vectors, term ids); term id t is the word `w%05d` (fixed width, so a
    chunk's text and its postings have fixed-size binary COPY rows)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CENTRES, DIM)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    p = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    p /= p.sum()
    for start in range(0, n, BATCH):
        m = min(BATCH, n - start)
        vecs = centres[rng.integers(0, CENTRES, m)] + 0.35 * rng.standard_normal((m, DIM)).astype(np.float32) / np.sqrt(DIM)
        vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        terms = rng.choice(VOCAB, size=(m, DOC_LEN), p=p)
        yield start, vecs, terms


def word(t: int) -> str:
    return f"w{t:05d}"


def cid(i: int) -> str:
    return f"c{i:07d}"


def queries(n: int, all_vecs: np.ndarray, seed: int = 1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        q = all_vecs[rng.integers(len(all_vecs))] + 0.3 * rng.standard_normal(DIM).astype(np.float32) / np.sqrt(DIM)
        out.append(([word(t) for t in rng.integers(100, 20_000, 4)], q / np.linalg.norm(q)))
    return out


def pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs)
    return {"p50_ms": round(float(np.percentile(a, 50)), 2), "p99_ms": round(float(np.percentile(a, 99)), 2),
            "mean_ms": round(float(a.mean()), 2)}


_SIG = b"PGCOPY\n\xff\r\n\x00" + b"\x00" * 8  # binary COPY signature, flags, no header extension
_TRAILER = b"\xff\xff"
WORDS = [word(t) for t in range(VOCAB)]
_WORD_BYTES = np.array([w.encode() for w in WORDS], dtype="S6")
_TEXT_LEN = DOC_LEN * 7 - 1
# (column, constant or None, numpy dtype of the value) in `chunks` column order for binary COPY
_CHUNK_COLS = [("collection", b"scale"), ("chunk_id", None, "S8"), ("int_id", None, ">i8"), ("doc_id", None, "S8"),
               ("seq", 0), ("granularity", b"default"), ("start", 0), ('"end"', _TEXT_LEN),
               ("text", None, f"S{_TEXT_LEN}"), ("content_hash", b"h"), ("source", b"synthetic"), ("title", b""),
               ("section", b""), ("language", b"en"), ("metadata", b"\x01{}"), ("index_hash", b"h"),
               ("doc_len", DOC_LEN), ("embedding", None, (">f4", DIM + 1))]


def _record_dtype(cols: list[tuple]) -> np.dtype:
    """One binary COPY tuple as a numpy record: field count, then (length, value) per column."""
    fields: list[tuple] = [("nfields", ">i2")]
    for i, col in enumerate(cols):
        if col[1] is None:
            dt = np.dtype(col[2]) if not isinstance(col[2], tuple) else np.dtype((col[2][0], (col[2][1],)))
        elif isinstance(col[1], bytes):
            dt = np.dtype(f"S{len(col[1])}") if col[1] else None
        else:
            dt = np.dtype(">i4")
        fields.append((f"l{i}", ">i4"))
        if dt is not None:
            fields.append((f"v{i}", dt))
    return np.dtype(fields)


_CHUNK_DT = _record_dtype(_CHUNK_COLS)
_POST_COLS = [("collection", b"scale"), ("term", None, "S6"), ("int_id", None, ">i8"), ("tf", None, ">f4"),
              ("dl", None, ">f4")]
_POST_DT = _record_dtype(_POST_COLS)


def _records(cols: list[tuple], dt: np.dtype, m: int, values: dict[str, np.ndarray]) -> bytes:
    rec = np.zeros(m, dtype=dt)
    rec["nfields"] = len(cols)
    for i, col in enumerate(cols):
        if col[1] is None:
            rec[f"v{i}"] = values[col[0]]
            rec[f"l{i}"] = dt[f"v{i}"].itemsize
        elif isinstance(col[1], bytes):
            rec[f"l{i}"] = len(col[1])
            if col[1]:
                rec[f"v{i}"] = col[1]
        else:
            rec[f"l{i}"] = 4
            rec[f"v{i}"] = col[1]
    return rec.tobytes()


def chunk_copy(start: int, vecs: np.ndarray, terms: np.ndarray, int_ids: np.ndarray) -> bytes:
    """Binary COPY rows of `chunks` for one batch, built with numpy (no per-row Python)."""
    m = len(vecs)
    ids = np.array([cid(start + j).encode() for j in range(m)], dtype="S8")
    words = _WORD_BYTES[terms].view(np.uint8).reshape(m, DOC_LEN, 6)
    text = np.concatenate([words, np.full((m, DOC_LEN, 1), ord(" "), np.uint8)], axis=2).reshape(m, -1)
    emb = np.empty((m, DIM + 1), dtype=">f4")
    emb[:, 1:] = vecs
    head = np.zeros((m, 2), dtype=">i2")  # pgvector binary: int16 dim, int16 unused, then the floats
    head[:, 0] = DIM
    emb[:, 0] = head.view(">f4")[:, 0]
    return _records(_CHUNK_COLS, _CHUNK_DT, m, {
        "chunk_id": ids, "doc_id": ids, "int_id": int_ids,
        "text": np.ascontiguousarray(text[:, :_TEXT_LEN]).view(f"S{_TEXT_LEN}").ravel(), "embedding": emb})


def posting_copy(terms: np.ndarray, int_ids: np.ndarray) -> bytes:
    """Binary COPY rows of `rag_postings` (term, chunk, tf, dl) for one batch, vectorised."""
    srt = np.sort(terms, axis=1)
    flat, row = srt.ravel(), np.repeat(np.arange(len(srt)), srt.shape[1])
    first = np.ones(len(flat), dtype=bool)
    first[1:] = (flat[1:] != flat[:-1]) | (row[1:] != row[:-1])
    idx = np.flatnonzero(first)
    tf = np.diff(np.append(idx, len(flat))).astype(np.float32)
    return _records(_POST_COLS, _POST_DT, len(idx), {
        "term": _WORD_BYTES[flat[idx]], "int_id": int_ids[row[idx]], "tf": tf,
        "dl": np.full(len(idx), DOC_LEN, dtype=np.float32)})


def _constraints(db, tables: tuple[str, ...]) -> list[tuple[str, str, str]]:
    """(table, name, SQL to re-create) of the keys, foreign keys and indexes of these tables."""
    out = []
    for t, name, kind, sql in db.execute(
            "SELECT conrelid::regclass::text, conname, contype, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conrelid::regclass::text = ANY(%s) AND contype IN ('p', 'u', 'f') "
            "ORDER BY contype = 'f', contype", (list(tables),)).fetchall():
        out.append((t, name, f'ALTER TABLE {t} ADD CONSTRAINT "{name}" {sql}', kind))
    for t, name, sql in db.execute(
            "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE tablename = ANY(%s) AND indexname NOT IN "
            "(SELECT conname FROM pg_constraint)", (list(tables),)).fetchall():
        out.append((t, name, sql, "i"))
    return out


def load_pg(store: PgDocumentStore, n: int, replica: LocalPostgres | None = None) -> tuple[dict, np.ndarray]:
    """Bulk load: drop the keys and indexes, binary COPY chunks (with vectors) and postings, then
    re-create keys, foreign key and indexes, then HNSW: what a bulk import into an empty store does."""
    cfg = RetrievalConfig(mode="hybrid", dense={"hnsw_m": 16, "hnsw_ef_construction": 64, "hnsw_ef_search": 100})
    pi = PgIndex(store, "scale", cfg, lambda: SyntheticEmbedder(), Analyzer(cfg.bm25.analyzer))
    keep = np.zeros((n, DIM), dtype=np.float32)
    with store.conn() as db:
        cons = _constraints(db, ("chunks", "rag_postings"))
        for t, name, _, kind in sorted(cons, key=lambda c: c[3] != "f"):  # foreign keys first
            db.execute(f'DROP INDEX "{name}"' if kind == "i" else f'ALTER TABLE {t} DROP CONSTRAINT "{name}"')
    t0 = time.perf_counter()
    with store.conn() as db:
        for start, vecs, terms in corpus(n):
            keep[start : start + len(vecs)] = vecs
            int_ids = np.array([chunk_int_id(cid(start + j)) for j in range(len(vecs))], dtype=np.int64)
            with db.transaction(), db.cursor() as cur:
                cols = ", ".join(c[0] for c in _CHUNK_COLS)
                with cur.copy(f"COPY chunks ({cols}) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.write(_SIG + chunk_copy(start, vecs, terms, int_ids) + _TRAILER)
                with cur.copy("COPY rag_postings (collection, term, int_id, tf, dl) FROM STDIN (FORMAT BINARY)") as cp:
                    cp.write(_SIG + posting_copy(terms, int_ids) + _TRAILER)
        db.execute("INSERT INTO collections(name, version) VALUES ('scale', 1) ON CONFLICT DO NOTHING")
        db.execute("INSERT INTO rag_index_meta(collection, config) VALUES ('scale', %s) ON CONFLICT DO NOTHING",
                   (json.dumps(pi.expected()),))
    ingest_s = time.perf_counter() - t0
    lag: dict[str, float] = {}
    if replica is not None:  # how far streaming replication trails a bulk COPY (not counted in ingest_s)
        r = replica.replay_lag(timeout=1800)
        lag = {"replica_replay_after_copy_s": round(r["seconds"], 1), "replica_bytes_behind_after_copy": r["bytes_behind"]}
    t1 = time.perf_counter()
    with store.conn() as db:
        for _, _, sql, _ in sorted(cons, key=lambda c: c[3] == "f"):  # foreign keys last
            db.execute(sql)
    keys_s = time.perf_counter() - t1
    t1 = time.perf_counter()
    pi._ensure_hnsw()
    build_s = time.perf_counter() - t1
    t2 = time.perf_counter()
    pi._refresh_stats(1)
    stats_s = time.perf_counter() - t2
    if replica is not None:  # and an index build (HNSW pages are WAL-logged as whole pages)
        r = replica.replay_lag(timeout=1800)
        lag |= {"replica_replay_after_build_s": round(r["seconds"], 1),
                "replica_bytes_behind_after_build": r["bytes_behind"]}
    with store.conn() as db:
        db.execute("VACUUM ANALYZE chunks")
        db.execute("VACUUM ANALYZE rag_postings")
        sizes = {name: db.execute("SELECT pg_total_relation_size(%s)", (name,)).fetchone()[0]
                 for name in ("chunks", "rag_postings")}
        sizes["hnsw_index"] = db.execute("SELECT pg_relation_size('chunks_embedding_hnsw')").fetchone()[0]
    return {"ingest_s": round(ingest_s, 1), "ingest_chunks_per_s": round(n / ingest_s),
            "keys_and_indexes_s": round(keys_s, 1), "hnsw_build_s": round(build_s, 1),
            "bm25_stats_s": round(stats_s, 1), **lag, "bytes": sizes, "index": pi}, keep


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
    ids = np.array([chunk_int_id(cid(i)) for i in range(n)], dtype=np.int64)
    t0 = time.perf_counter()
    bm = BM25Index()
    dense = DenseIndex(DIM, DenseConfig(index=kind, hnsw_m=16, hnsw_ef_construction=64, hnsw_ef_search=100))
    for start, _, terms in corpus(n):
        bm.add(ids[start : start + len(terms)].tolist(), [[WORDS[t] for t in row] for row in terms])
    bm_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    dense.add(ids, vecs)
    dense_s = time.perf_counter() - t1
    bm.search([word(100)], 10)  # builds the weight matrix
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
    ids = np.array([chunk_int_id(cid(i)) for i in range(len(vecs))])
    hits = 0
    for _, qv in qs[:50]:
        exact = set(ids[np.argsort(-(vecs @ qv))[:k]].tolist())
        hits += len(exact & {i for i, _ in pi.dense(qv, k)})
    return hits / (50 * k)


def server_memory(pg: LocalPostgres) -> int:
    """Proportional set size of the postmaster and its children (shared buffers counted once)."""
    import psutil

    root = psutil.Process(pg.proc.pid)
    total = 0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error, AttributeError):  # a worker that exited meanwhile
            total += p.memory_full_info().pss
    return total


def run_postgres(n: int, n_queries: int, replica: bool, res: dict) -> tuple[np.ndarray, list]:
    """Load, index and query one local server (and its replica); fills res["postgres"] / res["replica"]."""
    settings = {"shared_buffers": "2GB", "maintenance_work_mem": "3GB", "max_parallel_maintenance_workers": "2",
                "work_mem": "64MB", "max_wal_size": "4GB", "checkpoint_timeout": "30min"}
    with LocalPostgres(settings=settings) as pg:
        rep = pg.start_replica() if replica else None
        try:
            store = PgDocumentStore(pg.dsn, statement_timeout_ms=0)
            pg_res, vecs = load_pg(store, n, rep)
            pi = pg_res.pop("index")
            qs = queries(n_queries, vecs)
            pg_res["search"] = bench_pg(pi, qs)
            pg_res["hnsw_recall_at_10"] = round(recall(pi, vecs, qs), 3)
            pg_res["server_pss_bytes"] = server_memory(pg)
            res["postgres"] = pg_res
            print(json.dumps(res, indent=1), flush=True)
            if rep is not None:
                lag = rep.replay_lag(timeout=1800)
                rstore = PgDocumentStore(pg.dsn, statement_timeout_ms=0, read_dsn=rep.dsn)
                rpi = PgIndex(rstore, "scale", pi.cfg, lambda: SyntheticEmbedder(), pi.analyzer)
                rpi.stats = pi.stats
                res["replica"] = {"replay_after_queries_s": round(lag["seconds"], 1),
                                  "search": bench_pg(rpi, qs), "server_pss_bytes": server_memory(rep)}
                rstore.close()
                print(json.dumps(res["replica"], indent=1), flush=True)
            store.close()
        finally:
            if rep is not None:
                rep.cleanup()
    return vecs, qs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--peers", default="flat,hnsw",
                    help="in-process peers to run (flat, hnsw; empty for none)")
    ap.add_argument("--replica", action="store_true",
                    help="also start a streaming read replica (before the load), measure its replay lag after "
                         "the bulk load and the same queries through it (storage.read_dsn)")
    ap.add_argument("--no-postgres", action="store_true", help="only the in-process peers (same data and queries)")
    ap.add_argument("--out", default=str(REPO / "bench" / "out" / "scale.json"))
    args = ap.parse_args()
    t_start = time.perf_counter()
    res: dict = {"n": args.n, "dim": DIM, "cpus": os.cpu_count(), "load_avg_start": os.getloadavg()[0]}
    if args.no_postgres:
        vecs = np.concatenate([v for _, v, _ in corpus(args.n)])
        qs = queries(args.queries, vecs)
    else:
        vecs, qs = run_postgres(args.n, args.queries, args.replica, res)
        res["postgres_total_s"] = round(time.perf_counter() - t_start, 1)
    for kind in [p for p in args.peers.split(",") if p]:
        res[f"in_process_{kind}"] = bench_local(args.n, vecs, qs, kind)
    res["load_avg_end"] = os.getloadavg()[0]
    res["wall_s"] = round(time.perf_counter() - t_start, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
