"""GGML weight formats the native kernels handle: type ids and block geometry.

Kept free of torch and of the compiled library so callers can size buffers and decide whether a
tensor can stay quantised before (or without) loading the extension. Ids and sizes are those of
`gguf.GGMLQuantizationType` / `gguf.GGML_QUANT_SIZES` (the tests check they agree).

Block layouts (little-endian, fp16 scales; element order within a block as in gguf's reference):
  Q4_0 (32 el, 18 B): d, qs[16]            x = d * (q - 8); low nibbles are elements 0..15
  Q4_1 (32 el, 20 B): d, m, qs[16]         x = d * q + m
  Q5_0 (32 el, 22 B): d, qh[4], qs[16]     5th bit of element j = bit j of qh; x = d * (q - 16)
  Q5_1 (32 el, 24 B): d, m, qh[4], qs[16]  x = d * q + m
  Q8_0 (32 el, 34 B): d, int8 qs[32]
  Q4_K (256 el, 144 B): d, dmin, 12 B packed 6-bit scales/mins for 8 sub-blocks of 32, qs[128]
  Q5_K (256 el, 176 B): as Q4_K plus qh[32] (bit s of qh[l] = 5th bit of sub-block s, element l)
  Q6_K (256 el, 210 B): ql[128], qh[64], int8 scales[16] (one per 16), d; x = d * sc * (q - 32)
"""

from __future__ import annotations

F32 = 0
F16 = 1
Q4_0 = 2
Q4_1 = 3
Q5_0 = 6
Q5_1 = 7
Q8_0 = 8
Q4_K = 12
Q5_K = 13
Q6_K = 14
BF16 = 30

NAMES: dict[int, str] = {
    F32: "F32",
    F16: "F16",
    BF16: "BF16",
    Q4_0: "Q4_0",
    Q4_1: "Q4_1",
    Q5_0: "Q5_0",
    Q5_1: "Q5_1",
    Q8_0: "Q8_0",
    Q4_K: "Q4_K",
    Q5_K: "Q5_K",
    Q6_K: "Q6_K",
}

# type id -> (elements per block, bytes per block)
BLOCKS: dict[int, tuple[int, int]] = {
    F32: (1, 4),
    F16: (1, 2),
    BF16: (1, 2),
    Q4_0: (32, 18),
    Q4_1: (32, 20),
    Q5_0: (32, 22),
    Q5_1: (32, 24),
    Q8_0: (32, 34),
    Q4_K: (256, 144),
    Q5_K: (256, 176),
    Q6_K: (256, 210),
}

SUPPORTED_TYPES: frozenset[int] = frozenset(BLOCKS)

# Not a GGML type (no file holds it; outside GGML's id range): Q4_K rows interleaved by 8 at load
# (`ops.repack_q4_k_x8`, layout in csrc/common.h) for the one-row GEMV; same bytes per row as Q4_K.
Q4_K_X8 = 64


def _geometry(qtype: int) -> tuple[int, int]:
    try:
        return BLOCKS[int(qtype)]
    except KeyError:
        supported = ", ".join(f"{NAMES[t]}={t}" for t in sorted(BLOCKS))
        raise ValueError(f"GGML type {qtype} is not supported by the native kernels ({supported})") from None


def type_name(qtype: int) -> str:
    return NAMES.get(int(qtype), f"type {qtype}")


def block_size(qtype: int) -> int:
    """Elements per block: K must be a multiple of it."""
    return _geometry(qtype)[0]


def row_bytes(qtype: int, k: int) -> int:
    """Bytes of one GGUF row of k elements; ValueError when k is not a whole number of blocks."""
    elems, nbytes = _geometry(qtype)
    if k <= 0 or k % elems:
        raise ValueError(f"K={k} is not a positive multiple of {type_name(qtype)}'s block size {elems}")
    return k // elems * nbytes
