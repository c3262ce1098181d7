// Paged attention as torch custom ops, read from the block pool in place (no gather):
//   ragk::paged_decode  one new token per sequence against its whole context (block tables);
//   ragk::paged_prefill a prompt chunk's rows against their causal context (flat slots).
// Both run every row through IsaTable::attn_rows (x86_attn.inc, scalar reference in scalar.cpp)
// over segments of kSegment tokens fixed by absolute position, merged in segment order, so a row's
// result is the same bits whichever op, batch, prefill chunk or thread split computed it (see
// AttnRowsFn in common.h for why). This file splits the work and merges the segments.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"

namespace ragk {
namespace {

// Tokens per segment: part of the numerics (a row's softmax is merged at these positions), so a
// constant, not a function of the thread count. Long contexts split into segments give one
// sequence's decode work for every thread.
constexpr int64_t kSegment = 256;
// Prefill rows per work item: they share each gathered, transposed K chunk.
constexpr int64_t kTile = 8;

struct Tile {
  int64_t r0, r1;        // rows [r0, r1) of q
  const int64_t* table;  // their block table (bs > 1) or slot list (bs == 1)
  int64_t bs;
  int64_t len;           // the furthest context any of them sees
};

// Fold a segment's partial state (m2, l2, a2) into the running one (m, l, a); a row that saw no
// token of the segment (m2 = -inf) leaves it unchanged.
inline void merge(float& m, float& l, float* a, float m2, float l2, const float* a2, int64_t d) {
  if (m2 == -INFINITY) return;
  const float mn = std::max(m, m2);
  const float c1 = std::exp(m - mn), c2 = std::exp(m2 - mn);
  l = l * c1 + l2 * c2;
  for (int64_t j = 0; j < d; ++j) a[j] = a[j] * c1 + a2[j] * c2;
  m = mn;
}

void check_pools(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool, const char* op) {
  // Rows may be strided (q as a view of the fused qkv projection): it is copied, scaled, anyway.
  TORCH_CHECK_VALUE(q.is_cpu() && q.scalar_type() == at::kFloat && q.dim() == 3 && q.stride(2) == 1 &&
                        q.stride(1) == q.size(2),
                    "ragk: ", op, " q must be a float32 CPU [T, Hq, D] tensor with contiguous rows");
  TORCH_CHECK_VALUE(k_pool.scalar_type() == at::kFloat && v_pool.scalar_type() == at::kFloat && k_pool.dim() == 4 &&
                        k_pool.sizes() == v_pool.sizes() && k_pool.is_contiguous() && v_pool.is_contiguous(),
                    "ragk: ", op, " pools must be contiguous float32 [blocks, block_size, Hk, D]");
  const int64_t hq = q.size(1), d = q.size(2), hk = k_pool.size(2);
  TORCH_CHECK_VALUE(k_pool.size(3) == d && hk > 0 && hq % hk == 0, "ragk: ", op, " head shapes do not match");
  TORCH_CHECK_VALUE(d % 8 == 0 && hq / hk <= 16, "ragk: ", op,
                    " needs head_dim % 8 == 0 and <= 16 query heads per KV head");
}

// out[r] = softmax(q[r] K^T) V over each row's first lims[r] context tokens, for the rows of `tiles`.
at::Tensor attend(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool, const std::vector<Tile>& tiles,
                  const int64_t* lims, double scale) {
  const int64_t t_rows = q.size(0), hq = q.size(1), d = q.size(2), hk = k_pool.size(2);
  const int64_t g = hq / hk, ts = hk * d;
  std::vector<float> qs(size_t(t_rows * hq * d));
  const float* qp = q.data_ptr<float>();
  const int64_t row = hq * d, qstride = q.stride(0);
  for (int64_t r = 0; r < t_rows; ++r)
    for (int64_t i = 0; i < row; ++i) qs[size_t(r * row + i)] = qp[r * qstride + i] * float(scale);
  const AttnRowsFn part = active_table().attn_rows;
  const float* kp = k_pool.data_ptr<float>();
  const float* vp = v_pool.data_ptr<float>();
  at::Tensor out = at::empty({t_rows, hq, d}, q.options());
  float* op = out.data_ptr<float>();
  const int64_t nt = int64_t(tiles.size());
  const int64_t stride = g * d;  // per row of a tile's state
  auto segments = [](const Tile& tl) { return (tl.len + kSegment - 1) / kSegment; };
  auto run = [&](const Tile& tl, int64_t h, int64_t seg, float* m, float* l, float* a) {
    part(qs.data() + (tl.r0 * hq + h * g) * d, hq * d, int(tl.r1 - tl.r0), int(g), int(d), kp + h * d, vp + h * d, ts,
         tl.table, tl.bs, seg * kSegment, std::min(tl.len, (seg + 1) * kSegment), lims + tl.r0, m, l, a);
  };
  auto finish = [&](const Tile& tl, int64_t h, const float* m, const float* l, const float* a) {
    (void)m;
    for (int64_t r = tl.r0; r < tl.r1; ++r)
      for (int64_t x = 0; x < g; ++x) {
        const int64_t i = (r - tl.r0) * g + x;
        float* o = op + (r * hq + h * g + x) * d;
        for (int64_t j = 0; j < d; ++j) o[j] = a[i * d + j] / l[i];
      }
  };
  int64_t max_seg = 0;
  for (const Tile& tl : tiles) max_seg = std::max(max_seg, segments(tl));
  if (nt * hk >= 2 * at::get_num_threads() || max_seg == 1) {
    // Enough (tile, KV head) items for every thread: each folds its segments as it goes. A
    // prompt's later rows see more tokens, so tiles are taken from both ends in turn (0, n-1, 1,
    // n-2, ...): every thread's contiguous share then holds as much early as late work.
    at::parallel_for(0, nt * hk, 1, [&](int64_t s, int64_t e) {
      std::vector<float> sm(kTile * g), sl(kTile * g), sa(kTile * stride), pm(kTile * g), pl(kTile * g), pa(kTile * stride);
      for (int64_t it = s; it < e; ++it) {
        const int64_t k = it / hk;
        const Tile& tl = tiles[size_t(k % 2 == 0 ? k / 2 : nt - 1 - k / 2)];
        const int64_t h = it % hk, nr = (tl.r1 - tl.r0) * g;
        run(tl, h, 0, sm.data(), sl.data(), sa.data());
        for (int64_t seg = 1; seg < segments(tl); ++seg) {
          run(tl, h, seg, pm.data(), pl.data(), pa.data());
          for (int64_t x = 0; x < nr; ++x) merge(sm[x], sl[x], sa.data() + x * d, pm[x], pl[x], pa.data() + x * d, d);
        }
        finish(tl, h, sm.data(), sl.data(), sa.data());
      }
    });
    return out;
  }
  // Few rows (decode of a few sequences): segments run in parallel, then are folded in order.
  std::vector<int64_t> first(size_t(nt + 1), 0);  // item index of each tile's first (head, segment)
  for (int64_t i = 0; i < nt; ++i) first[size_t(i + 1)] = first[size_t(i)] + hk * segments(tiles[size_t(i)]);
  const int64_t items = first[size_t(nt)];
  std::vector<float> pm(size_t(items * kTile * g)), pl(size_t(items * kTile * g)), pa(size_t(items * kTile * stride));
  at::parallel_for(0, items, 1, [&](int64_t s, int64_t e) {
    for (int64_t it = s; it < e; ++it) {
      const int64_t ti = int64_t(std::upper_bound(first.begin(), first.end(), it) - first.begin()) - 1;
      const Tile& tl = tiles[size_t(ti)];
      const int64_t local = it - first[size_t(ti)], nseg = segments(tl);
      run(tl, local / nseg, local % nseg, pm.data() + it * kTile * g, pl.data() + it * kTile * g,
          pa.data() + it * kTile * stride);
    }
  });
  at::parallel_for(0, nt * hk, 1, [&](int64_t s, int64_t e) {
    for (int64_t it = s; it < e; ++it) {
      const int64_t ti = it / hk, h = it % hk;
      const Tile& tl = tiles[size_t(ti)];
      const int64_t nseg = segments(tl), nr = (tl.r1 - tl.r0) * g;
      const int64_t base = first[size_t(ti)] + h * nseg;
      float* sm = pm.data() + base * kTile * g;
      float* sl = pl.data() + base * kTile * g;
      float* sa = pa.data() + base * kTile * stride;
      for (int64_t seg = 1; seg < nseg; ++seg) {
        const int64_t b = base + seg;
        for (int64_t x = 0; x < nr; ++x)
          merge(sm[x], sl[x], sa + x * d, pm[size_t(b * kTile * g + x)], pl[size_t(b * kTile * g + x)],
                pa.data() + b * kTile * stride + x * d, d);
      }
      finish(tl, h, sm, sl, sa);
    }
  });
  return out;
}

// q [B, Hq, D] float32; k_pool / v_pool [num_blocks, block_size, Hk, D] float32; tables [B, W]
// int64 block ids; lens [B] int64 context lengths (the new token's K/V already written).
at::Tensor paged_decode(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                        const at::Tensor& tables, const at::Tensor& lens, double scale) {
  check_pools(q, k_pool, v_pool, "paged_decode");
  const int64_t b = q.size(0), nblocks = k_pool.size(0), bs = k_pool.size(1);
  at::Tensor tb = tables.to(at::kLong).contiguous();
  at::Tensor ln = lens.to(at::kLong).contiguous();
  TORCH_CHECK_VALUE(tb.dim() == 2 && tb.size(0) == b && ln.numel() == b, "ragk: paged_decode tables/lens do not match q");
  const int64_t w = tb.size(1);
  const int64_t* tp = tb.data_ptr<int64_t>();
  const int64_t* lp = ln.data_ptr<int64_t>();
  std::vector<Tile> tiles;
  for (int64_t i = 0; i < b; ++i) {
    TORCH_CHECK_VALUE(lp[i] >= 1 && lp[i] <= w * bs, "ragk: paged_decode context length ", lp[i], " out of range");
    for (int64_t j = 0; j < (lp[i] + bs - 1) / bs; ++j)
      TORCH_CHECK_VALUE(tp[i * w + j] >= 0 && tp[i * w + j] < nblocks, "ragk: paged_decode block id out of range");
    tiles.push_back({i, i + 1, tp + i * w, bs, lp[i]});
  }
  return attend(q, k_pool, v_pool, tiles, lp, scale);
}

// q [n, Hq, D] float32: the rows of one prefill span; slots [L] int64 the flat pool slots of its
// context in position order; lims [n] int64: row r attends the first lims[r] of them (its own
// position + 1: every row sees a prefix of the context).
at::Tensor paged_prefill(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                         const at::Tensor& slots, const at::Tensor& lims, double scale) {
  check_pools(q, k_pool, v_pool, "paged_prefill");
  const int64_t n = q.size(0), total = k_pool.size(0) * k_pool.size(1);
  at::Tensor sl = slots.to(at::kLong).contiguous();
  at::Tensor lm = lims.to(at::kLong).contiguous();
  TORCH_CHECK_VALUE(sl.dim() == 1 && lm.dim() == 1 && lm.numel() == n, "ragk: paged_prefill slots/lims do not match q");
  const int64_t len = sl.numel();
  const int64_t* sp = sl.data_ptr<int64_t>();
  const int64_t* lp = lm.data_ptr<int64_t>();
  for (int64_t i = 0; i < len; ++i)
    TORCH_CHECK_VALUE(sp[i] >= 0 && sp[i] < total, "ragk: paged_prefill slot ", sp[i], " out of range");
  for (int64_t r = 0; r < n; ++r)
    TORCH_CHECK_VALUE(lp[r] >= 1 && lp[r] <= len, "ragk: paged_prefill row limit ", lp[r], " out of range");
  std::vector<Tile> tiles;
  for (int64_t r0 = 0; r0 < n; r0 += kTile) {
    const int64_t r1 = std::min(n, r0 + kTile);
    tiles.push_back({r0, r1, sp, 1, *std::max_element(lp + r0, lp + r1)});
  }
  return attend(q, k_pool, v_pool, tiles, lp, scale);
}

}  // namespace
}  // namespace ragk

TORCH_LIBRARY_FRAGMENT(ragk, m) {
  m.def("paged_decode(Tensor q, Tensor k_pool, Tensor v_pool, Tensor tables, Tensor lens, float scale) -> Tensor",
        &ragk::paged_decode);
  m.def("paged_prefill(Tensor q, Tensor k_pool, Tensor v_pool, Tensor slots, Tensor lims, float scale) -> Tensor",
        &ragk::paged_prefill);
}
