"""`generator.backend: remote` against our own server's OpenAI-compatible endpoint on loopback:
the same greedy text as the in-process engine, streamed answers with citations, stop strings, and a
clear error when the server is unreachable."""

from __future__ import annotations

import pytest

from indexing.pg_local import free_port
from inference.sampling_params import SamplingParams
from rag.generation.remote import RemoteGenerator, RemoteUnavailable


def _remote_cfg(pipeline, base_url: str):
    cfg = pipeline.cfg.model_copy(deep=True)
    cfg.generator.backend = "remote"
    cfg.generator.remote.base_url = base_url
    cfg.generator.remote.max_model_len = pipeline.generator.max_model_len
    return cfg


@pytest.fixture
def remote(server, pipeline):
    base, _ = server
    gen = RemoteGenerator(_remote_cfg(pipeline, base + "/v1").generator)
    yield gen
    gen.close()


def test_same_greedy_text_as_in_process_engine(remote, pipeline):
    _, built, _ = pipeline.prepare("What is the capital city of Zarnovia?")
    params = SamplingParams(max_tokens=24, temperature=0.0)
    local = pipeline.generator.generate([built.token_ids], params)[0]
    far = remote.generate([built.token_ids], params)[0]
    assert far.outputs[0].text == local.outputs[0].text and far.outputs[0].text
    assert far.metrics.prompt_tokens == len(built.token_ids) and far.finished


def test_stop_strings_end_the_stream(remote, pipeline):
    _, built, _ = pipeline.prepare("What is the capital city of Zarnovia?")
    free = remote.generate([built.token_ids], SamplingParams(max_tokens=24, temperature=0.0))[0].outputs[0].text
    assert "Velmora" in free
    outs = list(remote.stream(built.token_ids, SamplingParams(max_tokens=24, temperature=0.0, stop=["Velmora"])))
    final = outs[-1].outputs[0]
    assert final.text == free[: free.index("Velmora")] and final.finish_reason == "stop"
    assert "".join(o.outputs[0].delta_text for o in outs) == final.text


def test_pipeline_streams_a_cited_answer_through_the_remote(server, pipeline):
    from rag.answer import Answer
    from rag.pipeline import Pipeline

    base, _ = server
    cfg = _remote_cfg(pipeline, base + "/v1")
    cfg.answer.long_grounding = "off"  # token by token as the remote sends them (grounded: sentence by sentence)
    pipe = Pipeline(cfg, store=pipeline.store, retriever=pipeline.retriever)
    try:
        assert isinstance(pipe.generator, RemoteGenerator)
        items = list(pipe.stream("What is the capital city of Zarnovia?"))
        answer = items[-1]
        assert isinstance(answer, Answer) and "Velmora" in answer.text
        assert "".join(x for x in items[:-1] if isinstance(x, str)) == answer.text and len(items) > 2
        assert answer.citations and any("zarnovia" in c.source for c in answer.citations)
        assert answer.tokens["prompt"] > 0 and answer.tokens["completion"] > 0
    finally:
        pipe.generator.close()


def test_unreachable_server_is_a_clear_error(pipeline):
    url = f"http://127.0.0.1:{free_port()}/v1"
    gen = RemoteGenerator(_remote_cfg(pipeline, url).generator)
    try:
        with pytest.raises(RemoteUnavailable, match=f"127.0.0.1:{url.split(':')[2].split('/')[0]}"):
            gen.generate(["hello"], SamplingParams(max_tokens=4))
    finally:
        gen.close()


def test_cache_routes_answer_501_naming_the_backend_on_a_remote_generator(server, pipeline, tmp_path):
    """Catches the prefix-cache routes reaching into `generator.engine` of a backend that keeps no
    prefix cache: with `generator.backend: remote` they were an AttributeError and a 500. Now each
    answers 501 with a message naming the backend, and reading the cache stays a 200 (no blocks)."""
    import httpx

    from rag.pipeline import Pipeline
    from rag.server.app import create_app
    from tests.rag.conftest import serve_in_thread

    base, _ = server
    cfg = _remote_cfg(pipeline, base + "/v1")
    cfg.storage.path = str(tmp_path)  # the remote server's own cache file stays untouched
    pipe = Pipeline(cfg, store=pipeline.store, retriever=pipeline.retriever)
    far, srv, th = serve_in_thread(create_app(cfg, pipeline=pipe, load_in_background=False))
    try:
        assert not pipe.generator.supports_prefix_cache and pipeline.generator.supports_prefix_cache
        for action in ("save", "restore", "clear"):
            r = httpx.post(f"{far}/v1/cache/{action}", timeout=30)
            assert r.status_code == 501, (action, r.status_code, r.text)
            err = r.json()["error"]
            assert err["type"] == "not_implemented"
            assert f"cannot {action} the prefix cache" in err["message"]
            assert "generator.backend remote" in err["message"]
        listed = httpx.get(far + "/v1/cache", timeout=30)
        assert listed.status_code == 200 and listed.json()["top_prefixes"] == []
    finally:
        srv.should_exit = True
        th.join(timeout=20)
        pipe.generator.close()
