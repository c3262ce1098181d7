"""End to end through the real pipeline: retrieval, prompt layout, engine, citations."""

from __future__ import annotations

import pytest

from rag.answer import Answer


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


def test_streaming_concatenation_equals_final_text(pipeline):
    deltas, final = [], None
    for item in pipeline.stream("What is the capital city of Quintara?"):
        if isinstance(item, Answer):
            final = item
        else:
            deltas.append(item)
    assert final is not None and len(deltas) > 1
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
    cfg = pipeline.cfg.model_copy(update={"compress": CompressorConfig(type="engine", ratio=0.5)})
    pipe = Pipeline(cfg, store=pipeline.store, generator=pipeline.generator, retriever=pipeline.retriever)
    answer = pipe.ask("What is the flight time of the XR-300 drone?")
    assert pipe.compressor.model is None and pipe.compressor.engine is pipeline.generator
    assert pipeline.compressor is None  # the session pipeline still compresses nothing
    comp = answer.compression
    assert comp["tokens_out"] < comp["tokens_in"] and comp["ratio"] >= 1.5
    assert "compress" in answer.timings_ms
    assert any("55" in p.text for p in answer.passages)  # numbers are kept
    assert "55" in answer.text


def test_both_generators_satisfy_the_generator_protocols(pipeline):
    """The compressor, the LLM reranker and the pipeline are typed against these Protocols; a
    method renamed or dropped on either implementation breaks them here, not at run time."""
    from inference import LLM
    from inference.protocols import ChatScorer, StreamingGenerator, TokenScorer

    assert isinstance(pipeline.generator, StreamingGenerator)
    offline = LLM.__new__(LLM)  # structure only: no second model is loaded
    offline.tokenizer = pipeline.generator.tokenizer
    assert isinstance(offline, ChatScorer) and isinstance(offline, TokenScorer)
    assert not isinstance(offline, StreamingGenerator)  # no async stream: the pipeline needs the bridge
