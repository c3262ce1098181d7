"""K/V reuse at shifted positions (issue 25): the passage KV cache and KV shifting (cache_reuse).

Real SmolLM2 engines; every full-prefill reference is the same engine with the prefix cache cleared
and no passage spans, so the only difference under test is the reuse path.
"""

from __future__ import annotations

import logging

import pytest
import torch

from inference import SamplingParams
from inference.kv_cache import bytes_per_block
from inference.kv_reuse import NoRotaryError, join_segments, locate_spans, require_rope
from inference.model_loader import resolve_model_dir

PASSAGES = [
    "Paris is the capital and most populous city of France. It is located on the Seine river, in the north.",
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, named after Gustave Eiffel.",
    "Mount Everest is Earth's highest mountain above sea level, in the Himalayas on the border of Nepal and China.",
    "The Great Wall of China is a series of fortifications built across the northern borders of ancient states.",
    "The Amazon is the largest rainforest on Earth, covering much of the Amazon basin of South America.",
    "Honey bees live in colonies with a single queen, thousands of female workers and a few hundred drones.",
]
SYSTEM = "<|im_start|>system\nAnswer the question from the passages.<|im_end|>\n<|im_start|>user\nContext:\n\n"
QUESTION = "Who is the Eiffel Tower named after?"
POOL_BLOCKS = 10  # passage region of the shared engine: 10 blocks of 16 tokens


def rag_prompt(tok, order: list[int], question: str = QUESTION, system: str = SYSTEM):
    pieces = [(system, False)]
    for j, i in enumerate(order):
        pieces += [(f"[{j + 1}] ", False), (PASSAGES[i], True), ("\n\n", False)]
    pieces.append((f"Question: {question}<|im_end|>\n<|im_start|>assistant\n", False))
    return join_segments(tok, pieces)


@pytest.fixture(scope="module")
def pc_llm(engine_factory, tmp_path_factory):
    from transformers import AutoConfig

    c = AutoConfig.from_pretrained(str(resolve_model_dir("smollm2")))
    per_block = bytes_per_block(c.num_hidden_layers, 16, c.num_key_value_heads,
                                c.hidden_size // c.num_attention_heads, False, torch.float32)
    disk = tmp_path_factory.mktemp("passage_kv")
    eng = engine_factory(num_blocks=64, max_num_batched_tokens=512,
                         passage_cache={"enabled": True, "max_gb": POOL_BLOCKS * per_block / 2**30,
                                        "disk_path": str(disk), "recompute_ratio": 0.15})
    eng.disk = disk
    return eng


@pytest.fixture
def fresh(pc_llm):
    """Empty prefix and passage caches and the default ratio; the files on disk are kept."""
    pc_llm.clear_prefix_cache()
    pc_llm.clear_passage_cache()
    pc_llm.engine.kv_reuse.recompute_ratio = 0.15
    yield pc_llm
    pc_llm.engine.kv_reuse.recompute_ratio = 0.15
    pc_llm.engine.kv_reuse.miss_inline = True


def _greedy(n: int = 12, **kw) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True, **kw)


def _reference(llm, ids, n: int = 12, **kw):
    llm.clear_prefix_cache()
    out = llm.generate([ids], _greedy(n, **kw))[0]
    llm.clear_prefix_cache()
    return out


def test_shift_keys_equals_rope_at_the_target_position(pc_llm):
    """Bug: a wrong sign for negative deltas or a non-composing rotation (the cache would hold K at
    the wrong position)."""
    rot = pc_llm.engine.model.rotary
    g = torch.Generator().manual_seed(0)
    k = torch.randn(6, 3, 64, generator=g)
    q = torch.zeros_like(k)
    src = torch.tensor([0, 5, 40, 100, 7, 300])
    delta = torch.tensor([3, -5, 17, -60, 0, 250])
    _, k_src = rot(src, q, k)
    _, k_dst = rot(src + delta, q, k)
    # float32 angle tables: the error grows with the position (3.6e-5 at 550)
    assert torch.allclose(rot.shift_keys(k_src, delta), k_dst, atol=1e-4)


def test_placed_passage_keys_equal_keys_computed_at_the_new_position(fresh):
    """Layer-0 K depends on token and position only, so a cached passage placed at another
    position must hold exactly the K a full prefill computes there. Bug: K copied unrotated,
    rotated by the wrong delta, or written into the wrong slots."""
    eng = fresh.engine
    tok = fresh.tokenizer
    warm_ids, warm_spans = rag_prompt(tok, [2, 1])
    fresh.generate([warm_ids], _greedy(1), passage_spans=[warm_spans])  # caches passages 2 and 1
    ids, spans = rag_prompt(tok, [1, 2])  # passage 2 now later: a non-zero delta
    s, e = spans[1]

    def layer_keys(passage_spans):
        fresh.clear_prefix_cache()
        rid = eng.add_request(ids, _greedy(2), passage_spans=passage_spans)
        eng.step()
        seq = eng.requests[rid].seqs[0]
        slots = eng.runner.slots_of(seq.block_table, s, e)
        k = [eng.runner.caches[li].gather_slots(slots)[0].clone() for li in (0, 5)]
        eng.abort(rid)
        return k

    before = eng.stats()["passage_cache_hits"]
    placed = layer_keys(spans)
    assert eng.stats()["passage_cache_hits"] - before == 2
    full = layer_keys(None)
    assert torch.allclose(placed[0], full[0], atol=1e-4)
    assert not torch.allclose(placed[1], full[1], atol=1e-4)  # deeper layers really were reused


def test_ratio_one_equals_full_prefill(fresh):
    """recompute_ratio 1.0 recomputes every reused token: the blend must be a full prefill. Bug: a
    wrong mask or position on the custom attention layout, or a dropped token."""
    tok = fresh.tokenizer
    ids, spans = rag_prompt(tok, [0, 1, 2])
    ref = _reference(fresh, ids, logprobs=5)
    fresh.generate([rag_prompt(tok, [2, 0, 1])[0]], _greedy(1),
                   passage_spans=[rag_prompt(tok, [2, 0, 1])[1]])  # cache them at other positions
    fresh.engine.kv_reuse.recompute_ratio = 1.0
    fresh.clear_prefix_cache()
    out = fresh.generate([ids], _greedy(logprobs=5), passage_spans=[spans])[0]
    assert out.token_ids == ref.token_ids
    first, first_ref = out.outputs[0].logprobs[0], ref.outputs[0].logprobs[0]
    assert all(abs(first[t] - first_ref[t]) < 1e-3 for t in first_ref)


def test_pure_reuse_gives_close_logits_and_counts_hits(fresh):
    """ratio 0: every passage token keeps the K/V computed on its own. Bug: the passage reused from
    another prompt's key, or stats not counting."""
    tok = fresh.tokenizer
    ids, spans = rag_prompt(tok, [2, 0, 1])
    ref = _reference(fresh, ids)
    cands = ref.token_ids[:1] + tok.encode(" Paris Gustave The It", add_special_tokens=False)
    ref_lp = _reference(fresh, ids, 1, candidate_token_ids=cands).candidate_logprobs
    fresh.generate([rag_prompt(tok, [0, 1, 2])[0]], _greedy(1), passage_spans=[rag_prompt(tok, [0, 1, 2])[1]])
    fresh.engine.kv_reuse.recompute_ratio = 0.0
    before = fresh.stats()
    fresh.clear_prefix_cache()
    out = fresh.generate([ids], _greedy(1, candidate_token_ids=cands), passage_spans=[spans])[0]
    after = fresh.stats()
    assert after["passage_cache_hits"] - before["passage_cache_hits"] == 3
    assert after["passage_cache_tokens_reused"] - before["passage_cache_tokens_reused"] == sum(e - s for s, e in spans)
    assert after["recomputed_tokens"] == before["recomputed_tokens"]
    assert out.token_ids[0] == ref.token_ids[0]
    assert max(abs(out.candidate_logprobs[t] - ref_lp[t]) for t in cands) < 1.0


def test_reused_kv_never_enters_the_prefix_cache(fresh):
    """Blocks after the first reused token hold approximate K/V; a later plain request of the same
    prompt must not get them from the prefix cache. Bug: blended blocks hashed as exact."""
    tok = fresh.tokenizer
    ids, spans = rag_prompt(tok, [1, 0])
    ref = _reference(fresh, ids)
    fresh.generate([rag_prompt(tok, [0, 1])[0]], _greedy(1), passage_spans=[rag_prompt(tok, [0, 1])[1]])
    fresh.engine.kv_reuse.recompute_ratio = 0.0
    fresh.clear_prefix_cache()
    fresh.generate([ids], _greedy(1), passage_spans=[spans])
    hits = fresh.stats()["prefix_cache_hits"]
    again = fresh.generate([ids], _greedy())[0]
    assert fresh.stats()["prefix_cache_hits"] - hits <= spans[0][0]
    assert again.token_ids == ref.token_ids


def test_the_same_blended_prompt_again_is_a_prefix_cache_hit(fresh):
    """The per-passage candidate decodes of a short answer submit one blended prompt k times. Bug:
    each paid its own reuse pass (blended blocks kept out of the prefix cache altogether), or the
    hit served K/V other than what the first request computed (its answer would differ)."""
    tok = fresh.tokenizer
    ids, spans = rag_prompt(tok, [1, 0, 2])
    fresh.generate([rag_prompt(tok, [0, 1, 2])[0]], _greedy(1), passage_spans=[rag_prompt(tok, [0, 1, 2])[1]])
    fresh.engine.kv_reuse.recompute_ratio = 0.0
    fresh.clear_prefix_cache()
    s0 = fresh.stats()
    first = fresh.generate([ids], _greedy(), passage_spans=[spans])[0]
    s1 = fresh.stats()
    assert s1["reuse_prefills"] - s0["reuse_prefills"] == 1 and s1["passage_cache_hits"] - s0["passage_cache_hits"] == 3
    second = fresh.generate([ids], _greedy(), passage_spans=[spans])[0]
    s2 = fresh.stats()
    assert s2["reuse_prefills"] == s1["reuse_prefills"] and s2["passage_cache_hits"] == s1["passage_cache_hits"]
    assert s2["prefix_cache_hits"] - s1["prefix_cache_hits"] >= len(ids) - 16
    assert second.token_ids == first.token_ids


def test_a_miss_is_computed_in_the_prompt_prefill_and_stored_after_the_prefix(fresh):
    """miss_compute: prompt (the default). A cold cache must answer exactly as a plain prefill and
    store both passages; the second one, computed at its prompt position, must be stored K-rotated
    back to the position right after the prefix, where `alone` computes it. Bug: a cold request
    paying an extra forward or answering differently, misses not stored, or K stored unrotated."""
    eng = fresh.engine
    kr, tok = eng.kv_reuse, fresh.tokenizer
    store = kr.store
    ids, spans = rag_prompt(tok, [0, 3])
    prefix = spans[0][0]

    def forget_files():
        for s, e in spans:
            store.file_for(ids[:prefix], ids[s:e]).unlink(missing_ok=True)
        fresh.clear_passage_cache()
        fresh.clear_prefix_cache()

    def stored_keys():
        s, e = spans[1]
        entry = store.entries[store.key(store.prefix_id(ids[:prefix]), ids[s:e])]
        return [eng.runner.caches[li].gather_slots(entry.slots)[0].clone() for li in (0, 5)]

    ref = _reference(fresh, ids, logprobs=5)
    forget_files()
    before = fresh.stats()
    out = fresh.generate([ids], _greedy(logprobs=5), passage_spans=[spans])[0]
    after = fresh.stats()
    assert out.token_ids == ref.token_ids
    first, first_ref = out.outputs[0].logprobs[0], ref.outputs[0].logprobs[0]
    assert all(abs(first[t] - first_ref[t]) < 1e-4 for t in first_ref)
    assert after["passage_cache_misses"] - before["passage_cache_misses"] == 2
    assert after["passage_cache_hits"] == before["passage_cache_hits"]
    assert after["passage_cache_entries"] == 2
    inline = stored_keys()
    forget_files()
    kr.miss_inline = False
    fresh.generate([ids], _greedy(1), passage_spans=[spans])
    alone = stored_keys()
    assert torch.allclose(inline[0], alone[0], atol=1e-4)  # layer 0: token and position only
    assert not torch.allclose(inline[1], alone[1], atol=1e-3)  # deeper: it attended to passage 0
    # and the stored entry is what a hit reuses: the next request finds both
    fresh.clear_prefix_cache()
    hits = fresh.stats()["passage_cache_hits"]
    fresh.generate([ids], _greedy(1), passage_spans=[spans])
    assert fresh.stats()["passage_cache_hits"] == hits + 2


def test_a_prompt_with_no_cached_passage_takes_the_plain_batched_prefill(fresh):
    """Two cold prompts sent together: neither gets a reuse pass of its own (they prefill in the
    normal batch, as with the cache off), both answer exactly as a plain prefill, and all four
    passages are stored once computed, so a prompt reordering two of them hits both. Bug: a cold
    prompt paying a separate, unbatched pass; passages of the plain path never stored, or stored
    from blocks not yet computed (the hit would then answer from garbage)."""
    kr, tok, store = fresh.engine.kv_reuse, fresh.tokenizer, fresh.engine.kv_reuse.store
    prompts = [rag_prompt(tok, [0, 3]), rag_prompt(tok, [1, 4])]
    for ids, spans in prompts:
        for s, e in spans:
            store.file_for(ids[:spans[0][0]], ids[s:e]).unlink(missing_ok=True)
    refs = [_reference(fresh, ids) for ids, _ in prompts]
    fresh.clear_passage_cache()
    before, n_reuse = fresh.stats(), kr.reuse_prefills
    outs = fresh.generate([ids for ids, _ in prompts], _greedy(), passage_spans=[sp for _, sp in prompts])
    after = fresh.stats()
    assert [o.token_ids for o in outs] == [r.token_ids for r in refs]
    assert kr.reuse_prefills == n_reuse
    assert after["passage_cache_entries"] == 4
    assert after["passage_cache_misses"] - before["passage_cache_misses"] == 4
    b_ids, b_spans = prompts[1]

    def stored_k0() -> torch.Tensor:  # layer-0 K of prompt b's second passage, as stored
        s, e = b_spans[1]
        entry = store.entries[store.key(store.prefix_id(b_ids[:b_spans[0][0]]), b_ids[s:e])]
        return fresh.engine.runner.caches[0].gather_slots(entry.slots)[0].clone()

    plain = stored_k0()
    ids, spans = rag_prompt(tok, [4, 1])  # prompt b's passages, reordered
    ref = _reference(fresh, ids, 1)
    kr.recompute_ratio = 0.0  # pure reuse: the answer reads the stored K/V as it is
    out = fresh.generate([ids], _greedy(1), passage_spans=[spans])[0]
    assert fresh.stats()["passage_cache_hits"] - after["passage_cache_hits"] == 2
    assert kr.reuse_prefills == n_reuse + 1
    assert out.token_ids[0] == ref.token_ids[0]
    # layer 0 depends on token and position only: the stored K equals the one `alone` computes
    # right after the prefix, so it was read from computed blocks and rotated back
    fresh.clear_passage_cache()
    fresh.clear_prefix_cache()
    for s, e in b_spans:
        store.file_for(b_ids[:b_spans[0][0]], b_ids[s:e]).unlink(missing_ok=True)
    kr.miss_inline = False
    fresh.generate([b_ids], _greedy(1), passage_spans=[b_spans])
    assert torch.allclose(plain, stored_k0(), atol=1e-4)


def test_passages_after_a_prefix_served_one_keep_their_key(fresh):
    """Two one-passage prompts store passages 0 and 1 (plain prefills: their exact blocks also
    enter the prefix cache); the prompt [0, 1] then gets passage 0 from the prefix cache and must
    still find passage 1 in the passage cache. Bug: keys taken from the prompt up to the first
    passage still to compute, so every passage after a prefix-served one missed (the warm hit rate
    of bench/kv_reuse.py fell from 1.0 to 0.12)."""
    tok, store = fresh.tokenizer, fresh.engine.kv_reuse.store
    for i in (0, 1):
        ids, spans = rag_prompt(tok, [i])
        store.file_for(ids[:spans[0][0]], ids[spans[0][0]:spans[0][1]]).unlink(missing_ok=True)
    fresh.clear_passage_cache()
    for i in (0, 1):
        ids, spans = rag_prompt(tok, [i])
        fresh.generate([ids], _greedy(1), passage_spans=[spans])
    before = fresh.stats()
    ids, spans = rag_prompt(tok, [0, 1])
    fresh.generate([ids], _greedy(1), passage_spans=[spans])
    after = fresh.stats()
    assert after["passage_prefix_hits"] - before["passage_prefix_hits"] == 1  # passage 0
    assert after["passage_cache_hits"] - before["passage_cache_hits"] == 1  # passage 1
    assert after["passage_cache_misses"] == before["passage_cache_misses"]


def test_lru_budget_is_enforced(fresh):
    """Six passages of two blocks each into a ten-block region: the least recently used go, the
    region never overflows. Bug: no eviction (unbounded memory) or evicting the most recent."""
    tok = fresh.tokenizer
    st = fresh.stats
    for i in range(6):
        ids, spans = rag_prompt(tok, [i])
        fresh.generate([ids], _greedy(1), passage_spans=[spans])
        assert st()["passage_cache_blocks_used"] <= st()["passage_cache_blocks_total"] == POOL_BLOCKS
    assert st()["passage_cache_evictions"] >= 1
    assert st()["passage_cache_entries"] == 5
    fresh.clear_prefix_cache()
    hits = st()["passage_cache_hits"]
    ids, spans = rag_prompt(tok, [5])  # the most recent: still cached
    fresh.generate([ids], _greedy(1), passage_spans=[spans])
    assert st()["passage_cache_hits"] == hits + 1


def test_a_passage_larger_than_the_region_is_computed_not_cached(fresh):
    """A passage needing more blocks than `max_gb` holds: no entry, nothing evicted, the answer a
    full prefill's. Bug: an allocation past the region (writing into request blocks) or a crash."""
    tok = fresh.tokenizer
    ids, spans = rag_prompt(tok, [0])
    fresh.generate([ids], _greedy(1), passage_spans=[spans])  # one entry, kept
    long_text = " ".join(PASSAGES * 2)  # ~290 tokens: 19 blocks, the region has 10
    pieces = [(SYSTEM, False), ("[1] ", False), (long_text, True),
              (f"\n\nQuestion: {QUESTION}<|im_end|>\n<|im_start|>assistant\n", False)]
    long_ids, long_spans = join_segments(tok, pieces)
    assert -(-(long_spans[0][1] - long_spans[0][0]) // 16) > POOL_BLOCKS
    ref = _reference(fresh, long_ids)
    before = fresh.stats()
    out = fresh.generate([long_ids], _greedy(), passage_spans=[long_spans])[0]
    after = fresh.stats()
    assert out.token_ids == ref.token_ids
    assert after["passage_cache_entries"] == before["passage_cache_entries"] == 1
    assert after["passage_cache_evictions"] == before["passage_cache_evictions"]
    assert after["passage_cache_blocks_used"] <= POOL_BLOCKS


def test_max_gb_beyond_memory_is_refused_at_start(engine_factory):
    """A region larger than free memory would fill until the process is killed: refused at start,
    naming the key. Bug: max_gb taken as given (an out-of-memory hours later)."""
    with pytest.raises(ValueError, match=r"passage_cache.max_gb 100000.* does not fit in memory"):
        engine_factory(num_blocks=16, passage_cache={"enabled": True, "max_gb": 1e5})


def test_passage_region_is_part_of_the_kv_budget():
    """With the pool sized by `kv_cache_memory` (no `num_blocks`), the passage region comes out of
    that budget: an engine with the cache on takes no more K/V memory than one with it off (the rag
    pipeline turns it on by default, and a default engine must start wherever a cache-off one
    did). A region as large as the budget is refused, naming both keys. Bugs caught: the region
    added on top of the budget, or the pool sized as if there were no region."""
    import gc

    from inference import LLM

    budget = 1.5  # GiB (> 1: absolute); 64 sequences of 2,048 tokens would need more, so the budget binds
    llm = LLM("smollm2", dtype="float32", quantization="none", max_model_len=2048, max_num_seqs=64,
              kv_cache_memory=budget, passage_cache={"enabled": True, "max_gb": 0.25})
    try:
        eng = llm.engine
        per_block = eng.kv_bytes / eng.bm.num_blocks
        assert eng.passage_cache_bytes > 0
        assert eng.kv_bytes + eng.passage_cache_bytes <= budget * 2**30
        assert eng.kv_bytes > (budget - 0.25) * 2**30 - per_block  # the rest of the budget is the pool
    finally:
        del llm, eng
        gc.collect()
    with pytest.raises(ValueError, match=r"passage_cache.max_gb 2.* leaves nothing of kv_cache_memory"):
        LLM("smollm2", dtype="float32", quantization="none", max_model_len=2048, kv_cache_memory=budget,
            passage_cache={"enabled": True, "max_gb": 2.0})
    gc.collect()


def test_disk_cache_is_keyed_and_skips_bad_files(fresh, caplog):
    """Files are keyed by model, template (the prompt's prefix) and passage: another template is a
    miss, a file saved for another model is ignored, a corrupt one is skipped with a warning. Bug:
    a key without the template, or a crash / wrong K/V from a bad file."""
    tok = fresh.tokenizer
    ids, spans = rag_prompt(tok, [3])
    fresh.generate([ids], _greedy(1), passage_spans=[spans])  # written through to disk
    files = sorted(fresh.disk.glob("*.pt"))
    assert files
    st = fresh.stats
    # memory cleared: the passage comes back from its file
    fresh.clear_passage_cache()
    fresh.clear_prefix_cache()
    disk_hits = st()["passage_cache_disk_hits"]
    fresh.generate([ids], _greedy(1), passage_spans=[spans])
    assert st()["passage_cache_disk_hits"] == disk_hits + 1
    # another template (system prompt): same passage tokens, another key
    hits = st()["passage_cache_hits"]
    other_ids, other_spans = rag_prompt(tok, [3], system=SYSTEM.replace("Answer", "Reply to"))
    fresh.generate([other_ids], _greedy(1), passage_spans=[other_spans])
    assert st()["passage_cache_hits"] == hits
    # the passage's file rewritten as if saved by another model: ignored
    store = fresh.engine.kv_reuse.store
    s, e = spans[0]
    path = store._file(store.key(store.prefix_id(ids[:s]), ids[s:e]))
    data = torch.load(path, weights_only=True)
    for bad in ({**data, "signature": {**data["signature"], "model": "another-model"}}, None):
        if bad is None:
            path.write_bytes(b"not a torch file")
        else:
            torch.save(bad, path)
        fresh.clear_passage_cache()
        fresh.clear_prefix_cache()
        disk_hits = st()["passage_cache_disk_hits"]
        with caplog.at_level(logging.INFO, logger="inference.passage_store"):
            out = fresh.generate([ids], _greedy(1), passage_spans=[spans])[0]
        assert st()["passage_cache_disk_hits"] == disk_hits
        assert out.token_ids
    assert any("ignoring" in r.message for r in caplog.records)
    assert any(r.levelno == logging.WARNING and "corrupt" in r.message for r in caplog.records)


def test_bad_passage_spans_are_refused(fresh):
    ids, _ = rag_prompt(fresh.tokenizer, [0])
    with pytest.raises(ValueError, match="passage_spans"):
        fresh.engine.add_request(ids, _greedy(1), passage_spans=[(10, 20), (15, 30)])
    with pytest.raises(ValueError, match="passage_spans"):
        fresh.engine.add_request(ids, _greedy(1), passage_spans=[(0, len(ids) + 1)])


def test_cache_reuse_shifts_cached_blocks(engine_factory):
    """cache_reuse: the second prompt holds the first one's cached blocks at another position; they
    are reused re-rotated and counted. Bug: runs not found (no reuse) or reused unshifted."""
    llm = engine_factory(num_blocks=64, cache_reuse=32)
    tok = llm.tokenizer
    body = " ".join(PASSAGES[:3])
    first = tok.encode(SYSTEM + body, add_special_tokens=False)
    second = tok.encode(SYSTEM + "[1] " + PASSAGES[4] + "\n\n" + body + "\nQuestion: " + QUESTION,
                        add_special_tokens=False)
    ref = _reference(llm, second, 8)
    llm.generate([first], _greedy(1))
    out = llm.generate([second], _greedy(8))[0]
    reused = llm.stats()["kv_shift_reused_tokens"]
    assert reused >= 32 and reused % 16 == 0
    assert out.token_ids[0] == ref.token_ids[0]


def test_reuse_is_refused_without_rope(pc_llm):
    """Bug: a model without RoPE would get unrotatable K/V moved to new positions silently."""
    with pytest.raises(NoRotaryError, match="rotary position embeddings"):
        require_rope(torch.nn.Linear(2, 2), "generator.engine.cache_reuse")
    assert require_rope(pc_llm.engine.model, "cache_reuse") is pc_llm.engine.model.rotary


def test_locate_spans_gives_the_same_passage_tokens_at_any_position(pc_llm):
    """A prompt rendered and tokenised whole (as rag builds it): the located passage tokens must be
    the same in two prompts that hold the passage at different positions, or the cache never hits.
    Bug: spans off by a boundary token, or a passage matched inside another one."""
    tok = pc_llm.tokenizer

    def render(order):
        body = "\n\n".join(f"[{j + 1}] {PASSAGES[i]}" for j, i in enumerate(order))
        text = SYSTEM + body + f"\n\nQuestion: {QUESTION}<|im_end|>\n<|im_start|>assistant\n"
        ids = tok.encode(text, add_special_tokens=False)
        return ids, locate_spans(tok, ids, [PASSAGES[i] for i in order])

    a_ids, a_spans = render([0, 1, 2])
    b_ids, b_spans = render([2, 0])
    assert len(a_spans) == 3 and len(b_spans) == 2
    assert a_ids[slice(*a_spans[0])] == b_ids[slice(*b_spans[1])]  # passage 0: first, then second
    assert a_ids[slice(*a_spans[2])] == b_ids[slice(*b_spans[0])]
    assert PASSAGES[1][5:-5] in tok.decode(a_ids[slice(*a_spans[1])])
    pc_llm.clear_prefix_cache()
    pc_llm.generate([a_ids], _greedy(1), passage_spans=[a_spans])
    hits = pc_llm.stats()["passage_cache_hits"]
    pc_llm.clear_prefix_cache()
    pc_llm.generate([b_ids], _greedy(1), passage_spans=[b_spans])
    assert pc_llm.stats()["passage_cache_hits"] - hits >= 1  # passage 0 moved to second place: a hit


CHECK = "<|im_start|>system\nCheck the answer.<|im_end|>\n<|im_start|>user\nPassage:\n"


def check_prompt(tok, i: int):
    """Another template around one passage (as the answerability checks have their own)."""
    return join_segments(tok, [(CHECK, False), (PASSAGES[i], True),
                               (f"\n\nQuestion: {QUESTION} Yes or no?<|im_end|>\n<|im_start|>assistant\n", False)])


def _k0(llm, ids, span, **kw) -> tuple[torch.Tensor, dict]:
    """Layer-0 K at `span` after the prompt's first step (prefix cache cleared first), and the
    passage-cache hits and misses it cost. Layer 0 depends on token and position only, so a placed
    passage must equal a plain prefill here."""
    eng = llm.engine
    llm.clear_prefix_cache()
    before = llm.stats()
    rid = eng.add_request(ids, _greedy(2), **kw)
    eng.step()
    seq = eng.requests[rid].seqs[0]
    k0 = eng.runner.caches[0].gather_slots(eng.runner.slots_of(seq.block_table, *span))[0].clone()
    eng.abort(rid)
    eng.step()
    after = llm.stats()
    return k0, {k: after[k] - before[k] for k in ("passage_cache_hits", "passage_cache_misses")}


def test_an_anchored_request_reads_and_stores_under_another_prompts_key(fresh):
    """A check prompt naming the answer prompt's template as its anchor must read the passage that
    prompt stored (a hit, no miss), placed where it now stands; a passage it misses must be stored
    under the anchor's key, K at the position after the anchor, so the answer template then finds
    it. Bugs caught: the anchor ignored (its own template: a miss, the answer's checks prefilling
    every passage again), the stored K placed from the wrong base position (the check's own
    template length instead of the anchor's), a miss stored under the wrong key or position."""
    kr, tok, store = fresh.engine.kv_reuse, fresh.tokenizer, fresh.engine.kv_reuse.store
    a_ids, a_spans = rag_prompt(tok, [0, 3])
    anchor = a_ids[:a_spans[0][0]]
    for i in (0, 3, 4):
        ids, spans = rag_prompt(tok, [i])
        store.file_for(anchor, ids[spans[0][0]:spans[0][1]]).unlink(missing_ok=True)
    fresh.clear_passage_cache()
    fresh.generate([a_ids], _greedy(1), passage_spans=[a_spans])  # cold: stores passages 0 and 3
    kr.recompute_ratio = 0.0
    c_ids, c_spans = check_prompt(tok, 3)
    placed, counts = _k0(fresh, c_ids, c_spans[0], passage_spans=c_spans, passage_anchor=anchor)
    assert counts == {"passage_cache_hits": 1, "passage_cache_misses": 0}
    assert torch.allclose(placed, _k0(fresh, c_ids, c_spans[0])[0], atol=1e-4)
    _, own = _k0(fresh, c_ids, c_spans[0], passage_spans=c_spans)  # its own template: a miss
    assert own == {"passage_cache_hits": 0, "passage_cache_misses": 1}
    # a miss of an anchored request is stored under the anchor, K after it: the answer template finds it
    m_ids, m_spans = check_prompt(tok, 4)
    fresh.clear_prefix_cache()
    fresh.generate([m_ids], _greedy(1), passage_spans=[m_spans], passage_anchors=[anchor])
    ids, spans = rag_prompt(tok, [4])
    assert ids[:spans[0][0]] == anchor
    hit, counts = _k0(fresh, ids, spans[0], passage_spans=spans)
    assert counts == {"passage_cache_hits": 1, "passage_cache_misses": 0}
    assert torch.allclose(hit, _k0(fresh, ids, spans[0])[0], atol=1e-4)


def test_a_request_that_stores_no_passages_reads_the_cache_and_leaves_it_as_it_was(fresh):
    """`SamplingParams.store_passages=False` (rag's long prompt reading its gate's entries): a
    cached passage is still read (a hit), a missed one is computed in the prompt and kept nowhere,
    on the reuse path (one passage cached) and on the plain prefill path (none cached); its output is
    the storing request's. Bugs caught: the flag ignored (a passage computed amid others stored under
    the key exact entries live under), a miss left out of the prompt's K/V (a wrong answer), or the
    reads switched off too."""
    tok, store = fresh.tokenizer, fresh.engine.kv_reuse.store
    ids, spans = rag_prompt(tok, [0, 3])
    prefix = spans[0][0]

    def forget() -> None:  # memory and disk
        for i in (0, 3):
            one, one_spans = rag_prompt(tok, [i])
            store.file_for(one[:prefix], one[one_spans[0][0]:one_spans[0][1]]).unlink(missing_ok=True)
        fresh.clear_passage_cache()
        fresh.clear_prefix_cache()

    forget()
    ref = fresh.generate([ids], _greedy(), passage_spans=[spans])[0]  # cold, storing: the reference
    forget()
    st = fresh.stats()
    out = fresh.generate([ids], _greedy(store_passages=False), passage_spans=[spans])[0]  # cold: plain prefill
    after = fresh.stats()
    assert out.token_ids == ref.token_ids
    assert after["passage_cache_entries"] == 0 and after["passage_cache_misses"] - st["passage_cache_misses"] == 2
    one, one_spans = rag_prompt(tok, [0])
    fresh.clear_prefix_cache()  # else its passage is served from the blocks the last prompt left
    fresh.generate([one], _greedy(1), passage_spans=[one_spans])  # passage 0 cached (after the prefix)
    assert fresh.stats()["passage_cache_entries"] == 1
    fresh.clear_prefix_cache()
    st = fresh.stats()
    fresh.generate([ids], _greedy(store_passages=False), passage_spans=[spans])  # reuse path: 0 hit, 3 missed
    after = fresh.stats()
    assert after["passage_cache_hits"] - st["passage_cache_hits"] == 1
    assert after["passage_cache_misses"] - st["passage_cache_misses"] == 1
    assert after["passage_cache_entries"] == 1  # passage 3 was not stored
    for i in (0, 3):  # nor written to disk
        one, one_spans = rag_prompt(tok, [i])
        assert store.file_for(one[:prefix], one[one_spans[0][0]:one_spans[0][1]]).exists() == (i == 0)
