"""Hybrid retrieval latency (query embedding included) at 10k and 100k chunks.

The corpus is synthesised by sampling SciFact passages (2-4 consecutive sentences of a random
abstract, with its title). Embedding 100k chunks on a laptop CPU takes hours and is not what is
measured here, so each chunk's vector is its source abstract's real MiniLM vector plus small noise,
written into the embedding cache under the chunk's content hash: `Retriever.sync()` then builds
the real indexes without running the model. Queries are real SciFact queries, embedded by the
real model at search time. Reports p50/p99 of `Retriever.search(..., mode="hybrid")` and the
median of each stage. Run: `.venv/bin/python bench/retrieval_latency.py [--quick] [--sizes 10000 100000]`.
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

from bench._common import DATASETS  # noqa: E402  (sets the offline environment)
from indexing.store import DocumentStore  # noqa: E402
from indexing.types import Chunk, Document, content_hash  # noqa: E402
from retrieval.config import RetrievalConfig  # noqa: E402
from retrieval.embeddings import CachedEmbedder, make_embedder  # noqa: E402
from retrieval.retriever import Retriever  # noqa: E402
from retrieval.small_to_big import sentence_spans  # noqa: E402
from retrieval.text import indexed_text  # noqa: E402

DATA = DATASETS / "scifact"
OUT = REPO / "bench" / "out" / "retrieval_latency"


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def doc_vectors(emb: CachedEmbedder, docs: list[dict]) -> np.ndarray:
    """Real MiniLM vectors of the SciFact abstracts (from the cache after the first run)."""
    texts = [indexed_text(Chunk(chunk_id=d["_id"], doc_id=d["_id"], text=d["text"], start=0, end=0,
                                title=d["title"])) for d in docs]
    return emb.encode_documents(texts)


def build(n: int, docs: list[dict], vecs: np.ndarray, emb: CachedEmbedder, root: Path) -> DocumentStore:
    """A store of n sampled passages, their vectors planted in the embedding cache."""
    root.mkdir(parents=True, exist_ok=True)
    store = DocumentStore(root / "store.sqlite")
    if store.count_chunks("default") == n:
        return store
    rng = np.random.default_rng(n)
    spans = [sentence_spans(d["text"]) or [(0, len(d["text"]))] for d in docs]
    hashes, planted = [], []
    t = time.perf_counter()
    for i in range(n):
        j = int(rng.integers(len(docs)))
        d, sp = docs[j], spans[j]
        a = int(rng.integers(len(sp)))
        b = min(len(sp), a + int(rng.integers(2, 5)))
        text = d["text"][sp[a][0] : sp[b - 1][1]].strip() or d["text"]
        doc = Document(doc_id=f"s{i}", text=text, source=f"scifact/{d['_id']}", title=d["title"])
        ch = Chunk(chunk_id=f"s{i}#0", doc_id=f"s{i}", text=text, start=0, end=len(text), title=d["title"],
                   source=doc.source, metadata={"year": 1990 + i % 30})
        store.upsert(doc, [ch])
        v = vecs[j] + rng.normal(scale=0.02, size=vecs.shape[1]).astype(np.float32)
        hashes.append(content_hash(indexed_text(ch)))
        planted.append(v / np.linalg.norm(v))
    emb.cache.put(emb.name, hashes, np.stack(planted))
    print(f"  built store of {n} chunks in {time.perf_counter() - t:.1f} s", flush=True)
    return store


def measure(r: Retriever, queries: list[str], k: int = 10) -> dict:
    r.search(queries[0], k=k)  # warm-up (first model call, lazy weights)
    totals, cpu, stages = [], [], {}
    for q in queries:
        c0 = time.thread_time()
        res = r.search(q, k=k, mode="hybrid")
        cpu.append((time.thread_time() - c0) * 1000)
        totals.append(res.timings_ms["total"])
        for s, ms in res.timings_ms.items():
            stages.setdefault(s, []).append(ms)
    return {"p50_ms": round(float(np.percentile(totals, 50)), 2), "p99_ms": round(float(np.percentile(totals, 99)), 2),
            "mean_ms": round(float(np.mean(totals)), 2),
            # CPU time of the searching thread: query embedding and FAISS run single-threaded for one
            # query, so this is what the wall time is on an otherwise idle core.
            "cpu_p50_ms": round(float(np.percentile(cpu, 50)), 2), "cpu_p99_ms": round(float(np.percentile(cpu, 99)), 2),
            "stage_p50_ms": {s: round(float(np.median(v)), 2) for s, v in stages.items() if s != "total"}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="10k chunks and 50 queries only")
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--index", default="flat", choices=["flat", "hnsw", "ivf_flat"], help="dense index type")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    if not DATA.is_dir():
        print(f"skipped: {DATA} is absent")
        return 0
    sizes, nq = ([10_000], 50) if a.quick else (a.sizes, a.queries)
    import torch

    docs = _jsonl(DATA / "corpus.jsonl")
    queries = [q["text"] for q in _jsonl(DATA / "queries.jsonl")][:nq]
    OUT.mkdir(parents=True, exist_ok=True)
    cfg = RetrievalConfig(mode="hybrid", dense={"index": a.index})
    emb = make_embedder(cfg.embedder, OUT / "embeddings.sqlite")
    assert isinstance(emb, CachedEmbedder)
    t = time.perf_counter()
    vecs = doc_vectors(emb, docs)
    print(f"SciFact abstract vectors ready in {time.perf_counter() - t:.1f} s (torch threads: "
          f"{torch.get_num_threads()}, cpus: {os.cpu_count()})", flush=True)
    results = {}
    for n in sizes:
        print(f"{n} chunks:", flush=True)
        store = build(n, docs, vecs, emb, OUT / f"n{n}")
        r = Retriever.from_config(cfg, store, OUT / f"n{n}" / f"indexes-{a.index}", embedder=emb)
        t = time.perf_counter()
        r.sync()
        print(f"  indexes synced in {time.perf_counter() - t:.1f} s (embedder misses so far: {emb.misses})")
        m = measure(r, queries)
        m["filtered"] = measure_filtered(r, queries)
        results[n] = m
        print(f"  hybrid k=10: p50 {m['p50_ms']} ms  p99 {m['p99_ms']} ms  stages(p50) {m['stage_p50_ms']}")
        print(f"  CPU time of the search thread: p50 {m['cpu_p50_ms']} ms  p99 {m['cpu_p99_ms']} ms "
              f"(load average now {os.getloadavg()[0]:.1f})")
        print(f"  with filter year>=2015 (~50% kept): p50 {m['filtered']['p50_ms']} ms")
        store.close()
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


def measure_filtered(r: Retriever, queries: list[str]) -> dict:
    totals = [r.search(q, k=10, filters=["year>=2015"]).timings_ms["total"] for q in queries]
    return {"p50_ms": round(float(np.percentile(totals, 50)), 2), "p99_ms": round(float(np.percentile(totals, 99)), 2)}


if __name__ == "__main__":
    raise SystemExit(main())
