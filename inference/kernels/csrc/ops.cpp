// torch custom ops (namespace ragk): activations are quantised once per call, then every output
// row is one pass over its weight bytes, parallel over output rows with at::parallel_for.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
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

void check_type(int64_t qtype) {
  TORCH_CHECK_VALUE(qtype >= 0 && qtype < T_COUNT && block_elems(int(qtype)) > 0 &&
                        active_table().dot[qtype] != nullptr,
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
}

std::vector<int64_t> check_rows(const at::Tensor& rows, int64_t n) {
  TORCH_CHECK_VALUE(rows.dim() == 1, "ragk: rows must be 1-D");
  at::Tensor r = rows.to(at::kLong).contiguous();
  const int64_t* p = r.data_ptr<int64_t>();
  std::vector<int64_t> out(p, p + r.numel());
  for (int64_t v : out) TORCH_CHECK_VALUE(v >= 0 && v < n, "ragk: row index ", v, " out of range [0, ", n, ")");
  return out;
}

at::Tensor matmul_impl(const at::Tensor& x_in, const at::Tensor& w, int64_t qtype, int64_t k,
                       const int64_t* rows, int64_t n_out) {
  const IsaTable& tb = active_table();
  check_weight(w, qtype, k);
  TORCH_CHECK_VALUE(x_in.device().is_cpu(), "ragk: activations must be on the CPU");
  TORCH_CHECK_VALUE(x_in.dim() == 2 && x_in.size(1) == k, "ragk: x must be [M, K=", k, "], got ",
                    x_in.sizes());
  at::Tensor x = x_in.to(at::kFloat).contiguous();
  const int64_t m = x.size(0);
  at::Tensor out = at::empty({m, n_out}, x.options());
  if (m == 0 || n_out == 0) return out;

  const int t = int(qtype);
  const XKind kind = x_kind(t);
  const size_t xrb = x_row_bytes(t, k);
  at::Tensor xq_t;
  const uint8_t* xq;
  if (kind == X_FLOAT) {
    xq = reinterpret_cast<const uint8_t*>(x.data_ptr<float>());
  } else {
    xq_t = at::empty({m, int64_t(xrb)}, x.options().dtype(at::kByte));
    uint8_t* dst = xq_t.data_ptr<uint8_t>();
    const float* src = x.data_ptr<float>();
    const QuantFn qf = kind == X_Q32 ? tb.quant32 : tb.quant256;
    at::parallel_for(0, m, std::max<int64_t>(1, (1 << 15) / k), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) qf(src + i * k, dst + i * xrb, k);
    });
    xq = dst;
  }
  const DotFn dot = tb.dot[t];
  const DotMFn dotm = tb.dotm[t];
  const uint8_t* wp = w.data_ptr<uint8_t>();
  const int64_t rb = w.size(1);
  float* o = out.data_ptr<float>();
  const int64_t gmin = g_gemm_min_rows.load(std::memory_order_relaxed);
  const GemmFn gemm = tb.gemm[t];
  if (gemm != nullptr && gmin > 0 && m >= gmin) {
    // Tasks are groups of 16 output columns (one 512-bit or two 256-bit panels); ~1M
    // multiply-adds per task at least.
    const int64_t groups = (n_out + 15) / 16;
    const int64_t pgrain = std::max<int64_t>(1, (int64_t(1) << 20) / (16 * k * m));
    at::parallel_for(0, groups, pgrain, [&](int64_t b, int64_t e) {
      gemm(k, wp, rb, rows, b * 16, std::min(n_out, e * 16), xq, xrb, m, o, n_out);
    });
    return out;
  }
  // ~1M multiply-adds (tens of microseconds) per task: smaller shapes stay on the calling thread,
  // where waking a second OpenMP thread would cost more than it saves (much more on busy cores).
  const int64_t grain = std::max<int64_t>(4, (int64_t(1) << 20) / (k * std::min<int64_t>(m, kMTile)));
  at::parallel_for(0, n_out, grain, [&](int64_t b, int64_t e) {
    for (int64_t m0 = 0; m0 < m; m0 += kMTile) {
      const int64_t m1 = std::min(m, m0 + kMTile);
      for (int64_t j = b; j < e; ++j) {
        const uint8_t* wr = wp + (rows ? rows[j] : j) * rb;
        for (int64_t i = m0; i < m1;) {
          const int64_t mr = std::min<int64_t>(4, m1 - i);
          if (mr == 1 || dotm == nullptr) {
            o[i * n_out + j] = dot(k, wr, xq + i * xrb);
            ++i;
          } else {
            dotm(k, wr, xq + i * xrb, xrb, int(mr), o + i * n_out + j, n_out);
            i += mr;
          }
        }
      }
    }
  });
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
    for (int64_t j = b; j < e; ++j) dequant_row(int(qtype), wp + (rows ? rows[j] : j) * rb, o + j * k, k);
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

int64_t set_gemm_xblock_kb_op(int64_t kb) { return set_gemm_xblock_kb(kb); }

bool has_gemm_op(int64_t qtype) {
  return qtype >= 0 && qtype < T_COUNT && active_table().gemm[qtype] != nullptr;
}

}  // namespace
}  // namespace ragk

TORCH_LIBRARY(ragk, m) {
  m.def("quant_matmul(Tensor x, Tensor w, int qtype, int k) -> Tensor", &ragk::quant_matmul);
  m.def("quant_matmul_rows(Tensor x, Tensor w, int qtype, int k, Tensor rows) -> Tensor",
        &ragk::quant_matmul_rows);
  m.def("dequantize(Tensor w, int qtype, int k) -> Tensor", &ragk::dequantize);
  m.def("dequantize_rows(Tensor w, int qtype, int k, Tensor rows) -> Tensor", &ragk::dequantize_rows);
  m.def("isa() -> str", &ragk::isa_op);
  m.def("supported_isas() -> str", &ragk::supported_op);
  m.def("set_isa(str name) -> bool", &ragk::set_isa_op);
  m.def("row_bytes(int qtype, int k) -> int", &ragk::row_bytes_op);
  m.def("set_gemm_min_rows(int rows) -> int", &ragk::set_gemm_min_rows_op);
  m.def("has_gemm(int qtype) -> bool", &ragk::has_gemm_op);
  m.def("set_gemm_xblock_kb(int kb) -> int", &ragk::set_gemm_xblock_kb_op);
}
