// AVX-VNNI path (Intel Alder Lake and later client cores, Sierra Forest; AVX2 CPUs without
// AVX-512): the AVX2 kernels with each u8 x s8 product sum done by one VEX-encoded vpdpbusd and each
// int16 scale product by vpdpwssd, where AVX2 needs maddubs + madd + add. The int32 sums are the
// AVX2 path's exactly (its int16 partial sums never saturate), and Q8_0 gets the panel GEMMs that
// AVX2 cannot run exactly.
#include "common.h"

#if defined(__x86_64__) && RAGK_HAVE_AVXVNNI
#include <immintrin.h>

#include <cmath>

#define TGT __attribute__((target("avx2,fma,f16c,avxvnni")))
#define SFX avxvnni
#define RAGK_DPBUSD 1
#define DOT_U8S8(acc, u, s) _mm256_dpbusd_avx_epi32((acc), (u), (s))
#define DOT_S16(acc, p, sc) _mm256_dpwssd_avx_epi32((acc), (p), (sc))

namespace ragk {
#include "x86_body.inc"

void fill_avxvnni(IsaTable& t) { fill_body_avxvnni(t); }
}  // namespace ragk
#endif
