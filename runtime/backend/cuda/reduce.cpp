// Front-ends of the CUDA reductions (reduce.cu): sum/mean/max/min over the dims where out has
// size 1, and row argmax. Semantics are the CPU backend's (cpu/reduce.cpp); every floating dtype.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>
#include <vector>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/reduce_kernels.h"
#include "runtime/backend/cuda/strided_shape.h"

namespace dp::cuda {

namespace {

ReduceKind reduce_kind(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ReduceKind::Sum;
    case ReduceOp::Mean: return ReduceKind::Mean;
    case ReduceOp::Max: return ReduceKind::Max;
    case ReduceOp::Min: return ReduceKind::Min;
  }
  throw Error("unknown reduce op");
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  check_operand("reduce", x);
  check_operand("reduce", out);
  check_supported(Kernel::Reduce, x.dtype());
  DP_CHECK(out.dtype() == x.dtype() && out.is_contiguous() && out.dim() == x.dim(),
           "reduce: expects a contiguous output with the input's dtype and number of dims, got ", x.str(), " → ",
           out.str());
  for (int64_t d = 0; d < x.dim(); ++d)
    DP_CHECK(out.shape()[d] == x.shape()[d] || out.shape()[d] == 1, "reduce: output ", out.str(),
             " does not keep or reduce each dim of ", x.str());
  if (out.numel() == 0) return;

  // Kept dims (in x's order: out is row-major over them) and reduced dims (largest stride first,
  // so the innermost one is the most contiguous); size-1 dims take no part.
  Shape kept_sizes, kept_strides;
  std::vector<std::pair<int64_t, int64_t>> reduced;  // (size, stride)
  for (int64_t d = 0; d < x.dim(); ++d) {
    const int64_t n = x.shape()[d];
    if (n == 1) continue;
    if (out.shape()[d] == 1) {
      reduced.emplace_back(n, x.strides()[d]);
    } else {
      kept_sizes.push_back(n);
      kept_strides.push_back(x.strides()[d]);
    }
  }
  std::stable_sort(reduced.begin(), reduced.end(),
                   [](const auto& a, const auto& b) { return std::llabs(a.second) > std::llabs(b.second); });
  Shape reduced_sizes, reduced_strides;
  for (const auto& [n, stride] : reduced) {
    reduced_sizes.push_back(n);
    reduced_strides.push_back(stride);
  }

  ReduceProblem problem;
  problem.kept = make_strided_shape<1>("reduce", kept_sizes, {&kept_strides});
  problem.reduced = make_strided_shape<1>("reduce", reduced_sizes, {&reduced_strides});
  problem.kept_numel = out.numel();
  problem.reduced_numel = numel_of(reduced_sizes);
  problem.op = reduce_kind(op);
  // The CPU's mean: acc * out numel / max(x numel, 1) (so an empty mean is 0).
  problem.scale = op == ReduceOp::Mean
                      ? static_cast<double>(out.numel()) / static_cast<double>(std::max<int64_t>(x.numel(), 1))
                      : 1.0;

  activate();
  // Partial results when the reduction is split across blocks; freed (stream-ordered) on return.
  const size_t scratch_bytes = reduce_scratch_bytes(problem, x.dtype());
  Tensor scratch;
  if (scratch_bytes > 0)
    scratch = Tensor::empty({static_cast<int64_t>((scratch_bytes + 7) / 8)}, kFloat64, device());
  DP_CUDA_CHECK(device_,
                launch_reduce(x.raw_data(), out.raw_data(), scratch.defined() ? scratch.raw_data() : nullptr, problem,
                              x.dtype(), stream_),
                "reduce ", x.str(), " → ", out.str());
}

void CudaBackend::argmax_rows(const Tensor& x, const Tensor& out) {
  check_operand("argmax_rows", x);
  check_operand("argmax_rows", out);
  check_supported(Kernel::ArgmaxRows, x.dtype());
  DP_CHECK(x.dim() == 2 && x.is_contiguous(), "argmax_rows: expects a contiguous 2-D input, got ", x.str());
  DP_CHECK(out.dtype() == kInt64 && out.is_contiguous() && out.numel() == x.shape()[0],
           "argmax_rows: expects a contiguous int64 output of ", x.shape()[0], " elements, got ", out.str());
  if (out.numel() == 0) return;
  activate();
  DP_CUDA_CHECK(device_,
                launch_argmax_rows(x.raw_data(), x.dtype(), x.shape()[0], x.shape()[1], out.data<int64_t>(), stream_),
                "argmax_rows ", x.str());
}

}  // namespace dp::cuda
