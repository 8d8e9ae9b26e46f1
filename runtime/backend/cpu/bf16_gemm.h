// bfloat16 GEMM with float32 accumulation on the CPU, through oneDNN's matmul primitive (its
// AVX-512 BF16 kernels: vdpbf16ps multiplies pairs of bfloat16 and accumulates in float32 at
// twice the float32 FMA rate).
//
// NOTE [ CPU bfloat16 GEMM ]
// oneDNN is Debian's libdnnl (2.6); PyTorch's CPU autocast runs on it too. A matmul primitive
// is compiled (JIT) per shape and layout, so primitives are cached per calling thread, keyed by
// everything that shapes them; each call then only wraps the pointers. The primitive works in
// the caller's OpenMP thread budget: called inside a parallel region it runs on its one thread
// (oneDNN does not nest), outside it on `threads` threads. Scratch memory is passed by us
// (oneDNN's "user" scratchpad), so concurrent calls from several threads never share it.
// Where this CPU lacks AVX-512 BF16, oneDNN would pick a reference kernel far slower than
// float32 conversion: available() is then false and callers keep the float32 path.
#pragma once

#include <Eigen/Core>
#include <cstdint>

namespace dp::cpu {

// Row-major C [M, N] (ldc) = alpha · op(A) · op(B) + beta · C, where op(A) is [M, K]: A read
// row-major with leading dimension lda, or transposed (ta: A stored [K, M]); likewise B.
struct Bf16GemmArgs {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  const Eigen::bfloat16* A = nullptr;
  int64_t lda = 0;
  const Eigen::bfloat16* B = nullptr;
  int64_t ldb = 0;
  float alpha = 1.0f, beta = 0.0f;
  int64_t ldc = 0;
};

// True when oneDNN has a native bfloat16 matmul on this CPU (checked once per process).
bool bf16_gemm_available();

// C in float32 (weight-gradient sums, convolution outputs before their last rounding) or in
// bfloat16 (rounded once from the float32 accumulator). Throws dp::Error naming the shape when
// oneDNN refuses it.
void bf16_gemm(const Bf16GemmArgs& args, float* C, int threads);
void bf16_gemm(const Bf16GemmArgs& args, Eigen::bfloat16* C, int threads);

}  // namespace dp::cpu
