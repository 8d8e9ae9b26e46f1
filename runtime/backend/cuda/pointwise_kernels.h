// Launchers for the CUDA kernels in pointwise.cu: unary ops and their gradients, binary ops
// (broadcast through stride-0 operands), binary ops with a scalar, and axpby (conventions in
// kernel_types.h). Every floating dtype; float16/bfloat16 compute in float.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "runtime/backend/cuda/kernel_types.h"
#include "runtime/core/dtype.h"

namespace dp::cuda {

// Mirror dp::UnaryOp and dp::BinaryOp (backend.h is C++20 and stays out of the .cu); the
// front-end maps them member by member.
enum class UnaryKind : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Square, Reciprocal, Relu, Gelu, Tanh, Sigmoid, Silu,
};
enum class BinaryKind : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, Pow, Equal };

// Which of (x, y) unary_backward's formula for `op` reads (as the CPU kernel's functors).
bool unary_backward_reads_x(UnaryKind op);
bool unary_backward_reads_y(UnaryKind op);

// y = op(x) over `numel` elements; shape.strides[0] is y's (contiguous), [1] is x's.
cudaError_t launch_unary(UnaryKind op, const void* x, void* y, DType dtype, const StridedShape<2>& shape,
                         int64_t numel, cudaStream_t stream);
// dx = dy * op'(x, y), all contiguous [numel]. x or y may be null where the op does not read it
// (unary_backward_reads_x/_y).
cudaError_t launch_unary_backward(UnaryKind op, const void* x, const void* y, const void* dy, void* dx,
                                  DType dtype, int64_t numel, cudaStream_t stream);
// out = a op b; shape.strides[0] is out's (contiguous), [1] a's, [2] b's (0 where broadcast).
cudaError_t launch_binary(BinaryKind op, const void* a, const void* b, void* out, DType dtype,
                          const StridedShape<3>& shape, int64_t numel, cudaStream_t stream);
// out = a op s; shape.strides[0] is out's (contiguous), [1] a's. out may be a itself (in place).
cudaError_t launch_binary_scalar(BinaryKind op, const void* a, double s, void* out, DType dtype,
                                 const StridedShape<2>& shape, int64_t numel, cudaStream_t stream);
// y = alpha * x + beta * y over contiguous [numel]; beta == 0 writes y without reading it.
cudaError_t launch_axpby(double alpha, const void* x, double beta, void* y, DType dtype, int64_t numel,
                         cudaStream_t stream);

}  // namespace dp::cuda
