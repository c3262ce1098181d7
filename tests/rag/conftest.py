"""A small real corpus and one pipeline (real embedder, real engine) shared by the rag tests."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from tests.readiness import wait_http

DOCS = {
    "geo/zarnovia.md": "---\ntitle: Zarnovia\ndate: 2021-05-04\n---\n# Zarnovia\n\n"
    "Zarnovia is a small island nation. The capital city of Zarnovia is Velmora. "
    "Velmora has a population of about 80,000 people and a busy harbour.\n",
    "geo/quintara.md": "---\ntitle: Quintara\ndate: 2019-02-11\n---\n# Quintara\n\n"
    "Quintara is a mountain republic. The capital city of Quintara is Ostrel, "
    "famous for its glass bridges.\n",
    "products/xr200.md": "---\ntitle: XR-200 manual\ndate: 2022-09-01\n---\n# XR-200\n\n"
    "The XR-200 drone has a flight time of 42 minutes and charges in 90 minutes.\n",
    "products/xr300.md": "---\ntitle: XR-300 manual\ndate: 2023-03-15\n---\n# XR-300\n\n"
    "The XR-300 drone has a flight time of 55 minutes and a foldable frame.\n",
    "furniture/couch.md": "---\ntitle: Living room\ndate: 2020-01-01\n---\n# Living room\n\n"
    "A leather couch costs between 900 and 1,400 euros in our store.\n",
    "furniture/table.md": "---\ntitle: Dining\ndate: 2020-06-01\n---\n# Dining\n\n"
    "Oak dining tables are sold with six chairs.\n",
}


@pytest.fixture(scope="session")
def corpus_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("corpus")
    for rel, text in DOCS.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text, encoding="utf-8")
    return root


@pytest.fixture(scope="session")
def pipeline(corpus_dir, tmp_path_factory):
    from rag.app import build_ingestor
    from rag.config import load_config
    from rag.pipeline import Pipeline

    storage = tmp_path_factory.mktemp("storage")
    # an explicit model (not `auto`): calibration entries the tests write are keyed by its name
    cfg = load_config(None, [f"storage.path={storage}", "generator.engine.model=smollm2",
                             "generator.sampling.max_tokens=40",
                             "answer.context_k=3", "generator.engine.max_model_len=1024",
                             "generator.engine.kv_cache_memory=0.5",
                             # float32 float weights: greedy output and signals the same on every CPU
                             # (bf16 GEMMs round differently on AMX and AVX512-BF16 machines, and
                             # cached vs recomputed prefixes differ in bf16; GGUF blocks round
                             # activations to 8 bits with batch-size-dependent sums, and switch to
                             # bf16 for long prompts on bf16 CPUs only). The block path has its own
                             # tests in tests/inference/test_engine_gguf_blocks.py.
                             "generator.engine.dtype=float32", "generator.engine.quantization=none",
                             # no passage KV cache (whatever the default): reused K/V would make an answer
                             # depend on which tests asked before it; tests/rag/test_passage_cache.py turns it on
                             "generator.engine.passage_cache.enabled=false"])
    pipe = Pipeline.from_config(cfg)
    report = build_ingestor(cfg, pipe.store).ingest([str(corpus_dir)], progress=False)
    assert report.failed == [], report.summary()
    assert report.new == len(DOCS), report.summary()  # every document stored (none deduplicated away)
    pipe.retriever.sync("default")
    yield pipe
    pipe.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_in_thread(app, wait_ready: bool = True, log_level: str = "warning"):
    """Run `app` under uvicorn on a free loopback port in a daemon thread; returns (base, server,
    thread). Waits for `/ready` to answer 200, or (wait_ready=False) for any answer on `/health`."""
    import uvicorn

    port = _free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level=log_level))
    th = threading.Thread(target=srv.run, daemon=True)
    th.start()
    base = f"http://127.0.0.1:{port}"
    wait_http(base + ("/ready" if wait_ready else "/health"), "the server did not become ready", timeout=120,
              alive=lambda: None if th.is_alive() else "the uvicorn thread ended", any_status=not wait_ready)
    return base, srv, th


@pytest.fixture(scope="session")
def server(pipeline):
    """uvicorn on 127.0.0.1 in a thread, serving the session pipeline; yields (base URL, app)."""

    from rag.server.app import create_app

    cfg = pipeline.cfg.model_copy(deep=True)
    cfg.server.max_body_bytes = 64 * 1024
    app = create_app(cfg, pipeline=pipeline, load_in_background=False)
    base, srv, th = serve_in_thread(app)
    yield base, app
    srv.should_exit = True
    th.join(timeout=20)
