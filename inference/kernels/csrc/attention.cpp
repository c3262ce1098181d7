// Paged decode attention as a torch custom op (ragk::paged_decode): one new token per sequence
// against its whole context, read from the block pool in place (no gather). The per-ISA inner loop
// is IsaTable::attn_part (x86_attn.inc, scalar reference in scalar.cpp); this file splits the work
// and merges partial softmax states.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"

namespace ragk {
namespace {

// Tokens per work item at least: below it the merge costs more than the split saves.
constexpr int64_t kMinSplitTokens = 256;

// q [B, Hq, D] float32; k_pool / v_pool [num_blocks, block_size, Hk, D] float32; tables [B, W]
// int64 block ids; lens [B] int64 context lengths (the new token's K/V already written).
at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                        const at::Tensor& tables, const at::Tensor& lens, double scale) {
  TORCH_CHECK_VALUE(q.is_cpu() && q.scalar_type() == at::kFloat && q.dim() == 3 && q.is_contiguous(),
                    "ragk: paged_decode q must be a contiguous float32 CPU [B, Hq, D] tensor");
  TORCH_CHECK_VALUE(k_pool.scalar_type() == at::kFloat && v_pool.scalar_type() == at::kFloat && k_pool.dim() == 4 &&
                        k_pool.sizes() == v_pool.sizes() && k_pool.is_contiguous() && v_pool.is_contiguous(),
                    "ragk: paged_decode pools must be contiguous float32 [blocks, block_size, Hk, D]");
  const int64_t b = q.size(0), hq = q.size(1), d = q.size(2);
  const int64_t nblocks = k_pool.size(0), bs = k_pool.size(1), hk = k_pool.size(2);
  TORCH_CHECK_VALUE(k_pool.size(3) == d && hk > 0 && hq % hk == 0, "ragk: paged_decode head shapes do not match");
  const int64_t g = hq / hk;
  TORCH_CHECK_VALUE(d % 8 == 0 && g <= 16, "ragk: paged_decode needs head_dim % 8 == 0 and <= 16 query heads per KV head");
  at::Tensor tb = tables.to(at::kLong).contiguous();
  at::Tensor ln = lens.to(at::kLong).contiguous();
  TORCH_CHECK_VALUE(tb.dim() == 2 && tb.size(0) == b && ln.numel() == b, "ragk: paged_decode tables/lens do not match q");
  const int64_t w = tb.size(1);
  const int64_t* tp = tb.data_ptr<int64_t>();
  const int64_t* lp = ln.data_ptr<int64_t>();
  int64_t max_len = 0;
  for (int64_t i = 0; i < b; ++i) {
    TORCH_CHECK_VALUE(lp[i] >= 1 && lp[i] <= w * bs, "ragk: paged_decode context length ", lp[i], " out of range");
    for (int64_t j = 0; j < (lp[i] + bs - 1) / bs; ++j)
      TORCH_CHECK_VALUE(tp[i * w + j] >= 0 && tp[i * w + j] < nblocks, "ragk: paged_decode block id out of range");
    max_len = std::max(max_len, lp[i]);
  }
  // Split each row's context so both threads have work even for one sequence (2 KV heads).
  const int64_t threads = at::get_num_threads();
  const int64_t want = (4 * threads + b * hk - 1) / (b * hk);
  const int64_t splits = std::max<int64_t>(1, std::min<int64_t>(want, max_len / kMinSplitTokens));
  const int64_t items = b * hk * splits;
  std::vector<float> qs(size_t(b * hq * d));
  const float* qp = q.data_ptr<float>();
  for (size_t i = 0; i < qs.size(); ++i) qs[i] = qp[i] * float(scale);
  std::vector<float> pm(size_t(items * g)), pl(size_t(items * g)), pa(size_t(items * g * d));
  const AttnPartFn part = active_table().attn_part;
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  at::parallel_for(0, items, 1, [&](int64_t s, int64_t e) {
    for (int64_t it = s; it < e; ++it) {
      const int64_t row = it / (hk * splits), h = (it / splits) % hk, sp = it % splits;
      const int64_t len = lp[row];
      const int64_t per = (len + splits - 1) / splits;
      const int64_t i0 = std::min(len, sp * per), i1 = std::min(len, i0 + per);
      float* m = pm.data() + it * g;
      float* l = pl.data() + it * g;
      float* a = pa.data() + it * g * d;
      if (i0 >= i1) {
        for (int64_t x = 0; x < g; ++x) m[x] = -INFINITY, l[x] = 0.0f;
        continue;
      }
      part(qs.data() + (row * hq + h * g) * d, int(g), int(d), kp + h * d, vp + h * d, hk * d, tp + row * w, bs, i0, i1,
           m, l, a);
    }
  });
  at::Tensor out = at::empty({b, hq, d}, q.options());
  float* op = out.data_ptr<float>();
  for (int64_t row = 0; row < b; ++row)
    for (int64_t h = 0; h < hk; ++h)
      for (int64_t x = 0; x < g; ++x) {
        const int64_t base = (row * hk + h) * splits;
        float mx = -INFINITY;
        for (int64_t sp = 0; sp < splits; ++sp) mx = std::max(mx, pm[(base + sp) * g + x]);
        float den = 0.0f;
        float* o = op + (row * hq + h * g + x) * d;
        for (int64_t j = 0; j < d; ++j) o[j] = 0.0f;
        for (int64_t sp = 0; sp < splits; ++sp) {
          const float mm = pm[(base + sp) * g + x];
          if (mm == -INFINITY) continue;
          const float c = std::exp(mm - mx);
          den += c * pl[(base + sp) * g + x];
          const float* a = pa.data() + ((base + sp) * g + x) * d;
          for (int64_t j = 0; j < d; ++j) o[j] += c * a[j];
        }
        for (int64_t j = 0; j < d; ++j) o[j] /= den;
      }
  return out;
}

}  // namespace
}  // namespace ragk

TORCH_LIBRARY_FRAGMENT(ragk, m) {
  m.def("paged_decode(Tensor q, Tensor k_pool, Tensor v_pool, Tensor tables, Tensor lens, float scale) -> Tensor",
        &ragk::paged_decode);
}
