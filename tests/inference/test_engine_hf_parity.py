"""Greedy decoding must be token-identical to HF transformers generate on the same weights."""

from __future__ import annotations

N = 10


def test_batch_matches_hf(llm, hf_greedy, greedy, prompts):
    outs = llm.generate(prompts, greedy(N))
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == hf_greedy(prompt, N), prompt
        assert out.finish_reason in ("length", "stop")
        assert out.metrics.prompt_tokens == len(llm.tokenizer.encode(prompt))
        assert out.metrics.ttft is not None and out.metrics.ttft >= out.metrics.queue_time >= 0


def test_prefix_cache_hits_give_identical_output(llm, hf_greedy, greedy, system_prompt):
    prompts = [f"{system_prompt} passage {i}: the river is {c}. Q: what colour is the river? A:"
               for i, c in enumerate(["green", "blue", "brown"])]
    cold = llm.generate(prompts[:1], greedy(N))[0]
    warm = llm.generate(prompts, greedy(N))
    assert warm[0].token_ids == cold.token_ids
    for prompt, out in zip(prompts, warm, strict=True):
        assert out.metrics.cached_prompt_tokens >= 32, "shared system prompt should be served from cache"
        assert out.token_ids == hf_greedy(prompt, N)


def test_chunked_prefill_matches_hf(llm, hf_greedy, greedy, prompts, system_prompt):
    sched = llm.engine.scheduler
    old = sched.max_num_batched_tokens
    sched.max_num_batched_tokens = 7  # prompts are split into many chunks, mixed with decodes
    try:
        prompts = prompts + [system_prompt + " chunked"]
        outs = llm.generate(prompts, greedy(N))
    finally:
        sched.max_num_batched_tokens = old
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == hf_greedy(prompt, N)


def test_preemption_matches_hf(hf_greedy, greedy, engine_factory, prompts):
    tiny = engine_factory(num_blocks=9, block_size=4, enable_prefix_caching=False, max_num_batched_tokens=64)
    prompts = prompts[:3]
    outs = tiny.generate(prompts, greedy(N))
    assert tiny.stats()["preemptions"] > 0, "pool of 9x4 tokens must force preemption"
    for prompt, out in zip(prompts, outs, strict=True):
        assert out.token_ids == hf_greedy(prompt, N)
    assert sum(o.metrics.preemptions for o in outs) == tiny.stats()["preemptions"]
