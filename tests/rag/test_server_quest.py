"""QUEST's counters on the server (issue 25 item 5): a pipeline with `sparse_attention: quest` behind
uvicorn on 127.0.0.1 reports the KV blocks its decode skipped in `/v1/cache` and `/metrics`. Real
SmolLM2 engine (float32) over the session corpus and index."""

from __future__ import annotations

import httpx
import pytest

from rag.config import RagConfig
from rag.pipeline import Pipeline
from tests.rag.conftest import serve_in_thread


@pytest.fixture(scope="module")
def quest_server(pipeline):
    from rag.generation import build_generator
    from rag.server.app import create_app

    data = pipeline.cfg.to_dict()
    data["generator"]["engine"].update(num_blocks=96, max_num_seqs=4,
                                       sparse_attention={"method": "quest", "token_budget": 32, "dense_layers": 2})
    cfg = RagConfig.model_validate(data)
    pipe = Pipeline(cfg, store=pipeline.store, generator=build_generator(cfg.generator), retriever=pipeline.retriever)
    app = create_app(cfg, pipeline=pipe, load_in_background=False)
    base, srv, th = serve_in_thread(app)
    yield base
    srv.should_exit = True
    th.join(timeout=20)
    pipe.generator.close()


def test_quest_skipped_blocks_in_cache_endpoint_and_metrics(quest_server):
    """Bugs caught: /v1/cache leaving QUEST's counters out (so a server cannot show sparse decode is
    on and skipping), and /metrics and /v1/cache disagreeing on them."""
    from prometheus_client.parser import text_string_to_metric_families

    base = quest_server
    before = httpx.get(base + "/v1/cache").json()
    assert before["sparse_blocks_skipped"] == before["sparse_blocks_considered"] == 0
    r = httpx.post(base + "/v1/ask", json={"question": "What is the capital city of Zarnovia?",
                                           "options": {"max_tokens": 8}}, timeout=120)
    assert r.status_code == 200, r.text
    cache = httpx.get(base + "/v1/cache").json()
    # a ~300-token prompt and a 32-token budget (2 of ~20 blocks): most blocks are skipped
    assert 0 < cache["sparse_blocks_skipped"] < cache["sparse_blocks_considered"], cache
    assert cache["sparse_blocks_skipped"] > 0.5 * cache["sparse_blocks_considered"], cache
    families = {f.name: f for f in text_string_to_metric_families(httpx.get(base + "/metrics").text)}
    for key in ("sparse_blocks_skipped", "sparse_blocks_considered"):
        assert families[f"rag_engine_{key}"].samples[0].value == cache[key]
