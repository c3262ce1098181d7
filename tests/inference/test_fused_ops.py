"""The native fused ops (inference/kernels/csrc/fused.cpp, `ops.quant_linear`) against the torch
code they replace, and the GGUF-block model with them against the same model without them."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoConfig

from inference import SamplingParams
from inference.catalog import catalog_gguf
from inference.gguf_loader import load_gguf_model
from inference.kernels import formats, ops
from inference.layers.gguf_linear import GGUFLinear, RowGroup
from inference.layers.norm import RMSNorm
from inference.layers.rotary import RotaryEmbedding
from tests.inference.test_quant_kernels import make_weights

pytestmark = pytest.mark.skipif(not ops.available(), reason=f"native kernels unavailable: {ops.load_error()}")


def _groups(k: int) -> list[RowGroup]:
    """Three groups whose activations quantise three ways: 32-element (Q5_0, Q8_0), 256-element
    (Q4_K) and float (F16), with odd row counts so column offsets are not multiples of 16."""
    out = []
    for i, (qtype, n) in enumerate([(formats.Q5_0, 37), (formats.Q4_K, 21), (formats.Q8_0, 19), (formats.F16, 5)]):
        out.append(RowGroup(torch.from_numpy(make_weights(qtype, n, k, seed=i)), qtype, k))
    return out


@pytest.mark.parametrize("m", [1, 3, 20])
def test_quant_linear_equals_per_group_matmuls(m: int):
    """Catches a fused projection writing a group at the wrong column offset or row stride, reusing
    the activations quantised for another block kind (Q4_K fed XBlock32), or a bias added to the
    wrong columns: equal, bit for bit, to one quant_matmul per group + cat + bias (m = 20 runs the
    panel GEMM with its output stride wider than the group)."""
    k = 512
    gs = _groups(k)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(m))
    bias = torch.randn(sum(g.n for g in gs), generator=torch.Generator().manual_seed(9))
    ref = torch.cat([ops.quant_matmul(x, g.rows, g.qtype, k) for g in gs], dim=-1) + bias
    got = ops.quant_linear(x, [g.rows for g in gs], [g.qtype for g in gs], k, bias)
    assert got.shape == ref.shape
    assert torch.equal(got, ref)
    nob = ops.quant_linear(x, [g.rows for g in gs], [g.qtype for g in gs], k, None)
    assert torch.equal(nob, ref - bias) or (nob - (ref - bias)).abs().max().item() < 1e-5


def test_quant_linear_rejects_mismatched_arguments():
    """Catches a call with a weight of the wrong row size or a short bias writing out of bounds."""
    gs = _groups(256)
    with pytest.raises(ValueError, match="row"):
        ops.quant_linear(torch.randn(1, 512), [gs[0].rows], [gs[0].qtype], 512, None)
    with pytest.raises(ValueError, match="bias"):
        ops.quant_linear(torch.randn(1, 256), [gs[0].rows], [gs[0].qtype], 256, torch.zeros(3))


def test_gguf_linear_fast_path_is_used_and_matches_groups():
    """Catches the layer's one-call path diverging from its per-group path (the fallback for bf16
    or 3-D inputs) on a fused layer with a bias."""
    k = 512
    gs = [g for g in _groups(k) if g.qtype != formats.F16]
    bias = torch.randn(sum(g.n for g in gs))
    layer = GGUFLinear(gs, bias)
    assert layer._fast
    x = torch.randn(2, k)
    fast = layer(x)
    slow = layer(x[None])[0]  # 3-D input: the per-group path
    assert torch.allclose(fast, slow, atol=1e-5, rtol=0)


def test_rms_norm_and_residual_add_match_torch():
    """Catches a norm over the wrong axis, a missing eps, or a residual add that is not in place
    (the next layer would read the stale stream)."""
    g = torch.Generator().manual_seed(0)
    h = torch.randn(5, 896, generator=g) * 3
    delta = torch.randn(5, 896, generator=g)
    norm = RMSNorm(896, 1e-6)
    norm.weight.data = torch.rand(896, generator=g) + 0.5
    ref = norm(h)
    assert torch.allclose(ops.rms_norm(h, norm.weight, 1e-6), ref, rtol=1e-5, atol=1e-6)
    h2 = h.clone()
    out = ops.add_rms_norm_(h2, delta, norm.weight, 1e-6)
    assert torch.equal(h2, h + delta)
    assert torch.allclose(out, norm(h + delta), rtol=1e-5, atol=1e-6)


def test_rope_in_place_is_bit_identical_and_leaves_v():
    """Catches the rotation applied to V, a head offset off by one, the wrong half rotated, or a
    position read from the wrong row: q and k equal `RotaryEmbedding.forward` exactly, v unchanged."""
    cfg = AutoConfig.for_model("qwen2", rope_theta=1e6, max_position_embeddings=256)
    rot = RotaryEmbedding(64, 256, cfg)
    hq, hk, d, t = 7, 2, 64, 4
    qkv = torch.randn(t, (hq + 2 * hk) * d, generator=torch.Generator().manual_seed(1))
    pos = torch.tensor([0, 5, 77, 255])
    q, k, v = qkv.split([hq * d, hk * d, hk * d], dim=-1)
    rq, rk = rot(pos, q.reshape(t, hq, d), k.reshape(t, hk, d))
    v0 = v.clone()
    ops.rope_qk_(qkv, pos, rot.cos, rot.sin, hq + hk, d)
    assert torch.equal(qkv[:, :hq * d].reshape(t, hq, d), rq)
    assert torch.equal(qkv[:, hq * d:(hq + hk) * d].reshape(t, hk, d), rk)
    assert torch.equal(qkv[:, (hq + hk) * d:], v0)
    with pytest.raises(ValueError, match="position"):
        ops.rope_qk_(qkv, torch.tensor([0, 1, 2, 256]), rot.cos, rot.sin, hq + hk, d)


def test_silu_mul_matches_torch():
    """Catches gate and up swapped (silu(up) * gate) or the halves split at the wrong column."""
    gu = torch.randn(3, 2 * 300, generator=torch.Generator().manual_seed(2)) * 4
    gate, up = gu.split(300, dim=-1)
    assert torch.allclose(ops.silu_mul(gu), F.silu(gate) * up, rtol=1e-5, atol=1e-6)


def test_silu_mul_in_place_view_feeds_quant_linear():
    """silu_mul_ returns a view over the gate half (row stride 2I), and quant_linear must read its
    rows at that stride: catches the quantiser stepping K floats per row (it would read up values
    into row 1 on), the view's values differing from silu_mul, and the float (F16) path reading
    the view as if contiguous."""
    k = 256
    gu = torch.randn(5, 2 * k, generator=torch.Generator().manual_seed(3))
    want = ops.silu_mul(gu)
    got = ops.silu_mul_(gu.clone())
    assert got.stride() == (2 * k, 1) and torch.equal(got, want)
    for qtype in (formats.Q4_K, formats.Q8_0, formats.F16):
        w = torch.from_numpy(make_weights(qtype, 24, k, seed=1))
        dense = ops.quant_linear(want.contiguous(), [w], [qtype], k, None)
        assert torch.equal(ops.quant_linear(got, [w], [qtype], k, None), dense), qtype


@pytest.mark.parametrize("isa", [i for i in ops.supported_isas() if i != "scalar"])
def test_silu_mul_simd_matches_scalar_reference(isa: str):
    """Each SIMD SiLU (its own polynomial exp) against the scalar libm one: catches a wrong
    polynomial coefficient or range reduction (errors ~1e-3 and up), a lost 2^n exponent, inf/NaN
    at the clamps (+-100), the 8-lane loop dropping or double-writing the tail (width 299), and
    threads splitting rows wrongly (65 rows)."""
    g = torch.Generator().manual_seed(5)
    gate = torch.randn(65, 299, generator=g) * 6
    gate[0, :6] = torch.tensor([100.0, -100.0, 0.0, 1e-30, -87.5, 88.5])
    gu = torch.cat([gate, torch.randn(65, 299, generator=g)], dim=1)
    try:
        ops.set_isa("scalar")
        ref = ops.silu_mul(gu)
        ops.set_isa(isa)
        got = ops.silu_mul(gu)
    finally:
        ops.set_isa(None)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, ref, rtol=2e-6, atol=1e-7), (got - ref).abs().max()


def _set_fused(model, on: bool) -> None:
    model.fused = on
    for layer in model.layers:
        layer.self_attn.fused = layer.mlp.fused = on


def test_loader_turns_fused_ops_on(engine_factory):
    """Catches the GGUF-block engine silently running the slow torch elementwise path."""
    model = engine_factory(num_blocks=64, quantization="gguf").engine.model
    assert model.fused and all(la.self_attn.fused and la.mlp.fused for la in model.layers)


def test_fused_forward_equals_torch_ops(engine_factory, model_dir):
    """Catches the fused forward skipping a residual add, normalising with the wrong layer's
    weights (each add is fused with the *next* norm), rotating the wrong heads, or a probe capture
    that aliases the in-place residual stream. Run on the torch-backend block model (F.linear on
    dequantised rows, no 8-bit activations), so only float rounding separates the two: on the
    kernels, a last-bit difference flips the 8-bit rounding of a few activations and log-probs
    move by the quantisation noise itself (measured up to 0.12 nats), which would hide such bugs."""
    llm = engine_factory(num_blocks=64)
    model = load_gguf_model(catalog_gguf("smollm2"), AutoConfig.from_pretrained(str(model_dir)), backend="torch")
    model.set_kv_caches(llm.engine.runner.caches)
    saved = llm.engine.model
    llm.engine.model = llm.engine.runner.model = model
    try:
        model.enable_fused_ops()
        assert model.fused
        ids = llm.tokenizer.encode("The lighthouse on the cape was first lit in 1874 and automated in 1961.")
        sp = SamplingParams(temperature=0.0, max_tokens=1, hidden_state=True, hidden_state_layer=3)
        got = {}
        for on in (True, False):
            _set_fused(model, on)
            llm.clear_prefix_cache()
            lps = torch.tensor(llm.prompt_logprobs([ids])[0][1:])
            llm.clear_prefix_cache()
            got[on] = (lps, llm.generate([ids], sp)[0].hidden_state)
        assert (got[True][0] - got[False][0]).abs().max().item() < 1e-3
        assert got[True][1] is not None
        assert torch.allclose(got[True][1], got[False][1], rtol=1e-4, atol=1e-4)
    finally:
        llm.engine.model = llm.engine.runner.model = saved
        saved.set_kv_caches(llm.engine.runner.caches)


def test_last_layer_mlp_runs_on_sampled_rows_only(engine_factory, model_dir):
    """Catches the runner reading the wrong rows of a pruned forward (`keep`: the last layer's MLP
    on the sampled rows only), a prompt chunk that samples nothing returning states, or pruning
    not wired at all (the last MLP still sees every prompt row). 16-token chunks, so the long
    prompt's first chunk samples nothing (its last MLP is skipped outright). Same torch-backend
    block model as above, so only float rounding may separate pruned from full."""
    llm = engine_factory(num_blocks=128, max_num_batched_tokens=16)
    model = load_gguf_model(catalog_gguf("smollm2"), AutoConfig.from_pretrained(str(model_dir)), backend="torch")
    model.set_kv_caches(llm.engine.runner.caches)
    saved = llm.engine.model
    llm.engine.model = llm.engine.runner.model = model
    seen: list[int] = []
    last_mlp = model.layers[-1].mlp
    hook = last_mlp.register_forward_pre_hook(lambda _m, args: seen.append(args[0].shape[0]))
    full_forward = model.forward
    try:
        model.enable_fused_ops()
        # the long prompt's first chunk samples nothing; its second shares a step with both short ones
        ids = [llm.tokenizer.encode(t) for t in ("The lighthouse on the cape was first lit in 1874 and automated in 1961.",
                                                 "Mooring fees are", "The harbour master")]
        assert len(ids[0]) > 16 and len(ids[0]) + len(ids[1]) + len(ids[2]) <= 32
        sp = SamplingParams(temperature=0.0, max_tokens=6, candidate_token_ids=list(range(0, 2000, 7)))
        got = {}
        for prune in (True, False):
            model.forward = full_forward if prune else (lambda *a, keep=None, **k: full_forward(*a, **k))
            llm.clear_prefix_cache()
            seen.clear()
            got[prune] = llm.generate(ids, sp)
            if prune:
                assert sum(seen) == 3 * 6, f"last MLP ran on {seen} rows: only the sampled ones expected"
            else:
                assert sum(seen) == sum(map(len, ids)) + 3 * 5
        for a, b in zip(got[True], got[False]):
            assert a.outputs[0].token_ids == b.outputs[0].token_ids
            assert max(abs(a.candidate_logprobs[t] - b.candidate_logprobs[t]) for t in a.candidate_logprobs) < 1e-4
    finally:
        hook.remove()
        model.forward = full_forward
        llm.engine.model = llm.engine.runner.model = saved
        saved.set_kv_caches(llm.engine.runner.caches)


@pytest.mark.parametrize("isa", ops.supported_isas())
@pytest.mark.parametrize("d, grp", [(64, 3), (128, 6), (40, 2)])
def test_paged_decode_matches_float64_attention(isa: str, d: int, grp: int):
    """ragk::paged_decode against SDPA in float64 on gathered K/V, each ISA path: catches a wrong
    slot (block id * block_size + offset), GQA heads mapped to the wrong KV head, the 8- or
    16-token tail of a chunk read past the context (lengths 1, 17, odd), a lost online-softmax
    rescale, and the merge of the fixed 256-token segments (rows of 803 and 1,500 tokens). Head
    sizes: 64 and 128 (the Qwen shapes; the AVX-512 path's 16-float chunks) and 40 (not a multiple
    of 16: the AVX-512 path hands it to the 256-bit loop)."""
    g = torch.Generator().manual_seed(0)
    nb, bs, hk = 120, 16, 2
    kp, vp = torch.randn(nb, bs, hk, d, generator=g), torch.randn(nb, bs, hk, d, generator=g)
    lens = torch.tensor([1, 17, 803, 1500, 255])
    w = int((lens.max() + bs - 1) // bs)
    tables = torch.stack([torch.randperm(nb, generator=g)[:w] for _ in lens])
    q = torch.randn(len(lens), hk * grp, d, generator=g)
    want = []
    for b, n in enumerate(lens.tolist()):
        blk = tables[b, : (n + bs - 1) // bs]
        k = kp[blk].reshape(-1, hk, d)[:n].repeat_interleave(grp, 1).transpose(0, 1).double()
        v = vp[blk].reshape(-1, hk, d)[:n].repeat_interleave(grp, 1).transpose(0, 1).double()
        want.append(F.scaled_dot_product_attention(q[b][:, None].double(), k, v)[:, 0])
    try:
        ops.set_isa(isa)
        got = ops.paged_decode(q, kp, vp, tables, lens, d ** -0.5)
    finally:
        ops.set_isa(None)
    assert torch.allclose(got.double(), torch.stack(want), atol=2e-6)
    with pytest.raises(ValueError, match="context length"):
        ops.paged_decode(q, kp, vp, tables, torch.tensor([0, 1, 1, 1, 1]), 0.125)


@pytest.mark.parametrize("isa", ops.supported_isas())
@pytest.mark.parametrize("d, grp", [(64, 7), (40, 2)])
def test_paged_prefill_rows_are_batch_invariant(isa: str, d: int, grp: int):
    """ragk::paged_prefill: causal attention of a prompt chunk's rows against float64 SDPA, and
    each row's output the same bits whichever rows are computed with it (one chunk, chunks of 1,
    13 or 100 rows, a chunk on top of cached rows) and equal to ragk::paged_decode for the same
    token. Catches a row limit off by one (a row seeing its successor), slots read in the wrong
    order, a strided q read as if contiguous, and any dependence of a row's arithmetic on the
    other rows or on where its chunk starts: with 8-bit activations that is what made prompt log-probs depend on prefill chunking
    and prefix-cache hits (up to 0.27 on the 0.5B)."""
    g = torch.Generator().manual_seed(1)
    nb, bs, hk, n = 40, 16, 2, 600
    kp, vp = torch.randn(nb, bs, hk, d, generator=g), torch.randn(nb, bs, hk, d, generator=g)
    blocks = torch.randperm(nb, generator=g)[: (n + bs - 1) // bs]
    slots = (blocks[:, None] * bs + torch.arange(bs)).reshape(-1)[:n]
    q = torch.randn(n, hk * grp, d, generator=g)
    lims = torch.arange(1, n + 1)
    scale = d ** -0.5
    k = kp.reshape(-1, hk, d)[slots].double().repeat_interleave(grp, 1).transpose(0, 1)
    v = vp.reshape(-1, hk, d)[slots].double().repeat_interleave(grp, 1).transpose(0, 1)
    want = F.scaled_dot_product_attention(q.double().transpose(0, 1), k, v, is_causal=True).transpose(0, 1)
    try:
        ops.set_isa(isa)
        full = ops.paged_prefill(q, kp, vp, slots, lims, scale)
        assert torch.allclose(full.double(), want, atol=2e-6)
        # rows at a stride (q as a view of the fused qkv output, passed without a copy): same bits
        wide = torch.cat([q.reshape(n, -1), torch.randn(n, 3 * d, generator=g)], 1)
        strided = wide[:, : q.shape[1] * d].view(n, q.shape[1], d)
        assert not strided.is_contiguous() and torch.equal(ops.paged_prefill(strided, kp, vp, slots, lims, scale), full)
        for step in (1, 13, 100):
            for a in range(0, n, step * 7):  # a sample of chunks of this size
                b = min(n, a + step)
                part = ops.paged_prefill(q[a:b].contiguous(), kp, vp, slots[:b], lims[a:b], scale)
                assert torch.equal(part, full[a:b]), (step, a)
        rows = torch.tensor([0, 15, 16, 255, 256, 257, 599])
        dec = ops.paged_decode(q[rows].contiguous(), kp, vp, blocks[None].expand(len(rows), -1).contiguous(),
                               rows + 1, scale)
        assert torch.equal(dec, full[rows])
    finally:
        ops.set_isa(None)
    with pytest.raises(ValueError, match="row limit"):
        ops.paged_prefill(q[:2].contiguous(), kp, vp, slots, torch.tensor([1, n + 1]), scale)
    with pytest.raises(ValueError, match="row limit"):
        ops.paged_prefill(q[:1].contiguous(), kp, vp, slots, torch.tensor([0]), scale)
    with pytest.raises(ValueError, match="slot"):
        ops.paged_prefill(q[:1].contiguous(), kp, vp, torch.tensor([nb * bs]), torch.tensor([1]), scale)
