"""Sampling parameters behave as documented."""

from __future__ import annotations

import pytest
import torch

from inference import SamplingParams


def test_seeded_sampling_reproducible(llm, prompts):
    sp = SamplingParams(temperature=0.9, top_p=0.9, seed=1234, max_tokens=8)
    a = llm.generate(prompts[:2], sp)
    b = llm.generate([prompts[1], prompts[0]], sp)  # other batch order, same per-request seed
    assert a[0].token_ids == b[1].token_ids and a[1].token_ids == b[0].token_ids
    c = llm.generate(prompts[:1], SamplingParams(temperature=0.9, top_p=0.9, seed=99, max_tokens=8))
    assert c[0].token_ids != a[0].token_ids


def test_top_k_one_is_greedy(llm, greedy, prompts):
    g = llm.generate(prompts, greedy(6))
    k1 = llm.generate(prompts, SamplingParams(temperature=0.8, top_k=1, max_tokens=6, seed=5))
    assert [o.token_ids for o in g] == [o.token_ids for o in k1]


def test_max_tokens_and_stop_strings(llm, prompts, greedy):
    full = llm.generate([prompts[1]], greedy(12))[0]
    assert len(full.token_ids) == 12 and full.finish_reason == "length"
    stop = full.text.strip()[:6]
    cut = llm.generate([prompts[1]], SamplingParams(temperature=0.0, max_tokens=12, stop=[stop]))[0]
    assert cut.finish_reason == "stop" and cut.outputs[0].stop_reason == stop
    assert stop not in cut.text and full.text.startswith(cut.text)
    incl = llm.generate([prompts[1]], SamplingParams(temperature=0.0, max_tokens=12, stop=stop,
                                                     include_stop_str_in_output=True))[0]
    assert incl.text.endswith(stop)


def test_stop_token_ids(llm, prompts, greedy):
    full = llm.generate([prompts[0]], greedy(8))[0]
    target = full.token_ids[3]
    out = llm.generate([prompts[0]], SamplingParams(temperature=0.0, max_tokens=8, stop_token_ids=[target]))[0]
    assert out.token_ids == full.token_ids[: full.token_ids.index(target) + 1]
    assert out.outputs[0].stop_reason == target


def test_logprobs_and_candidates_match_hf(llm, hf_greedy, prompts):
    yes, no = llm.tokenizer.encode(" yes")[0], llm.tokenizer.encode(" no")[0]
    out = llm.generate([prompts[0]], SamplingParams(temperature=0.0, max_tokens=3, logprobs=5,
                                                    candidate_token_ids=[yes, no]))[0]
    lps = out.outputs[0].logprobs
    assert len(lps) == 3 and all(len(d) >= 5 for d in lps)
    assert max(lps[0], key=lps[0].get) == out.token_ids[0]
    ids = torch.tensor([llm.tokenizer.encode(prompts[0])])
    with torch.inference_mode():
        ref = torch.log_softmax(hf_greedy.model(ids).logits[0, -1].float(), -1)
    for t in (yes, no):
        assert abs(out.candidate_logprobs[t] - float(ref[t])) < 1e-3
    assert llm.next_token_logprobs([prompts[0]], [yes])[0][yes] == out.candidate_logprobs[yes]


def test_logits_processor_and_penalties(llm, prompts, greedy):
    base = llm.generate([prompts[0]], greedy(6))[0]
    banned = base.token_ids[0]

    def ban(token_ids, logits):
        logits[banned] = float("-inf")
        return logits

    out = llm.generate([prompts[0]], SamplingParams(temperature=0.0, max_tokens=6, logits_processors=[ban]))[0]
    assert banned not in out.token_ids
    rep = llm.generate([prompts[1]], SamplingParams(temperature=0.0, max_tokens=24, repetition_penalty=1.5))[0]
    plain = llm.generate([prompts[1]], greedy(24))[0]
    assert len(set(rep.token_ids)) >= len(set(plain.token_ids))
    assert rep.token_ids != plain.token_ids
    pf = llm.generate([prompts[1]], SamplingParams(temperature=0.7, max_tokens=8, seed=0, min_p=0.1,
                                                   presence_penalty=0.5, frequency_penalty=0.5))[0]
    assert len(pf.token_ids) == 8


def test_hidden_state_matches_hf_and_survives_prefix_cache(llm, hf_greedy, prompts):
    """The probe features are HF's final normed hidden state of the last prompt token, also when the
    prompt is served from the prefix cache (a cached request must still compute its last row)."""
    ids = torch.tensor([llm.tokenizer.encode(prompts[2])])
    with torch.inference_mode():
        ref = hf_greedy.model(ids, output_hidden_states=True).hidden_states[-1][0, -1].float()
    first, again = (llm.last_hidden_states([prompts[2]])[0] for _ in range(2))
    assert first.shape == ref.shape
    assert torch.allclose(first, ref, atol=1e-3, rtol=1e-3)
    assert torch.allclose(again, first, atol=1e-4)
    # other prompts in the same batch get their own rows, requests that did not ask get none
    both = llm.generate([prompts[0], prompts[2]], [SamplingParams(max_tokens=2, temperature=0.0),
                                                   SamplingParams(max_tokens=2, temperature=0.0, hidden_state=True)])
    assert both[0].hidden_state is None
    assert torch.allclose(both[1].hidden_state, first, atol=1e-3)


def test_middle_layer_hidden_state_matches_hf(llm, hf_greedy, prompts):
    """Catches capturing the wrong layer (off by one: HF's hidden_states[k] is the residual stream
    after decoder layer k) or mixing up rows of two requests that ask for different layers."""
    ids = torch.tensor([llm.tokenizer.encode(prompts[3])])
    with torch.inference_mode():
        ref = hf_greedy.model(ids, output_hidden_states=True).hidden_states
    k = len(ref) // 2
    mid = llm.last_hidden_states([prompts[3]], layer=k)[0]
    assert torch.allclose(mid, ref[k][0, -1].float(), atol=1e-3, rtol=1e-3)
    assert not torch.allclose(mid, ref[k + 1][0, -1].float(), atol=1e-2)
    outs = llm.generate([prompts[3], prompts[3]],
                        [SamplingParams(max_tokens=1, hidden_state=True, hidden_state_layer=k),
                         SamplingParams(max_tokens=1, hidden_state=True, hidden_state_layer=-1)])
    assert torch.allclose(outs[0].hidden_state, mid, atol=1e-3)
    assert torch.allclose(outs[1].hidden_state, ref[-1][0, -1].float(), atol=1e-3, rtol=1e-3)
    with pytest.raises(ValueError, match="hidden_state_layer"):
        llm.generate([prompts[3]], SamplingParams(max_tokens=1, hidden_state=True, hidden_state_layer=len(ref)))
