"""End to end through the real pipeline: retrieval, prompt layout, engine, citations."""

from __future__ import annotations

import pytest

from tests.rag.streaming import collect


def test_cited_source_contains_the_answer(pipeline):
    answer = pipeline.ask("What is the capital city of Zarnovia?")
    assert "Velmora" in answer.text
    assert answer.citations, answer
    cited = {c.marker for c in answer.citations}
    assert any("Velmora" in p.text for p in answer.passages if p.marker in cited)
    assert all(c.source.endswith(".md") and c.title for c in answer.citations)
    for key in ("retrieve", "fuse", "prefill", "decode", "total"):
        assert answer.timings_ms[key] >= 0
    assert answer.tokens["prompt"] > 0 and answer.tokens["completion"] > 0


def test_markers_point_only_at_given_passages(pipeline):
    answer = pipeline.ask("How long does the XR-200 drone fly?")
    given = {p.marker for p in answer.passages}
    import re

    for m in re.findall(r"\[(\d+)\]", answer.text):
        assert int(m) in given
    assert {c.marker for c in answer.citations} <= given


@pytest.mark.parametrize("grounding", ["off", "strict"])
def test_streaming_concatenation_equals_final_text(pipeline, grounding):
    # grounded long answers (the default, strict) stream a sentence once it is judged; off: token by token
    from rag.pipeline import Pipeline

    cfg = pipeline.cfg.model_copy(update={"answer": pipeline.cfg.answer.model_copy(
        update={"long_grounding": grounding})})
    pipe = Pipeline(cfg, store=pipeline.store, generator=pipeline.generator, retriever=pipeline.retriever)
    deltas, final = collect(pipe.stream("What is the capital city of Quintara?"))
    assert len(deltas) > 1 or grounding == "strict"
    assert "".join(deltas) == final.text


def test_system_prompt_is_served_from_cache_after_first_request(pipeline):
    pipeline.ask("What does a leather couch cost?")
    second = pipeline.ask("What is sold with oak dining tables?")
    from rag import prompt as prompt_mod

    sys_tokens = len(pipeline.generator.tokenizer.encode(
        prompt_mod.system_prefix(pipeline.cfg.prompt, pipeline.generator.tokenizer), add_special_tokens=False))
    block = pipeline.cfg.generator.engine.block_size
    assert second.tokens["cached"] >= (sys_tokens // block) * block > 0
    stats = pipeline.generator.stats()
    assert stats["prefix_cache_hit_rate"] > 0


def test_filters_restrict_sources(pipeline, corpus_dir):
    res = pipeline.search("capital city", filters=[f"source^={corpus_dir / 'products'}"], k=5)
    assert res.candidates
    assert all("/products/" in c.chunk.source for c in res.candidates)
    answer = pipeline.ask("What is the flight time?", filters=["title=XR-300 manual"])
    assert {p.title for p in answer.passages} == {"XR-300 manual"}


def test_question_limits(pipeline):
    with pytest.raises(ValueError, match="empty"):
        pipeline.ask("   ")
    with pytest.raises(ValueError, match="max_question_chars"):
        pipeline.ask("why " * 1000)


def test_given_passages_skip_retrieval(pipeline):
    answer = pipeline.ask("What colour is the Brindle tram?",
                          passages=["The Brindle tram is painted bright orange.", "Trams run every ten minutes."])
    assert [p.chunk_id for p in answer.passages] == ["given-1", "given-2"]
    assert "retrieve" not in answer.timings_ms and "orange" in answer.text.lower()


def test_engine_compression_runs_on_the_pipeline_engine(pipeline):
    """`compress.type: engine` scores tokens with the generator's own engine (prompt logprobs):
    no second model copy, the passages shrink, the markers and the answer survive."""
    from rag.pipeline import Pipeline
    from rerank import CompressorConfig

    # A pipeline of its own over the session's store, retriever and engine: the session fixture
    # (shared by every test) is never mutated, so an assertion failing here cannot leak into others.
    # The answer as generated (`long_grounding: off`): SmolLM2 writes "55 days and 90 hours [1]" from the
    # compressed passages, which the default grounding rightly turns into the refusal (90 is not in [1]).
    cfg = pipeline.cfg.model_copy(update={"compress": CompressorConfig(type="engine", ratio=0.5),
                                          "answer": pipeline.cfg.answer.model_copy(update={"long_grounding": "off"})})
    pipe = Pipeline(cfg, store=pipeline.store, generator=pipeline.generator, retriever=pipeline.retriever)
    answer = pipe.ask("What is the flight time of the XR-300 drone?")
    assert pipe.compressor.model is None and pipe.compressor.engine is pipeline.generator
    assert pipeline.compressor is None  # the session pipeline still compresses nothing
    comp = answer.compression
    assert comp["tokens_out"] < comp["tokens_in"] and comp["ratio"] >= 1.5
    assert "compress" in answer.timings_ms
    assert any("55" in p.text for p in answer.passages)  # numbers are kept
    assert "55" in answer.text


def _signature_problems(impl: type, proto: type) -> list[str]:
    """Where `impl` cannot be called the way `proto` declares: a member missing, a positional
    parameter renamed, moved or dropped, an optional one made required, an extra one required."""
    import inspect

    problems = []
    for name in sorted(n for n, v in vars(proto).items() if callable(v) and not n.startswith("_")):
        if not hasattr(impl, name):
            problems.append(f"{impl.__name__} lacks {name}")
            continue
        want = list(inspect.signature(getattr(proto, name)).parameters.values())[1:]  # past self
        got = list(inspect.signature(getattr(impl, name)).parameters.values())[1:]
        named = [p for p in got if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        for i, w in enumerate(want):
            g = named[i] if i < len(named) else None
            if g is None or g.name != w.name:
                problems.append(f"{impl.__name__}.{name}: parameter {i + 1} is not {w.name!r}")
            elif w.default is not w.empty and g.default is g.empty:
                problems.append(f"{impl.__name__}.{name}: {w.name!r} must be optional")
        problems += [f"{impl.__name__}.{name}: extra parameter {g.name!r} has no default"
                     for g in named[len(want):] if g.default is g.empty]
    return problems


def test_both_generators_satisfy_the_generator_protocols(pipeline):
    """The compressor, the LLM reranker and the pipeline are typed against these Protocols. Catches a
    method renamed, dropped or given other parameters on any implementation (the runtime `isinstance`
    check only looks at names: it passed `generate(prompts, params)` against a Protocol whose
    `sampling_params` is optional), a capability flag missing or not a bool, and a bridge method that
    exists but fails when called (each is called once on the real engine: `stream` could not start a
    request on the engine)."""
    from inference import LLM
    from inference.protocols import ChatScorer, PrefixCache, StreamingGenerator, TokenScorer
    from inference.sampling_params import SamplingParams
    from rag.generation.base import Generator
    from rag.generation.engine import EngineGenerator
    from rag.generation.remote import RemoteGenerator

    for proto in (TokenScorer, ChatScorer, PrefixCache, StreamingGenerator):
        for impl in (Generator, EngineGenerator, RemoteGenerator):
            assert not _signature_problems(impl, proto), _signature_problems(impl, proto)
    for proto in (TokenScorer, ChatScorer):
        assert not _signature_problems(LLM, proto), _signature_problems(LLM, proto)
    for impl in (EngineGenerator, RemoteGenerator):
        assert isinstance(impl.backend, str) and isinstance(impl.supports_prefix_cache, bool)
        assert isinstance(impl.supports_logits_processors, bool)
    assert EngineGenerator.supports_logits_processors and not RemoteGenerator.supports_logits_processors
    offline = LLM.__new__(LLM)  # structure only: no second model is loaded
    offline.tokenizer = pipeline.generator.tokenizer
    assert isinstance(offline, ChatScorer) and isinstance(offline, TokenScorer)
    assert not isinstance(offline, StreamingGenerator)  # no async stream: the pipeline needs the bridge

    gen = pipeline.generator
    assert isinstance(gen, StreamingGenerator) and gen.backend == "engine" and gen.max_model_len > 0
    tok = gen.tokenizer
    eos = gen.eos_token_ids
    assert tok.eos_token_id in (eos if isinstance(eos, set) else {eos})
    ids = gen.encode_chat([{"role": "user", "content": "Name a colour."}])
    assert ids and all(isinstance(t, int) for t in ids)
    sp = SamplingParams(max_tokens=2, temperature=0.0)
    # (token ids are not compared across calls: a prefix-cache hit may flip a near-tie greedily)
    (out,) = gen.generate([ids], sp)
    assert out.finished and len(out.outputs[0].token_ids) == 2
    streamed = [o.outputs[0].token_ids for o in gen.stream(ids, sp)]  # it raised "no running event loop"
    assert len(streamed[-1]) == 2 and all(streamed[-1][: len(t)] == t for t in streamed)
    final = gen.run(gen.agenerate(ids, sp))
    assert final.finished and len(final.outputs[0].token_ids) == 2
    yes = tok.encode(" yes", add_special_tokens=False)[0]
    (scores,) = gen.next_token_logprobs([ids], [yes])
    assert set(scores) == {yes} and scores[yes] <= 0.0
    (lps,) = gen.prompt_logprobs([ids])
    assert len(lps) == len(ids) - 1 and all(v <= 0.0 for v in lps)
    assert "kv_blocks_total" in gen.stats() and isinstance(gen.cached_prefixes(1), list)
