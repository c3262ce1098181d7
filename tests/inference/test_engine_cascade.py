"""Cascade decode (shared prefix attended once, merged by log-sum-exp) matches the plain path."""

from __future__ import annotations

from inference import SamplingParams, model_runner


def test_cascade_decode_matches_plain_and_hf(llm, hf_greedy, monkeypatch):
    prefix = [1000 + (i * 7) % 3000 for i in range(300)]  # > CASCADE_MIN_TOKENS shared tokens
    prompts = [prefix + [50 + i, 60 + i, 70 + i] for i in range(3)]
    sp = SamplingParams(temperature=0.0, max_tokens=6, logprobs=0)
    llm.clear_prefix_cache()
    llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=1))  # cache the prefix
    used = []
    plan = model_runner.ModelRunner._plan_cascade

    def spy(self, meta, table, lens):
        plan(self, meta, table, lens)
        used.append(meta.shared_blocks is not None)

    monkeypatch.setattr(model_runner.ModelRunner, "_plan_cascade", spy)
    cascade = llm.generate(prompts, sp)
    assert any(used), "decode rows sharing 300 cached tokens should take the cascade path"
    monkeypatch.setattr(model_runner, "CASCADE_MIN_TOKENS", 10**9)
    plain = llm.generate(prompts, sp)
    for c, p, prompt in zip(cascade, plain, prompts, strict=True):
        assert c.token_ids == p.token_ids == hf_greedy(prompt, 6)
        for a, b, t in zip(c.outputs[0].logprobs, p.outputs[0].logprobs, c.token_ids, strict=True):
            assert abs(a[t] - b[t]) < 1e-4
