// Op harness table: reductions (sum, mean, max, min over one or several dims, keepdim both ways),
// argmax, matmul and linear (batched, broadcast, transposed operands, empty dims).
#include <string>
#include <vector>

#include "common/op_harness.h"
#include "runtime/ops/matmul.h"
#include "runtime/ops/reduce.h"

namespace dp::testing::harness {

namespace {

using V = std::vector<Tensor>;

// min over `dims` through the backend (no public op): out keeps every dim.
OpFn backend_reduce(ReduceOp op, Shape dims) {
  return [op, dims](const V& v) {
    Shape kept = v[0].shape();
    for (int64_t d : dims) kept[d] = 1;
    Tensor out = Tensor::empty(kept, v[0].dtype(), v[0].device());
    v[0].device().backend().reduce(op, v[0], out);
    return V{out};
  };
}

}  // namespace

std::vector<OpCase> reduction_matmul_cases() {
  std::vector<OpCase> cases;
  const std::vector<Kernel> red{Kernel::Reduce};

  // ---- sum / mean ----
  cases.push_back({"sum_all_3x5x7", red, {InputSpec("x", {3, 5, 7})}, [](const V& v) { return V{sum(v[0])}; }});
  cases.push_back({"sum_dim1_keepdim_3x5x7", red, {InputSpec("x", {3, 5, 7}).transposed()},
                   [](const V& v) { return V{sum(v[0], {1}, true)}; }});
  cases.push_back({"sum_dims02_3x5x7", red, {InputSpec("x", {3, 5, 7}).narrowed()},
                   [](const V& v) { return V{sum(v[0], {0, 2}, false)}; }});
  cases.push_back({"sum_last_7x257_transposed", red, {InputSpec("x", {7, 257}).transposed()},
                   [](const V& v) { return V{sum(v[0], {-1})}; }});
  cases.push_back({"sum_dim0_257x3", red, {InputSpec("x", {257, 3}).narrowed()},
                   [](const V& v) { return V{sum(v[0], {0}, true)}; }});
  // A long reduction whose result cancels (Σ of 5155 values in [-1, 1)): the CPU's float32 partial
  // sums reach ~0.45 of the default tolerance, so it is scaled with the length.
  cases.push_back({"sum_all_long_5x1031", red, {InputSpec("x", {5, 1031})},
                   [](const V& v) { return V{sum(v[0])}; }, true, Tolerance{}.scaled(4).gradcheck(1e-6, 1e-5)});
  cases.push_back({"sum_expanded_1x33_over_dim0", red, {InputSpec("x", {1, 33})},
                   [](const V& v) { return V{sum(v[0].expand({7, 33}), {0})}; }});
  cases.push_back({"sum_empty_dim_4x0", red, {InputSpec("x", {4, 0})},
                   [](const V& v) { return V{sum(v[0], {1})}; }});
  // CPU bug (NOTE [ Disabled cases ] in op_harness_test.cpp): reduce's cpu::strided_loop divides
  // by the zero outer size (SIGFPE).
  cases.push_back({"sum_of_empty_rows_0x3", red, {InputSpec("x", {0, 3})},
                   [](const V& v) { return V{sum(v[0], {1}, true)}; }});
  cases.push_back({"mean_all_7x33_narrowed", red, {InputSpec("x", {7, 33}).narrowed()},
                   [](const V& v) { return V{mean(v[0])}; }});
  cases.push_back({"mean_dims01_keepdim_3x5x7", red, {InputSpec("x", {3, 5, 7}).transposed()},
                   [](const V& v) { return V{mean(v[0], {0, 1}, true)}; }});
  cases.push_back({"mean_dim2_2x3x257", red, {InputSpec("x", {2, 3, 257})},
                   [](const V& v) { return V{mean(v[0], {2})}; }});

  // ---- max (amax: the gradient goes to the maximum) / min (forward only) ----
  const std::vector<Kernel> maxk{Kernel::Reduce, Kernel::Binary};  // backward: Equal mask, division by ties
  cases.push_back({"amax_dim1_3x5x7", maxk, {InputSpec("x", {3, 5, 7}).distinct()},
                   [](const V& v) { return V{amax(v[0], {1})}; }});
  cases.push_back({"amax_dims02_keepdim_3x5x7", maxk, {InputSpec("x", {3, 5, 7}).distinct().transposed()},
                   [](const V& v) { return V{amax(v[0], {0, 2}, true)}; }});
  cases.push_back({"amax_last_7x257_narrowed", maxk, {InputSpec("x", {7, 257}).distinct().narrowed()},
                   [](const V& v) { return V{amax(v[0], {-1})}; }});
  cases.push_back({"amax_all_33", maxk, {InputSpec("x", {33}).distinct()},
                   [](const V& v) { return V{amax(v[0], {0})}; }});
  cases.push_back({"min_dim1_3x5x7", red, {InputSpec("x", {3, 5, 7}).transposed()},
                   backend_reduce(ReduceOp::Min, {1}), false});
  cases.push_back({"min_dims02_3x5x7", red, {InputSpec("x", {3, 5, 7}).narrowed()},
                   backend_reduce(ReduceOp::Min, {0, 2}), false});
  cases.push_back({"max_all_7x257", red, {InputSpec("x", {7, 257})}, backend_reduce(ReduceOp::Max, {0, 1}), false});

  // ---- argmax (first maximum; distinct values, so no ties in any dtype) ----
  cases.push_back({"argmax_5x257", {Kernel::ArgmaxRows}, {InputSpec("x", {5, 257}).distinct().transposed()},
                   [](const V& v) { return V{argmax(v[0], -1)}; }, false});
  cases.push_back({"argmax_33x1", {Kernel::ArgmaxRows}, {InputSpec("x", {33, 1})},
                   [](const V& v) { return V{argmax(v[0], 1)}; }, false});

  // ---- matmul / linear ----
  const std::vector<Kernel> mm{Kernel::Gemm, Kernel::Reduce, Kernel::Copy};
  const Tolerance mt = Tolerance{}.scaled(3);
  cases.push_back({"matmul_7x33_33x5", mm, {InputSpec("a", {7, 33}), InputSpec("b", {33, 5})},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_transposed_a_b", mm, {InputSpec("a", {7, 33}).transposed(), InputSpec("b", {33, 5}).transposed()},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_narrowed_rows_1x257_257x3", mm, {InputSpec("a", {1, 257}).narrowed(), InputSpec("b", {257, 3}).narrowed()},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_k257_5x257_257x9", mm, {InputSpec("a", {5, 257}), InputSpec("b", {257, 9})},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_batched_3x7x33_3x33x5", mm, {InputSpec("a", {3, 7, 33}), InputSpec("b", {3, 33, 5})},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_batched_transposed_b", mm, {InputSpec("a", {3, 7, 33}), InputSpec("b", {3, 5, 33})},
                   [](const V& v) { return V{matmul(v[0], v[1].transpose(1, 2))}; }, true, mt});
  cases.push_back({"matmul_batched_transposed_a", mm, {InputSpec("a", {3, 33, 7}), InputSpec("b", {3, 33, 5})},
                   [](const V& v) { return V{matmul(v[0].transpose(1, 2), v[1])}; }, true, mt});
  cases.push_back({"matmul_batched_noncontiguous_3d", mm, {InputSpec("a", {3, 7, 33}).transposed(), InputSpec("b", {3, 33, 5}).narrowed()},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_broadcast_2d_b_4x3x5_5x7", mm, {InputSpec("a", {4, 3, 5}), InputSpec("b", {5, 7}).transposed()},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  cases.push_back({"matmul_broadcast_2d_a_3x5_4x5x7", mm, {InputSpec("a", {3, 5}), InputSpec("b", {4, 5, 7})},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }, true, mt});
  // CPU bug (NOTE [ Disabled cases ] in op_harness_test.cpp): the gradient of a [3, 0] is a [3, 0]
  // GEMM output that Tensor::is_contiguous() calls non-contiguous, and gemm asserts.
  cases.push_back({"matmul_empty_k_3x0_0x4", mm, {InputSpec("a", {3, 0}), InputSpec("b", {0, 4})},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }});
  cases.push_back({"matmul_empty_m_0x5_5x3", mm, {InputSpec("a", {0, 5}), InputSpec("b", {5, 3})},
                   [](const V& v) { return V{matmul(v[0], v[1])}; }});
  cases.push_back({"linear_bias_3x7x33_to_5", mm, {InputSpec("x", {3, 7, 33}), InputSpec("w", {5, 33}), InputSpec("b", {5})},
                   [](const V& v) { return V{linear(v[0], v[1], v[2])}; }, true, mt});
  cases.push_back({"linear_no_bias_transposed_x", mm, {InputSpec("x", {9, 33}).transposed(), InputSpec("w", {7, 33}).narrowed()},
                   [](const V& v) { return V{linear(v[0], v[1])}; }, true, mt});
  cases.push_back({"linear_bias_1d_input_257_to_3", mm, {InputSpec("x", {257}), InputSpec("w", {3, 257}), InputSpec("b", {3}).narrowed()},
                   [](const V& v) { return V{linear(v[0], v[1], v[2])}; }, true, mt});
  return cases;
}

}  // namespace dp::testing::harness
