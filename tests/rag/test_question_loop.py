"""A question is one async implementation: the sync API crosses onto the generator's loop once, the
server's loop runs it without crossing, and every model call of every stage is made on the loop that
runs the question (never from a worker thread calling back onto a loop).

Real pipeline, real SmolLM2 engine (the session's); the generator is only observed, never replaced.
"""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from rag.answer import Answer
from rag.chat import ChatTurn
from rag.config import RagConfig
from rag.pipeline import Pipeline
from tests.rag.conftest import serve_in_thread
from tests.rag.streaming import acollect

# every stage that calls the model before the answer: condensing (a chat turn), the planner's
# rewrite, a multi-hop follow-up, the LLM reranker and the engine compressor
LLM_STAGES = {"query": {"rewrite": {"enabled": True}, "multi_hop": {"enabled": True, "max_hops": 2}},
              "rerank": {"type": "llm"}, "compress": {"type": "engine", "ratio": 0.5}}
HISTORY = [ChatTurn("Which island nation has Velmora as its capital?", "Zarnovia [1].")]


def variant(pipeline: Pipeline, sections: dict) -> Pipeline:
    """A pipeline over the session's store, retriever and engine with `sections` merged into its config."""
    data = pipeline.cfg.to_dict()
    for name, values in sections.items():
        data[name] = {**data[name], **values}
    return Pipeline(RagConfig.model_validate(data), store=pipeline.store, generator=pipeline.generator,
                    retriever=pipeline.retriever)


class Crossings:
    """What a question does on the generator: each crossing from sync code onto its bridge loop
    (`_submit`), and the thread and running loop of each model request (`agenerate`, `astream`)."""

    def __init__(self, gen, monkeypatch: pytest.MonkeyPatch):
        self.submits: list[threading.Thread] = []
        self.calls: list[tuple[threading.Thread, asyncio.AbstractEventLoop]] = []
        submit, agenerate, astream = gen._submit, gen.agenerate, gen.astream

        def counted_submit(coro):
            self.submits.append(threading.current_thread())
            return submit(coro)

        async def seen_agenerate(*args, **kwargs):
            self.calls.append((threading.current_thread(), asyncio.get_running_loop()))
            return await agenerate(*args, **kwargs)

        def seen_astream(*args, **kwargs):
            self.calls.append((threading.current_thread(), asyncio.get_running_loop()))
            return astream(*args, **kwargs)

        monkeypatch.setattr(gen, "_submit", counted_submit)
        monkeypatch.setattr(gen, "agenerate", seen_agenerate)
        monkeypatch.setattr(gen, "astream", seen_astream)

    def reset(self) -> None:
        self.submits.clear()
        self.calls.clear()


def test_a_sync_question_crosses_onto_the_generator_loop_once(pipeline, monkeypatch):
    """Bug caught: an LLM stage called through the sync bridge inside the question (the planner,
    condenser, multi-hop, LLM reranker and engine compressor each did, from the worker thread that ran
    `prepare`: five more crossings, and a blocked thread per call). One `ask` with all of them on is
    one crossing, and every model request runs on the bridge loop's own thread."""
    pipe = variant(pipeline, LLM_STAGES)
    gen = pipeline.generator
    seen = Crossings(gen, monkeypatch)
    answer = pipe.ask("How many people live there?", history=HISTORY)
    assert len(seen.submits) == 1 and seen.submits[0] is threading.current_thread()
    # condense 1, rewrite 1, hop 1, a rerank and a compression request per passage, the answer 1
    assert len(seen.calls) >= 6, len(seen.calls)
    assert {t for t, _ in seen.calls} == {gen._thread} and {lp for _, lp in seen.calls} == {gen._loop}
    assert answer.chat["condense"] in ("model", "fallback") and answer.compression and "rerank" in answer.timings_ms
    seen.reset()
    pipe.search("How long does the XR-300 drone fly?", k=3)  # the sync search: the same single entry
    assert len(seen.submits) == 1 and {t for t, _ in seen.calls} == {gen._thread}


def test_a_sync_model_call_on_the_generator_loop_fails_instead_of_hanging(pipeline):
    """Bug caught: a sync call left inside the async path blocks the bridge loop waiting for work
    scheduled on that same loop, a silent deadlock; it is an error naming the async twin."""
    gen = pipeline.generator

    async def nested() -> None:
        gen.generate(["Name a colour."])

    with pytest.raises(RuntimeError, match="async twin"):
        gen.run(nested())


def _facts(answer: Answer) -> dict:
    """What an answer says, less its timings (the same question may take another time)."""
    d = answer.to_dict(passages=True)
    return {k: d[k] for k in ("text", "refused", "citations", "passages", "tokens", "mode", "signals", "queries")}


async def _on_own_loop(pipe: Pipeline, question: str, **kw) -> tuple[list[str], Answer]:
    return await acollect(pipe.astream(question, **kw))


@pytest.mark.parametrize("mode,question", [("short", "What is the capital city of Zarnovia?"),
                                           ("long", "How long does the XR-300 drone fly?")])
def test_the_async_path_on_a_loop_of_its_own_answers_as_the_sync_api(pipeline, monkeypatch, mode, question):
    """Bug caught: the server's path (the question awaited on the caller's loop) and `Pipeline.ask`
    diverging: other prompts, answers or token counts, or the async path hopping onto the
    generator's private loop anyway. Each question is asked once first so both runs below find the
    same prefix cache (a cache hit may flip a greedy near-tie)."""
    pipe = variant(pipeline, {"query": {"rewrite": {"enabled": True}}, "answer": {"mode": mode}})
    gen = pipeline.generator
    pipe.ask(question)
    seen = Crossings(gen, monkeypatch)
    deltas, final = asyncio.run(_on_own_loop(pipe, question))
    assert seen.submits == [] and {t for t, _ in seen.calls} == {threading.current_thread()}
    assert "".join(deltas) == final.text
    assert _facts(final) == _facts(pipe.ask(question))


def test_server_routes_await_the_question_on_their_own_loop(pipeline, monkeypatch):
    """Bug caught: a route that runs the pipeline's sync search or prepare in a worker thread,
    whose LLM stages then hop onto the generator's private loop (two event loops per question in
    the server). /v1/ask and /v1/search with the planner's and the reranker's model calls on make
    no crossing; every model request runs on the server's loop thread."""
    from rag.server.app import create_app

    pipe = variant(pipeline, {"query": {"rewrite": {"enabled": True}}, "rerank": {"type": "llm"}})
    cfg = pipe.cfg.model_copy(deep=True)
    base, srv, th = serve_in_thread(create_app(cfg, pipeline=pipe, load_in_background=False))
    try:
        seen = Crossings(pipeline.generator, monkeypatch)
        r = httpx.post(base + "/v1/ask", json={"question": "What is the capital city of Zarnovia?"}, timeout=300)
        assert r.status_code == 200, r.text
        r = httpx.post(base + "/v1/search", json={"query": "How long does the XR-300 drone fly?"}, timeout=300)
        assert r.status_code == 200 and r.json()["results"], r.text
        assert seen.submits == [] and len(seen.calls) >= 3
        assert {t for t, _ in seen.calls} == {th}
    finally:
        srv.should_exit = True
        th.join(timeout=20)


def test_async_rerank_and_compression_equal_their_sync_forms(pipeline):
    """Bug caught: the async path's `arank` / `acompress` drifting from `rank` / `compress` (their
    head/tail/top_n rules or the compressor's word selection taken apart differently), which would
    change answers only where the server or `Pipeline.ask` runs them."""
    from rerank import CompressorConfig, build_compressor, build_reranker

    q = "How long does the XR-300 drone fly?"
    cands = pipeline.search(q, k=5).candidates
    bi = build_reranker({"type": "bi-encoder", "depth": 3, "top_n": 4}, embedder=pipeline.retriever.embedder())
    got, want = asyncio.run(bi.arank(q, cands)), bi.rank(q, cands)
    assert [(c.chunk.chunk_id, c.score, c.ranks) for c in got] == [(c.chunk.chunk_id, c.score, c.ranks) for c in want]
    assert len(got) == 4 and "rerank" in got[0].scores
    comp = build_compressor(CompressorConfig(type="engine", ratio=0.5), engine=pipeline.generator)
    texts = [c.chunk.text for c in cands]
    comp.compress(q, texts)  # both runs below then find the same prefix cache
    a, b = asyncio.run(comp.acompress(q, texts)), comp.compress(q, texts)
    assert a.contexts == b.contexts and (a.tokens_in, a.tokens_out, a.dropped) == (b.tokens_in, b.tokens_out, b.dropped)
    assert a.tokens_out < a.tokens_in
