"""Load on the REST server over loopback: N concurrent streaming /v1/ask clients for a bounded time.

Runs the same workload with the engine's prefix cache on and off (one server each, in this
process) and prints requests/s, latency p50/p95/p99 and time to first token, plus the ratios.

    python bench/server_load.py --clients 8 --seconds 60 [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import uvicorn  # noqa: E402

from rag.app import build_ingestor  # noqa: E402
from rag.config import load_config  # noqa: E402
from rag.pipeline import Pipeline  # noqa: E402
from rag.server.app import create_app  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "docs" / "guide"
QUESTIONS = [
    "How does the engine reuse the shared system prompt?", "Which file formats can be indexed?",
    "What is Reciprocal Rank Fusion?", "How are Chinese queries handled by BM25?",
    "What does small-to-big retrieval return?", "Where is the data stored?",
    "How do I rebuild the indexes?", "Does it need a GPU?",
]


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def start(app) -> tuple[uvicorn.Server, threading.Thread, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    base = f"http://127.0.0.1:{port}"
    while True:
        try:
            if httpx.get(base + "/ready", timeout=2).status_code == 200:
                return srv, th, base
        except httpx.HTTPError:
            pass
        time.sleep(0.2)


async def client(base: str, deadline: float, max_tokens: int, i: int, out: list[dict]) -> None:
    async with httpx.AsyncClient(timeout=600) as c:
        n = i
        while time.perf_counter() < deadline:
            q = QUESTIONS[n % len(QUESTIONS)]
            n += 1
            t0 = time.perf_counter()
            ttft = None
            async with c.stream("POST", base + "/v1/ask", json={"question": q, "stream": True,
                                                                "options": {"max_tokens": max_tokens}}) as r:
                async for line in r.aiter_lines():
                    if ttft is None and line.startswith("event: delta"):
                        ttft = time.perf_counter() - t0
            out.append({"latency": time.perf_counter() - t0, "ttft": ttft or float("nan"), "status": r.status_code})


def run_one(prefix_caching: bool, clients: int, seconds: float, max_tokens: int, storage: str) -> dict:
    cfg = load_config(None, [f"storage.path={storage}",
                             f"generator.engine.enable_prefix_caching={str(prefix_caching).lower()}"])
    pipe = Pipeline.from_config(cfg)
    build_ingestor(cfg, pipe.store).ingest([str(CORPUS)], progress=False)
    srv, th, base = start(create_app(cfg, pipeline=pipe, load_in_background=False))
    try:
        asyncio.run(client(base, time.perf_counter() + 5, 4, 0, []))  # warm-up, not measured
        out: list[dict] = []
        t0 = time.perf_counter()
        deadline = t0 + seconds

        async def all_clients():
            await asyncio.gather(*(client(base, deadline, max_tokens, i, out) for i in range(clients)))

        asyncio.run(all_clients())
        wall = time.perf_counter() - t0
        stats = httpx.get(base + "/v1/cache").json()
    finally:
        srv.should_exit = True
        th.join(timeout=30)
        pipe.close()
    ok = [r for r in out if r["status"] == 200]
    lat = [r["latency"] * 1000 for r in ok]
    ttft = [r["ttft"] * 1000 for r in ok if r["ttft"] == r["ttft"]]
    return {"prefix_caching": prefix_caching, "requests": len(ok), "errors": len(out) - len(ok),
            "rps": len(ok) / wall, "p50_ms": pct(lat, 50), "p95_ms": pct(lat, 95), "p99_ms": pct(lat, 99),
            "ttft_p50_ms": pct(ttft, 50), "ttft_p95_ms": pct(ttft, 95),
            "ttft_mean_ms": statistics.fmean(ttft) if ttft else float("nan"),
            "prefix_cache_hit_rate": stats.get("prefix_cache_hit_rate")}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for on in (True, False):
            rows.append(run_one(on, args.clients, args.seconds, args.max_tokens, f"{tmp}/{'on' if on else 'off'}"))
    cols = ["prefix_caching", "requests", "errors", "rps", "p50_ms", "p95_ms", "p99_ms", "ttft_p50_ms",
            "ttft_p95_ms", "prefix_cache_hit_rate"]
    print(" | ".join(cols))
    for r in rows:
        print(" | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    on, off = rows
    ratios = {"rps_ratio_cache_on_vs_off": on["rps"] / off["rps"] if off["rps"] else float("nan"),
              "ttft_p50_ratio_off_vs_on": off["ttft_p50_ms"] / on["ttft_p50_ms"] if on["ttft_p50_ms"] else float("nan")}
    print(json.dumps(ratios))
    if args.json:
        Path(args.json).write_text(json.dumps({"clients": args.clients, "seconds": args.seconds, "rows": rows,
                                               **ratios}, indent=2))


if __name__ == "__main__":
    main()
