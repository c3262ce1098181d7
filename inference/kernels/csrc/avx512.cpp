// AVX-512 VNNI path (Ice Lake / Sapphire Rapids, Zen 4/5): the same kernels with the integer
// products fused into vpdpbusd (u8 x s8 -> int32) and vpdpwssd (int16 x int16 -> int32) on
// 256-bit registers (VL), one instruction where AVX2 needs two or three.
#if defined(__x86_64__)
#include <immintrin.h>

#include "common.h"

#define TGT __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define SFX avx512
#define DOT_U8S8(acc, u, s) _mm256_dpbusd_epi32((acc), (u), (s))
#define DOT_S16(acc, p, sc) _mm256_dpwssd_epi32((acc), (p), (sc))

namespace ragk {
#include "x86_body.inc"
}  // namespace ragk
#endif
