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

#if RAGK_HAVE_AMX
#include "x86_amx.inc"
#endif

}  // namespace

void fill_avx512(IsaTable& t) {
  fill_body_avx512(t);
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
  // The AVX-512 path's GEMMs stay for the rows where they are faster: measured per type on a
  // Sapphire Rapids-class Xeon, 2 threads, the 1.5B's tensors (docs/performance.md, session 43), the
  // tile GEMM (16-row activation tiles, the last one zero-padded) loses to the small-M GEMM below 32
  // rows (Q6_K: 0.7-0.8x at 16-32 rows) and to the x8 Q4_K panel GEMM below 32 (0.7-1.0x), wins on
  // Q4_K from 32-48 rows (1.1-1.2x at 48-256) and ties on Q6_K from 48. Q5_K (no packaged model has
  // it) takes Q4_K's threshold: same 32-element sub-blocks. x8 weights reach the tile GEMM through
  // unpacked copies (ops.cpp).
  t.tile[T_Q4_K] = gemm_amx<T_Q4_K>;
  t.tile[T_Q5_K] = gemm_amx<T_Q5_K>;
  t.tile[T_Q6_K] = gemm_amx<T_Q6_K>;
  t.tile_min[T_Q4_K] = 32;
  t.tile_min[T_Q5_K] = 32;
  t.tile_min[T_Q6_K] = 64;
}
#endif
}  // namespace ragk
#endif
