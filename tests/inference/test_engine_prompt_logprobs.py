"""Prompt-token logprobs equal a plain HF forward pass over the same prompt."""

from __future__ import annotations

import torch

from inference import SamplingParams


def _hf_prompt_logprobs(model, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        logits = model(torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_prompt_logprobs_match_hf_with_chunked_prefill(llm, hf_greedy, prompts, system_prompt):
    sp = SamplingParams(temperature=0.0, max_tokens=1, prompt_logprobs=2)
    texts = [system_prompt + " the river is green.", prompts[2]]
    llm.generate(texts[:1], SamplingParams(temperature=0.0, max_tokens=1))  # now cached: must not be used
    sched = llm.engine.scheduler
    old, sched.max_num_batched_tokens = sched.max_num_batched_tokens, 11  # many chunks per prompt
    try:
        outs = llm.generate(texts, sp)
    finally:
        sched.max_num_batched_tokens = old
    for text, out in zip(texts, outs, strict=True):
        ids = llm.tokenizer.encode(text)
        plp = out.prompt_logprobs
        assert plp is not None and len(plp) == len(ids) and plp[0] is None
        assert out.metrics.cached_prompt_tokens == 0
        ref = _hf_prompt_logprobs(hf_greedy.model, ids)
        ours = torch.tensor([plp[p][ids[p]] for p in range(1, len(ids))])
        assert torch.allclose(ours, ref, atol=1e-3), float((ours - ref).abs().max())
        for p in range(1, len(ids)):
            assert 2 <= len(plp[p]) <= 3  # top-2 plus the real token when it is not among them
            assert max(plp[p].values()) >= plp[p][ids[p]]


def test_no_prompt_logprobs_by_default(llm, prompts):
    out = llm.generate(prompts[:1], SamplingParams(temperature=0.0, max_tokens=1))[0]
    assert out.prompt_logprobs is None
