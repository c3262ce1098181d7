"""Block accounting, prefix-cache hit counts, abort, rejection, COW forks, int8 KV, persistence."""

from __future__ import annotations

import pytest

from inference import SamplingParams


def _ids(n: int, start: int = 1000) -> list[int]:
    return [start + i for i in range(n)]


def test_shared_prefix_hit_counts(llm, greedy):
    llm.clear_prefix_cache()
    bs = llm.engine.bm.block_size
    prefix = _ids(3 * bs)  # exactly three full blocks
    before = llm.stats()
    first = llm.generate([prefix + [7, 8, 9]], greedy(2))[0]
    assert first.metrics.cached_prompt_tokens == 0
    outs = llm.generate([prefix + [11 + i, 12, 13] for i in range(3)], greedy(2))
    assert [o.metrics.cached_prompt_tokens for o in outs] == [3 * bs] * 3
    after = llm.stats()
    assert after["prefix_cache_hits"] - before["prefix_cache_hits"] == 9 * bs
    assert after["prefix_cache_queries"] - before["prefix_cache_queries"] == 4 * (3 * bs + 3)
    # a prompt that is entirely cached still computes its last block to get logits
    again = llm.generate([prefix], greedy(2))[0]
    assert again.metrics.cached_prompt_tokens == 2 * bs


def test_cached_prefixes_listing(llm, greedy):
    llm.clear_prefix_cache()
    llm.generate([_ids(40)], greedy(1))
    top = llm.cached_prefixes(top=3)
    assert top and top[0]["tokens"] == 32 and top[0]["complete"] and not top[0]["in_use"]
    assert llm.clear_prefix_cache() >= 2
    assert llm.cached_prefixes() == []


def test_abort_frees_blocks(llm):
    eng = llm.engine
    rid = eng.add_request(_ids(50), SamplingParams(temperature=0.0, max_tokens=50))
    eng.step()
    eng.step()
    assert eng.bm.num_used >= 4
    assert eng.abort(rid)
    assert eng.bm.num_used == 0 and not eng.has_unfinished_requests()
    assert not eng.abort(rid)


def test_too_long_prompt_rejected(llm):
    limit = llm.engine.max_model_len
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([[5] * (limit + 1)])
    with pytest.raises(ValueError, match="can never run"):
        llm.generate([[5] * 100], SamplingParams(max_tokens=llm.engine.num_kv_tokens))


def test_n_samples_share_prompt_blocks(llm, hf_greedy, prompts):
    out = llm.generate([prompts[2]], SamplingParams(n=3, temperature=0.0, max_tokens=6))[0]
    want = hf_greedy(prompts[2], 6)
    assert len(out.outputs) == 3 and [c.index for c in out.outputs] == [0, 1, 2]
    assert all(c.token_ids == want for c in out.outputs)  # COW kept every copy intact
    sampled = llm.generate([prompts[0]], SamplingParams(n=4, temperature=1.0, seed=3, max_tokens=8))[0]
    assert len({tuple(c.token_ids) for c in sampled.outputs}) > 1


def test_int8_kv_close_to_fp32(engine_factory, llm, prompts):
    q8 = engine_factory(num_blocks=64, kv_cache_dtype="int8")
    sp = SamplingParams(temperature=0.0, max_tokens=8, logprobs=0)
    ref = llm.generate(prompts, sp)
    got = q8.generate(prompts, sp)
    assert q8.engine.runner.caches[0].k.dtype.itemsize == 1
    agree = sum(a == b for r, g in zip(ref, got, strict=True) for a, b in zip(r.token_ids, g.token_ids))
    assert agree >= 0.75 * 8 * len(prompts)
    first = [abs(r.outputs[0].logprobs[0][r.token_ids[0]] - g.outputs[0].logprobs[0][r.token_ids[0]])
             for r, g in zip(ref, got, strict=True) if r.token_ids[0] == g.token_ids[0]]
    assert first and max(first) < 0.2


def test_prefix_cache_save_load(llm, greedy, tmp_path, system_prompt):
    llm.clear_prefix_cache()
    prompt = system_prompt + " Persisted question?"
    cold = llm.generate([prompt], greedy(6))[0]
    n = llm.save_prefix_cache(tmp_path / "prefix.pt")
    assert n >= 2
    llm.clear_prefix_cache()
    assert llm.load_prefix_cache(tmp_path / "prefix.pt") == n
    warm = llm.generate([prompt], greedy(6))[0]
    assert warm.metrics.cached_prompt_tokens > 0
    assert warm.token_ids == cold.token_ids


def test_priority_runs_first(llm):
    outs_order = []
    eng = llm.engine
    low = eng.add_request(_ids(20, 2000), SamplingParams(temperature=0.0, max_tokens=3), priority=5)
    high = eng.add_request(_ids(20, 3000), SamplingParams(temperature=0.0, max_tokens=3), priority=-1)
    eng.scheduler.max_num_seqs, old = 1, eng.scheduler.max_num_seqs
    try:
        while eng.has_unfinished_requests():
            outs_order += [o.request_id for o in eng.step() if o.finished]
    finally:
        eng.scheduler.max_num_seqs = old
    assert outs_order == [high, low]


def test_concurrent_same_prefix_computed_once(llm, greedy):
    """Requests arriving together with a shared uncached prefix: one computes it, the rest wait a
    step and hit the cache instead of computing (and storing) copies of it."""
    llm.clear_prefix_cache()
    bs = llm.engine.bm.block_size
    prefix = _ids(4 * bs, 4000)
    outs = llm.generate([prefix + [21 + i, 22, 23] for i in range(4)], greedy(2))
    assert sorted(o.metrics.cached_prompt_tokens for o in outs) == [0, 4 * bs, 4 * bs, 4 * bs]


def test_higher_priority_preempts_running(llm, hf_greedy):
    """A running low-priority request gives its seat to a later high-priority one and still
    finishes with the same tokens (preemption by recompute loses nothing)."""
    eng = llm.engine
    sp = SamplingParams(temperature=0.0, max_tokens=12)
    eng.scheduler.max_num_seqs, old = 1, eng.scheduler.max_num_seqs
    finished: dict[str, list[int]] = {}
    try:
        low = eng.add_request(_ids(20, 4000), sp, priority=5)
        for _ in range(4):  # low is now decoding
            eng.step()
        high = eng.add_request(_ids(20, 5000), sp, priority=-1)
        order = []
        while eng.has_unfinished_requests():
            for o in eng.step():
                if o.finished:
                    order.append(o.request_id)
                    finished[o.request_id] = o
    finally:
        eng.scheduler.max_num_seqs = old
    assert order == [high, low]
    assert finished[low].metrics.preemptions == 1 and finished[high].metrics.preemptions == 0
    assert finished[low].token_ids == hf_greedy(_ids(20, 4000), 12)
