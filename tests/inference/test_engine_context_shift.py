"""Context shift (llama.cpp --keep): generation goes past max_model_len by dropping old tokens."""

from __future__ import annotations

import pytest

from inference import SamplingParams


@pytest.fixture(scope="module")
def small_ctx(engine_factory):
    return engine_factory(max_model_len=64, num_blocks=24, block_size=16)


def test_without_shift_generation_stops_at_the_context(small_ctx):
    prompt = "Count slowly: one, two, three, four, five, six, seven, eight, nine, ten, eleven"
    n_prompt = len(small_ctx.tokenizer.encode(prompt))
    out = small_ctx.generate(prompt, SamplingParams(max_tokens=100, temperature=0, ignore_eos=True))[0]
    assert out.finish_reason == "length"
    assert len(out.token_ids) == 64 - n_prompt


def test_shift_keeps_the_prefix_and_generates_past_the_context(small_ctx):
    prompt = "Count slowly: one, two, three, four, five, six, seven, eight, nine, ten, eleven"
    params = SamplingParams(max_tokens=100, temperature=0, ignore_eos=True, context_shift_keep=8)
    out = small_ctx.generate(prompt, params)[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 100  # well past 64 - prompt
    assert small_ctx.stats()["kv_blocks_used"] == 0
    # The kept prefix is the same every time, so after the first shift it comes from the cache.
    assert small_ctx.stats()["prefix_cache_hits"] > 0


def test_keep_minus_one_keeps_the_whole_prompt(small_ctx):
    params = SamplingParams(max_tokens=60, temperature=0, ignore_eos=True, context_shift_keep=-1)
    out = small_ctx.generate("Write a long story about a cat.", params)[0]
    assert len(out.token_ids) == 60
