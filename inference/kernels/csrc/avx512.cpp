// AVX-512 VNNI path (Ice Lake / Sapphire Rapids, Zen 4/5): the same kernels with the integer
// products fused into vpdpbusd (u8 x s8 -> int32) and vpdpwssd (int16 x int16 -> int32) on
// 256-bit registers (VL), one instruction where AVX2 needs two or three.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

#include "common.h"
#if RAGK_HAVE_AMX
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define SFX avx512
#define RAGK_MASK_OPS 1
#define RAGK_VNNI 1
#define RAGK_DPBUSD 1
#define DOT_U8S8(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define DOT_S16(acc, p, sc) _mm256_dpwssd_epi32((acc), (p), (sc))

namespace ragk {
#include "x86_body.inc"

namespace {

// Two 32-element blocks per 512-bit register: nibbles spread with one permute + masked shift,
// fifth bits added under a 64-bit mask, one vpdpbusd, one FMA for both blocks.
template <int BB, int QOFF, bool MIN, bool FIVE>
TGT float dot32_zmm(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock32*>(xv);
  const int64_t nb = n / QK;
  constexpr int QS = (MIN ? 4 : 2) + (FIVE ? 4 : 0);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i b4 = _mm512_set1_epi8(0x10);
  const __m512i spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3);
  __m512 acc = _mm512_setzero_ps();
  float corr = 0.0f;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const uint8_t* b0 = w + BB * i;
    const uint8_t* b1 = b0 + BB;
    const __m256i t = _mm256_inserti128_si256(
        _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b0 + QS))),
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(b1 + QS)), 1);
    __m512i q = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(t));  // t0 t0 t1 t1
    q = _mm512_and_si512(_mm512_mask_srli_epi16(q, __mmask32(0xFF00FF00u), q, 4), m4);
    if (FIVE) {
      uint32_t h0, h1;
      std::memcpy(&h0, b0 + (MIN ? 4 : 2), 4);
      std::memcpy(&h1, b1 + (MIN ? 4 : 2), 4);
      q = _mm512_mask_add_epi8(q, __mmask64(h0 | (uint64_t(h1) << 32)), q, b4);
    }
    const __m512i xx = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i + 1].qs)), 1);
    const __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xx);
    const float d0 = f16avx512(b0), d1 = f16avx512(b1);
    const __m512 sc =
        _mm512_mask_blend_ps(__mmask16(0xFF00), _mm512_set1_ps(d0 * x[i].d), _mm512_set1_ps(d1 * x[i + 1].d));
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), sc, acc);
    corr += (MIN ? f16avx512(b0 + 2) : d0) * x[i].ds + (MIN ? f16avx512(b1 + 2) : d1) * x[i + 1].ds;
  }
  float tail = 0.0f;
  if (i < nb) {
    __m256 a = _mm256_setzero_ps();
    block32avx512<BB, QOFF, MIN, FIVE>(w + BB * i, x[i], a, corr);
    tail = hsum_psavx512(a);
  }
  return _mm512_reduce_add_ps(acc) + tail + (MIN ? 1.0f : -float(QOFF)) * corr;
}

// Words 8k..8k+7 = v[k]: per-128-bit-lane indices / scales for vpermw.
TGT inline __m512i lane_words(uint64_t v0, uint64_t v1, uint64_t v2, uint64_t v3) {
  const uint64_t rep = 0x0101010101010101ull;
  return _mm512_cvtepu8_epi16(
      _mm256_set_epi64x(int64_t(v3 * rep), int64_t(v2 * rep), int64_t(v1 * rep), int64_t(v0 * rep)));
}

// Q4_K / Q5_K with one 64-element sub-block pair per zmm: [low nibbles | high nibbles] against
// 64 contiguous activations, one vpmaddubsw + one vpdpwssd with the pair's two scales.
template <bool FIVE>
TGT float dot_qk45_zmm(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock256*>(xv);
  constexpr int BB = FIVE ? 176 : 144;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i b4 = _mm512_set1_epi8(0x10);
  __m512i idx[4], sel[4];
  for (int j = 0; j < 4; ++j) {
    idx[j] = lane_words(2 * j, 2 * j, 2 * j + 1, 2 * j + 1);
    sel[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(char(1 << (2 * j)))),
                                _mm256_set1_epi8(char(1 << (2 * j + 1))), 1);
  }
  __m512 acc = _mm512_setzero_ps();
  __m128 corr = _mm_setzero_ps();
  for (int64_t i = 0; i < n / QKK; ++i) {
    const uint8_t* b = w + BB * i;
    __m128i mn16;
    const __m512i sc16 = _mm512_castsi256_si512(k_scalesavx512(b + 4, mn16));
    const uint8_t* qs = b + (FIVE ? 48 : 16);
    const int8_t* xq = x[i].qs;
    __m512i hz = _mm512_setzero_si512();
    if (FIVE) hz = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16)));
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j)));
      q = _mm512_and_si512(_mm512_mask_srli_epi16(q, __mmask32(0xFFFF0000u), q, 4), m4);
      if (FIVE) q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(hz, sel[j]), q, b4);
      const __m512i xx = _mm512_loadu_si512(xq + 64 * j);
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(q, xx), _mm512_permutexvar_epi16(idx[j], sc16));
    }
    const float dx = x[i].d;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(f16avx512(b) * dx), acc);
    corr = _mm_fmadd_ps(k_mins_psavx512(mn16, x[i].bsums), _mm_set1_ps(f16avx512(b + 2) * dx), corr);
  }
  return _mm512_reduce_add_ps(acc) - hsum4_psavx512(corr);
}

// Q6_K with 64 elements per zmm: the 6th/5th bit pairs come from one broadcast of qh shifted by
// a different count in each half (vpsllvw / vpsrlvw), scales picked per 16 with vpermw.
TGT float dot_q6k_zmm(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock256*>(xv);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i cnt_a = lane_words(4, 4, 2, 2);
  const __m512i cnt_b = lane_words(0, 0, 2, 2);
  const __m512i idx[4] = {lane_words(0, 1, 2, 3), lane_words(4, 5, 6, 7), lane_words(8, 9, 10, 11),
                          lane_words(12, 13, 14, 15)};
  __m512 acc = _mm512_setzero_ps();
  __m128 corr = _mm_setzero_ps();
  for (int64_t i = 0; i < n / QKK; ++i) {
    const uint8_t* b = w + 210 * i;
    const int8_t* xq = x[i].qs;
    const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    const __m128i sc_lo = _mm_cvtepi8_epi16(s8), sc_hi = _mm_cvtepi8_epi16(_mm_srli_si128(s8, 8));
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_set_m128i(sc_hi, sc_lo));
    __m512i sumi = _mm512_setzero_si512();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m512i q = _mm512_loadu_si512(b + 64 * h);
      const __m512i hh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h)));
      const __m512i a = _mm512_or_si512(_mm512_and_si512(q, m4), _mm512_and_si512(_mm512_sllv_epi16(hh, cnt_a), m30));
      const __m512i c = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4),
                                        _mm512_and_si512(_mm512_srlv_epi16(hh, cnt_b), m30));
      const __m512i xa = _mm512_loadu_si512(xq + 128 * h);
      const __m512i xc = _mm512_loadu_si512(xq + 128 * h + 64);
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(a, xa), _mm512_permutexvar_epi16(idx[2 * h], sc16));
      sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(c, xc), _mm512_permutexvar_epi16(idx[2 * h + 1], sc16));
    }
    const float dd = f16avx512(b + 208) * x[i].d;
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_set1_ps(dd), acc);
    corr = _mm_fmadd_ps(q6_offset_psavx512(sc_lo, sc_hi, x[i].bsums), _mm_set1_ps(32.0f * dd), corr);
  }
  return _mm512_reduce_add_ps(acc) - hsum4_psavx512(corr);
}

#include "avx512_rows.inc"
#if RAGK_HAVE_AMX
#include "x86_amx.inc"
#endif

}  // namespace

void fill_avx512(IsaTable& t) {
  fill_body_avx512(t);
  t.dot[T_Q4_0] = dot32_zmm<18, 8, false, false>;
  t.dot[T_Q4_1] = dot32_zmm<20, 0, true, false>;
  t.dot[T_Q5_0] = dot32_zmm<22, 16, false, true>;
  t.dot[T_Q5_1] = dot32_zmm<24, 0, true, true>;
  t.dot[T_Q4_K] = dot_qk45_zmm<false>;
  t.dot[T_Q5_K] = dot_qk45_zmm<true>;
  t.dot[T_Q6_K] = dot_q6k_zmm;
  t.dotm[T_Q4_0] = dotm_q4_0_zmm;
  t.dotm[T_Q4_1] = dotm_q4_1_zmm;
  t.dotm[T_Q5_0] = dotm_q5_0_zmm;
  t.dotm[T_Q5_1] = dotm_q5_1_zmm;
  t.dotm[T_Q4_K] = dotm_q4_k_zmm;
  t.dotm[T_Q5_K] = dotm_q5_k_zmm;
  t.dotm[T_Q6_K] = dotm_q6_k_zmm;
}

#if RAGK_HAVE_AMX
bool amx_ready() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  if (!((d >> 24) & 1u) || !((d >> 25) & 1u)) return false;  // AMX-TILE, AMX-INT8
  // Linux hands out tile state only on request (once per process); it fails where the kernel
  // does not support AMX, and then this path is not offered.
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

void fill_amx(IsaTable& t) {
  // The 256-element K formats only: there a tile product's scaling is summed over a super-block
  // before the float fix-up; for the 32-element formats every 32-element product needs its own
  // fix-up, and the tile GEMM measured no faster than the AVX-512 panel GEMM (docs/performance.md,
  // session 23), so they keep it.
  t.gemm[T_Q4_K] = gemm_amx<T_Q4_K>;
  t.gemm[T_Q5_K] = gemm_amx<T_Q5_K>;
  t.gemm[T_Q6_K] = gemm_amx<T_Q6_K>;
  t.gemm[T_Q4_KX8] = nullptr;  // x8 weights reach the tile GEMM through unpacked copies (ops.cpp)
  // The tile GEMM from 16 rows (one full tile of activations); the small-M GEMM below that.
  t.xgemm_lo = 12;
  t.xgemm_hi = 15;
}
#endif
}  // namespace ragk
#endif
