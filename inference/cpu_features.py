"""CPU instruction-set flags that decide the engine's fast paths (Linux /proc/cpuinfo; elsewhere
every check answers False and the engine keeps its portable float32 path)."""

from __future__ import annotations

import functools
import platform

# The flags `rag doctor` reports: what the GEMM paths (fp32/bf16/int8) and the GGUF kernels key on.
ENGINE_FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx_vnni",
                "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")
# int8 x int8 -> int32 dot products in hardware; without one `torch._int_mm` is emulated and int8
# loses to bf16/fp32 (docs/performance.md, "int8 kernels").
INT8_DOT_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})


@functools.lru_cache(maxsize=1)
def _cpuinfo() -> tuple[frozenset[str], str]:
    flags: frozenset[str] = frozenset()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not flags and line.startswith("flags"):
                    flags = frozenset(line.split(":", 1)[1].split())
                elif not model and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                if flags and model:
                    break
    except OSError:
        pass
    return flags, model


# `RAG_CPU_ISA=avx2|avxvnni|avx512` masks the flags above that level, so the engine's decisions (bf16,
# int8, kernel paths) can be measured as an AVX2-only or AMX-less CPU would make them. Pair it with
# ATEN_CPU_CAPABILITY / ONEDNN_MAX_CPU_ISA for torch's own kernels (docs/performance.md).
_ABOVE = {
    "avx2": ("avx512", "avx_vnni", "amx"),
    "avxvnni": ("avx512", "amx"),  # an AVX2 + AVX-VNNI client core (Alder Lake and later)
    "avx512": ("amx",),
}


def cpu_flags() -> frozenset[str]:
    import os

    flags = _cpuinfo()[0]
    cap = os.environ.get("RAG_CPU_ISA", "").strip().lower()
    if cap in _ABOVE:
        flags = frozenset(f for f in flags if not f.startswith(_ABOVE[cap]))
    return flags


def cpu_model() -> str:
    """/proc/cpuinfo "model name" (what an error message should name), else the platform's guess."""
    return _cpuinfo()[1] or platform.processor() or "unknown CPU"


def has_fast_bf16() -> bool:
    """AVX512-BF16 or AMX: bf16 GEMMs run ~2-3x faster than fp32; elsewhere bf16 is emulated."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def has_int8_dot(flags: frozenset[str] | None = None) -> bool:
    """VNNI (AVX512 or AVX) or AMX-INT8: the CPUs on which `quantization: int8` was measured faster."""
    return bool((cpu_flags() if flags is None else flags) & INT8_DOT_FLAGS)
