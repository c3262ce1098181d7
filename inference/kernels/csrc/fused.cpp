// Fused decoder-layer elementwise ops for the GGUF-block engine on CPU (torch custom ops, namespace
// ragk). Why: a decoded token of a 0.5B model runs ~60 small torch ops per layer (RMSNorm alone is
// six: float, pow, mean, add, rsqrt, two muls), each costing more dispatch time than arithmetic;
// on a 2-core CPU that overhead was a third of the decode step. Each op here is one pass over
// float32 rows. RoPE is bit-identical to the torch formula (same products and sums, no FMA
// contraction: -ffp-contract=off); RMSNorm and SiLU differ from torch in the last bits only
// (summation order, exp), which is why only the GGUF-block path, not the float32 HF path that
// must match transformers token for token, uses them.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>

#include "common.h"

namespace ragk {
namespace {

void check_rows_f32(const at::Tensor& x, const char* name) {
  TORCH_CHECK_VALUE(x.device().is_cpu() && x.scalar_type() == at::kFloat, "ragk: ", name,
                    " must be a float32 CPU tensor");
  TORCH_CHECK_VALUE(x.dim() == 2 && x.stride(1) == 1, "ragk: ", name, " must be 2-D with contiguous rows");
}

// Sum of squares with 8 independent partial sums (vectorisable without reassociation flags).
inline float sum_squares(const float* x, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += x[i + l] * x[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += x[i] * x[i];
  return s;
}

inline void norm_row(const float* x, const float* w, float* out, int64_t n, double eps) {
  const float r = 1.0f / std::sqrt(sum_squares(x, n) / float(n) + float(eps));
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (x[i] * r);
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& w, double eps) {
  check_rows_f32(x, "x");
  const int64_t t = x.size(0), n = x.size(1);
  TORCH_CHECK_VALUE(w.numel() == n, "ragk: rms_norm weight has ", w.numel(), " values, expected ", n);
  at::Tensor wc = w.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({t, n}, x.options());
  const float* xp = x.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t ld = x.stride(0);
  at::parallel_for(0, t, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) norm_row(xp + i * ld, wp, op + i * n, n, eps);
  });
  return out;
}

// h += delta (in place: the residual stream), then RMSNorm(h): the residual add of one sub-layer
// and the norm of the next in one pass.
at::Tensor add_rms_norm_(at::Tensor& h, const at::Tensor& delta, const at::Tensor& w, double eps) {
  check_rows_f32(h, "h");
  check_rows_f32(delta, "delta");
  TORCH_CHECK_VALUE(h.sizes() == delta.sizes(), "ragk: add_rms_norm_ shapes differ: ", h.sizes(), " vs ",
                    delta.sizes());
  const int64_t t = h.size(0), n = h.size(1);
  TORCH_CHECK_VALUE(w.numel() == n, "ragk: add_rms_norm_ weight has ", w.numel(), " values, expected ", n);
  at::Tensor wc = w.to(at::kFloat).contiguous();
  at::Tensor out = at::empty({t, n}, h.options());
  float* hp = h.data_ptr<float>();
  const float* dp = delta.data_ptr<float>();
  const float* wp = wc.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t lh = h.stride(0), ldd = delta.stride(0);
  at::parallel_for(0, t, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float* row = hp + i * lh;
      const float* d = dp + i * ldd;
      for (int64_t j = 0; j < n; ++j) row[j] += d[j];
      norm_row(row, wp, op + i * n, n, eps);
    }
  });
  return out;
}

// In place on the first (hq + hk) heads of each row of qkv [T, (hq + 2 hk) * D] (q then k, as the
// fused projection lays them out): x * cos + rotate_half(x) * sin at the token's position, the
// rotate-half convention of HF checkpoints. cos/sin: [max_positions, D] float32.
void rope_qk_(at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& cos, const at::Tensor& sin,
              int64_t heads, int64_t d) {
  check_rows_f32(qkv, "qkv");
  TORCH_CHECK_VALUE(cos.is_contiguous() && sin.is_contiguous() && cos.scalar_type() == at::kFloat &&
                        sin.scalar_type() == at::kFloat && cos.dim() == 2 && cos.size(1) == d &&
                        sin.sizes() == cos.sizes(),
                    "ragk: rope tables must be contiguous float32 [positions, ", d, "]");
  TORCH_CHECK_VALUE(d % 2 == 0 && heads * d <= qkv.size(1), "ragk: rope_qk_ heads*head_dim exceeds the row");
  at::Tensor pos = positions.to(at::kLong).contiguous();
  TORCH_CHECK_VALUE(pos.numel() == qkv.size(0), "ragk: one position per row expected");
  const int64_t* pp = pos.data_ptr<int64_t>();
  const int64_t maxp = cos.size(0);
  for (int64_t i = 0; i < pos.numel(); ++i)
    TORCH_CHECK_VALUE(pp[i] >= 0 && pp[i] < maxp, "ragk: position ", pp[i], " outside the rope table (", maxp, ")");
  float* base = qkv.data_ptr<float>();
  const float* cp = cos.data_ptr<float>();
  const float* sp = sin.data_ptr<float>();
  const int64_t ld = qkv.stride(0), half = d / 2;
  at::parallel_for(0, qkv.size(0), std::max<int64_t>(1, 8192 / (heads * d)), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float* c = cp + pp[i] * d;
      const float* s = sp + pp[i] * d;
      for (int64_t h = 0; h < heads; ++h) {
        float* x = base + i * ld + h * d;
        for (int64_t j = 0; j < half; ++j) {
          const float x1 = x[j], x2 = x[j + half];
          const float a = x1 * c[j];
          const float bq = (-x2) * s[j];
          const float c2 = x2 * c[j + half];
          const float d2 = x1 * s[j + half];
          x[j] = a + bq;
          x[j + half] = c2 + d2;
        }
      }
    }
  });
}

void silu_mul_into(const at::Tensor& gu, float* o, int64_t ldo) {
  const int64_t t = gu.size(0), n = gu.size(1) / 2;
  const float* g = gu.data_ptr<float>();
  const int64_t ld = gu.stride(0);
  const SiluMulFn fn = active_table().silu_mul;
  // A prompt chunk's activation is ~17M elements (1,900 rows x 8,960): rows split over threads.
  at::parallel_for(0, t, std::max<int64_t>(1, 16384 / n), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) fn(g + i * ld, g + i * ld + n, o + i * ldo, n);
  });
}

// silu(gate) * up for gate_up [T, 2I] (gate first, as the fused projection lays them out) -> [T, I].
at::Tensor silu_mul(const at::Tensor& gu) {
  check_rows_f32(gu, "gate_up");
  TORCH_CHECK_VALUE(gu.size(1) % 2 == 0, "ragk: silu_mul needs an even width");
  at::Tensor out = at::empty({gu.size(0), gu.size(1) / 2}, gu.options());
  silu_mul_into(gu, out.data_ptr<float>(), out.size(1));
  return out;
}

// The same written over the gate half, returned as a [T, I] view with gate_up's row stride: no
// new [T, I] buffer, whose page faults (a fresh 68 MB per prompt-chunk layer) cost more than the
// arithmetic. quant_linear reads such rows as they are.
at::Tensor silu_mul_(at::Tensor& gu) {
  check_rows_f32(gu, "gate_up");
  TORCH_CHECK_VALUE(gu.size(1) % 2 == 0, "ragk: silu_mul_ needs an even width");
  silu_mul_into(gu, gu.data_ptr<float>(), gu.stride(0));
  return gu.narrow(1, 0, gu.size(1) / 2);
}

}  // namespace
}  // namespace ragk

TORCH_LIBRARY_FRAGMENT(ragk, m) {
  m.def("rms_norm(Tensor x, Tensor w, float eps) -> Tensor", &ragk::rms_norm);
  m.def("add_rms_norm_(Tensor(a!) h, Tensor delta, Tensor w, float eps) -> Tensor", &ragk::add_rms_norm_);
  m.def("rope_qk_(Tensor(a!) qkv, Tensor positions, Tensor cos, Tensor sin, int heads, int head_dim) -> ()",
        &ragk::rope_qk_);
  m.def("silu_mul(Tensor gate_up) -> Tensor", &ragk::silu_mul);
  m.def("silu_mul_(Tensor(a!) gate_up) -> Tensor(a)", &ragk::silu_mul_);
}
