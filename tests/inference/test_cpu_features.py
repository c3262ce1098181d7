"""`RAG_CPU_ISA` masks the CPU flags above a level, so an AVX-512/AMX machine can make the engine's
decisions (bf16, int8 refusal, kernel path) as an AVX2-only CPU would."""

from __future__ import annotations

import pytest

from inference import cpu_features


def test_isa_mask_drops_only_the_flags_above_the_level(monkeypatch):
    """Catches a mask that leaves AVX-512/VNNI/AMX flags in (the 'AVX2' figures would then use
    AVX-512 decisions) or that drops AVX2/FMA themselves."""
    real = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni",
                      "amx_tile", "amx_int8", "amx_bf16"})
    monkeypatch.setattr(cpu_features, "_cpuinfo", lambda: (real, "Test CPU"))
    monkeypatch.setenv("RAG_CPU_ISA", "avx2")
    assert cpu_features.cpu_flags() == {"sse4_2", "avx", "avx2", "fma", "f16c"}
    assert not cpu_features.has_fast_bf16() and not cpu_features.has_int8_dot()
    monkeypatch.setenv("RAG_CPU_ISA", "avxvnni")  # an Alder Lake-class core: AVX-VNNI, no AVX-512
    assert cpu_features.cpu_flags() == {"sse4_2", "avx", "avx2", "fma", "f16c", "avx_vnni"}
    assert not cpu_features.has_fast_bf16() and cpu_features.has_int8_dot()
    monkeypatch.setenv("RAG_CPU_ISA", "avx512")
    assert cpu_features.cpu_flags() == real - {"amx_tile", "amx_int8", "amx_bf16"}
    assert cpu_features.has_fast_bf16() and cpu_features.has_int8_dot()
    monkeypatch.delenv("RAG_CPU_ISA")
    assert cpu_features.cpu_flags() == real


@pytest.mark.parametrize("value", ["", "native", "AVX9"])
def test_unknown_isa_mask_changes_nothing(monkeypatch, value):
    """Catches an unknown value silently masking everything (the engine would drop to its slowest path)."""
    real = frozenset({"avx2", "avx512f"})
    monkeypatch.setattr(cpu_features, "_cpuinfo", lambda: (real, "Test CPU"))
    monkeypatch.setenv("RAG_CPU_ISA", value)
    assert cpu_features.cpu_flags() == real
