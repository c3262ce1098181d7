// Portable reference path: every SIMD path is tested against these, and they fill any table entry
// a SIMD path leaves empty. Integer sums are exact; only the per-block float scaling rounds.
#include <algorithm>
#include <cmath>

#include "common.h"

namespace ragk {
namespace {

inline int8_t round_q8(float v) {
  // Round half to even (the default FP mode), as _mm256_round_ps and vrndnq_f32 do; the clamp
  // only matters for inf/nan inputs and keeps the int conversion defined.
  v = std::nearbyint(v);
  v = std::fmin(std::fmax(v, -127.0f), 127.0f);
  return int8_t(v);
}

void quant32(const float* x, void* out, int64_t k) {
  auto* b = static_cast<XBlock32*>(out);
  for (int64_t i = 0; i < k / QK; ++i) {
    const float* p = x + i * QK;
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::fmax(amax, std::fabs(p[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < QK; ++j) {
      b[i].qs[j] = round_q8(p[j] * id);
      sum += b[i].qs[j];
    }
    b[i].d = d;
    b[i].sum = sum;
    b[i].ds = d * float(sum);
  }
}

void quant256(const float* x, void* out, int64_t k) {
  auto* b = static_cast<XBlock256*>(out);
  for (int64_t i = 0; i < k / QKK; ++i) {
    const float* p = x + i * QKK;
    float amax = 0.0f;
    for (int j = 0; j < QKK; ++j) amax = std::fmax(amax, std::fabs(p[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QKK; ++j) b[i].qs[j] = round_q8(p[j] * id);
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += b[i].qs[g * 16 + j];
      b[i].bsums[g] = int16_t(s);
    }
    b[i].d = d;
  }
}

float dot_f32(int64_t n, const uint8_t* w, const void* xv) {
  const float* x = static_cast<const float*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, w + 4 * i, 4);
    acc += v * x[i];
  }
  return acc;
}

float dot_f16(int64_t n, const uint8_t* w, const void* xv) {
  const float* x = static_cast<const float*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += h2f(w + 2 * i) * x[i];
  return acc;
}

float dot_bf16(int64_t n, const uint8_t* w, const void* xv) {
  const float* x = static_cast<const float*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) acc += bf2f(w + 2 * i) * x[i];
  return acc;
}

// Sum of (4-bit weight) * (int8 activation) over one 32-block: low nibbles are elements 0..15,
// high nibbles 16..31.
inline int dot_nibbles(const uint8_t* qs, const int8_t* x) {
  int s = 0;
  for (int j = 0; j < 16; ++j) s += (qs[j] & 15) * x[j] + (qs[j] >> 4) * x[j + 16];
  return s;
}

// Same with the fifth bit of element j in bit j of qh.
inline int dot_5bit(const uint8_t* qhp, const uint8_t* qs, const int8_t* x) {
  uint32_t qh;
  std::memcpy(&qh, qhp, 4);
  int s = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = (qs[j] & 15) | int(((qh >> j) & 1u) << 4);
    const int hi = (qs[j] >> 4) | int(((qh >> (j + 16)) & 1u) << 4);
    s += lo * x[j] + hi * x[j + 16];
  }
  return s;
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 (the template parameters of the SIMD paths' dot32): BB bytes a block,
// fp16 d, then the fp16 minimum when MIN, the 32 fifth bits when FIVE, then 16 bytes of nibbles.
// Without a minimum the quants are offset by QOFF (8 or 16), applied through the activation sum.
template <int BB, int QOFF, bool MIN, bool FIVE>
float dot32(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock32*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QK; ++i) {
    const uint8_t* b = w + BB * i;
    const uint8_t* q = b + (MIN ? 4 : 2);
    const int s = (FIVE ? dot_5bit(q, q + 4, x[i].qs) : dot_nibbles(q, x[i].qs)) - QOFF * x[i].sum;
    if (MIN)
      acc += h2f(b) * x[i].d * float(s) + h2f(b + 2) * (x[i].d * float(x[i].sum));
    else
      acc += h2f(b) * x[i].d * float(s);
  }
  return acc;
}

float dot_q8_0(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock32*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QK; ++i) {
    const uint8_t* b = w + 34 * i;
    const auto* q = reinterpret_cast<const int8_t*>(b + 2);
    int s = 0;
    for (int j = 0; j < QK; ++j) s += q[j] * x[i].qs[j];
    acc += h2f(b) * x[i].d * float(s);
  }
  return acc;
}

// Q4_K / Q5_K: 8 sub-blocks of 32; qs byte l of pair j holds sub-block 2j (low) and 2j+1 (high).
template <bool FIVE>
float dot_qk45(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock256*>(xv);
  constexpr int BB = FIVE ? 176 : 144;
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QKK; ++i) {
    const uint8_t* b = w + BB * i;
    uint8_t sc[8], mn[8];
    unpack_k_scales(b + 4, sc, mn);
    const uint8_t* qh = b + 16;
    const uint8_t* qs = b + (FIVE ? 48 : 16);
    const int8_t* xq = x[i].qs;
    int sumi = 0;
    for (int j = 0; j < 4; ++j) {
      int s0 = 0, s1 = 0;
      for (int l = 0; l < 32; ++l) {
        int lo = qs[32 * j + l] & 15, hi = qs[32 * j + l] >> 4;
        if (FIVE) {
          lo |= ((qh[l] >> (2 * j)) & 1) << 4;
          hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
        }
        s0 += lo * xq[64 * j + l];
        s1 += hi * xq[64 * j + 32 + l];
      }
      sumi += sc[2 * j] * s0 + sc[2 * j + 1] * s1;
    }
    int summ = 0;
    for (int s = 0; s < 8; ++s) summ += mn[s] * (x[i].bsums[2 * s] + x[i].bsums[2 * s + 1]);
    acc += x[i].d * (h2f(b) * float(sumi) - h2f(b + 2) * float(summ));
  }
  return acc;
}

float dot_q6_k(int64_t n, const uint8_t* w, const void* xv) {
  const auto* x = static_cast<const XBlock256*>(xv);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QKK; ++i) {
    const uint8_t* b = w + 210 * i;
    const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
    const int8_t* xq = x[i].qs;
    int gs[16] = {0};
    q6_k_each(b, [&](int e, int q) { gs[e / 16] += q * xq[e]; });
    int sumi = 0;
    for (int g = 0; g < 16; ++g) sumi += sc[g] * (gs[g] - 32 * x[i].bsums[g]);
    acc += h2f(b + 208) * x[i].d * float(sumi);
  }
  return acc;
}

// The reference every SIMD SiLU is compared with: libm's expf.
void silu_mul_scalar(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = gate[j] / (1.0f + std::exp(-gate[j])) * up[j];
}

// The reference every SIMD attention is compared with: one token at a time, libm's expf. Chunks
// of ATTN_CHUNK tokens from i0 as on the SIMD paths (the online-softmax state is updated per
// chunk), so the result does not depend on the other rows either.
void attn_rows_scalar(const float* q, int64_t q_stride, int rows, int g, int d, const float* kpool,
                      const float* vpool, int64_t tok_stride, const int64_t* table, int64_t bs, int64_t i0,
                      int64_t i1, const int64_t* lims, float* m, float* l, float* acc) {
  float s[ATTN_CHUNK];
  for (int r = 0; r < rows; ++r) {
    const int64_t e = std::min(i1, lims[r]);
    for (int h = 0; h < g; ++h) {
      const int x = r * g + h;
      const float* qh = q + r * q_stride + h * d;
      float* ah = acc + int64_t(x) * d;
      m[x] = -INFINITY;
      l[x] = 0.0f;
      for (int j = 0; j < d; ++j) ah[j] = 0.0f;
      for (int64_t c0 = i0; c0 < e; c0 += ATTN_CHUNK) {
        const int n = int(std::min<int64_t>(ATTN_CHUNK, e - c0));
        float mx = -INFINITY;
        for (int t = 0; t < n; ++t) {
          const int64_t i = c0 + t;
          const float* k = kpool + (table[i / bs] * bs + i % bs) * tok_stride;
          float a = 0.0f;
          for (int j = 0; j < d; ++j) a += qh[j] * k[j];
          s[t] = a;
          mx = std::max(mx, a);
        }
        const float mn = std::max(m[x], mx);
        const float corr = std::exp(m[x] - mn);
        float sum = 0.0f;
        for (int t = 0; t < n; ++t) {
          s[t] = std::exp(s[t] - mn);
          sum += s[t];
        }
        l[x] = l[x] * corr + sum;
        m[x] = mn;
        for (int j = 0; j < d; ++j) ah[j] *= corr;
        for (int t = 0; t < n; ++t) {
          const int64_t i = c0 + t;
          const float* v = vpool + (table[i / bs] * bs + i % bs) * tok_stride;
          for (int j = 0; j < d; ++j) ah[j] += s[t] * v[j];
        }
      }
    }
  }
}

// The x8 GEMV's reference: each row unpacked to its plain bytes, then the plain Q4_K dot.
void dot8_q4k_scalar(int64_t n, const uint8_t* grp, const uint8_t* x, size_t xs, int mr, float* out, int64_t os) {
  const int64_t nsb = n / QKK;
  std::vector<uint8_t> row(size_t(nsb) * 144);
  for (int r = 0; r < X8_ROWS; ++r) {
    q4k_x8_unpack_row(grp, nsb, r, row.data());
    for (int i = 0; i < mr; ++i) out[i * os + r] = dot_qk45<false>(n, row.data(), x + i * xs);
  }
}

void x8_unpack_group_scalar(const uint8_t* grp, int64_t nsb, uint8_t* dst, int64_t rb) {
  for (int r = 0; r < X8_ROWS; ++r) q4k_x8_unpack_row(grp, nsb, r, dst + r * rb);
}

}  // namespace

void fill_scalar(IsaTable& t) {
  t.quant32 = quant32;
  t.quant256 = quant256;
  for (auto& f : t.dot) f = nullptr;
  for (auto& f : t.dotm) f = nullptr;
  for (auto& f : t.gemm) f = nullptr;
  for (auto& f : t.xgemm) f = nullptr;
  for (auto& f : t.tile) f = nullptr;
  for (auto& r : t.tile_min) r = 0;
  t.xlanes = 0;
  t.xgemm_lo = t.xgemm_hi = 0;
  t.silu_mul = silu_mul_scalar;
  t.attn_rows = attn_rows_scalar;
  t.dot[T_F32] = dot_f32;
  t.dot[T_F16] = dot_f16;
  t.dot[T_BF16] = dot_bf16;
  t.dot[T_Q4_0] = dot32<18, 8, false, false>;
  t.dot[T_Q4_1] = dot32<20, 0, true, false>;
  t.dot[T_Q5_0] = dot32<22, 16, false, true>;
  t.dot[T_Q5_1] = dot32<24, 0, true, true>;
  t.dot[T_Q8_0] = dot_q8_0;
  t.dot[T_Q4_K] = dot_qk45<false>;
  t.dot[T_Q5_K] = dot_qk45<true>;
  t.dot[T_Q6_K] = dot_q6_k;
  t.dot8_q4k = dot8_q4k_scalar;
  t.x8_unpack = x8_unpack_group_scalar;
}

}  // namespace ragk
