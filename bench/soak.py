"""Soak: N concurrent clients against a real `rag serve` process for a bounded time.

Each client loops over a random mix of ask (JSON), ask (SSE stream, sometimes dropped after the
first event: a client disconnect), search, ingest (JSON document) and delete (of a document this
run ingested). At the end it reports requests served, errors by status, latency p50/p99 per kind,
server RSS growth after the warm-up, KV blocks still held once idle (leaked: must be 0) and
documents lost (ingest jobs reported done whose document is gone without a delete: must be 0).

    .venv/bin/python bench/soak.py --clients 64 --seconds 90 --warmup 20 --out /tmp/soak.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import httpx
import psutil

REPO = Path(__file__).resolve().parents[1]
QUESTIONS = ["What is the capital city of Zarnovia?", "How long does the XR-200 drone fly?",
             "What does a leather couch cost?", "Which city has glass bridges?", "How long does the XR-300 fly?"]
CORPUS = {
    "zarnovia.md": "# Zarnovia\n\nThe capital city of Zarnovia is Velmora, a harbour town of 80,000 people.\n",
    "quintara.md": "# Quintara\n\nQuintara is a mountain republic. Its capital Ostrel is famous for glass bridges.\n",
    "xr200.md": "# XR-200\n\nThe XR-200 drone has a flight time of 42 minutes and charges in 90 minutes.\n",
    "xr300.md": "# XR-300\n\nThe XR-300 drone has a flight time of 55 minutes and a foldable frame.\n",
    "couch.md": "# Living room\n\nA leather couch costs between 900 and 1,400 euros in our store.\n",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stats:
    def __init__(self) -> None:
        self.lat: dict[str, list[float]] = defaultdict(list)
        self.status: Counter = Counter()
        self.served: Counter = Counter()
        self.disconnects = 0
        self.done_docs: set[str] = set()
        self.deleted: set[str] = set()
        self.pending_jobs: dict[str, str] = {}

    def record(self, kind: str, status: int | str, seconds: float) -> None:
        self.status[f"{kind}:{status}"] += 1
        if isinstance(status, int) and status < 400:
            self.served[kind] += 1
            self.lat[kind].append(seconds)


async def one(client: httpx.AsyncClient, rnd: random.Random, st: Stats, run_id: str, seq: list[int]) -> None:
    kind = rnd.choices(["ask", "stream", "search", "ingest", "delete"], weights=[3, 3, 4, 2, 1])[0]
    t0 = time.perf_counter()
    try:
        if kind == "ask":
            r = await client.post("/v1/ask", json={"question": rnd.choice(QUESTIONS), "options": {"passages": False}})
            st.record(kind, r.status_code, time.perf_counter() - t0)
        elif kind == "stream":
            drop = rnd.random() < 0.4
            async with client.stream("POST", "/v1/ask", json={"question": rnd.choice(QUESTIONS), "stream": True}) as r:
                status = r.status_code
                async for line in r.aiter_lines():
                    if drop and line.startswith("data:"):
                        st.disconnects += 1
                        break  # leaving the block closes the connection mid-stream
            st.record(kind, status, time.perf_counter() - t0)
        elif kind == "search":
            r = await client.post("/v1/search", json={"query": rnd.choice(QUESTIONS), "top_k": 5})
            st.record(kind, r.status_code, time.perf_counter() - t0)
        elif kind == "ingest":
            seq[0] += 1
            doc_id = f"soak-{run_id}-{seq[0]}"
            r = await client.post("/v1/documents", json={"doc_id": doc_id, "title": f"Soak {seq[0]}",
                                                         "text": f"Soak note {seq[0]}: the lighthouse at pier "
                                                                 f"{seq[0]} is painted {rnd.choice(['red', 'blue'])}."})
            st.record(kind, r.status_code, time.perf_counter() - t0)
            if r.status_code == 202:
                st.pending_jobs[r.json()["job_id"]] = doc_id
        else:
            done = sorted(st.done_docs - st.deleted)
            if not done:
                return
            doc_id = rnd.choice(done)
            st.deleted.add(doc_id)
            r = await client.delete(f"/v1/documents/{doc_id}")
            st.record(kind, r.status_code, time.perf_counter() - t0)
    except httpx.HTTPError as e:
        st.record(kind, type(e).__name__, time.perf_counter() - t0)


async def poll_jobs(client: httpx.AsyncClient, st: Stats, stop: asyncio.Event) -> None:
    while not stop.is_set() or st.pending_jobs:
        for job_id, doc_id in list(st.pending_jobs.items()):
            j = (await client.get(f"/v1/jobs/{job_id}")).json()
            if j.get("status") == "done":
                st.done_docs.add(doc_id)
                del st.pending_jobs[job_id]
            elif j.get("status") == "failed":
                st.status[f"job_failed:{j.get('error')}"] += 1
                del st.pending_jobs[job_id]
        await asyncio.sleep(0.5)


async def soak(base: str, pid: int, clients: int, seconds: float, warmup: float, seed: int) -> dict:
    st, run_id, seq = Stats(), f"{seed}", [0]
    proc = psutil.Process(pid)
    rss: dict[str, float] = {"start": proc.memory_info().rss / 2**20}
    limits = httpx.Limits(max_connections=clients + 8, max_keepalive_connections=clients + 8)
    async with httpx.AsyncClient(base_url=base, timeout=httpx.Timeout(300.0), limits=limits) as client:
        stop = asyncio.Event()
        t_end = time.monotonic() + seconds

        async def worker(i: int) -> None:
            rnd = random.Random(seed * 1000 + i)
            while time.monotonic() < t_end:
                await one(client, rnd, st, run_id, seq)

        async def sample_rss() -> None:
            await asyncio.sleep(warmup)
            rss["after_warmup"] = proc.memory_info().rss / 2**20
            peak = rss["after_warmup"]
            while time.monotonic() < t_end:
                peak = max(peak, proc.memory_info().rss / 2**20)
                await asyncio.sleep(1.0)
            rss["peak_after_warmup"] = peak

        poller = asyncio.create_task(poll_jobs(client, st, stop))
        await asyncio.gather(*(worker(i) for i in range(clients)), sample_rss())
        stop.set()
        await asyncio.wait_for(poller, 300)
        # idle: every request finished, so no KV block may still be in use
        cache = {}
        for _ in range(100):
            cache = (await client.get("/v1/cache")).json()
            if cache.get("kv_blocks_used") == 0 and cache.get("running") == 0:
                break
            await asyncio.sleep(0.2)
        rss["end"] = proc.memory_info().rss / 2**20
        present = set()
        offset = 0
        while True:
            page = (await client.get("/v1/documents", params={"limit": 1000, "offset": offset})).json()
            present |= {d["doc_id"] for d in page["documents"]}
            offset += 1000
            if offset >= page["total"]:
                break
    expected = st.done_docs - st.deleted
    wrongly_present = {d for d in st.deleted if d in present}
    all_lat = [x for v in st.lat.values() for x in v]

    def pct(xs: list[float], q: float) -> float | None:
        return round(statistics.quantiles(xs, n=100)[q - 1] * 1000, 1) if len(xs) >= 2 else None

    growth = (rss["end"] - rss["after_warmup"]) / rss["after_warmup"]
    return {
        "clients": clients, "seconds": seconds, "warmup_s": warmup,
        "requests_served": sum(st.served.values()), "served_by_kind": dict(st.served),
        "responses_by_status": dict(sorted(st.status.items())), "stream_disconnects": st.disconnects,
        "latency_ms": {"all": {"p50": pct(all_lat, 50), "p99": pct(all_lat, 99)},
                       **{k: {"p50": pct(v, 50), "p99": pct(v, 99)} for k, v in sorted(st.lat.items())}},
        "rss_mib": {k: round(v, 1) for k, v in rss.items()}, "rss_growth_after_warmup": round(growth, 4),
        "kv_blocks_leaked": cache.get("kv_blocks_used"), "engine_running_after": cache.get("running"),
        "documents_ingested": len(st.done_docs), "documents_deleted": len(st.deleted),
        "documents_lost": len(expected - present), "deleted_but_present": len(wrongly_present),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=90)
    ap.add_argument("--warmup", type=float, default=20)
    ap.add_argument("--max-tokens", type=int, default=16, help="generation budget per answer")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="soak-"))
    docs = tmp / "docs"
    docs.mkdir()
    for name, text in CORPUS.items():
        (docs / name).write_text(text, encoding="utf-8")
    common = ["--set", f"storage.path={tmp / 'rag'}", "--set", f"generator.sampling.max_tokens={args.max_tokens}",
              "--set", "generator.engine.max_model_len=1024", "--set", "answer.context_k=3"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-m", "rag", "index", str(docs), "--no-progress", *common], check=True,
                   env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    port = free_port()
    log = (tmp / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "rag", "serve", "--port", str(port), *common,
                               "--set", f"server.max_concurrent={args.clients}",
                               "--set", f"server.max_waiting={args.clients}"],
                              env=env, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(1200):
            try:
                if httpx.get(base + "/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None, f"server exited; see {tmp / 'server.log'}"
            time.sleep(0.25)
        report = asyncio.run(soak(base, server.pid, args.clients, args.seconds, args.warmup, args.seed))
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
    report["command"] = "bench/soak.py " + " ".join(sys.argv[1:])
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
