// Shared definitions for the ragk quantized-matmul kernels: GGML type ids, the 8-bit activation
// blocks every integer path consumes, fp16/bf16 conversion and the per-ISA kernel table.
// Weight block layouts follow the GGUF spec (see formats.py for the byte maps).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ragk {

// GGML type ids (gguf.GGMLQuantizationType).
enum QType : int {
  T_F32 = 0,
  T_F16 = 1,
  T_Q4_0 = 2,
  T_Q4_1 = 3,
  T_Q5_0 = 6,
  T_Q5_1 = 7,
  T_Q8_0 = 8,
  T_Q4_K = 12,
  T_Q5_K = 13,
  T_Q6_K = 14,
  T_BF16 = 30,
  // Not a GGML type: Q4_K rows interleaved by 8 at load (the "x8" layout below), an id outside
  // GGML's range so no file can name it.
  T_Q4_KX8 = 64,
  T_COUNT = 65,
};

// Activations quantised once per call, for the 32-element weight formats: one scale, the integer
// sum and d * sum (Q4_0/Q5_0 offsets and Q4_1/Q5_1 minimums need sum(x)), 32 int8 values.
struct XBlock32 {
  float d;
  float ds;
  int32_t sum;
  int8_t qs[32];
};
static_assert(sizeof(XBlock32) == 44, "XBlock32 layout");

// Activations for the 256-element K formats: one scale, 256 int8 and the sum of every 16 (the
// K formats' minimums and Q6_K's -32 offset are applied through these sums).
struct XBlock256 {
  float d;
  int16_t bsums[16];
  int8_t qs[256];
};
static_assert(sizeof(XBlock256) == 292, "XBlock256 layout");

// Weight block sizes in bytes / elements.
constexpr int QK = 32;
constexpr int QKK = 256;

constexpr int block_elems(int t) {
  switch (t) {
    case T_F32: case T_F16: case T_BF16: return 1;
    case T_Q4_0: case T_Q4_1: case T_Q5_0: case T_Q5_1: case T_Q8_0: return QK;
    case T_Q4_K: case T_Q5_K: case T_Q6_K: case T_Q4_KX8: return QKK;
    default: return 0;
  }
}

constexpr int block_bytes(int t) {
  switch (t) {
    case T_F32: return 4;
    case T_F16: case T_BF16: return 2;
    case T_Q4_0: return 18;
    case T_Q4_1: return 20;
    case T_Q5_0: return 22;
    case T_Q5_1: return 24;
    case T_Q8_0: return 34;
    case T_Q4_K: case T_Q4_KX8: return 144;  // x8: per row, as the rows it holds
    case T_Q5_K: return 176;
    case T_Q6_K: return 210;
    default: return 0;
  }
}

// How activations are presented to a format's dot kernel.
enum XKind { X_FLOAT = 0, X_Q32 = 1, X_Q256 = 2 };

inline XKind x_kind(int t) {
  int be = block_elems(t);
  return be == 1 ? X_FLOAT : (be == QK ? X_Q32 : X_Q256);
}

inline size_t x_row_bytes(int t, int64_t k) {
  switch (x_kind(t)) {
    case X_FLOAT: return size_t(k) * sizeof(float);
    case X_Q32: return size_t(k / QK) * sizeof(XBlock32);
    default: return size_t(k / QKK) * sizeof(XBlock256);
  }
}

// Portable IEEE half -> float (subnormals, inf, nan), used to fill the lookup table.
inline float half_to_float_bits(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        man <<= 1;
        ++e;
      } while ((man & 0x400u) == 0);
      man &= 0x3FFu;
      bits = sign | (uint32_t(127 - 15 - e) << 23) | (man << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (man << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

extern float g_half_table[65536];

inline float h2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return g_half_table[h];
}

inline float bf2f(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ragk kernels assume a little-endian CPU (GGUF blocks are little-endian)"
#endif

// Q4_K / Q5_K: the 12 packed bytes as four words of 4 six-bit values each:
// w[0] = scales 0..3, w[1] = scales 4..7, w[2] = mins 0..3, w[3] = mins 4..7. Bytes 0..3 hold
// the low 6 bits of scales 0..3 (top 2 bits: high bits of scales 4..7), bytes 4..7 the same for
// the mins, bytes 8..11 the low nibbles of scales 4..7 (low half) and mins 4..7 (high half).
inline void k_scale_words(const uint8_t* s, uint32_t* w) {
  uint32_t a, b, c;
  std::memcpy(&a, s, 4);
  std::memcpy(&b, s + 4, 4);
  std::memcpy(&c, s + 8, 4);
  w[0] = a & 0x3F3F3F3Fu;
  w[1] = (c & 0x0F0F0F0Fu) | ((a >> 2) & 0x30303030u);
  w[2] = b & 0x3F3F3F3Fu;
  w[3] = ((c >> 4) & 0x0F0F0F0Fu) | ((b >> 2) & 0x30303030u);
}

inline void unpack_k_scales(const uint8_t* s, uint8_t* sc, uint8_t* mn) {
  uint32_t w[4];
  k_scale_words(s, w);
  std::memcpy(sc, w, 8);
  std::memcpy(mn, w + 2, 8);
}

// Q6_K (210-byte block of 256): calls f(e, q) for every element e in order, q its 6-bit quant
// (0..63, before the format's -32 offset): low 4 bits in ql (bytes 0..127), high 2 in qh
// (bytes 128..191). The 16 int8 scales (bytes 192..207) and the fp16 d (208) are the caller's.
// The scalar dot kernel and the reference dequantisation both read blocks through this.
template <class F>
inline void q6_k_each(const uint8_t* b, F&& f) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  for (int h = 0; h < 2; ++h) {
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int lo = c < 2 ? (ql[64 * h + 32 * c + l] & 15) : (ql[64 * h + 32 * (c - 2) + l] >> 4);
        const int hi = (qh[32 * h + l] >> (2 * c)) & 3;
        f(128 * h + 32 * c + l, lo | (hi << 4));
      }
    }
  }
}

// One row dot product: n = elements in the row, w = the row's raw bytes, x = that activation row
// (float for F32/F16/BF16, XBlock32 / XBlock256 otherwise).
using DotFn = float (*)(int64_t n, const uint8_t* w, const void* x);
// Quantise one activation row of k floats into XBlock32 / XBlock256.
using QuantFn = void (*)(const float* x, void* out, int64_t k);

// mr (2..4) activation rows (row r at x + r * xstride bytes) against one weight row, so the
// weight block is unpacked once for all of them: out[r * ostride]. Null: the caller loops dot.
using DotMFn = void (*)(int64_t n, const uint8_t* w, const uint8_t* x, size_t xstride, int mr, float* out,
                        int64_t ostride);

// 8 weight rows (wr[0..7]: the first nr are the ones wanted, the others repeat one of them) against
// mr (1..4) activation rows (row r at x + r * xstride bytes): the outputs of activation row r at
// out[r * ostride + 0 .. nr - 1]. Each output gets the same float arithmetic, in the same order, as
// in the small-M and panel GEMMs (x86_lanes.inc), so a row's bits do not depend on M. pf: the rows
// read next start pf bytes after wr[0] (the next group, contiguous): their bytes are prefetched in
// order, one block of each of 8 rows per block read (0: none).
using DotLFn = void (*)(int64_t n, const uint8_t* const* wr, int nr, const uint8_t* x, size_t xstride, int mr,
                        float* out, int64_t ostride, int64_t pf);

// Q4_K rows interleaved by 8 ("x8", repack.cpp): per super-block i, 1,152 bytes for the 8 rows
// of a group: d[8] and dmin[8] (fp16), the three 32-bit words of each row's packed 6-bit scales
// (a[8], b[8], c[8]), then qs: for sub-block pair p (0..3) and element quad t (0..7), 32 bytes
// whose bytes 4r..4r+3 are row r's qs[32p + 4t .. 32p + 4t + 3]. Same bytes as the 8 plain rows,
// moved so one 256-bit load holds the same 4 elements of 8 rows: a GEMV then sums 8 rows in the 8
// lanes of one register, with the scales and mins applied across rows (no horizontal sums, no
// per-row scalar unpacking).
constexpr int X8_ROWS = 8;
constexpr int X8_SB_BYTES = 8 * 144;
// Byte offsets inside one super-block of a group.
constexpr int X8_D = 0, X8_DMIN = 16, X8_A = 32, X8_B = 64, X8_C = 96, X8_QS = 128;
// Row r's 16-byte plain block header (d, dmin, the 12 scale bytes) from a group's super-block.
inline void x8_row_header(const uint8_t* sb, int r, uint8_t* hdr) {
  std::memcpy(hdr, sb + X8_D + 2 * r, 2);
  std::memcpy(hdr + 2, sb + X8_DMIN + 2 * r, 2);
  std::memcpy(hdr + 4, sb + X8_A + 4 * r, 4);
  std::memcpy(hdr + 8, sb + X8_B + 4 * r, 4);
  std::memcpy(hdr + 12, sb + X8_C + 4 * r, 4);
}
// 8 plain rows (row r at src + r * rb, nsb super-blocks each) -> one x8 group at dst (8 * rb bytes).
void q4k_x8_pack(const uint8_t* src, int64_t rb, int64_t nsb, uint8_t* dst);
// Row r of an x8 group back to its plain bytes (dst: nsb * 144 bytes).
void q4k_x8_unpack_row(const uint8_t* grp, int64_t nsb, int r, uint8_t* dst);
// mr (1..4) activation rows (row r at x + r * xstride bytes) against one x8 group: the group's 8
// outputs of row r at out[r * ostride .. + 7].
using Dot8Fn = void (*)(int64_t n, const uint8_t* grp, const uint8_t* x, size_t xstride, int mr, float* out,
                        int64_t ostride);

// Output columns [j0, j1) (weight rows rows[j] or j) of all m activation rows, written to
// out[i * ldo + j]: the panel GEMM (x86_gemm.inc). Null: the caller uses dotm / dot.
// out[j] = silu(gate[j]) * up[j] = gate / (1 + exp(-gate)) * up for j < n (the MLP's activation).
using SiluMulFn = void (*)(const float* gate, const float* up, float* out, int64_t n);
// Causal attention of `rows` query rows of one sequence for one KV head over its context tokens
// [i0, i1) (i0 a multiple of ATTN_CHUNK): row r's G query heads at q + r * q_stride (already
// scaled), row r seeing only the tokens before lims[r]; K/V of token i at pool + (table[i / bs] *
// bs + i % bs) * tok_stride (bs 1: `table` lists the slots). Writes each (row, head)'s partial
// softmax state over that range: max m[r * G + h], sum l[..] and unnormalised output acc[(r * G + h)
// * D ..]; a row that sees no token of the range gets m = -inf, l = 0, acc = 0.
// Batch invariance: a row's arithmetic depends only on its own query, its tokens and [i0, i1)
// (tokens go in chunks of ATTN_CHUNK from i0, masked past lims[r]), never on the other rows or
// their number, so prefill chunks, prefix-cache hits and decode compute the same bits.
constexpr int64_t ATTN_CHUNK = 16;
using AttnRowsFn = void (*)(const float* q, int64_t q_stride, int rows, int g, int d, const float* kpool,
                            const float* vpool, int64_t tok_stride, const int64_t* table, int64_t bs, int64_t i0,
                            int64_t i1, const int64_t* lims, float* m, float* l, float* acc);
using GemmFn = void (*)(int64_t k, const uint8_t* w, int64_t rb, const int64_t* rows, int64_t j0, int64_t j1,
                        const uint8_t* xq, size_t xrb, int64_t m, float* out, int64_t ldo);

// The small-M GEMM (x86_xgemm.inc): like GemmFn, but the activations come packed by
// xpanel_pack for this path's lane count (IsaTable::xlanes).
using XGemmFn = void (*)(int64_t k, const uint8_t* w, int64_t rb, const int64_t* rows, int64_t j0, int64_t j1,
                         const uint8_t* xp, int64_t m, float* out, int64_t ldo);

// Packed activations for XGemmFn, groups of `lanes` rows (the last one zero-padded), per block:
// word t (elements 4t..4t+3) of lane r at v[4 lanes t + 4 r], then for 256-element blocks the
// 16-element sums as int16 pairs (sums 2q, 2q+1 of lane r at [q][2r], [q][2r+1]) and d per lane
// (292 bytes per lane), for 32-element blocks d and d * sum per lane (40 bytes per lane).
constexpr size_t xpanel_block_bytes(XKind kind, int lanes) { return size_t(kind == X_Q256 ? 292 : 40) * lanes; }
inline size_t xpanel_bytes(XKind kind, int64_t k, int64_t m, int lanes) {
  const int64_t groups = (m + lanes - 1) / lanes;
  return size_t(groups) * size_t(k / (kind == X_Q256 ? QKK : QK)) * xpanel_block_bytes(kind, lanes);
}
void xpanel_pack(XKind kind, int64_t k, const uint8_t* xq, size_t xrb, int64_t m, int lanes, uint8_t* dst);

// Activation bytes per row block of the panel GEMM (KiB; RAG_GEMM_XBLOCK_KB, default 2048). Blocks of
// 64-1024 KiB measured no faster than none for 900-row prompts on Zen 5 (repacking costs what L2 saves),
// so only very long prompts are blocked.
int64_t gemm_xblock_kb();
int64_t set_gemm_xblock_kb(int64_t kb);

// Software prefetch of weights that are about to be read (RAG_PREFETCH, default 4096; 0 = off;
// ops.set_prefetch at run time): the plain row kernels (scalar, NEON) prefetch this many bytes
// ahead of the row they read, the x86 lane kernels the next group of 8 rows as they read one, the
// panel GEMM the next panel's rows while it computes on the current one. Decode streams the whole
// model from DRAM every step, and without it the loads stall.
int64_t prefetch_bytes();
// Multiply-adds per row-kernel task at least (RAG_ROW_TASK_KMACS, in units of 1024; default 256).
int64_t row_task_macs();
int64_t set_row_task_macs(int64_t macs);
int64_t set_prefetch_bytes(int64_t bytes);

struct IsaTable {
  const char* name;
  QuantFn quant32;
  QuantFn quant256;
  DotFn dot[T_COUNT];
  DotMFn dotm[T_COUNT];
  DotLFn dotl[T_COUNT];  // row kernels with outputs in lanes (null: dot / dotm)
  Dot8Fn dot8_q4k;  // GEMV on Q4_K x8 groups
  void (*x8_unpack)(const uint8_t* grp, int64_t nsb, uint8_t* dst, int64_t rb);  // a group -> 8 plain rows
  GemmFn gemm[T_COUNT];
  XGemmFn xgemm[T_COUNT];
  int xlanes;  // activation rows per register of xgemm (8: 256-bit, 16: 512-bit)
  int64_t xgemm_lo, xgemm_hi;  // activation rows for which xgemm runs by default on this path
  // Tile-unit GEMMs (AMX) and, per type, from how many activation rows each runs by default (below
  // it the path's panel / small-M GEMMs do: same bits, measured faster there).
  GemmFn tile[T_COUNT];
  int64_t tile_min[T_COUNT];
  SiluMulFn silu_mul;
  AttnRowsFn attn_rows;
};

// Each path fills the entries it implements; missing ones fall back to scalar.
void fill_scalar(IsaTable& t);
#if defined(__x86_64__)
void fill_avx2(IsaTable& t);
void fill_avx512(IsaTable& t);
#endif
// AVX-VNNI (VEX vpdpbusd on 256-bit registers): compilers from GCC 11 / clang 12 know the target.
#if defined(__x86_64__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define RAGK_HAVE_AVXVNNI 1
void fill_avxvnni(IsaTable& t);
// CPUID.(EAX=7, ECX=1):EAX bit 4 (the compilers' __builtin_cpu_supports names differ by version).
bool cpu_has_avxvnni();
#else
#define RAGK_HAVE_AVXVNNI 0
#endif
// AMX-INT8 tile GEMM (x86_amx.inc): Linux on x86-64 with a compiler that has the tile intrinsics.
#if defined(__x86_64__) && defined(__linux__) && \
    ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && defined(__GNUC__) && __GNUC__ >= 11))
#define RAGK_HAVE_AMX 1
// Whether the CPU has AMX-TILE + AMX-INT8 and the kernel granted this process the tile state.
bool amx_ready();
// The AVX-512 table plus tile GEMMs for the K formats from the row counts where they win.
void fill_amx(IsaTable& t);
#else
#define RAGK_HAVE_AMX 0
#endif
#if defined(__aarch64__)
void fill_neon(IsaTable& t);
#endif

// Scalar dequantisation of one row (n elements) into float; exact match of gguf's numpy reference.
bool dequant_row(int t, const uint8_t* w, float* out, int64_t n);

const IsaTable& active_table();
const char* active_isa();
// Returns false when name is not a path this CPU runs. Empty name = best.
bool select_isa(const char* name);
// Comma-separated names of the paths this CPU can run, best last.
const char* supported_isas_csv();

}  // namespace ragk
