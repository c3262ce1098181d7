"""Python face of the native GGUF kernels (torch custom ops in namespace `ragk`).

The library is loaded lazily on first use; if it has not been built for this source/torch/
compiler combination it is built once (so a fresh clone and the tests work). Any failure leaves
`available()` False with `load_error()` saying why, and the engine keeps its float32 path.
"""

from __future__ import annotations

import os
import threading
import warnings

import torch

from inference.kernels.formats import Q4_K_X8, SUPPORTED_TYPES, block_size, row_bytes

__all__ = [
    "Q4_K_X8",
    "SUPPORTED_TYPES",
    "available",
    "block_size",
    "dequantize",
    "dequantize_rows",
    "has_gemm",
    "has_tile",
    "isa",
    "load_error",
    "quant_matmul",
    "quant_matmul_rows",
    "repack_q4_k_x8",
    "row_bytes",
    "set_gemm_min_rows",
    "set_isa",
    "set_tile_min_rows",
    "supported_isas",
    "x8_enabled",
]

ISA_NAMES = ("scalar", "avx2", "avxvnni", "avx512", "amx", "neon")

_lock = threading.Lock()
_state: dict[str, object] = {"tried": False, "error": None, "path": None}


def _load() -> bool:
    if _state["tried"]:
        return _state["error"] is None
    with _lock:
        if _state["tried"]:
            return _state["error"] is None
        try:
            from inference.kernels.build import BuildError, build

            try:
                path = build()
                torch.ops.load_library(str(path))
                _state["path"] = str(path)
            except BuildError as exc:
                _state["error"] = str(exc)
        except Exception as exc:  # any failure (no torch headers, bad .so) means "not available"
            _state["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        _state["tried"] = True
        if _state["error"] is None:
            _check_env_isa()
        return _state["error"] is None


_X86_ORDER = tuple(n for n in ISA_NAMES if n != "neon")  # scalar < avx2 < avxvnni < avx512 < amx


def _check_env_isa() -> None:
    """RAG_KERNEL_ISA forces a path (the library reads it); otherwise RAG_CPU_ISA=avx2|avxvnni|avx512,
    which masks the engine's CPU flags above that level (inference.cpu_features), also caps the
    kernels, so one variable measures what an AVX2-only or AMX-less CPU runs."""
    forced = os.environ.get("RAG_KERNEL_ISA")
    if forced:
        if forced != torch.ops.ragk.isa():
            warnings.warn(
                f"RAG_KERNEL_ISA={forced} is not a path this CPU runs (supported: "
                f"{torch.ops.ragk.supported_isas()}); using {torch.ops.ragk.isa()}",
                RuntimeWarning,
                stacklevel=3,
            )
        return
    cap = os.environ.get("RAG_CPU_ISA", "").strip().lower()
    if cap in _X86_ORDER:
        allowed = [p for p in str(torch.ops.ragk.supported_isas()).split(",")
                   if p in _X86_ORDER and _X86_ORDER.index(p) <= _X86_ORDER.index(cap)]
        torch.ops.ragk.set_isa(allowed[-1])


def available() -> bool:
    """True when the compiled library is built and loaded."""
    return _load()


def load_error() -> str | None:
    """Why the library is unavailable (one line), or None when it loaded."""
    _load()
    return _state["error"]  # type: ignore[return-value]


def library_path() -> str | None:
    _load()
    return _state["path"]  # type: ignore[return-value]


def _require() -> None:
    if not _load():
        raise RuntimeError(f"ragk kernels are not available: {_state['error']}")


def isa() -> str:
    """The active path: scalar | avx2 | avxvnni | avx512 | amx | neon (avxvnni = the AVX2 kernels with
    VEX vpdpbusd; amx = the AVX-512 path with its panel GEMMs on the AMX-INT8 tile unit)."""
    _require()
    return str(torch.ops.ragk.isa())


def supported_isas() -> list[str]:
    """Paths this CPU can run, scalar first, best last."""
    _require()
    return str(torch.ops.ragk.supported_isas()).split(",")


def set_isa(name: str | None) -> None:
    """Force a path (tests compare each with scalar); None selects the best one."""
    _require()
    if not torch.ops.ragk.set_isa(name or ""):
        raise ValueError(f"ISA {name!r} is not supported on this CPU; supported: {supported_isas()}")


def has_gemm(qtype: int) -> bool:
    """Whether the active path has the panel GEMM for this type (else many rows use row kernels)."""
    _require()
    return bool(torch.ops.ragk.has_gemm(qtype))


def set_gemm_min_rows(rows: int) -> int:
    """From how many activation rows the panel GEMM runs (0 = never); returns the previous value.
    Default 16 (RAG_GEMM_MIN_ROWS overrides): below it packing 8 weight rows costs more than it
    saves. Tests force each path with it; benchmarks compare them."""
    _require()
    return int(torch.ops.ragk.set_gemm_min_rows(int(rows)))


def set_tile_min_rows(rows: int) -> int:
    """From how many activation rows the tile GEMM (AMX) runs: -1 = each type's measured default
    (Q4_K / Q5_K 32, Q6_K 64), 0 = never, n = from n rows; returns the previous value.
    RAG_TILE_MIN_ROWS overrides. Below the threshold the AVX-512 GEMMs run (same bits). Tests force
    each path with it; benchmarks compare them."""
    _require()
    return int(torch.ops.ragk.set_tile_min_rows(int(rows)))


def has_tile(qtype: int) -> bool:
    """Whether the active path has a tile-unit GEMM (AMX) for this type."""
    _require()
    return bool(torch.ops.ragk.has_tile(qtype))


def matmul_path(qtype: int, m: int, gathered: bool = False) -> str:
    """The kernel `quant_matmul` (`gathered`: `quant_matmul_rows`) runs for `m` activation rows of
    this type on the active path: "x8_rows", "small_m_gemm", "panel_gemm", "tile_gemm", "lane_rows"
    or "rows".
    On x86 they all give an output the same bits; this says which one the speed rules picked."""
    _require()
    return str(torch.ops.ragk.matmul_path(int(qtype), int(m), bool(gathered)))


def has_xgemm(qtype: int) -> bool:
    """Whether the active path has the small-M GEMM for this type (x86_xgemm.inc)."""
    _require()
    return bool(torch.ops.ragk.has_xgemm(qtype))


def set_xgemm_rows(lo: int, hi: int) -> tuple[int, int]:
    """Activation rows [lo, hi] for which the small-M GEMM runs (lo 0 = never, -1 = the active
    path's default); returns the previous range. Defaults (RAG_XGEMM_ROWS="lo,hi" overrides): 12..32
    on the AVX-512 path, 6..4096 on the AVX2 path, where it also beats the panel GEMM on prompts.
    It unpacks each weight row once per call, where the row kernels unpack per 4 activation rows
    and the panel GEMM packs 8-16 weight rows at a cost that pays back only over many rows
    (docs/performance.md, session 19). Tests force each path with it."""
    _require()
    lo0, hi0 = torch.ops.ragk.set_xgemm_rows(int(lo), int(hi))
    return int(lo0), int(hi0)


def xgemm_band() -> tuple[int, int]:
    """The activation-row band in which the active path runs the small-M GEMM now."""
    _require()
    lo, hi = torch.ops.ragk.xgemm_band()
    return int(lo), int(hi)


def _op(name: str):
    """The op's overload, looked up once (the dispatcher call is most of a small GEMV's cost)."""
    op = _ops.get(name)
    if op is None:
        _require()
        op = _ops[name] = getattr(torch.ops.ragk, name).default
    return op


_ops: dict[str, object] = {}


def _as_2d(x: torch.Tensor) -> torch.Tensor:
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


# The C++ ops validate type, K, row bytes and rows, raising ValueError naming the problem, and
# accept bf16 / non-contiguous x; the wrappers only reshape [..., K] activations.


def quant_matmul(x: torch.Tensor, w: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    """x [..., K] (float32 or bf16) @ dequant(w [N, row_bytes]).T -> float32 [..., N].

    M == 1 is a GEMV; up to `set_gemm_min_rows` rows the row kernels reuse each unpacked weight
    block for 4 activation rows; in the `set_xgemm_rows` band (batched decode) the small-M GEMM
    packs the activations instead and unpacks each weight row once; from `set_gemm_min_rows`
    the panel GEMM packs 8-16 weight rows at a time and runs them against all rows. Measured on a 2-core Zen 5 (1 thread, busy box), AVX2 path:
    GEMVs 3-8x faster than fp32 F.linear on the dequantised weight; at M=64-512 the panel GEMM
    is 2-3.5x the row kernels and 1.5-3x fp32; on the AVX-512 path (16-row panels, VNNI) a whole
    prefill runs 1.4x faster than dequantise + AVX512-BF16 GEMM (gguf_linear keeps that rule for
    AMX CPUs only).

    `qtype = Q4_K_X8` (weights from `repack_q4_k_x8`): below `set_gemm_min_rows` rows the x8 kernels
    (8 weight rows per register, 1-4 activation rows per pass, each group read once); from there the
    panel GEMM packs the groups directly; where a path lacks that (AMX) and for gathered rows the
    plain kernels read unpacked copies.
    """
    out = _op("quant_matmul")(_as_2d(x), w, qtype, k)
    return out if x.dim() == 2 else out.reshape(*x.shape[:-1], out.shape[-1])


def quant_matmul_rows(x: torch.Tensor, w: torch.Tensor, qtype: int, k: int, rows: torch.Tensor) -> torch.Tensor:
    """Only output features `rows` (int64 [R]) of quant_matmul: float32 [M, R]."""
    out = _op("quant_matmul_rows")(_as_2d(x), w, qtype, k, rows)
    return out if x.dim() == 2 else out.reshape(*x.shape[:-1], out.shape[-1])


def x8_enabled() -> bool:
    """Whether GGUF layers interleave their Q4_K rows by 8 at load: on an x86 SIMD path, unless
    RAG_KERNEL_X8=0 (for comparisons). The one-row GEMV then sums 8 rows per register (1.4-1.8x per
    thread on Zen 4, docs/performance.md, session 34)."""
    if os.environ.get("RAG_KERNEL_X8", "1").strip() in ("0", "false", "no", "off"):
        return False
    # the x8 kernels are x86 SIMD code; elsewhere (scalar, NEON) x8 would run the scalar reference
    return available() and isa() in ("avx2", "avxvnni", "avx512", "amx")


def repack_q4_k_x8(w: torch.Tensor, k: int) -> torch.Tensor:
    """Q4_K rows [N, row_bytes] (N a multiple of 8) -> the same bytes interleaved by 8 rows, the
    layout of type `Q4_K_X8` (every op here takes it; exact: a byte permutation)."""
    return _op("repack_q4_k_x8")(w, k)


def dequantize(w: torch.Tensor, qtype: int, k: int) -> torch.Tensor:
    """All rows as float32 [N, K], bit-exact with gguf's numpy dequantize."""
    return _op("dequantize")(w, qtype, k)


def dequantize_rows(w: torch.Tensor, qtype: int, k: int, rows: torch.Tensor) -> torch.Tensor:
    """Rows `rows` as float32 [R, K]: an embedding lookup that keeps token_embd quantised."""
    return _op("dequantize_rows")(w, qtype, k, rows)


# ---- fused projection and decoder-layer elementwise ops (csrc/fused.cpp) --------------------
# Used by the GGUF-block model on CPU (see inference/models/llama.py `enable_fused_ops`): each
# replaces several torch ops whose dispatch cost dominated small-model decode.


def quant_linear(x: torch.Tensor, ws: list[torch.Tensor], qtypes: list[int], k: int,
                 bias: torch.Tensor | None) -> torch.Tensor:
    """x [M, K] against several weight groups side by side (a fused qkv / gate-up projection):
    float32 [M, sum N_g], activations quantised once per kind, bias added in place."""
    return _op("quant_linear")(x, ws, qtypes, k, bias)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm of float32 rows [T, H] (summation order differs from torch in the last bits)."""
    return _op("rms_norm")(x, w, eps)


def add_rms_norm_(h: torch.Tensor, delta: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """h += delta in place (the residual stream), returns RMSNorm(h)."""
    return _op("add_rms_norm_")(h, delta, w, eps)


def rope_qk_(qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             heads: int, head_dim: int) -> None:
    """Rotate the first `heads` heads (q then k) of each row of qkv in place (bit-identical to
    `RotaryEmbedding.forward`)."""
    _op("rope_qk_")(qkv, positions, cos, sin, heads, head_dim)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for gate_up [T, 2I] -> [T, I]."""
    return _op("silu_mul")(gate_up)


def silu_mul_(gate_up: torch.Tensor) -> torch.Tensor:
    """`silu_mul` written over the gate half of `gate_up` (which it consumes), returned as a
    [T, I] view with gate_up's row stride; `quant_linear` takes it without a copy."""
    return _op("silu_mul_")(gate_up)


def paged_decode(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, tables: torch.Tensor,
                 lens: torch.Tensor, scale: float) -> torch.Tensor:
    """Decode attention read from the block pool in place: q [B, Hq, D] against each row's first
    lens[b] tokens of blocks tables[b] in k/v_pool [blocks, block_size, Hk, D] -> [B, Hq, D]."""
    return _op("paged_decode")(q, k_pool, v_pool, tables, lens, scale)


def paged_prefill(q: torch.Tensor, k_pool: torch.Tensor, v_pool: torch.Tensor, slots: torch.Tensor,
                  lims: torch.Tensor, scale: float) -> torch.Tensor:
    """Prefill attention read from the block pool in place: q [n, Hq, D], the rows of one prompt
    chunk; row r attends the first lims[r] of the context's flat pool `slots` -> [n, Hq, D]. Each
    row's bits equal what `paged_decode` gives for the same token (batch-invariant, common.h)."""
    return _op("paged_prefill")(q, k_pool, v_pool, slots, lims, scale)


def set_row_task_macs(macs: int) -> int:
    """Least multiply-adds per task of the row kernels (decode-sized calls below it stay on one
    thread); returns the previous value."""
    _require()
    return int(torch.ops.ragk.set_row_task_macs(int(macs)))


def set_prefetch(distance_bytes: int) -> int:
    """Software-prefetch distance of the row kernels (0 = off); returns the previous one."""
    _require()
    return int(torch.ops.ragk.set_prefetch(int(distance_bytes)))
