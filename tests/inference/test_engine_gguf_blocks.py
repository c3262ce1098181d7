"""GGUF weights kept in their block formats (`inference.gguf_loader`, `inference.layers.gguf_linear`)
against the float32-dequantised model (itself token-identical to HF transformers).

The block model runs the native kernels when `inference.kernels` loads; until then (or on a
machine where it cannot build) the same loader is tested with the torch backend (rows
dequantised once with gguf-py, `F.linear`), and the kernel-only bounds are skipped with a reason.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoConfig

from inference import SamplingParams
from inference.catalog import catalog_gguf
from inference.config import EngineConfig
from inference.gguf_convert import GGUFFileError, open_gguf
from inference.gguf_loader import UnsupportedTensorType, load_gguf_model
from inference.layers.gguf_linear import (
    GGUFLinear,
    RowGroup,
    kernel_error,
    kernel_ops,
    weight_bytes,
)
from inference.model_loader import resolve_model_dir
from inference.quant_mode import plan_quantization

REPO = Path(__file__).resolve().parents[2]
KERNELS = kernel_ops() is not None
BACKEND = "kernels" if KERNELS else "torch"
Q4_1, Q8_0 = 3, 8
TEXT = ("A block table maps each sequence to the blocks that hold its tokens, so two requests that "
        "start with the same system prompt can share those blocks instead of computing them twice.")


@pytest.fixture(scope="module")
def gguf_path():
    return catalog_gguf("smollm2")


@pytest.fixture(scope="module")
def hf_config(model_dir):
    return AutoConfig.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def block_llm(gguf_path, hf_config, engine_factory):
    """The engine on GGUF blocks: `quantization: gguf` with the kernels; without them the float
    engine's model is swapped for a torch-backend block model (same loader, same runner)."""
    if KERNELS:
        llm = engine_factory(num_blocks=64, quantization="gguf")
        assert llm.engine.quant.mode == "gguf"
        return llm
    llm = engine_factory(num_blocks=64)
    model = load_gguf_model(gguf_path, hf_config, backend="torch")
    model.set_kv_caches(llm.engine.runner.caches)
    llm.engine.model = llm.engine.runner.model = model
    return llm


@pytest.fixture(scope="module")
def fresh_blocks(gguf_path, hf_config):
    """A block model no forward has touched (the torch backend's float copies appear on first use)."""
    return load_gguf_model(gguf_path, hf_config, backend=BACKEND)


def test_every_weight_is_a_block_layer(block_llm):
    """Catches a projection, the embedding or the head left as a float nn.Linear/nn.Embedding (the
    float32 copy this path exists to avoid)."""
    model = block_llm.engine.model
    assert not any(type(m) in (torch.nn.Linear, torch.nn.Embedding) for m in model.modules())
    assert sum(isinstance(m, GGUFLinear) for m in model.modules()) == 4 * len(model.layers) + 1
    assert block_llm.engine.dtype == torch.float32


def test_prompt_numbers_do_not_depend_on_chunks_or_prefix_hits(block_llm):
    """Every prompt log-prob the same bits whether the prompt was prefilled in one chunk, in
    64-token chunks or on top of a prefix-cache hit. Catches prefill attention whose last bits
    depend on the chunk's row count or on a cached prefix: the 8-bit activations of the GGUF
    kernels turn those into log-prob differences of up to ~0.27 (SDPA's tiling before session 40),
    so an answer depended on what the prefix cache held. 64-token chunks run the GEMMs, 5-token
    chunks the row kernels (since session 41 they sum like the GEMMs)."""
    ids = block_llm.tokenizer.encode(" ".join([TEXT] * 9))[:400]
    sched = block_llm.engine.scheduler
    block_llm.clear_prefix_cache()
    one = block_llm.prompt_logprobs([ids])[0]
    budget = sched.max_num_batched_tokens
    try:
        for chunk in (64, 5):
            sched.max_num_batched_tokens = chunk
            block_llm.clear_prefix_cache()
            assert block_llm.prompt_logprobs([ids])[0] == one, chunk
    finally:
        sched.max_num_batched_tokens = budget
    # prompt log-probs never read the prefix cache (every position is scored): the next token's do
    sp = SamplingParams(max_tokens=1, temperature=0.0, logprobs=10)

    def next_token() -> dict:
        return {t: float(getattr(v, "logprob", v)) for t, v in block_llm.generate([ids], sp)[0].outputs[0].logprobs[0].items()}

    block_llm.clear_prefix_cache()
    cold = next_token()
    for cut in (32, 208):
        block_llm.clear_prefix_cache()
        block_llm.generate([ids[:cut + 1]], sp)
        hits = block_llm.stats()["prefix_cache_hits"]
        assert next_token() == cold, cut
        assert block_llm.stats()["prefix_cache_hits"] - hits >= cut  # it did start from the cached prefix


def test_decode_numbers_do_not_depend_on_the_batch(block_llm, monkeypatch):
    """Batch invariance of decode: a greedy continuation has the same tokens and the same log-prob
    bits decoded alone, beside 2 or 6 other sequences, and while another prompt's prefill chunks
    share its steps. Catches row kernels whose sums depend on how many rows a step holds: before
    session 41 a decode row went through per-row kernels alone and through the small-M or panel
    GEMM in a crowded step, so what a server's other users sent moved a question's log-probs
    (and, through 8-bit activations, its answer)."""
    tok = block_llm.tokenizer
    ids = tok.encode(TEXT)[:60]
    others = [tok.encode(f"{i} {TEXT[i * 40:]}")[:30 + 7 * i] for i in range(6)]
    long = tok.encode(" ".join([TEXT] * 6))[:500]
    sp = SamplingParams(max_tokens=12, temperature=0.0, logprobs=5, ignore_eos=True)

    def run(batch: list[list[int]]) -> tuple[list[int], list[dict]]:
        block_llm.clear_prefix_cache()
        out = block_llm.generate(batch, sp)[0].outputs[0]
        return list(out.token_ids), [{t: float(getattr(v, "logprob", v)) for t, v in d.items()} for d in out.logprobs]

    alone = run([ids])
    assert run([ids] + others[:2]) == alone
    assert run([ids] + others) == alone
    sched = block_llm.engine.scheduler
    schedule, mixed = sched.schedule, []

    def recording():  # steps where a decode row and a prompt chunk of 2+ rows run together
        batch = schedule()
        mixed.append(1 in batch.num_tokens and max(batch.num_tokens, default=0) > 1)
        return batch

    monkeypatch.setattr(sched, "schedule", recording)
    monkeypatch.setattr(sched, "max_num_batched_tokens", 80)  # the long prompt in chunks beside the decode
    assert run([ids, long]) == alone
    assert sum(mixed) >= 2


def test_logits_match_float32(llm, block_llm):
    """Catches wrong rows, types or fusion order in the block model (any of them moves log-probs by
    whole nats). Torch backend: same dequantised weights, so only summation order differs (bound
    1e-3). Kernels: activations are rounded to Q8_0 per 32 values (as in llama.cpp; a layer's
    kernel output equals float32 on Q8_0-rounded activations to ~1e-5, see
    test_kernel_layer_is_q8_activation_exact; the 300-token prompt runs the panel GEMM, or the AMX
    tile GEMM, the short one the row kernels), so log-probs move: measured on the short text
    (kernels) mean |diff| 0.07-0.08, max 0.27-0.37 nats, on the 300-token one 0.036 and 0.20 (then
    through a bf16 GEMM); bounds 2x to 5x that."""
    short = llm.tokenizer.encode(TEXT)
    long = llm.tokenizer.encode((REPO / "docs" / "guide" / "inference.md").read_text())[:300]
    assert len(short) < 128 <= len(long)
    for ids in (short, long):
        ref = np.array(llm.prompt_logprobs([ids])[0])
        got = np.array(block_llm.prompt_logprobs([ids])[0])
        diff = np.abs(ref - got)
        if KERNELS:
            assert diff.mean() <= 0.15 and diff.max() <= 1.0, (len(ids), diff.mean(), diff.max())
        else:
            assert diff.max() <= 1e-3, diff.max()


def test_greedy_continuations_agree(llm, block_llm, greedy, prompts):
    """Catches a block model that is close per token but drifts (a wrong bias or norm, the head on
    the wrong rows): teacher-forced on float32's greedy 16-token continuations of the fixed
    prompts, the block model's top-1 token agrees >= 14/16 per prompt (kernels; measured 15-16/16,
    93/96 over six prompts; free-running continuations fork at the first near-tie, so positions
    after it say nothing), and the torch backend reproduces them exactly."""
    if not KERNELS:
        ref = [o.token_ids for o in llm.generate(prompts, greedy(16))]
        assert [o.token_ids for o in block_llm.generate(prompts, greedy(16))] == ref
        return
    hits = _teacher_forced_hits(llm, block_llm, [llm.tokenizer.encode(p) for p in prompts], 16)
    assert min(hits) >= 14, hits


def test_weight_bytes_about_file_size(llm, gguf_path, hf_config):
    """Catches a float copy of a quantised weight (the 98 MB SmolLM2 became 538 MB as float32) and
    a tied head given its own copy of the vocabulary: the block model holds the file's tensor bytes
    (norms and all), within 1%."""
    reader = open_gguf(gguf_path)
    file_tensors = sum(int(t.n_bytes) for t in reader.tensors)
    model = load_gguf_model(gguf_path, hf_config, backend=BACKEND)
    held = weight_bytes(model)
    assert abs(held - file_tensors) <= 0.01 * file_tensors, (held, file_tensors)
    assert weight_bytes(llm.engine.model) > 5 * held  # the float32 engine it replaces
    head, emb = model.lm_head, model.embed_tokens
    assert head.groups[0].rows.data_ptr() == emb.group.rows.data_ptr()  # tied: the same rows


def test_qk_rows_unpermuted_for_llama(llm, fresh_blocks):
    """Catches a missing (or doubled) undo of llama.cpp's Q/K row permutation on the quantised rows:
    the block model's fused qkv rows, dequantised, must equal the float model's qkv weight exactly
    (the float path unpermutes float arrays; HF parity tests pin that one)."""
    for i in (0, len(fresh_blocks.layers) - 1):
        qkv = fresh_blocks.layers[i].self_attn.qkv_proj
        dense = torch.cat([RowGroup(g.rows, g.qtype, g.k).dense() for g in qkv.groups])
        assert torch.equal(dense, llm.engine.model.layers[i].self_attn.qkv_proj.weight.float())


def test_forward_rows_is_a_column_subset(fresh_blocks):
    """Catches forward_rows returning the wrong columns or a different rounding than forward (a
    constrained head must score allowed tokens exactly as the full head would)."""
    x = torch.randn(3, fresh_blocks.config.hidden_size, generator=torch.Generator().manual_seed(0))
    rows = torch.tensor([5, 0, 49151, 1234, 1234])
    full = fresh_blocks.lm_head(x)
    assert torch.allclose(fresh_blocks.lm_head.forward_rows(x, rows), full[:, rows], atol=1e-4, rtol=1e-4)


def test_long_prompts_block_gemm_head(fresh_blocks):
    """Catches the GEMM path of the 49,152-row head (128 activation rows: the panel GEMM, or the AMX
    tile GEMM where the CPU has it) dropping, repeating or misordering output rows: it must match
    float32 on the dequantised weights within the Q8_0 rounding of the activations (bound 2% of the
    largest output; outputs up to ~20)."""
    x = torch.randn(128, fresh_blocks.config.hidden_size, generator=torch.Generator().manual_seed(3))
    head = fresh_blocks.lm_head
    w = torch.cat([RowGroup(g.rows, g.qtype, g.k).dense() for g in head.groups])
    ref = x @ w.T
    assert (head(x) - ref).abs().max().item() <= 0.02 * ref.abs().max().item()


def test_mixed_type_fused_groups(fresh_blocks):
    """Catches a fused projection whose row groups have different GGUF types being concatenated
    as one type (Q4_K_M files put attn_v/ffn_down in Q6_K next to Q4_K): groups stay apart, one
    matmul each, outputs concatenated in order."""
    q41 = fresh_blocks.layers[0].self_attn.o_proj.groups[0]  # Q4_1 [576, 576]
    q80 = fresh_blocks.embed_tokens.group  # Q8_0 [49152, 576]
    a = RowGroup(q41.rows[:64], Q4_1, q41.k)
    b = RowGroup(q80.rows[:32], Q8_0, q80.k)
    mixed = GGUFLinear([a, b, RowGroup(q41.rows[64:96], Q4_1, q41.k)], torch.arange(128.0), backend=BACKEND)
    assert [g.qtype for g in mixed.groups] == [Q4_1, Q8_0, Q4_1]
    x = torch.randn(2, q41.k, generator=torch.Generator().manual_seed(1))
    w = torch.cat([a.dense(), b.dense(), RowGroup(q41.rows[64:96], Q4_1, q41.k).dense()])
    ref = x @ w.T + torch.arange(128.0)
    tol = 0.02 * ref.abs().max().item() if KERNELS else 1e-4
    assert (mixed(x) - ref).abs().max().item() <= tol
    assert mixed(x.bfloat16()).dtype == torch.bfloat16


def _q8_0(x: torch.Tensor) -> torch.Tensor:
    """Activations rounded as llama.cpp's Q8_0 does (one scale max|x|/127 per 32 values)."""
    xb = x.reshape(x.shape[0], -1, 32)
    d = xb.abs().amax(-1, keepdim=True) / 127
    return ((xb / d.clamp(min=1e-30)).round().clamp(-127, 127) * d).reshape(x.shape)


@pytest.mark.skipif(not KERNELS, reason=f"native kernels unavailable: {kernel_error()}")
def test_kernel_layer_is_q8_activation_exact(fresh_blocks):
    """Catches wiring that feeds the kernels the wrong rows, type id, K or group order (errors of
    whole units), and pins where the kernels' difference from float32 comes from: each block
    layer equals float32 on Q8_0-rounded activations (measured ~1e-5 on outputs of ~20)."""
    x = torch.randn(4, fresh_blocks.config.hidden_size, generator=torch.Generator().manual_seed(2))
    for layer in (fresh_blocks.layers[0].self_attn.qkv_proj, fresh_blocks.layers[0].mlp.gate_up_proj,
                  fresh_blocks.lm_head):
        w = torch.cat([RowGroup(g.rows, g.qtype, g.k).dense() for g in layer.groups])
        ref = _q8_0(x) @ w.T
        assert (layer(x) - ref).abs().max().item() <= 1e-5 * max(1.0, ref.abs().max().item()) * 10


def _teacher_forced_hits(ref_llm, cand_llm, prompts: list[list[int]], n: int) -> list[int]:
    """Per prompt, top-1 matches of `cand_llm` on `ref_llm`'s greedy continuations (teacher-forced)."""
    conts = [o.token_ids for o in ref_llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=n,
                                                                            ignore_eos=True))]
    outs = cand_llm.generate([p + c for p, c in zip(prompts, conts, strict=True)],
                             SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1))
    return [sum(int(max(o.prompt_logprobs[pos], key=o.prompt_logprobs[pos].get) == tok)
                for pos, tok in enumerate(c, start=len(p))) for o, p, c in zip(outs, prompts, conts, strict=True)]


@pytest.mark.skipif(not KERNELS, reason=f"native kernels unavailable: {kernel_error()}")
def test_qwen_q4_k_m_mixed_types_close_to_float32(qwen_name, qwen_f32, prompts):
    """Catches the Q4_K_M type mix going wrong (qkv fused from Q5_0 q/k and Q8_0 v in half the
    layers, ffn_down alternating Q4_K/Q6_K, Q8_0 head, qwen2 q/k/v biases) and a float copy
    sneaking in: measured 95/96 teacher-forced top-1 agreement, perplexity +0.13%, 485 MB of
    weights (the file's tensors) against 2,521 MB in float32."""
    from inference import LLM

    ref = qwen_f32
    blk = LLM(qwen_name, num_blocks=64, quantization="gguf")
    model = blk.engine.model
    assert {tuple(g.qtype for g in layer.self_attn.qkv_proj.groups) for layer in model.layers} == {(6,), (6, 8)}
    assert {layer.mlp.down_proj.groups[0].qtype for layer in model.layers} == {12, 14}
    file_tensors = sum(int(t.n_bytes) for t in open_gguf(catalog_gguf(qwen_name)).tensors)
    assert abs(weight_bytes(model) - file_tensors) <= 0.01 * file_tensors
    ids = [ref.tokenizer.encode(p) for p in prompts]
    assert sum(_teacher_forced_hits(ref, blk, ids, 16)) >= 0.9 * 16 * len(ids)
    text = ref.tokenizer.encode(TEXT)
    ppl = [float(np.exp(-np.mean(llm.prompt_logprobs([text])[0]))) for llm in (ref, blk)]
    assert abs(ppl[1] / ppl[0] - 1) <= 0.03, ppl


def test_unsupported_type_named_then_auto_dequantises_it_alone(gguf_path, hf_config):
    """Catches an unsupported tensor type failing deep inside a kernel (or silently): `gguf` names
    the tensor, its type and the supported list in one line; `auto` dequantises that tensor only
    and says so once."""
    only_q41 = frozenset({Q4_1})
    with pytest.raises(UnsupportedTensorType) as err:
        load_gguf_model(gguf_path, hf_config, backend="torch", mode="gguf", supported=only_q41)
    msg = str(err.value)
    assert "token_embd.weight" in msg and "Q8_0" in msg and "supported: F32, Q4_1" in msg and "\n" not in msg
    with pytest.warns(RuntimeWarning, match=r"1 GGUF tensor\(s\).*token_embd\.weight: Q8_0.*those tensors only"):
        model = load_gguf_model(gguf_path, hf_config, backend="torch", mode="auto", supported=only_q41)
    assert model.embed_tokens.group.qtype == 0  # float32 now
    assert model.layers[0].mlp.down_proj.groups[0].qtype == Q4_1  # everything else still blocks


def test_truncated_gguf_named_and_nothing_cached(gguf_path, hf_config, tmp_path, monkeypatch):
    """Catches a truncated download failing with a numpy reshape error (and a half-written cache
    directory): the error names the file, and the model cache holds no conversion (only, at most,
    the file-version -> digest memo, `gguf_convert._DIGESTS`, whose key a completed file changes)."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("RAG_CACHE_DIR", str(cache))
    for size in (1000, 50_000_000):  # inside the header, inside the tensor data
        bad = tmp_path / f"cut{size}.gguf"
        with open(gguf_path, "rb") as src:
            bad.write_bytes(src.read(size))
        # each open of the longer file parses its whole vocabulary before failing: one per path
        for weights in (False, True) if size == 1000 else (True,):
            with pytest.raises(GGUFFileError, match=re.escape(str(bad))):
                resolve_model_dir(str(bad), weights=weights)
        with pytest.raises(GGUFFileError, match="truncated"):
            load_gguf_model(bad, hf_config, backend="torch")
    from inference.gguf_convert import _DIGESTS

    assert not cache.exists() or [p.name for p in cache.iterdir()] in ([], [_DIGESTS])


def test_int8_refused_without_vnni():
    """Catches int8 being accepted on an AVX2-only CPU, where `torch._int_mm` has no int8 dot
    products and runs slower than float: refused, naming the CPU and the alternative."""
    with pytest.raises(ValueError, match=r"Example CPU 9000.*quantization: auto"):
        plan_quantization("int8", "smollm2", "cpu", flags=frozenset({"avx2", "fma"}), cpu="Example CPU 9000")
    for flag in ("avx512_vnni", "avx_vnni", "amx_int8"):
        assert plan_quantization("int8", "smollm2", "cpu", flags=frozenset({"avx2", flag})).mode == "int8"


def test_auto_falls_back_with_one_warning_naming_the_cause(model_dir):
    """Catches `auto` failing (or silently going slow) when the kernels cannot load: float path,
    one warning that names the load error, bf16/fp32 as for `none`; with kernels, GGUF blocks in
    float32; a safetensors directory or CUDA never picks GGUF blocks."""
    plan = plan_quantization("auto", "smollm2", "cpu", kernels_available=False, kernels_error="no C compiler found")
    assert plan.mode == "none" and "no C compiler found" in plan.warning and "float" in plan.warning
    cfg = EngineConfig(model="smollm2")
    assert cfg.resolved_dtype("cpu", plan) == EngineConfig(quantization="none").resolved_dtype("cpu")
    on = plan_quantization("auto", "smollm2", "cpu", kernels_available=True)
    assert on.mode == "gguf" and on.warning is None and cfg.resolved_dtype("cpu", on) == torch.float32
    assert plan_quantization("auto", str(model_dir), "cpu", kernels_available=True).mode == "none"
    assert plan_quantization("auto", "smollm2", "cuda", kernels_available=True).mode == "none"
    with pytest.raises(ValueError, match="no C compiler found"):
        plan_quantization("gguf", "smollm2", "cpu", kernels_available=False, kernels_error="no C compiler found")


_FALLBACK = """
import json, warnings
from inference import LLM
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    llm = LLM("smollm2", num_blocks=16, quantization="auto")
ours = [str(w.message) for w in caught if "native GGUF kernels are unavailable" in str(w.message)]
out = llm.generate([llm.tokenizer.encode("The capital of France is")], __import__("inference").SamplingParams(
    temperature=0.0, max_tokens=3))[0]
print(json.dumps({"warnings": ours, "mode": llm.engine.quant.mode, "tokens": len(out.token_ids)}))
"""


def test_engine_auto_warns_once_when_kernels_missing():
    """Catches the no-compiler fallback (a machine without g++) failing to load the model, warning
    once per layer or not at all, or not naming the cause: a real engine in a subprocess whose
    compiler is missing (`CXX=/nonexistent`) must load on the float path, warn exactly once with the
    reason, and generate."""
    import json
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "CXX": "/nonexistent", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(repo)}
    r = subprocess.run([sys.executable, "-c", _FALLBACK], env=env, cwd=repo, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["mode"] == "none" and got["tokens"] == 3
    assert len(got["warnings"]) == 1 and "no C++ compiler found" in got["warnings"][0], got


def test_candidates_only_computes_their_head_rows_alone(block_llm, llm, prompts, monkeypatch):
    """Catches a yes/no check paying for the whole 49,152-row head again (the full `forward` must
    not run for a `candidates_only` row), or the restricted logits changing what the check reads:
    the candidates' log-probability differences equal the full head's (their normaliser cancels),
    the sampled token is a candidate, and a batch mixing restricted and full rows gives the full
    row what it gets alone. Also on the float engine (a tied head: embedding rows)."""
    from inference.sampling_params import SamplingParams

    cands = sorted({llm.tokenizer.encode(w, add_special_tokens=False)[0] for w in (" yes", " no", "Yes", "No")})
    full_sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=cands)
    only_sp = SamplingParams(max_tokens=1, temperature=0.0, candidate_token_ids=cands, candidates_only=True)
    plain = SamplingParams(max_tokens=4, temperature=0.0)
    for engine in (block_llm, llm):
        ref = engine.generate(prompts[:2], full_sp)
        alone = engine.generate(prompts[2:3], plain)[0].token_ids
        calls = {"full": 0}
        if engine is block_llm:  # the float engine's head is its tied embedding (no module to count)
            head = engine.engine.model.lm_head
            real = head.forward

            def counting(x, _real=real, _calls=calls):
                _calls["full"] += 1
                return _real(x)

            monkeypatch.setattr(head, "forward", counting)
        got = engine.generate([*prompts[:2], prompts[2]], [only_sp, only_sp, plain])
        monkeypatch.undo()
        for r, g in zip(ref, got[:2], strict=True):
            a, b = np.array([r.candidate_logprobs[t] for t in cands]), np.array([g.candidate_logprobs[t] for t in cands])
            assert np.allclose(a - a[0], b - b[0], atol=2e-3), (a, b)
            assert g.token_ids[0] in cands and abs(np.logaddexp.reduce(b)) < 1e-4  # normalised within the set
        assert got[2].token_ids == alone
        # the plain row's prefill and 3 decode steps; the restricted rows never call the full head
        if engine is block_llm:
            assert calls["full"] == 4, calls
    with pytest.raises(ValueError, match="candidates_only"):
        SamplingParams(max_tokens=2, candidate_token_ids=cands, candidates_only=True)
    with pytest.raises(ValueError, match="candidates_only"):
        SamplingParams(max_tokens=1, candidates_only=True)


def test_json_steps_outside_strings_compute_only_their_head_rows(block_llm, monkeypatch):
    """Catches a JSON-schema request paying for the whole head at steps that can only sample
    punctuation, keys or literals (the full `forward` of the head must run for fewer steps than
    were decoded), or the restricted rows changing the document: greedy output is token-identical
    to the same request with the restriction off, and a request that wants logprobs keeps the whole
    head (its logprobs are normalised over the vocabulary)."""
    from inference.sampling_params import SamplingParams
    from inference.structured import logits_processor

    schema = {"type": "object", "properties": {"colors": {"type": "array", "items": {
        "type": "string", "maxLength": 12}, "minItems": 2, "maxItems": 3}, "count": {"type": "integer"}},
        "required": ["colors", "count"]}
    msgs = [{"role": "user", "content": "Name three colors and how many there are, as JSON."}]
    sp = SamplingParams(temperature=0.0, max_tokens=40, json_schema=schema)
    head = block_llm.engine.model.lm_head
    real = head.forward
    calls = {"full": 0}

    def counting(x, _real=real):
        calls["full"] += 1
        return _real(x)

    monkeypatch.setattr(head, "forward", counting)
    got = block_llm.chat(msgs, sp)[0]
    restricted_calls = calls["full"]
    n = len(got.token_ids)
    assert json.loads(got.text)["colors"]
    assert restricted_calls < n, (restricted_calls, n)  # some steps ran on their rows alone
    calls["full"] = 0
    with_lp = block_llm.chat(msgs, sp.model_copy(update={"logprobs": 1}))[0]
    assert calls["full"] == len(with_lp.token_ids) and with_lp.token_ids == got.token_ids
    monkeypatch.setattr(logits_processor, "HEAD_ROWS_SHARE", 10**9)  # never restricted
    assert block_llm.chat(msgs, sp)[0].token_ids == got.token_ids


def _q4_k_rows(n: int, k: int, seed: int) -> torch.Tensor:
    """Random Q4_K rows (every bit pattern) with small finite fp16 d / dmin."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (n, k // 256, 144), dtype=np.uint8)
    for off in (0, 2):
        scale = rng.uniform(1e-3, 1e-2, (n, k // 256)) * rng.choice([-1.0, 1.0], (n, k // 256))
        blocks[:, :, off : off + 2] = scale.astype(np.float16).view(np.uint8).reshape(n, k // 256, 2)
    return torch.from_numpy(blocks.reshape(n, -1))


@pytest.mark.skipif(not KERNELS, reason=f"native kernels unavailable: {kernel_error()}")
def test_q4_k_layers_interleave_by_8_and_compute_the_same(monkeypatch):
    """Catches the load-time x8 repack changing a layer's outputs (decode, batched decode, prompt
    and a constrained head's rows), `dense()` reading x8 bytes as plain rows, a group whose row
    count is not a multiple of 8 being repacked, the file's type being overwritten, and a head
    tied to the embedding getting a repacked copy of the vocabulary (the rows must stay shared)."""
    from inference.layers.gguf_linear import GGUFEmbedding

    k = 512
    rows = _q4_k_rows(40, k, 0)
    x8 = GGUFLinear([RowGroup(rows, 12, k)], torch.arange(40.0))
    g = x8.groups[0]
    assert g.x8 and g.qtype == 12 and g.kernel_qtype == kernel_ops().Q4_K_X8 and "Q4_K(x8)x40" in repr(x8)
    monkeypatch.setenv("RAG_KERNEL_X8", "0")
    plain = GGUFLinear([RowGroup(rows, 12, k)], torch.arange(40.0))
    assert not plain.groups[0].x8
    monkeypatch.delenv("RAG_KERNEL_X8")
    for m in (1, 3, 5, 33):
        x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
        ref = plain(x)
        assert (x8(x) - ref).abs().max().item() <= 1e-5 * ref.abs().max().item(), m
        pick = torch.tensor([39, 0, 8, 8])
        assert (x8.forward_rows(x, pick) - ref[:, pick]).abs().max().item() <= 1e-5 * ref.abs().max().item()
    assert torch.equal(g.dense(), RowGroup(rows, 12, k).dense())
    assert not GGUFLinear([RowGroup(_q4_k_rows(12, k, 1), 12, k)]).groups[0].x8  # 12 rows: not whole groups
    head = GGUFEmbedding(RowGroup(rows, 12, k)).as_head()
    assert not head.groups[0].x8 and head.groups[0].rows.data_ptr() == rows.data_ptr()
