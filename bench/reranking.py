"""Reranking throughput: (query, passage) pairs/s of each backend on this machine's CPU threads.

Same pairs for every backend (SciFact test queries x their hybrid-style candidates when
../shared/datasets is present, else the user guide's paragraphs), the cross-encoder is the peer
the others are compared with. Run: `.venv/bin/python bench/rerank.py [--pairs N] [--threads 2]`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

DATA = REPO.parent / "shared" / "datasets" / "scifact"


def load_pairs(n: int) -> tuple[str, list[str]]:
    """One query and `n` passages of realistic length (SciFact abstracts or the guide's paragraphs)."""
    if DATA.is_dir():
        docs = []
        with (DATA / "corpus.jsonl").open() as f:
            for line in f:
                d = json.loads(line)
                docs.append(f"{d['title']}\n{d['text']}")
                if len(docs) >= n:
                    break
        return "0-dimensional biomaterials show inductive properties.", docs
    paras = [p for f in sorted((REPO / "docs").rglob("*.md")) for p in f.read_text().split("\n\n") if len(p) > 200]
    return "How do I configure hybrid retrieval?", (paras * (n // max(len(paras), 1) + 1))[:n]


def time_backend(name: str, cfg: dict, query: str, passages: list[str], **kw) -> dict:
    from rerank import build_reranker

    t = time.perf_counter()
    try:
        r = build_reranker(cfg, **kw)
    except (FileNotFoundError, ImportError, OSError) as e:
        return {"backend": name, "error": str(e).splitlines()[0][:90]}
    load = time.perf_counter() - t
    r.score(query, passages[:4])  # warm-up (lazy kernels, prefix cache of the instruction)
    t = time.perf_counter()
    r.score(query, passages)
    dt = time.perf_counter() - t
    return {"backend": name, "model": cfg.get("model") or "(default)", "pairs": len(passages),
            "load_s": round(load, 1), "pairs_per_s": round(len(passages) / dt, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--llm-pairs", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--cross-encoder", default=str(REPO / ".rag" / "models" / "reranker"),
                    help="trained model dir (falls back to the untrained MiniLM: same compute)")
    ap.add_argument("--skip-llm", action="store_true")
    a = ap.parse_args()
    import torch

    torch.set_num_threads(a.threads)
    query, passages = load_pairs(a.pairs)
    ce_model = a.cross_encoder if (Path(a.cross_encoder) / "config.json").is_file() else "minilm"
    ce = {"type": "cross-encoder", "model": ce_model, "max_length": a.max_length, "device": "cpu"}
    rows = [
        time_backend("cross-encoder", ce, query, passages),
        time_backend("cross-enc bf16", {**ce, "bf16": True}, query, passages),
        time_backend("bi-encoder", {"type": "bi-encoder", "model": "minilm", "max_length": a.max_length},
                     query, passages),
    ]
    if not a.skip_llm:
        for name, bf16 in (("llm", False), ("llm bf16", True)):
            rows.append(time_backend(name, {"type": "llm", "model": "smollm2", "max_length": a.max_length,
                                            "bf16": bf16}, query, passages[: a.llm_pairs]))
    peer = next((r["pairs_per_s"] for r in rows if r["backend"] == "cross-encoder" and "pairs_per_s" in r), None)
    print(f"threads={torch.get_num_threads()} max_length={a.max_length}")
    print(f"{'backend':<14} {'pairs':>6} {'load s':>7} {'pairs/s':>8} {'x cross-enc':>11}  model")
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<14} skipped: {r['error']}")
            continue
        ratio = f"{r['pairs_per_s'] / peer:.2f}" if peer else "-"
        print(f"{r['backend']:<14} {r['pairs']:>6} {r['load_s']:>7} {r['pairs_per_s']:>8} {ratio:>11}  {r['model']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
