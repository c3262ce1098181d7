"""Schema-driven fuzzing of the live server (schemathesis over its own OpenAPI document, real HTTP
on loopback): valid and invalid requests to every operation must never get a 5xx, hang or reset.

Bounded: `FUZZ_EXAMPLES` generated requests (default 120) on a server whose generation budget is a
few tokens, so it stays well under a minute. The >= 2,000-request run is `bench/fuzz.py`.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import httpx
import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "120"))
RANDOM = os.environ.get("FUZZ_RANDOM") == "1"  # the long run explores instead of replaying one seed


@pytest.fixture(scope="module")
def fuzz_server(pipeline, tmp_path_factory, corpus_dir):
    """Its own store (fuzzed uploads and deletes must not touch the session corpus), the session's
    engine and embedder (no second model load), generation capped at 4 tokens."""

    from rag.app import build_ingestor
    from rag.config import load_config
    from rag.pipeline import Pipeline
    from rag.server.app import create_app
    from retrieval.retriever import Retriever
    from tests.rag.conftest import serve_in_thread

    storage = tmp_path_factory.mktemp("fuzz")
    cfg = load_config(None, [f"storage.path={storage}", "generator.sampling.max_tokens=4",
                             "server.max_tokens_limit=4", "answer.context_k=2", "server.max_body_bytes=65536"])
    from indexing.store import DocumentStore

    store = DocumentStore(cfg.storage_path / "store.sqlite")
    build_ingestor(cfg, store).ingest([str(corpus_dir)], progress=False)
    retriever = Retriever.from_config(cfg.retrieval, store, cfg.storage_path / "indexes",
                                      embedder=pipeline.retriever.embedder())
    pipe = Pipeline(cfg, store=store, generator=pipeline.generator, retriever=retriever)
    base, srv, th = serve_in_thread(create_app(cfg, pipeline=pipe, load_in_background=False),
                                    log_level="critical")
    yield base
    srv.should_exit = True
    th.join(timeout=30)
    store.close()


def fuzz(base: str, examples: int, explore: bool = False) -> Counter:
    """Run `examples` generated requests; returns a Counter of status codes. Raises on a 5xx, a
    timeout (hang) or a transport error (reset)."""
    schema = schemathesis.openapi.from_url(base + "/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    strategy = st.one_of(*[op.as_strategy(generation_mode=m) for op in ops
                           for m in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)])
    statuses: Counter = Counter()
    failures: list[str] = []

    @settings(max_examples=examples, deadline=None, database=None, derandomize=not explore,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate])
    @given(case=strategy)
    def run(case) -> None:
        resp = case.call(base_url=base, timeout=60)
        statuses[resp.status_code] += 1
        if resp.status_code >= 500:
            failures.append(f"{case.method} {case.formatted_path} {case.body!r:.300} -> {resp.status_code} "
                            f"{resp.text[:300]}")
        assert resp.status_code < 500, failures[-1]

    run()
    return statuses


def test_fuzz_no_server_errors(fuzz_server):
    t0 = time.time()
    statuses = fuzz(fuzz_server, EXAMPLES, RANDOM)
    print(f"fuzz: {sum(statuses.values())} requests in {time.time() - t0:.0f}s, "
          f"{sum(n for s, n in statuses.items() if s >= 500)} responses >= 500, statuses {dict(sorted(statuses.items()))}")
    assert sum(statuses.values()) >= EXAMPLES
    assert all(s < 500 for s in statuses)
    assert any(400 <= s < 500 for s in statuses) and any(s < 300 for s in statuses)  # both kinds reached
    assert httpx.get(fuzz_server + "/health").status_code == 200  # still up afterwards
