// Float linear layers at decode, split by output rows across the intra-op threads.
//
// Why: torch's float32 F.linear with a few activation rows (a decode step) runs on one thread
// (MKL's GEMV path), so it reads the weights at one thread's DRAM bandwidth while the other
// cores wait: Zen 4, 2 threads, SmolLM2's 49,152 x 576 head: 11.0 GB/s with 2 threads as with 1,
// torch.sum over the same bytes 31.9 GB/s. Each thread here runs the same F.linear on its own
// contiguous block of rows (a multiple of `align` rows from the start), so every output row is
// computed by the same kernel as in the whole call; the caller (inference/layers/row_split.py)
// checks once per shape that the result is bit-identical and keeps F.linear where it is not.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <torch/library.h>

#include <algorithm>

namespace ragk {

at::Tensor linear_rows_split(const at::Tensor& x, const at::Tensor& w, const c10::optional<at::Tensor>& bias,
                             int64_t align) {
  TORCH_CHECK_VALUE(x.dim() == 2 && w.dim() == 2 && x.size(1) == w.size(1),
                    "ragk: linear_rows_split takes x [M, K] and w [N, K], got ", x.sizes(), " and ", w.sizes());
  TORCH_CHECK_VALUE(align > 0, "ragk: align must be positive, got ", align);
  TORCH_CHECK_VALUE(!bias.has_value() || (bias->dim() == 1 && bias->size(0) == w.size(0)),
                    "ragk: bias must be [N]");
  const int64_t n = w.size(0), m = x.size(0);
  const int64_t blocks = (n + align - 1) / align;
  at::Tensor out = at::empty({m, n}, x.options());
  // the worker threads do not inherit the caller's inference mode (writing into `out`, an inference
  // tensor, outside it is an error) nor its grad mode
  const bool inference = c10::InferenceMode::is_enabled();
  // grain 1: parallel_for hands each thread one contiguous range of blocks (one F.linear each)
  at::parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
    const c10::InferenceMode mode(inference);
    const at::NoGradGuard no_grad;
    const int64_t lo = b * align, hi = std::min(n, e * align);
    const at::Tensor part = at::linear(x, w.narrow(0, lo, hi - lo),
                                       bias.has_value() ? c10::optional<at::Tensor>(bias->narrow(0, lo, hi - lo))
                                                        : c10::optional<at::Tensor>());
    out.narrow(1, lo, hi - lo).copy_(part);
  });
  return out;
}

}  // namespace ragk

TORCH_LIBRARY_FRAGMENT(ragk, m) {
  m.def("linear_rows_split(Tensor x, Tensor w, Tensor? bias, int align) -> Tensor", &ragk::linear_rows_split);
}
