// Scalar dequantisation, bit-exact with gguf's numpy reference (same float32 operation order;
// built with -ffp-contract=off so d*q + m is never fused). Used for embedding lookups and checks,
// where speed does not matter.
#include "common.h"

namespace ragk {

bool dequant_row(int t, const uint8_t* w, float* out, int64_t n) {
  switch (t) {
    case T_F32:
      std::memcpy(out, w, size_t(n) * 4);
      return true;
    case T_F16:
      for (int64_t i = 0; i < n; ++i) out[i] = h2f(w + 2 * i);
      return true;
    case T_BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf2f(w + 2 * i);
      return true;
    case T_Q4_0:
    case T_Q4_1:
    case T_Q5_0:
    case T_Q5_1: {
      const bool has_min = t == T_Q4_1 || t == T_Q5_1;
      const bool five = t == T_Q5_0 || t == T_Q5_1;
      const int bb = block_bytes(t);
      for (int64_t i = 0; i < n / QK; ++i) {
        const uint8_t* b = w + bb * i;
        const float d = h2f(b);
        const float m = has_min ? h2f(b + 2) : 0.0f;
        const uint8_t* p = b + (has_min ? 4 : 2);
        uint32_t qh = 0;
        if (five) {
          std::memcpy(&qh, p, 4);
          p += 4;
        }
        const int off = has_min ? 0 : (five ? 16 : 8);
        float* o = out + QK * i;
        for (int j = 0; j < 16; ++j) {
          int lo = p[j] & 15, hi = p[j] >> 4;
          if (five) {
            lo |= int((qh >> j) & 1u) << 4;
            hi |= int((qh >> (j + 16)) & 1u) << 4;
          }
          float a = d * float(lo - off), c = d * float(hi - off);
          if (has_min) {
            a = a + m;
            c = c + m;
          }
          o[j] = a;
          o[j + 16] = c;
        }
      }
      return true;
    }
    case T_Q8_0:
      for (int64_t i = 0; i < n / QK; ++i) {
        const uint8_t* b = w + 34 * i;
        const float d = h2f(b);
        const auto* q = reinterpret_cast<const int8_t*>(b + 2);
        for (int j = 0; j < QK; ++j) out[QK * i + j] = float(q[j]) * d;
      }
      return true;
    case T_Q4_K:
    case T_Q5_K: {
      const bool five = t == T_Q5_K;
      const int bb = block_bytes(t);
      for (int64_t i = 0; i < n / QKK; ++i) {
        const uint8_t* b = w + bb * i;
        const float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sc[8], mn[8];
        unpack_k_scales(b + 4, sc, mn);
        const uint8_t* qh = b + 16;
        const uint8_t* qs = b + (five ? 48 : 16);
        float* o = out + QKK * i;
        for (int j = 0; j < 4; ++j) {
          const float d0 = d * float(sc[2 * j]), m0 = dmin * float(mn[2 * j]);
          const float d1 = d * float(sc[2 * j + 1]), m1 = dmin * float(mn[2 * j + 1]);
          for (int l = 0; l < 32; ++l) {
            int lo = qs[32 * j + l] & 15, hi = qs[32 * j + l] >> 4;
            if (five) {
              lo |= ((qh[l] >> (2 * j)) & 1) << 4;
              hi |= ((qh[l] >> (2 * j + 1)) & 1) << 4;
            }
            o[64 * j + l] = d0 * float(lo) - m0;
            o[64 * j + 32 + l] = d1 * float(hi) - m1;
          }
        }
      }
      return true;
    }
    case T_Q6_K:
      for (int64_t i = 0; i < n / QKK; ++i) {
        const uint8_t* b = w + 210 * i;
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
        const float d = h2f(b + 208);
        float* o = out + QKK * i;
        q6_k_each(b, [&](int e, int q) { o[e] = (d * float(sc[e / 16])) * float(q - 32); });
      }
      return true;
    default:
      return false;
  }
}

}  // namespace ragk
