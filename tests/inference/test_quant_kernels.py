"""Native GGUF kernels (inference.kernels) against gguf's numpy reference, on the real library.

Tolerances: the integer paths quantise activations to 8 bits per block (32 elements for the
32-element formats, 256 for the K formats), so each is checked twice:
  * against a float64 reference that quantises x exactly the same way (round half to even of
    x / (amax / 127)): max |out - ref| / max |ref| < 1e-5 (only float32 accumulation differs);
  * against plain float64 x @ W.T: ||out - ref|| / ||ref|| < 2e-2 (the 8-bit activation error,
    ~0.7 % for Gaussian x).
Every SIMD path is compared with scalar at 1e-5; F32/F16/BF16 weights keep x in float32.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from gguf.quants import dequantize as gg_dequantize
from gguf.quants import quantize as gg_quantize

from inference.kernels import formats, ops

F = formats
QUANTISABLE = {F.Q4_0, F.Q4_1, F.Q5_0, F.Q5_1, F.Q8_0}
FLOATS = {F.F32, F.F16, F.BF16}
# byte offsets of the fp16 scale fields, overwritten with sane values in random blocks
SCALE_FIELDS = {
    F.Q4_0: (0,),
    F.Q4_1: (0, 2),
    F.Q5_0: (0,),
    F.Q5_1: (0, 2),
    F.Q8_0: (0,),
    F.Q4_K: (0, 2),
    F.Q5_K: (0, 2),
    F.Q6_K: (208,),
}
ALL = sorted(F.SUPPORTED_TYPES)


@pytest.fixture(scope="module", autouse=True)
def kernels():
    if not ops.available():
        err = ops.load_error() or ""
        if "no C++ compiler" in err:
            pytest.skip(f"native kernels not built: {err}")
        pytest.fail(f"native kernels failed to build/load: {err}")
    yield
    ops.set_isa(None)


def k_values(qtype: int) -> list[int]:
    bs = F.block_size(qtype)
    if bs == 1:
        return [5, 77]
    return [bs, 3 * bs] if bs == 256 else [bs, 3 * bs, 4 * bs]


def make_weights(qtype: int, n: int, k: int, seed: int = 0) -> np.ndarray:
    """[n, row_bytes] uint8: gguf-quantised Gaussian rows where gguf can quantise the type, plus
    rows of random bytes (every bit pattern) with finite small fp16 scales."""
    rng = np.random.default_rng(seed + 1000 * qtype + k)
    rb = F.row_bytes(qtype, k)
    if qtype in FLOATS or qtype in QUANTISABLE:
        data = (rng.standard_normal((n, k)) * rng.uniform(0.02, 0.2, (n, 1))).astype(np.float32)
        q = gg_quantize(data, gguf.GGMLQuantizationType(qtype))
        w = np.ascontiguousarray(q).view(np.uint8).reshape(n, rb)
        if qtype in FLOATS:
            return w
        w = w.copy()
        rand_rows = range(n // 2, n)
    else:
        w = np.zeros((n, rb), np.uint8)
        rand_rows = range(n)
    bs, bb = F.BLOCKS[qtype]
    for r in rand_rows:
        blocks = rng.integers(0, 256, (k // bs, bb), dtype=np.uint8)
        for off in SCALE_FIELDS[qtype]:
            scale = rng.uniform(1e-3, 1e-2, k // bs) * rng.choice([-1.0, 1.0], k // bs)
            blocks[:, off : off + 2] = scale.astype(np.float16).view(np.uint8).reshape(-1, 2)
        w[r] = blocks.reshape(-1)
    return w


def ref_dequant(w: np.ndarray, qtype: int) -> np.ndarray:
    return gg_dequantize(w, gguf.GGMLQuantizationType(qtype)).astype(np.float32).reshape(w.shape[0], -1)


def quantise_x_like_kernel(x: np.ndarray, qtype: int) -> np.ndarray:
    """float64 copy of x after the kernels' 8-bit activation quantisation (float32 arithmetic)."""
    bs = F.block_size(qtype)
    if bs == 1:
        return x.astype(np.float64)
    blk = 32 if bs == 32 else 256
    m, k = x.shape
    xb = x.reshape(m, k // blk, blk).astype(np.float32)
    d = (np.abs(xb).max(-1, keepdims=True) / np.float32(127)).astype(np.float32)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0).astype(np.float32)
    q = np.clip(np.rint((xb * inv).astype(np.float32)), -127, 127)
    return (q.astype(np.float64) * d.astype(np.float64)).reshape(m, k)


def rel_max(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.abs(a - ref).max() / max(np.abs(ref).max(), 1e-30))


def rel_norm(a: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(a - ref) / max(np.linalg.norm(ref), 1e-30))


def test_formats_match_gguf():
    """Catches a wrong block geometry (row_bytes would mis-slice every GGUF tensor)."""
    for t in F.SUPPORTED_TYPES:
        assert F.BLOCKS[t] == gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(t)], F.type_name(t)
        assert ops.block_size(t) == F.BLOCKS[t][0]
        assert ops.row_bytes(t, 512) == int(torch.ops.ragk.row_bytes(t, 512))
    assert {F.Q5_0, F.Q4_1, F.Q4_K, F.Q6_K, F.Q8_0} <= ops.SUPPORTED_TYPES


@pytest.mark.parametrize("qtype", ALL, ids=F.type_name)
def test_quant_matmul_all_isas(qtype: int):
    """Catches wrong unpacking (nibble order, 5th/6th-bit planes, K-scale packing, offsets and
    minimums) in any path: scalar exactly vs a reference that quantises x the same way, loosely
    vs unquantised x, and every SIMD path vs scalar, over odd N and M in {1, 3, 6, 17}."""
    n = 37
    for k in k_values(qtype):
        w = make_weights(qtype, n, k)
        wdq = ref_dequant(w, qtype).astype(np.float64)
        wt = torch.from_numpy(w)
        for m in (1, 3, 6, 17):  # 6 = a 4-row and a 2-row multi-row kernel call
            x = np.random.default_rng(m * 7 + k).standard_normal((m, k)).astype(np.float32)
            exact = quantise_x_like_kernel(x, qtype) @ wdq.T
            plain = x.astype(np.float64) @ wdq.T
            ops.set_isa("scalar")
            base = ops.quant_matmul(torch.from_numpy(x), wt, qtype, k).numpy()
            assert base.shape == (m, n) and base.dtype == np.float32
            ctx = f"{F.type_name(qtype)} K={k} M={m}"
            assert rel_max(base, exact) < 1e-5, ctx
            assert rel_norm(base, plain) < 2e-2, ctx
            for isa in ops.supported_isas():
                ops.set_isa(isa)
                assert ops.isa() == isa
                out = ops.quant_matmul(torch.from_numpy(x), wt, qtype, k).numpy()
                assert rel_max(out, base) < 1e-5, f"{ctx} isa={isa}"
    ops.set_isa(None)


@pytest.mark.parametrize("qtype", ALL, ids=F.type_name)
def test_rows_match_full(qtype: int):
    """Catches quant_matmul_rows reading the wrong row (index vs output column mix-up), in every
    path: its columns must equal the same columns of quant_matmul bit for bit."""
    k = k_values(qtype)[-1]
    w = torch.from_numpy(make_weights(qtype, 29, k, seed=3))
    x = torch.randn(3, k)
    rows = torch.tensor([5, 0, 28, 5, 11], dtype=torch.int64)
    for isa in ops.supported_isas():
        ops.set_isa(isa)
        full = ops.quant_matmul(x, w, qtype, k)
        part = ops.quant_matmul_rows(x, w, qtype, k, rows)
        assert part.shape == (3, 5)
        assert torch.equal(part, full[:, rows]), isa
    ops.set_isa(None)


@pytest.mark.parametrize("qtype", ALL, ids=F.type_name)
def test_dequantize_exact(qtype: int):
    """Catches any dequantisation that differs from gguf's (element order, fused d*q+m rounding):
    the embedding lookup of a quantised token_embd must give the same floats the loader used to."""
    for k in k_values(qtype):
        w = make_weights(qtype, 21, k, seed=5)
        ref = ref_dequant(w, qtype)
        got = ops.dequantize(torch.from_numpy(w), qtype, k).numpy()
        assert np.array_equal(got, ref), f"{F.type_name(qtype)} K={k}"
        rows = torch.tensor([20, 3, 3, 0])
        part = ops.dequantize_rows(torch.from_numpy(w), qtype, k, rows).numpy()
        assert np.array_equal(part, ref[rows.numpy()])


@pytest.mark.parametrize("qtype", [F.Q4_K, F.Q5_0, F.Q8_0, F.F16], ids=F.type_name)
def test_threads_identical(qtype: int):
    """Catches races or thread-dependent chunking in the parallel-over-rows loop: 1 and 2 threads
    (a shape large enough to split) must give identical bits."""
    k = 512
    w = torch.from_numpy(make_weights(qtype, 4101, k, seed=9))  # > 2 tasks of ~1M multiply-adds
    x = torch.randn(5, k)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [ops.quant_matmul(x[:1], w, qtype, k), ops.quant_matmul(x, w, qtype, k)]
        torch.set_num_threads(2)
        two = [ops.quant_matmul(x[:1], w, qtype, k), ops.quant_matmul(x, w, qtype, k)]
    finally:
        torch.set_num_threads(before)
    for a, b in zip(one, two):
        assert torch.equal(a, b)


@pytest.mark.parametrize("qtype", [F.Q5_0, F.Q4_K], ids=F.type_name)
def test_row_task_size_changes_no_bits(qtype: int):
    """Catches rows dropped or written twice at task edges when the task size shrinks (decode-sized
    projections split over both threads): tiny, default and whole-matrix tasks give equal bits."""
    k = 256
    w = torch.from_numpy(make_weights(qtype, 901, k, seed=4))  # 901 rows: ragged last task
    x = torch.randn(3, k)
    before_threads = torch.get_num_threads()
    torch.set_num_threads(2)
    before = ops.set_row_task_macs(1 << 30)
    try:
        whole = [ops.quant_matmul(x[:1], w, qtype, k), ops.quant_matmul(x, w, qtype, k)]
        ops.set_row_task_macs(1)  # 4 rows a task (the floor)
        tiny = [ops.quant_matmul(x[:1], w, qtype, k), ops.quant_matmul(x, w, qtype, k)]
    finally:
        ops.set_row_task_macs(before)
        torch.set_num_threads(before_threads)
    for a, b in zip(whole, tiny):
        assert torch.equal(a, b)


def test_bf16_and_nd_activations():
    """Catches mishandled bf16, [..., K] or strided activations (the engine passes all three)."""
    k = 64
    w = torch.from_numpy(make_weights(F.Q8_0, 9, k))
    x = torch.randn(2, 3, k).bfloat16()
    out = ops.quant_matmul(x, w, gguf.GGMLQuantizationType.Q8_0, k)  # the loader's enum is an int
    assert out.shape == (2, 3, 9) and out.dtype == torch.float32
    assert torch.equal(out, ops.quant_matmul(x.float().reshape(6, k), w, F.Q8_0, k).reshape(2, 3, 9))
    xt = torch.randn(k, 4).t()  # non-contiguous rows
    assert torch.equal(ops.quant_matmul(xt, w, F.Q8_0, k), ops.quant_matmul(xt.contiguous(), w, F.Q8_0, k))


def test_bad_calls_raise_clear_errors():
    """Catches silent garbage from a mis-sliced tensor: wrong row bytes, unsupported type, K off
    the block grid and out-of-range rows must raise errors that name the problem (ValueError
    from the ops themselves, so torch.ops.ragk.* callers get them too)."""
    k = 256
    w = torch.from_numpy(make_weights(F.Q4_K, 4, k))
    x = torch.randn(1, k)
    with pytest.raises(ValueError, match="row_bytes=144"):
        ops.quant_matmul(x, w[:, :100], F.Q4_K, k)
    with pytest.raises(ValueError, match="unsupported GGML type id 10"):
        ops.quant_matmul(x, w, 10, k)  # Q2_K
    with pytest.raises(ValueError, match="not supported"):
        F.row_bytes(10, k)
    with pytest.raises(ValueError, match="block size 256"):
        ops.quant_matmul(torch.randn(1, 200), w, F.Q4_K, 200)
    with pytest.raises(ValueError, match="block size 32"):
        ops.dequantize(torch.zeros(2, 18, dtype=torch.uint8), F.Q4_0, 40)
    with pytest.raises(ValueError, match="uint8"):
        ops.quant_matmul(x, w.view(torch.int8), F.Q4_K, k)
    with pytest.raises(ValueError, match="out of range"):
        ops.quant_matmul_rows(x, w, F.Q4_K, k, torch.tensor([4]))
    with pytest.raises(ValueError, match="x must be"):
        ops.quant_matmul(torch.randn(1, 128), w, F.Q4_K, k)


def test_isa_selection():
    """Catches a dispatch table that claims a path it cannot run or ignores a forced one: scalar
    is always there, AMX is offered exactly where the CPU has it, unknown/unsupported names raise
    with the supported list, RAG_KERNEL_ISA=scalar forces the scalar path at load and
    RAG_CPU_ISA=avx2 (avxvnni) caps it at AVX2 (AVX-VNNI)."""
    sup = ops.supported_isas()
    ops.set_isa(None)
    assert sup[0] == "scalar" and ops.isa() == sup[-1]
    assert set(sup) <= set(ops.ISA_NAMES)
    from inference.cpu_features import cpu_flags

    flags = cpu_flags()
    # AVX-VNNI offered exactly where the CPU reports it (a path on a CPU without it would SIGILL)
    from inference.cpu_features import _cpuinfo

    assert ("avxvnni" in sup) == ("avx_vnni" in _cpuinfo()[0] and "avx2" in sup)
    if {"amx_tile", "amx_int8"} <= flags and sys.platform == "linux":
        assert "amx" in sup and sup[-1] == "amx"  # the tile path is offered and chosen by default
    else:
        assert "amx" not in sup
        with pytest.raises(ValueError, match="supported"):
            ops.set_isa("amx")
    with pytest.raises(ValueError, match="scalar"):
        ops.set_isa("bogus")
    ops.set_isa(None)
    assert ops.isa() == sup[-1]
    assert _isa_at_load(RAG_KERNEL_ISA="scalar") == "scalar"
    # RAG_CPU_ISA (the engine's flag mask) caps the kernels too; avxvnni: an Alder Lake-class CPU
    for cap in ("avx2", "avxvnni"):
        if cap in sup:
            assert _isa_at_load(RAG_CPU_ISA=cap) == cap


def _isa_at_load(**env_vars: str) -> str:
    """The path a fresh process picks at load with these environment variables (nothing forced else)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAG_KERNEL_ISA", "RAG_CPU_ISA")}
    out = subprocess.run([sys.executable, "-c", "from inference.kernels import ops; print(ops.isa())"],
                         env={**env, **env_vars}, cwd=Path(__file__).resolve().parents[2], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


GEMM_TYPES = [t for t in ALL if F.block_size(t) > 1]


@pytest.fixture()
def gemm_rows():
    """Restores the panel-GEMM threshold after a test forces it; the small-M GEMM is off
    meanwhile, so "forced on from M=1" reaches the panel GEMM for every M."""
    before = ops.set_gemm_min_rows(16)
    xbefore = ops.set_xgemm_rows(0, 0)
    tbefore = ops.set_tile_min_rows(0)
    yield ops.set_gemm_min_rows
    ops.set_gemm_min_rows(before)
    ops.set_xgemm_rows(*xbefore)
    ops.set_tile_min_rows(tbefore)
    ops.set_isa(None)


@pytest.fixture()
def xgemm_on():
    """Forces the small-M GEMM for every M (where the active path has it), restores after."""
    before = ops.set_xgemm_rows(1, 1 << 30)
    gbefore = ops.set_gemm_min_rows(16)
    yield
    ops.set_xgemm_rows(*before)
    ops.set_gemm_min_rows(gbefore)
    ops.set_isa(None)


def has_amx() -> bool:
    return ops.available() and "amx" in ops.supported_isas()


@pytest.fixture(params=["panel", "small_m", "tile"])
def forced_gemm(request):
    """Forces one GEMM for every M, the panel GEMM, the small-M GEMM (where the path has it) or the
    tile GEMM (AMX CPUs only), restores after: tests that must hold for each take this."""
    if request.param == "tile" and not has_amx():
        pytest.skip("no AMX tile GEMM on this CPU")
    big = request.param != "small_m"
    g0 = ops.set_gemm_min_rows(1 if big else 16)
    x0 = ops.set_xgemm_rows(*((0, 0) if big else (1, 1 << 30)))
    t0 = ops.set_tile_min_rows(1 if request.param == "tile" else 0)
    yield request.param
    ops.set_gemm_min_rows(g0)
    ops.set_xgemm_rows(*x0)
    ops.set_tile_min_rows(t0)
    ops.set_isa(None)


def _rows_only(x: torch.Tensor, w: torch.Tensor, qtype: int, k: int) -> np.ndarray:
    """quant_matmul on the row kernels alone (both GEMMs off), settings restored."""
    xb, gb = ops.set_xgemm_rows(0, 0), ops.set_gemm_min_rows(0)
    try:
        return ops.quant_matmul(x, w, qtype, k).numpy()
    finally:
        ops.set_xgemm_rows(*xb)
        ops.set_gemm_min_rows(gb)


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=F.type_name)
def test_small_m_gemm_matches_row_kernels(qtype: int, xgemm_on):
    """Catches a small-M GEMM bug (activation lanes packed in the wrong order, the zero-padded
    last lane group written out, a weight row group of fewer than NW rows, K-format scale or
    16-element-sum pairs swapped, int16 overflow) on every path that has it: forced on, it must
    equal the row kernels (same 8-bit activations, only float summation order differs) and the
    float64 reference that quantises x the same way; N=37 (tasks of 16 columns, a ragged last
    weight group), M from 2 to 33 (one lane group, a full one, a ragged second and third)."""
    n = 37
    for k in k_values(qtype):
        w = make_weights(qtype, n, k, seed=12)
        wt = torch.from_numpy(w)
        wdq = ref_dequant(w, qtype).astype(np.float64)
        for m in (2, 5, 8, 9, 16, 17, 33):
            x = np.random.default_rng(3 * m + k).standard_normal((m, k)).astype(np.float32)
            exact = quantise_x_like_kernel(x, qtype) @ wdq.T
            for isa in ops.supported_isas():
                ops.set_isa(isa)
                rows_out = _rows_only(torch.from_numpy(x), wt, qtype, k)
                out = ops.quant_matmul(torch.from_numpy(x), wt, qtype, k).numpy()
                ctx = f"{F.type_name(qtype)} K={k} M={m} isa={isa} xgemm={ops.has_xgemm(qtype)}"
                assert rel_max(out, rows_out) < 1e-5, ctx
                assert rel_max(out, exact) < 1e-5, ctx


def test_small_m_gemm_is_used_where_built(xgemm_on):
    """Catches the dispatch never reaching the small-M GEMM (a wrong range check or table entry):
    where an x86 path has it, forced on it is the kernel `matmul_path` names for M = 16 (off: the
    lane row kernels), and both give the same bits."""
    if not ops.has_xgemm(F.Q4_K):
        pytest.skip(f"no small-M GEMM on this path ({ops.isa()})")
    assert ops.has_xgemm(F.Q5_0) and ops.has_xgemm(F.Q6_K)
    k = 2048
    w = torch.from_numpy(make_weights(F.Q4_K, 64, k, seed=2))
    x = torch.randn(16, k)
    assert ops.matmul_path(F.Q4_K, 16) == "small_m_gemm"
    a = ops.quant_matmul(x, w, F.Q4_K, k)
    xb, gb = ops.set_xgemm_rows(0, 0), ops.set_gemm_min_rows(0)
    try:
        assert ops.matmul_path(F.Q4_K, 16) == "lane_rows"
    finally:
        ops.set_xgemm_rows(*xb)
        ops.set_gemm_min_rows(gb)
    assert torch.equal(a, torch.from_numpy(_rows_only(x, w, F.Q4_K, k)))


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=F.type_name)
def test_panel_gemm_matches_row_kernels(qtype: int, gemm_rows):
    """Catches a panel GEMM bug (transpose order, partial last panel, int16 overflow of the
    unsigned-weight products, K-format scale/offset lanes, the m % 4 tail) on every path that has
    it: forced on from M=1, it must equal the row kernels (same 8-bit activations, only float
    summation order differs) and the float64 reference that quantises x the same way, with N=37
    (four full panels and one of 5 rows) and M in {1, 5, 16, 33}."""
    n = 37
    for k in k_values(qtype):
        w = make_weights(qtype, n, k, seed=11)
        wt = torch.from_numpy(w)
        wdq = ref_dequant(w, qtype).astype(np.float64)
        for m in (1, 5, 16, 33):
            x = np.random.default_rng(m + k).standard_normal((m, k)).astype(np.float32)
            exact = quantise_x_like_kernel(x, qtype) @ wdq.T
            for isa in ops.supported_isas():
                ops.set_isa(isa)
                gemm_rows(0)
                rows_out = ops.quant_matmul(torch.from_numpy(x), wt, qtype, k).numpy()
                gemm_rows(1)
                out = ops.quant_matmul(torch.from_numpy(x), wt, qtype, k).numpy()
                ctx = f"{F.type_name(qtype)} K={k} M={m} isa={isa} gemm={ops.has_gemm(qtype)}"
                assert rel_max(out, rows_out) < 1e-5, ctx
                assert rel_max(out, exact) < 1e-5, ctx
                if ops.has_tile(qtype):  # the AMX tile GEMM forced from M=1 too
                    ops.set_tile_min_rows(1)
                    try:
                        assert ops.matmul_path(qtype, m) == "tile_gemm"
                        out = ops.quant_matmul(torch.from_numpy(x), wt, qtype, k).numpy()
                    finally:
                        ops.set_tile_min_rows(0)
                    assert rel_max(out, rows_out) < 1e-5, ctx + " tile"
                    assert rel_max(out, exact) < 1e-5, ctx + " tile"


def test_panel_gemm_is_used_where_built(gemm_rows):
    """Catches the dispatch silently never reaching the panel GEMM (a wrong threshold or table
    entry): where the active x86 path has it, it is the kernel `matmul_path` names for 48 rows
    from the threshold on (below it, off: the lane row kernels), and both give the same bits."""
    if not any(ops.has_gemm(t) for t in GEMM_TYPES):
        pytest.skip(f"no panel GEMM on this path ({ops.isa()})")
    assert ops.has_gemm(F.Q4_K) and ops.has_gemm(F.Q5_0) and ops.has_gemm(F.Q6_K)
    k = 2048
    w = torch.from_numpy(make_weights(F.Q4_K, 64, k, seed=2))
    x = torch.randn(48, k)
    gemm_rows(0)
    assert ops.matmul_path(F.Q4_K, 48) == "lane_rows"
    a = ops.quant_matmul(x, w, F.Q4_K, k)
    gemm_rows(16)
    assert ops.matmul_path(F.Q4_K, 48) == "panel_gemm"
    b = ops.quant_matmul(x, w, F.Q4_K, k)
    assert torch.equal(a, b)


def test_tile_gemm_runs_from_its_measured_rows():
    """Catches the AMX dispatch sending few rows to the tile GEMM (0.7-0.8x the AVX-512 GEMMs below
    32 rows, session 43) or never reaching it: with the defaults, Q4_K (plain and x8) takes the tile
    GEMM from 32 rows and Q6_K from 64, the AVX-512 GEMMs below, RAG_TILE_MIN_ROWS / 0 turns it off,
    and every choice gives the same bits. Only the amx path has a tile GEMM."""
    ops.set_isa("avx512" if "avx512" in ops.supported_isas() else None)
    assert not any(ops.has_tile(t) for t in ALL)
    ops.set_isa(None)
    if not has_amx():
        pytest.skip("no AMX tile GEMM on this CPU")
    t0 = ops.set_tile_min_rows(-1)
    try:
        ops.set_isa("amx")
        assert ops.has_tile(F.Q4_K) and ops.has_tile(F.Q5_K) and ops.has_tile(F.Q6_K)
        assert not ops.has_tile(F.Q5_0) and not ops.has_tile(F.Q8_0)
        want = {F.Q4_K: 32, F.Q5_K: 32, F.Q6_K: 64, F.Q4_K_X8: 32}
        for q, lo in want.items():
            assert ops.matmul_path(q, lo - 1) != "tile_gemm" and ops.matmul_path(q, lo) == "tile_gemm", q
        assert ops.matmul_path(F.Q6_K, 16) == "small_m_gemm" and ops.matmul_path(F.Q4_K_X8, 16) == "panel_gemm"
        k = 512
        w = torch.from_numpy(make_weights(F.Q6_K, 40, k, seed=3))
        x = torch.randn(70, k)
        tiled = ops.quant_matmul(x, w, F.Q6_K, k)
        g0 = ops.set_gemm_min_rows(80)  # RAG_GEMM_MIN_ROWS holds for the tile GEMM too
        try:
            assert ops.matmul_path(F.Q6_K, 70) == "lane_rows" and ops.matmul_path(F.Q6_K, 80) == "tile_gemm"
        finally:
            ops.set_gemm_min_rows(g0)
        ops.set_tile_min_rows(0)
        assert ops.matmul_path(F.Q6_K, 70) == "panel_gemm"
        assert torch.equal(ops.quant_matmul(x, w, F.Q6_K, k), tiled)
    finally:
        ops.set_tile_min_rows(t0)
        ops.set_isa(None)


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=F.type_name)
def test_every_row_gets_the_same_bits_whatever_m(qtype: int):
    """Batch invariance. Catches any kernel that sums an output in an order depending on how many
    activation rows the call holds (a row kernel keeping per-lane partial sums, a GEMM applying a
    block's scale in another order, a ragged weight group's lanes): on every x86 path, each row's
    outputs have the same bits alone, in chunks of 2 to 20 rows, in all 40 rows by the panel GEMM,
    the small-M GEMM or the lane row kernels (forced for every M), and as gathered columns
    (`quant_matmul_rows`, the constrained head). Session 40 measured answers moving with such
    last-bit differences once 8-bit activations amplify them."""
    paths = [p for p in ops.supported_isas() if p not in ("scalar", "neon")]
    if not paths:
        pytest.skip("no x86 SIMD path on this CPU")
    n = 37
    cols = torch.tensor([36, 3, 17, 8, 0, 9])
    g0, x0, t0 = ops.set_gemm_min_rows(16), ops.set_xgemm_rows(-1, -1), ops.set_tile_min_rows(-1)
    try:
        for k in k_values(qtype):
            w = torch.from_numpy(make_weights(qtype, n, k, seed=5))
            x = torch.from_numpy(np.random.default_rng(k).standard_normal((40, k)).astype(np.float32))
            for isa in paths:
                ops.set_isa(isa)
                full = ops.quant_matmul(x, w, qtype, k).numpy()
                ctx = f"{F.type_name(qtype)} K={k} isa={isa}"
                for c in (1, 2, 3, 5, 7, 13, 20):
                    parts = np.concatenate([ops.quant_matmul(x[i:i + c], w, qtype, k).numpy() for i in range(0, 40, c)])
                    assert np.array_equal(parts, full), f"{ctx} chunks of {c}"
                for name, (gmin, band, tmin) in {"panel": (1, (0, 0), 0), "small_m": (16, (1, 1 << 30), 0),
                                                 "lanes": (0, (0, 0), 0), "tile": (1, (0, 0), 1)}.items():
                    ops.set_gemm_min_rows(gmin)
                    ops.set_xgemm_rows(*band)
                    ops.set_tile_min_rows(tmin)
                    if name != "lanes" and ops.matmul_path(qtype, 40) == "lane_rows":
                        continue  # this GEMM is not built for the type on this path (Q8_0 on AVX2)
                    if name == "tile" and not ops.has_tile(qtype):
                        continue  # AMX only, K formats only
                    assert np.array_equal(ops.quant_matmul(x, w, qtype, k).numpy(), full), f"{ctx} {name}"
                    ops.set_gemm_min_rows(16)
                    ops.set_xgemm_rows(-1, -1)
                    ops.set_tile_min_rows(-1)
                for m in (1, 3, 40):
                    got = ops.quant_matmul_rows(x[:m], w, qtype, k, cols).numpy()
                    assert np.array_equal(got, full[:m][:, cols.numpy()]), f"{ctx} gathered, M={m}"
    finally:
        ops.set_gemm_min_rows(g0)
        ops.set_xgemm_rows(*x0)
        ops.set_tile_min_rows(t0)
        ops.set_isa(None)


def test_x8_rows_get_the_bits_of_plain_rows():
    """Catches the x8 layout's kernels (decode rows, panels, gathered copies) applying Q4_K's scales
    or minimums in another order than the plain rows' kernels: on every x86 path the same weights,
    repacked by 8, give every output the same bits for any M and as gathered columns."""
    paths = [p for p in ops.supported_isas() if p not in ("scalar", "neon")]
    if not paths:
        pytest.skip("no x86 SIMD path on this CPU")
    k, n = 768, 40
    w = torch.from_numpy(make_weights(F.Q4_K, n, k, seed=7))
    w8 = ops.repack_q4_k_x8(w, k)
    x = torch.from_numpy(np.random.default_rng(k).standard_normal((40, k)).astype(np.float32))
    cols = torch.tensor([39, 3, 17, 8, 0])
    try:
        for isa in paths:
            ops.set_isa(isa)
            plain = ops.quant_matmul(x, w, F.Q4_K, k).numpy()
            for c in (1, 3, 5, 13, 40):
                got = np.concatenate([ops.quant_matmul(x[i:i + c], w8, F.Q4_K_X8, k).numpy() for i in range(0, 40, c)])
                assert np.array_equal(got, plain), f"{isa} chunks of {c}"
            got = ops.quant_matmul_rows(x[:2], w8, F.Q4_K_X8, k, cols).numpy()
            assert np.array_equal(got, plain[:2][:, cols.numpy()]), isa
    finally:
        ops.set_isa(None)


def test_q8_0_gemms_only_on_vpdpbusd_paths():
    """Catches a Q8_0 panel or small-M GEMM registered on the AVX2 path (its 255 x 127 products
    saturate maddubs' int16 sums) or missing on the VNNI paths (AVX-VNNI, AVX-512), where it is the
    1.5-2.8x on Q8_0 prompts (docs/performance.md, session 25); values are checked per path above."""
    paths = [p for p in ("avx2", "avxvnni", "avx512") if p in ops.supported_isas()]
    if not paths:
        pytest.skip("no x86 SIMD path on this CPU")
    try:
        for isa in paths:
            ops.set_isa(isa)
            want = isa != "avx2"
            assert ops.has_gemm(F.Q8_0) == want and ops.has_xgemm(F.Q8_0) == want, isa
            assert ops.has_gemm(F.Q4_K) and ops.has_xgemm(F.Q6_K), isa
    finally:
        ops.set_isa(None)


@pytest.mark.parametrize("qtype", [F.Q4_K, F.Q5_0, F.Q6_K], ids=F.type_name)
def test_gemm_rows_and_threads(qtype: int, forced_gemm):
    """Catches either GEMM reading the wrong weight rows for quant_matmul_rows (the constrained
    output head) and thread-dependent splits: columns of a row subset equal those of the full
    product bit for bit, and 1 vs 2 threads give identical bits."""
    k = 512
    w = torch.from_numpy(make_weights(qtype, 301, k, seed=4))
    x = torch.randn(20, k)
    rows = torch.tensor([300, 7, 7, 0, 150, 8, 9, 10, 11, 12, 13], dtype=torch.int64)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        full1 = ops.quant_matmul(x, w, qtype, k)
        torch.set_num_threads(2)
        full2 = ops.quant_matmul(x, w, qtype, k)
        part = ops.quant_matmul_rows(x, w, qtype, k, rows)
    finally:
        torch.set_num_threads(before)
    assert torch.equal(full1, full2)
    assert torch.equal(part, full1[:, rows])


@pytest.mark.parametrize("qtype", GEMM_TYPES, ids=F.type_name)
def test_gemm_extreme_values_do_not_saturate(qtype: int, forced_gemm):
    """Catches int16 saturation in either GEMM's unsigned-weight products (maddubs clamps at
    32767): every weight at its largest value (all bits set) against activations that all
    quantise to +127 or -127 is the worst case for every partial sum; the result must still
    equal scalar."""
    k = F.block_size(qtype) * 4
    bs, bb = F.BLOCKS[qtype]
    blocks = np.full((16, k // bs, bb), 0xFF, np.uint8)
    for off in SCALE_FIELDS[qtype]:
        blocks[:, :, off : off + 2] = np.array([0.01], np.float16).view(np.uint8)
    w = torch.from_numpy(blocks.reshape(16, -1))
    for sign in (1.0, -1.0):
        x = torch.full((20, k), sign)
        ops.set_isa("scalar")
        base = ops.quant_matmul(x, w, qtype, k).numpy()
        for isa in ops.supported_isas():
            ops.set_isa(isa)
            out = ops.quant_matmul(x, w, qtype, k).numpy()
            assert rel_max(out, base) < 1e-5, f"{F.type_name(qtype)} isa={isa} sign={sign}"


@pytest.mark.parametrize("qtype", [F.Q5_0, F.Q6_K], ids=F.type_name)
def test_gemm_activation_blocks(qtype: int, forced_gemm):
    """Catches either GEMM's activation blocking skipping or repeating rows at block edges (a
    block of 1 KiB holds a few rows of the panel GEMM or one lane group of the small-M GEMM, so 45
    rows span many blocks with a ragged tail; a skipped group leaves its rows unwritten): the
    output must equal the unblocked one to the bit, on every path."""
    k = 512
    w = torch.from_numpy(make_weights(qtype, 40, k, seed=6))
    x = torch.randn(45, k)
    for isa in ops.supported_isas():
        ops.set_isa(isa)
        whole = ops.quant_matmul(x, w, qtype, k)
        before = int(torch.ops.ragk.set_gemm_xblock_kb(1))
        try:
            blocked = ops.quant_matmul(x, w, qtype, k)
        finally:
            torch.ops.ragk.set_gemm_xblock_kb(before)
        assert torch.equal(blocked, whole), isa


def test_small_m_gemm_default_band_per_path():
    """Catches the per-path default bands being lost or swapped: the AVX2 path runs the small-M
    GEMM from 6 to 4,096 rows (1.2x the panel GEMM on prompts there; AVX-VNNI the same), the AVX-512 path only from
    12 to 32 (slower than its panel GEMM on prompts), unless set (then on every path); the dispatch
    itself is checked by test_small_m_gemm_is_used_where_built."""
    want = {"avx2": (6, 4096), "avxvnni": (6, 4096), "avx512": (12, 32), "amx": (12, 32)}
    paths = set(want) & set(ops.supported_isas())
    if not paths:
        pytest.skip("no x86 SIMD path on this CPU")
    before = ops.set_xgemm_rows(-1, -1)
    try:
        for isa in paths:
            ops.set_isa(isa)
            assert ops.xgemm_band() == want[isa], isa
        ops.set_xgemm_rows(3, 7)
        assert ops.xgemm_band() == (3, 7)
    finally:
        ops.set_xgemm_rows(*before)
        ops.set_isa(None)



# ---- Q4_K rows interleaved by 8 (the x8 layout the GGUF layers use for Q4_K) ------------------


@pytest.fixture(params=["rows", "panel", "small_m", "tile"])
def x8_route(request):
    """Each way x8 weights are multiplied: the x8 row kernels for every M (GEMMs off), the panel
    GEMM from 2 rows (it packs the groups directly), the small-M GEMM band forced (reached through
    unpacked copies where the path has no x8 panel GEMM), or the AMX tile GEMM from 2 rows (unpacked
    copies; AMX CPUs only); settings restored."""
    route = request.param
    if route == "tile" and not has_amx():
        pytest.skip("no AMX tile GEMM on this CPU")
    g0 = ops.set_gemm_min_rows({"rows": 0, "panel": 2, "small_m": 16, "tile": 2}[route])
    x0 = ops.set_xgemm_rows(*((1, 1 << 30) if route == "small_m" else (0, 0)))
    t0 = ops.set_tile_min_rows(2 if route == "tile" else 0)
    yield route
    ops.set_gemm_min_rows(g0)
    ops.set_xgemm_rows(*x0)
    ops.set_tile_min_rows(t0)
    ops.set_isa(None)


@pytest.mark.parametrize("n,k", [(16, 256), (40, 768), (24, 1536)])
def test_x8_equals_plain_q4_k_on_every_path(n: int, k: int, x8_route):
    """Catches a wrong interleave (scale words, d/dmin lanes, nibble quads), a wrong per-lane scale
    or min pick, activation rows mixed up in the 1-4-row kernel, groups or chunks skipped at edges,
    and a panel packed wrongly from x8 groups: x8 weights must give plain Q4_K's scalar result on
    every ISA path, for M from 1 to 40, all output rows and gathered rows."""
    w = torch.from_numpy(make_weights(F.Q4_K, n, k))
    w8 = ops.repack_q4_k_x8(w, k)
    assert w8.shape == w.shape and not torch.equal(w8, w)
    rows = torch.tensor([5, 0, n - 1, 9, 9, 8])
    for m in (1, 3, 5, 13, 16, 24, 40):
        x = torch.from_numpy(np.random.default_rng(m + k).standard_normal((m, k)).astype(np.float32))
        ops.set_isa("scalar")
        ref = ops.quant_matmul(x, w, F.Q4_K, k).numpy()
        for isa in ops.supported_isas():
            ops.set_isa(isa)
            out = ops.quant_matmul(x, w8, ops.Q4_K_X8, k).numpy()
            assert rel_max(out, ref) < 1e-5, f"isa={isa} m={m} route={x8_route}"
            part = ops.quant_matmul_rows(x, w8, ops.Q4_K_X8, k, rows).numpy()
            assert rel_max(part, ref[:, rows.numpy()]) < 1e-5, f"rows isa={isa} m={m}"


def test_x8_is_a_byte_permutation():
    """Catches the repack losing or duplicating bytes (the model would change silently):
    dequantising x8 weights, all rows or any rows, is bit-exact with the plain rows, and the
    bytes are the same multiset."""
    k = 512
    w = torch.from_numpy(make_weights(F.Q4_K, 32, k))
    w8 = ops.repack_q4_k_x8(w, k)
    assert torch.equal(torch.sort(w8.flatten()).values, torch.sort(w.flatten()).values)
    assert torch.equal(ops.dequantize(w8, ops.Q4_K_X8, k), ops.dequantize(w, F.Q4_K, k))
    rows = torch.tensor([31, 0, 7, 8, 8, 17])
    assert torch.equal(ops.dequantize_rows(w8, ops.Q4_K_X8, k, rows), ops.dequantize_rows(w, F.Q4_K, k, rows))


def test_x8_extreme_values_do_not_saturate(x8_route):
    """Catches int16 overflow in the x8 kernels' sums of 8 nibble products per lane (8 x 2 x 15 x
    127 = 30,480 is the bound): every weight bit set against activations all +-127."""
    k = 512
    blocks = np.full((16, k // 256, 144), 0xFF, np.uint8)
    for off in SCALE_FIELDS[F.Q4_K]:
        blocks[:, :, off : off + 2] = np.array([0.01], np.float16).view(np.uint8)
    w = torch.from_numpy(blocks.reshape(16, -1))
    w8 = ops.repack_q4_k_x8(w, k)
    for sign in (1.0, -1.0):
        x = torch.full((6, k), sign)
        ops.set_isa("scalar")
        base = ops.quant_matmul(x, w, F.Q4_K, k).numpy()
        for isa in ops.supported_isas():
            ops.set_isa(isa)
            assert rel_max(ops.quant_matmul(x, w8, ops.Q4_K_X8, k).numpy(), base) < 1e-5, f"{isa} {sign}"


def test_x8_bad_shapes_named():
    """Catches an x8 call on rows that do not form whole groups failing inside a kernel (or
    reading past the tensor): repack and matmul both name the row count."""
    w = torch.from_numpy(make_weights(F.Q4_K, 12, 256))
    with pytest.raises(ValueError, match="multiple of 8 rows, got 12"):
        ops.repack_q4_k_x8(w, 256)
    with pytest.raises(ValueError, match="groups of 8 rows, got 12"):
        ops.quant_matmul(torch.randn(1, 256), w, ops.Q4_K_X8, 256)
    with pytest.raises(ValueError, match="K=512 needs row_bytes=288"):
        ops.repack_q4_k_x8(torch.from_numpy(make_weights(F.Q4_K, 16, 256)), 512)


def test_x8_only_where_simd_kernels_read_it(monkeypatch):
    """Catches layers interleaving Q4_K where only the scalar reference reads x8 (an ARM/NEON
    machine, or RAG_KERNEL_ISA=scalar): there x8 would turn every decode GEMV into the slow
    reference. RAG_KERNEL_X8=0 turns it off everywhere."""
    ops.set_isa("scalar")
    assert not ops.x8_enabled()
    ops.set_isa(None)
    assert ops.x8_enabled() == (ops.isa() in ("avx2", "avxvnni", "avx512", "amx"))
    monkeypatch.setenv("RAG_KERNEL_X8", "0")
    assert not ops.x8_enabled()
