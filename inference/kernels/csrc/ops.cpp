// torch custom ops (namespace ragk): activations are quantised once per call, then every output
// row is one pass over its weight bytes, parallel over output rows with at::parallel_for.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <tuple>
#include <utility>
#include <optional>
#include <cstdlib>
#include <string>
#include <vector>

#include "common.h"

namespace ragk {
namespace {

constexpr int64_t kMTile = 32; // activation rows that share one weight row while it is in L1


// From this many activation rows the panel GEMM (x86_gemm.inc) replaces the row kernels; below it
// packing 8 weight rows costs more than it saves. RAG_GEMM_MIN_ROWS overrides (0 = never), and
// set_gemm_min_rows lets tests force either path.
std::atomic<int64_t> g_gemm_min_rows{[] {
  const char* env = std::getenv("RAG_GEMM_MIN_ROWS");
  return env ? int64_t(std::atoll(env)) : int64_t(16);
}()};

// Activation rows for which the small-M GEMM (x86_xgemm.inc) runs, [lo, hi] (lo 0 = never; -1 =
// the active path's default, IsaTable::xgemm_lo/hi): where it beats both the row kernels (which
// unpack each weight block once per 4 activation rows) and the panel GEMM (whose per-call weight
// packing pays back only over many rows). RAG_XGEMM_ROWS="lo,hi" overrides on every path;
// set_xgemm_rows lets tests force it.
std::pair<int64_t, int64_t> xgemm_rows_env() {
  const char* env = std::getenv("RAG_XGEMM_ROWS");
  int64_t lo = -1, hi = -1;
  if (env != nullptr) {
    lo = std::atoll(env);
    const char* comma = std::strchr(env, ',');
    hi = comma ? std::atoll(comma + 1) : lo;
  }
  return {lo, hi};
}
const std::pair<int64_t, int64_t> g_xgemm_env = xgemm_rows_env();
std::atomic<int64_t> g_xgemm_lo{g_xgemm_env.first};
std::atomic<int64_t> g_xgemm_hi{g_xgemm_env.second};

// From how many activation rows the tile GEMM (AMX) runs: -1 = each type's default
// (IsaTable::tile_min), 0 = never, n = from n rows for every type that has one. RAG_TILE_MIN_ROWS
// overrides; set_tile_min_rows lets tests force it.
std::atomic<int64_t> g_tile_min_rows{[] {
  const char* env = std::getenv("RAG_TILE_MIN_ROWS");
  return env ? int64_t(std::atoll(env)) : int64_t(-1);
}()};

int64_t tile_min_rows(const IsaTable& tb, int kt) {
  if (tb.tile[kt] == nullptr) return 0;
  const int64_t v = g_tile_min_rows.load(std::memory_order_relaxed);
  return v < 0 ? tb.tile_min[kt] : v;
}

// The band in effect on a path: the set / RAG_XGEMM_ROWS values, or the path's defaults.
std::pair<int64_t, int64_t> xgemm_band(const IsaTable& tb) {
  const int64_t lo = g_xgemm_lo.load(std::memory_order_relaxed), hi = g_xgemm_hi.load(std::memory_order_relaxed);
  return {lo < 0 ? tb.xgemm_lo : lo, hi < 0 ? tb.xgemm_hi : hi};
}

void check_type(int64_t qtype) {
  TORCH_CHECK_VALUE(qtype >= 0 && qtype < T_COUNT && block_elems(int(qtype)) > 0 &&
                        (qtype == T_Q4_KX8 ? active_table().dot8_q4k != nullptr : active_table().dot[qtype] != nullptr),
                    "ragk: unsupported GGML type id ", qtype);
}

int64_t row_bytes_checked(int64_t qtype, int64_t k) {
  check_type(qtype);
  const int be = block_elems(int(qtype));
  TORCH_CHECK_VALUE(k > 0 && k % be == 0, "ragk: K=", k, " is not a positive multiple of the block size ",
                    be, " of GGML type ", qtype);
  return k / be * block_bytes(int(qtype));
}

void check_weight(const at::Tensor& w, int64_t qtype, int64_t k) {
  const int64_t rb = row_bytes_checked(qtype, k);
  TORCH_CHECK_VALUE(w.device().is_cpu(), "ragk: weights must be on the CPU");
  TORCH_CHECK_VALUE(w.scalar_type() == at::kByte, "ragk: weights must be uint8 raw GGUF rows, got ",
                    w.scalar_type());
  TORCH_CHECK_VALUE(w.dim() == 2, "ragk: weights must be 2-D [N, row_bytes], got ", w.dim(), "-D");
  TORCH_CHECK_VALUE(w.size(1) == rb, "ragk: weight row has ", w.size(1), " bytes but GGML type ", qtype,
                    " with K=", k, " needs row_bytes=", rb);
  TORCH_CHECK_VALUE(w.is_contiguous(), "ragk: weights must be contiguous");
  TORCH_CHECK_VALUE(qtype != T_Q4_KX8 || w.size(0) % X8_ROWS == 0,
                    "ragk: x8 weights hold groups of 8 rows, got ", w.size(0), " rows");
}

// Where no kernel reads x8 groups (gathered rows, dequantisation, the small-M GEMM, AMX's tile
// GEMM) the plain Q4_K kernels read copies: f(w, rws, lo, hi, shift) computes output columns
// shift + j for j in [lo, hi) from weight rows w + (rws ? rws[j] : j) * rb. Plain weights: one call
// on the tensor itself. x8 weights: chunks of up to 64 rows unpacked into this thread's buffer,
// whole groups at a time (tb.x8_unpack) where the chunk holds them, single rows otherwise.
template <class F>
void with_plain_rows(const IsaTable& tb, int t, int64_t k, const uint8_t* wp, int64_t rb, const int64_t* rows,
                     int64_t b, int64_t e, F&& f) {
  if (t != T_Q4_KX8) {
    f(wp, rows, b, e, int64_t(0));
    return;
  }
  constexpr int64_t kChunk = 64;
  thread_local std::vector<uint8_t> buf;
  buf.resize(size_t(kChunk * rb));
  const int64_t nsb = k / QKK;
  for (int64_t j0 = b; j0 < e; j0 += kChunk) {
    const int64_t j1 = std::min(e, j0 + kChunk);
    for (int64_t j = j0; j < j1;) {
      const int64_t src = rows ? rows[j] : j;
      uint8_t* d = buf.data() + (j - j0) * rb;
      if (rows == nullptr && src % X8_ROWS == 0 && j + X8_ROWS <= j1) {  // a whole group
        tb.x8_unpack(wp + src * rb, nsb, d, rb);
        j += X8_ROWS;
      } else {
        q4k_x8_unpack_row(wp + (src / X8_ROWS) * X8_ROWS * rb, nsb, int(src % X8_ROWS), d);
        ++j;
      }
    }
    f(buf.data(), static_cast<const int64_t*>(nullptr), int64_t(0), j1 - j0, j0);
  }
}

std::vector<int64_t> check_rows(const at::Tensor& rows, int64_t n) {
  TORCH_CHECK_VALUE(rows.dim() == 1, "ragk: rows must be 1-D");
  at::Tensor r = rows.to(at::kLong).contiguous();
  const int64_t* p = r.data_ptr<int64_t>();
  std::vector<int64_t> out(p, p + r.numel());
  for (int64_t v : out) TORCH_CHECK_VALUE(v >= 0 && v < n, "ragk: row index ", v, " out of range [0, ", n, ")");
  return out;
}

// Activations quantised once per call and per activation kind (a fused projection whose groups
// mix 32- and 256-element formats quantises twice, one of each).
struct XCache {
  at::Tensor buf[3];
  const uint8_t* ptr[3] = {nullptr, nullptr, nullptr};
};

const uint8_t* quantised_x(const IsaTable& tb, const at::Tensor& x, int t, int64_t k, XCache& cache) {
  const XKind kind = x_kind(t);
  if (cache.ptr[kind] != nullptr) return cache.ptr[kind];
  if (kind == X_FLOAT) {  // the float kernels read rows k apart
    cache.buf[kind] = x.contiguous();
    cache.ptr[kind] = reinterpret_cast<const uint8_t*>(cache.buf[kind].data_ptr<float>());
    return cache.ptr[kind];
  }
  const int64_t m = x.size(0), ld = x.stride(0);
  const size_t xrb = x_row_bytes(t, k);
  cache.buf[kind] = at::empty({m, int64_t(xrb)}, x.options().dtype(at::kByte));
  uint8_t* dst = cache.buf[kind].data_ptr<uint8_t>();
  const float* src = x.data_ptr<float>();
  const QuantFn qf = kind == X_Q32 ? tb.quant32 : tb.quant256;
  at::parallel_for(0, m, std::max<int64_t>(1, (1 << 15) / k), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) qf(src + i * ld, dst + i * xrb, k);
  });
  cache.ptr[kind] = dst;
  return dst;
}

// Which kernel computes m activation rows against weights of GGML type t (gathered rows or the
// whole tensor): one home for the choice, read by matmul_rows_into and reported by matmul_path_op.
// On x86 every choice gives an output the same bits (batch invariance, x86_lanes.inc); the choice
// is speed only.
enum class MatmulPath { kX8Rows, kXGemm, kPanel, kTile, kLanes, kRows };

MatmulPath choose_path(const IsaTable& tb, int t, int64_t m, bool gathered) {
  const int64_t gmin = g_gemm_min_rows.load(std::memory_order_relaxed);
  // Decode (one row or a batch below the panel GEMM) on x8 weights: 8 weight rows per register.
  if (t == T_Q4_KX8 && !gathered && (gmin <= 0 || m < gmin)) return MatmulPath::kX8Rows;
  const int kt = t == T_Q4_KX8 ? int(T_Q4_K) : t;  // the kernels of the rows' own layout
  // Many rows on a tile unit: from its own threshold, and never below the GEMMs' (gmin 0, "no
  // GEMM", turns it off too)
  const int64_t tmin = tile_min_rows(tb, kt);
  if (tmin > 0 && gmin > 0 && m >= std::max(tmin, gmin)) return MatmulPath::kTile;
  const auto [xlo, xhi] = xgemm_band(tb);
  // x8 weights skip the small-M GEMM where the panel GEMM packs their groups directly: it reads
  // them as they are, the small-M GEMM only through unpacked copies (measured 1.04 vs 0.87 of the
  // plain rows' speed at 16 rows, AVX2 path, Zen 4)
  const bool x8_panels = t == T_Q4_KX8 && !gathered && tb.gemm[t] != nullptr;
  if (tb.xgemm[kt] != nullptr && xlo > 0 && m >= xlo && m <= xhi && !x8_panels) return MatmulPath::kXGemm;
  if ((x8_panels || tb.gemm[kt] != nullptr) && gmin > 0 && m >= gmin) return MatmulPath::kPanel;
  return tb.dotl[kt] != nullptr ? MatmulPath::kLanes : MatmulPath::kRows;
}

const char* path_name(MatmulPath p) {
  switch (p) {
    case MatmulPath::kX8Rows: return "x8_rows";
    case MatmulPath::kXGemm: return "small_m_gemm";
    case MatmulPath::kPanel: return "panel_gemm";
    case MatmulPath::kTile: return "tile_gemm";
    case MatmulPath::kLanes: return "lane_rows";
    default: return "rows";
  }
}

// Output columns [0, n_out) of weight rows (rows[j] or j) for all m activation rows, written to
// o[i * ldo + j], by the kernel choose_path picks.
void matmul_rows_into(const IsaTable& tb, int t, int64_t k, const uint8_t* wp, int64_t rb, const int64_t* rows,
                      int64_t n_out, const uint8_t* xq, int64_t m, float* o, int64_t ldo) {
  const size_t xrb = x_row_bytes(t, k);
  const MatmulPath path = choose_path(tb, t, m, rows != nullptr);
  if (path == MatmulPath::kX8Rows) {
    // each group read from memory once and kept in L1 for every 4 activation rows
    const Dot8Fn dot8 = tb.dot8_q4k;
    const int64_t grain = std::max<int64_t>(1, row_task_macs() / (k * X8_ROWS * std::min<int64_t>(m, 4)));
    at::parallel_for(0, n_out / X8_ROWS, grain, [&](int64_t b, int64_t e) {
      for (int64_t g = b; g < e; ++g)
        for (int64_t i = 0; i < m; i += 4)
          dot8(k, wp + g * X8_ROWS * rb, xq + i * xrb, xrb, int(std::min<int64_t>(4, m - i)), o + i * ldo + g * X8_ROWS,
               ldo);
    });
    return;
  }
  const int kt = t == T_Q4_KX8 ? int(T_Q4_K) : t;  // the kernels of the rows' own layout
  if (path == MatmulPath::kXGemm) {
    const XGemmFn xgemm = tb.xgemm[kt];
    // Activations packed once on this thread (m * k bytes: small), read by every task.
    const XKind kind = x_kind(t);
    std::vector<uint8_t> xp(xpanel_bytes(kind, k, m, tb.xlanes));
    xpanel_pack(kind, k, xq, xrb, m, tb.xlanes, xp.data());
    const int64_t groups = (n_out + 15) / 16;
    const int64_t pgrain = std::max<int64_t>(1, (int64_t(1) << 20) / (16 * k * m));
    at::parallel_for(0, groups, pgrain, [&](int64_t b, int64_t e) {
      with_plain_rows(tb, t, k, wp, rb, rows, b * 16, std::min(n_out, e * 16),
                      [&](const uint8_t* w, const int64_t* rws, int64_t lo, int64_t hi, int64_t sh) {
                        xgemm(k, w, rb, rws, lo, hi, xp.data(), m, o + sh, ldo);
                      });
    });
    return;
  }
  if (path == MatmulPath::kPanel || path == MatmulPath::kTile) {
    // x8 weights: the panel GEMM packs their groups directly (no unpacked copy); gathered rows and
    // the tile GEMM go through copies
    const bool x8_panels = path == MatmulPath::kPanel && t == T_Q4_KX8 && rows == nullptr && tb.gemm[t] != nullptr;
    const GemmFn gemm = path == MatmulPath::kTile ? tb.tile[kt] : x8_panels ? tb.gemm[t] : tb.gemm[kt];
    // Tasks are groups of 16 output columns (one 512-bit or two 256-bit panels); ~1M
    // multiply-adds per task at least.
    const int64_t groups = (n_out + 15) / 16;
    const int64_t pgrain = std::max<int64_t>(1, (int64_t(1) << 20) / (16 * k * m));
    at::parallel_for(0, groups, pgrain, [&](int64_t b, int64_t e) {
      with_plain_rows(tb, x8_panels ? kt : t, k, wp, rb, rows, b * 16, std::min(n_out, e * 16),
                      [&](const uint8_t* w, const int64_t* rws, int64_t lo, int64_t hi, int64_t sh) {
                        gemm(k, w, rb, rws, lo, hi, xq, xrb, m, o + sh, ldo);
                      });
    });
    return;
  }
  // >= row_task_macs() multiply-adds per task (256K, ~10 us): smaller shapes stay on the calling
  // thread, where waking a second OpenMP thread would cost more than it saves. At 1M a decode-step
  // o_proj / qkv of the 0.5B (896 x 896, 1152 x 896) ran on one thread at ~10 GB/s; at 256K on
  // both: the 0.5B's projections 15.9 -> 14.6 ms per token (Zen 4, 2 threads, best of 3).
  const int64_t grain = std::max<int64_t>(4, row_task_macs() / (k * std::min<int64_t>(m, kMTile)));
  if (path == MatmulPath::kLanes) {
    const DotLFn dotl = tb.dotl[kt];
    // Groups of 8 output columns, their outputs in lanes (x86_lanes.inc): the same bits per output
    // as the GEMMs above give it, so a row's result does not depend on m (batch invariance).
    const int64_t groups = (n_out + 7) / 8;
    const bool pfl = prefetch_bytes() > 0;  // RAG_PREFETCH=0 / ops.set_prefetch(0) turn it off
    at::parallel_for(0, groups, std::max<int64_t>(1, grain / 8), [&](int64_t b, int64_t e) {
      with_plain_rows(tb, t, k, wp, rb, rows, b * 8, std::min(n_out, e * 8),
                      [&](const uint8_t* wv, const int64_t* rws, int64_t lo, int64_t hi, int64_t sh) {
        float* ov = o + sh;
        for (int64_t m0 = 0; m0 < m; m0 += kMTile) {
          const int64_t m1 = std::min(m, m0 + kMTile);
          for (int64_t j = lo; j < hi; j += 8) {
            const int nr = int(std::min<int64_t>(8, hi - j));
            const uint8_t* wr[8];
            for (int r = 0; r < 8; ++r) wr[r] = wv + (rws ? rws[j + std::min(r, nr - 1)] : j + std::min(r, nr - 1)) * rb;
            // Decode streams the weights from DRAM: the next group's bytes are prefetched in order,
            // a block's worth per block read (8 row streams side by side are a pattern the hardware
            // prefetcher does not follow: a 32,768 x 896 Q8_0 matrix, the head's shape, took
            // 1.5-3x as long without this, Zen 4, 2 threads).
            const int64_t pf = (pfl && m0 == 0 && rws == nullptr && wv == wp && j + 16 <= hi) ? 8 * rb : 0;
            for (int64_t i = m0; i < m1; i += 4)
              dotl(k, wr, nr, xq + i * xrb, xrb, int(std::min<int64_t>(4, m1 - i)), ov + i * ldo + j, ldo,
                   i == m0 ? pf : 0);
          }
        }
      });
    });
    return;
  }
  // Weights are read once per call (decode streams the whole model from DRAM every token): a
  // software prefetch a few KB ahead of the row being read keeps the loads from stalling. Not for
  // rows as long as the distance: there it re-requests lines of the row the hardware prefetcher is
  // already streaming (Zen 4, 2 threads: the 1.5B's Q6_K down_proj, 7 KB rows, 6.96 -> 4.80 ms
  // per token without it).
  const int64_t pfd = (rows || int64_t(rb) >= prefetch_bytes()) ? 0 : prefetch_bytes();
  const DotFn dot = tb.dot[kt];
  const DotMFn dotm = tb.dotm[kt];
  at::parallel_for(0, n_out, grain, [&](int64_t b, int64_t e) {
    with_plain_rows(tb, t, k, wp, rb, rows, b, e, [&](const uint8_t* wv, const int64_t* rws, int64_t lo, int64_t hi,
                                                   int64_t sh) {
      float* ov = o + sh;
      for (int64_t m0 = 0; m0 < m; m0 += kMTile) {
        const int64_t m1 = std::min(m, m0 + kMTile);
        for (int64_t j = lo; j < hi; ++j) {
          const uint8_t* wr = wv + (rws ? rws[j] : j) * rb;
          if (pfd > 0 && m0 == 0 && wv == wp) {
            const uint8_t* pf = wr + pfd;
            for (int64_t off = 0; off < rb; off += 64) __builtin_prefetch(pf + off, 0, 3);
          }
          for (int64_t i = m0; i < m1;) {
            const int64_t mr = std::min<int64_t>(4, m1 - i);
            if (mr == 1 || dotm == nullptr) {
              ov[i * ldo + j] = dot(k, wr, xq + i * xrb);
              ++i;
            } else {
              dotm(k, wr, xq + i * xrb, xrb, int(mr), ov + i * ldo + j, ldo);
              i += mr;
            }
          }
        }
      }
    });
  });
}

at::Tensor checked_x(const at::Tensor& x_in, int64_t k) {
  TORCH_CHECK_VALUE(x_in.device().is_cpu(), "ragk: activations must be on the CPU");
  TORCH_CHECK_VALUE(x_in.dim() == 2 && x_in.size(1) == k, "ragk: x must be [M, K=", k, "], got ",
                    x_in.sizes());
  // Rows may be apart (silu_mul_'s view into the gate half of gate_up): quantising reads row by row.
  if (x_in.scalar_type() == at::kFloat && x_in.stride(1) == 1 && x_in.stride(0) >= k) return x_in;
  return x_in.to(at::kFloat).contiguous();
}

at::Tensor matmul_impl(const at::Tensor& x_in, const at::Tensor& w, int64_t qtype, int64_t k,
                       const int64_t* rows, int64_t n_out) {
  const IsaTable& tb = active_table();
  check_weight(w, qtype, k);
  at::Tensor x = checked_x(x_in, k);
  const int64_t m = x.size(0);
  at::Tensor out = at::empty({m, n_out}, x.options());
  if (m == 0 || n_out == 0) return out;
  XCache cache;
  const uint8_t* xq = quantised_x(tb, x, int(qtype), k, cache);
  matmul_rows_into(tb, int(qtype), k, w.data_ptr<uint8_t>(), w.size(1), rows, n_out, xq, m,
                   out.data_ptr<float>(), n_out);
  return out;
}

// A fused projection (qkv, gate/up): several weight groups (each its own GGML type) side by side
// in one output, the activations quantised once per kind, the bias added in place. One call
// instead of a matmul per group + cat + add: decode spends more time in those Python hops than in
// the small projections themselves.
at::Tensor quant_linear(const at::Tensor& x_in, at::TensorList ws, at::IntArrayRef qtypes, int64_t k,
                        const std::optional<at::Tensor>& bias) {
  const IsaTable& tb = active_table();
  TORCH_CHECK_VALUE(ws.size() == qtypes.size() && !ws.empty(), "ragk: quant_linear needs one qtype per weight");
  int64_t n_total = 0;
  for (size_t g = 0; g < ws.size(); ++g) {
    check_weight(ws[g], qtypes[g], k);
    n_total += ws[g].size(0);
  }
  at::Tensor x = checked_x(x_in, k);
  const int64_t m = x.size(0);
  at::Tensor out = at::empty({m, n_total}, x.options());
  if (m == 0) return out;
  XCache cache;
  float* o = out.data_ptr<float>();
  int64_t col = 0;
  for (size_t g = 0; g < ws.size(); ++g) {
    const int t = int(qtypes[g]);
    const uint8_t* xq = quantised_x(tb, x, t, k, cache);
    matmul_rows_into(tb, t, k, ws[g].data_ptr<uint8_t>(), ws[g].size(1), nullptr, ws[g].size(0), xq, m, o + col,
                     n_total);
    col += ws[g].size(0);
  }
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK_VALUE(bias->numel() == n_total, "ragk: bias has ", bias->numel(), " values, expected ", n_total);
    at::Tensor b = bias->to(at::kFloat).contiguous();
    const float* bp = b.data_ptr<float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n_total; ++j) o[i * n_total + j] += bp[j];
  }
  return out;
}

at::Tensor quant_matmul(const at::Tensor& x, const at::Tensor& w, int64_t qtype, int64_t k) {
  check_weight(w, qtype, k);
  return matmul_impl(x, w, qtype, k, nullptr, w.size(0));
}

at::Tensor quant_matmul_rows(const at::Tensor& x, const at::Tensor& w, int64_t qtype, int64_t k,
                             const at::Tensor& rows) {
  check_weight(w, qtype, k);
  const std::vector<int64_t> r = check_rows(rows, w.size(0));
  return matmul_impl(x, w, qtype, k, r.data(), int64_t(r.size()));
}

at::Tensor dequant_impl(const at::Tensor& w, int64_t qtype, int64_t k, const int64_t* rows, int64_t n_out) {
  active_table();  // initialises the fp16 table
  check_weight(w, qtype, k);
  at::Tensor out = at::empty({n_out, k}, w.options().dtype(at::kFloat));
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const int64_t rb = w.size(1);
  float* o = out.data_ptr<float>();
  at::parallel_for(0, n_out, std::max<int64_t>(1, (1 << 16) / k), [&](int64_t b, int64_t e) {
    with_plain_rows(active_table(), int(qtype), k, wp, rb, rows, b, e,
                    [&](const uint8_t* w, const int64_t* rws, int64_t lo, int64_t hi, int64_t sh) {
                      for (int64_t j = lo; j < hi; ++j)
                        dequant_row(qtype == T_Q4_KX8 ? int(T_Q4_K) : int(qtype), w + (rws ? rws[j] : j) * rb,
                                    o + (sh + j) * k, k);
                    });
  });
  return out;
}

at::Tensor dequantize(const at::Tensor& w, int64_t qtype, int64_t k) {
  check_weight(w, qtype, k);
  return dequant_impl(w, qtype, k, nullptr, w.size(0));
}

at::Tensor dequantize_rows(const at::Tensor& w, int64_t qtype, int64_t k, const at::Tensor& rows) {
  check_weight(w, qtype, k);
  const std::vector<int64_t> r = check_rows(rows, w.size(0));
  return dequant_impl(w, qtype, k, r.data(), int64_t(r.size()));
}

std::string isa_op() { return active_isa(); }

std::string supported_op() { return supported_isas_csv(); }

bool set_isa_op(std::string name) { return select_isa(name.c_str()); }

int64_t row_bytes_op(int64_t qtype, int64_t k) { return row_bytes_checked(qtype, k); }

int64_t set_gemm_min_rows_op(int64_t rows) { return g_gemm_min_rows.exchange(rows); }

int64_t set_tile_min_rows_op(int64_t rows) { return g_tile_min_rows.exchange(rows); }

bool has_tile_op(int64_t qtype) {
  return qtype >= 0 && qtype < T_COUNT && active_table().tile[qtype] != nullptr;
}

std::string matmul_path_op(int64_t qtype, int64_t m, bool gathered) {
  check_type(qtype);
  return path_name(choose_path(active_table(), int(qtype), m, gathered));
}

std::tuple<int64_t, int64_t> set_xgemm_rows_op(int64_t lo, int64_t hi) {
  return {g_xgemm_lo.exchange(lo), g_xgemm_hi.exchange(hi)};
}

std::tuple<int64_t, int64_t> xgemm_band_op() {
  const auto [lo, hi] = xgemm_band(active_table());
  return {lo, hi};
}

bool has_xgemm_op(int64_t qtype) {
  return qtype >= 0 && qtype < T_COUNT && active_table().xgemm[qtype] != nullptr;
}

int64_t set_gemm_xblock_kb_op(int64_t kb) { return set_gemm_xblock_kb(kb); }

int64_t set_prefetch_op(int64_t bytes) { return set_prefetch_bytes(bytes); }

int64_t set_row_task_macs_op(int64_t macs) { return set_row_task_macs(macs); }

// Q4_K weights [N, rb] (N a multiple of 8) -> the same bytes interleaved by 8 rows (common.h).
at::Tensor repack_q4_k_x8(const at::Tensor& w, int64_t k) {
  check_weight(w, T_Q4_K, k);
  TORCH_CHECK_VALUE(w.size(0) % X8_ROWS == 0, "ragk: x8 repacking needs a multiple of 8 rows, got ", w.size(0));
  at::Tensor out = at::empty(w.sizes(), w.options());
  const int64_t rb = w.size(1), nsb = k / QKK;
  const uint8_t* src = w.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  at::parallel_for(0, w.size(0) / X8_ROWS, 64, [&](int64_t b, int64_t e) {
    for (int64_t g = b; g < e; ++g) q4k_x8_pack(src + g * X8_ROWS * rb, rb, nsb, dst + g * X8_ROWS * rb);
  });
  return out;
}

bool has_gemm_op(int64_t qtype) {
  return qtype >= 0 && qtype < T_COUNT && active_table().gemm[qtype] != nullptr;
}

}  // namespace

void xpanel_pack(XKind kind, int64_t k, const uint8_t* xq, size_t xrb, int64_t m, int lanes, uint8_t* dst) {
  const bool kf = kind == X_Q256;
  const int64_t nblk = k / (kf ? QKK : QK);
  const int words = kf ? 64 : 8;
  const size_t bb = xpanel_block_bytes(kind, lanes);
  const int64_t groups = (m + lanes - 1) / lanes;
  std::memset(dst, 0, xpanel_bytes(kind, k, m, lanes));
  for (int64_t g = 0; g < groups; ++g) {
    for (int l = 0; l < lanes && g * lanes + l < m; ++l) {
      const uint8_t* row = xq + size_t(g * lanes + l) * xrb;
      for (int64_t b = 0; b < nblk; ++b) {
        uint8_t* p = dst + size_t(g * nblk + b) * bb;
        if (kf) {
          const XBlock256& x = reinterpret_cast<const XBlock256*>(row)[b];
          for (int t = 0; t < words; ++t) std::memcpy(p + 4 * (lanes * t + l), x.qs + 4 * t, 4);
          auto* bs = reinterpret_cast<int16_t*>(p + 256 * lanes);
          for (int q = 0; q < 8; ++q) {
            bs[q * 2 * lanes + 2 * l] = x.bsums[2 * q];
            bs[q * 2 * lanes + 2 * l + 1] = x.bsums[2 * q + 1];
          }
          reinterpret_cast<float*>(p + 288 * lanes)[l] = x.d;
        } else {
          const XBlock32& x = reinterpret_cast<const XBlock32*>(row)[b];
          for (int t = 0; t < words; ++t) std::memcpy(p + 4 * (lanes * t + l), x.qs + 4 * t, 4);
          reinterpret_cast<float*>(p + 32 * lanes)[l] = x.d;
          reinterpret_cast<float*>(p + 36 * lanes)[l] = x.ds;
        }
      }
    }
  }
}

}  // namespace ragk

TORCH_LIBRARY(ragk, m) {
  m.def("quant_matmul(Tensor x, Tensor w, int qtype, int k) -> Tensor", &ragk::quant_matmul);
  m.def("quant_matmul_rows(Tensor x, Tensor w, int qtype, int k, Tensor rows) -> Tensor",
        &ragk::quant_matmul_rows);
  m.def("quant_linear(Tensor x, Tensor[] ws, int[] qtypes, int k, Tensor? bias) -> Tensor", &ragk::quant_linear);
  m.def("dequantize(Tensor w, int qtype, int k) -> Tensor", &ragk::dequantize);
  m.def("dequantize_rows(Tensor w, int qtype, int k, Tensor rows) -> Tensor", &ragk::dequantize_rows);
  m.def("repack_q4_k_x8(Tensor w, int k) -> Tensor", &ragk::repack_q4_k_x8);
  m.def("isa() -> str", &ragk::isa_op);
  m.def("supported_isas() -> str", &ragk::supported_op);
  m.def("set_isa(str name) -> bool", &ragk::set_isa_op);
  m.def("row_bytes(int qtype, int k) -> int", &ragk::row_bytes_op);
  m.def("set_gemm_min_rows(int rows) -> int", &ragk::set_gemm_min_rows_op);
  m.def("matmul_path(int qtype, int m, bool gathered=False) -> str", &ragk::matmul_path_op);
  m.def("has_gemm(int qtype) -> bool", &ragk::has_gemm_op);
  m.def("set_tile_min_rows(int rows) -> int", &ragk::set_tile_min_rows_op);
  m.def("has_tile(int qtype) -> bool", &ragk::has_tile_op);
  m.def("set_xgemm_rows(int lo, int hi) -> (int, int)", &ragk::set_xgemm_rows_op);
  m.def("has_xgemm(int qtype) -> bool", &ragk::has_xgemm_op);
  m.def("xgemm_band() -> (int, int)", &ragk::xgemm_band_op);
  m.def("set_gemm_xblock_kb(int kb) -> int", &ragk::set_gemm_xblock_kb_op);
  m.def("set_prefetch(int bytes) -> int", &ragk::set_prefetch_op);
  m.def("set_row_task_macs(int macs) -> int", &ragk::set_row_task_macs_op);
}
