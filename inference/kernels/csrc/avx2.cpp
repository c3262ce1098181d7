// AVX2 + FMA path (Haswell and later, Zen): u8 x s8 products with maddubs, then madd to int32.
#if defined(__x86_64__)
#include <immintrin.h>

#include <cmath>

#include "common.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define SFX avx2
#define DOT_U8S8(acc, u, s) \
  _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1)))
#define DOT_S16(acc, p, sc) _mm256_add_epi32((acc), _mm256_madd_epi16((p), (sc)))

namespace ragk {
#include "x86_body.inc"

void fill_avx2(IsaTable& t) { fill_body_avx2(t); }
}  // namespace ragk
#endif
