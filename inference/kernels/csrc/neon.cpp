// AArch64 NEON path (baseline ARMv8-A, no dotprod extension needed): widening s8 x s8 multiplies
// (vmull_s8) pairwise-accumulated into int32 (vpadalq_s16). Activation quantisation stays scalar.
#if defined(__aarch64__)
#include <arm_neon.h>

#include "common.h"

namespace ragk {
namespace {

inline int32x4_t dot16(int32x4_t acc, int8x16_t a, int8x16_t b) {
  acc = vpadalq_s16(acc, vmull_s8(vget_low_s8(a), vget_low_s8(b)));
  return vpadalq_s16(acc, vmull_high_s8(a, b));
}

inline int dot32s(int8x16_t a0, int8x16_t a1, const int8_t* x) {
  int32x4_t s = dot16(vdupq_n_s32(0), a0, vld1q_s8(x));
  s = dot16(s, a1, vld1q_s8(x + 16));
  return vaddvq_s32(s);
}

// Bit j of the 32-bit word at p -> 0x10 in byte j (j = 0..15 in lo, 16..31 in hi).
inline void bit4_32(const uint8_t* p, uint8x16_t& lo, uint8x16_t& hi) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  const uint8x16_t v = vreinterpretq_u8_u32(vdupq_n_u32(bits));
  const uint8_t i0[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  const uint8_t i1[16] = {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3};
  const uint8_t sel[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  const uint8x16_t s = vld1q_u8(sel);
  const uint8x16_t b4 = vdupq_n_u8(0x10);
  lo = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(i0)), s), b4);
  hi = vandq_u8(vtstq_u8(vqtbl1q_u8(v, vld1q_u8(i1)), s), b4);
}

template <int BB, int QOFF, bool MIN, bool FIVE>
float dot32(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock32*>(xv);
  float acc = 0.0f;
  const uint8x16_t m4 = vdupq_n_u8(15);
  for (int64_t i = 0; i < n / QK; ++i) {
    const uint8_t* b = w + BB * i;
    const uint8_t* qs = b + (MIN ? 4 : 2) + (FIVE ? 4 : 0);
    const uint8x16_t raw = vld1q_u8(qs);
    uint8x16_t lo = vandq_u8(raw, m4), hi = vshrq_n_u8(raw, 4);
    if (FIVE) {
      uint8x16_t hl, hh;
      bit4_32(b + (MIN ? 4 : 2), hl, hh);
      lo = vorrq_u8(lo, hl);
      hi = vorrq_u8(hi, hh);
    }
    const int s = dot32s(vreinterpretq_s8_u8(lo), vreinterpretq_s8_u8(hi), x[i].qs);
    const float dd = h2f(b) * x[i].d;
    if (MIN)
      acc += dd * float(s) + h2f(b + 2) * (x[i].d * float(x[i].sum));
    else
      acc += dd * float(s - QOFF * x[i].sum);
  }
  return acc;
}

float dot_q4_0(int64_t n, const uint8_t* w, const void* x) { return dot32<18, 8, false, false>(n, w, x); }
float dot_q4_1(int64_t n, const uint8_t* w, const void* x) { return dot32<20, 0, true, false>(n, w, x); }
float dot_q5_0(int64_t n, const uint8_t* w, const void* x) { return dot32<22, 16, false, true>(n, w, x); }
float dot_q5_1(int64_t n, const uint8_t* w, const void* x) { return dot32<24, 0, true, true>(n, w, x); }

float dot_q8_0(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock32*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QK; ++i) {
    const uint8_t* b = w + 34 * i;
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    const int s = dot32s(vld1q_s8(q), vld1q_s8(q + 16), x[i].qs);
    acc += h2f(b) * x[i].d * float(s);
  }
  return acc;
}

template <bool FIVE>
float dot_qk45(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock256*>(xv);
  constexpr int BB = FIVE ? 176 : 144;
  const uint8x16_t m4 = vdupq_n_u8(15);
  const uint8x16_t b4 = vdupq_n_u8(0x10);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QKK; ++i) {
    const uint8_t* b = w + BB * i;
    uint8_t sc[8], mn[8];
    unpack_k_scales(b + 4, sc, mn);
    const uint8_t* qs = b + (FIVE ? 48 : 16);
    const int8_t* xq = x[i].qs;
    uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
    if (FIVE) {
      qh0 = vld1q_u8(b + 16);
      qh1 = vld1q_u8(b + 32);
    }
    int sumi = 0;
    for (int j = 0; j < 4; ++j) {
      const uint8x16_t r0 = vld1q_u8(qs + 32 * j), r1 = vld1q_u8(qs + 32 * j + 16);
      uint8x16_t l0 = vandq_u8(r0, m4), l1 = vandq_u8(r1, m4);
      uint8x16_t h0 = vshrq_n_u8(r0, 4), h1 = vshrq_n_u8(r1, 4);
      if (FIVE) {
        const int8x16_t sl = vdupq_n_s8(int8_t(4 - 2 * j)), sh = vdupq_n_s8(int8_t(3 - 2 * j));
        l0 = vorrq_u8(l0, vandq_u8(vshlq_u8(qh0, sl), b4));
        l1 = vorrq_u8(l1, vandq_u8(vshlq_u8(qh1, sl), b4));
        h0 = vorrq_u8(h0, vandq_u8(vshlq_u8(qh0, sh), b4));
        h1 = vorrq_u8(h1, vandq_u8(vshlq_u8(qh1, sh), b4));
      }
      const int s0 = dot32s(vreinterpretq_s8_u8(l0), vreinterpretq_s8_u8(l1), xq + 64 * j);
      const int s1 = dot32s(vreinterpretq_s8_u8(h0), vreinterpretq_s8_u8(h1), xq + 64 * j + 32);
      sumi += sc[2 * j] * s0 + sc[2 * j + 1] * s1;
    }
    int summ = 0;
    for (int s = 0; s < 8; ++s) summ += mn[s] * (x[i].bsums[2 * s] + x[i].bsums[2 * s + 1]);
    acc += x[i].d * (h2f(b) * float(sumi) - h2f(b + 2) * float(summ));
  }
  return acc;
}

float dot_q4_k(int64_t n, const uint8_t* w, const void* x) { return dot_qk45<false>(n, w, x); }
float dot_q5_k(int64_t n, const uint8_t* w, const void* x) { return dot_qk45<true>(n, w, x); }

float dot_q6_k(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock256*>(xv);
  const uint8x16_t m4 = vdupq_n_u8(15);
  const uint8x16_t m30 = vdupq_n_u8(0x30);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QKK; ++i) {
    const uint8_t* b = w + 210 * i;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const int8_t* xq = x[i].qs;
    int sumi = 0;
    for (int h = 0; h < 2; ++h) {
      for (int c = 0; c < 4; ++c) {
        const int8x16_t sh = vdupq_n_s8(int8_t(4 - 2 * c));
        for (int half = 0; half < 2; ++half) {
          const uint8_t* lp = b + 64 * h + 32 * (c & 1) + 16 * half;
          const uint8x16_t raw = vld1q_u8(lp);
          const uint8x16_t lo = c < 2 ? vandq_u8(raw, m4) : vshrq_n_u8(raw, 4);
          const uint8x16_t hb = vandq_u8(vshlq_u8(vld1q_u8(b + 128 + 32 * h + 16 * half), sh), m30);
          const int e = 128 * h + 32 * c + 16 * half;
          const int32x4_t s = dot16(vdupq_n_s32(0), vreinterpretq_s8_u8(vorrq_u8(lo, hb)), vld1q_s8(xq + e));
          sumi += sc[e / 16] * (vaddvq_s32(s) - 32 * x[i].bsums[e / 16]);
        }
      }
    }
    acc += h2f(b + 208) * x[i].d * float(sumi);
  }
  return acc;
}

}  // namespace

void fill_neon(IsaTable& t) {
  t.dot[T_Q4_0] = dot_q4_0;
  t.dot[T_Q4_1] = dot_q4_1;
  t.dot[T_Q5_0] = dot_q5_0;
  t.dot[T_Q5_1] = dot_q5_1;
  t.dot[T_Q8_0] = dot_q8_0;
  t.dot[T_Q4_K] = dot_q4_k;
  t.dot[T_Q5_K] = dot_q5_k;
  t.dot[T_Q6_K] = dot_q6_k;
}

}  // namespace ragk
#endif
