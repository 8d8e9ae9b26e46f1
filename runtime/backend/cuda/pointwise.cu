// CUDA pointwise kernels (the CPU's cpu/pointwise.cpp): unary ops and their gradients, binary
// ops over broadcast (stride-0) operands, binary ops with a scalar, and axpby. Kernels first,
// launchers after.
//
// Every op is a small functor computing in acc_t<T> (float for float16/bfloat16/float32, double
// for float64) with the CPU kernel's formula; the launcher picks the functor once, so each
// (op, dtype, layout) is its own kernel with no branch in the loop. Layouts:
//  - contiguous, every pointer 16-byte aligned: Vec<T, kVec<T>> loads/stores (16 bytes) over
//    numel / kVec vectors, and a scalar tail of fewer than kVec elements;
//  - contiguous otherwise (a narrow() view starting mid-vector): the same kernel with V = 1;
//  - strided: an OffsetCalculator per element (int32 indexing when every offset fits).
// Pointers are not __restrict__: out may alias an input (binary_scalar in place, axpby on one
// tensor). Every thread reads its elements before writing the same ones, so aliasing is safe.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "runtime/backend/cuda/device_utils.cuh"
#include "runtime/backend/cuda/pointwise_kernels.h"

namespace dp::cuda {
namespace {

using namespace device;

// ---- Math in float or double ------------------------------------------------------------------

__device__ __forceinline__ float m_exp(float v) { return expf(v); }
__device__ __forceinline__ double m_exp(double v) { return exp(v); }
__device__ __forceinline__ float m_log(float v) { return logf(v); }
__device__ __forceinline__ double m_log(double v) { return log(v); }
__device__ __forceinline__ float m_sqrt(float v) { return sqrtf(v); }
__device__ __forceinline__ double m_sqrt(double v) { return sqrt(v); }
__device__ __forceinline__ float m_abs(float v) { return fabsf(v); }
__device__ __forceinline__ double m_abs(double v) { return fabs(v); }
__device__ __forceinline__ float m_erf(float v) { return erff(v); }
__device__ __forceinline__ double m_erf(double v) { return erf(v); }
__device__ __forceinline__ float m_tanh(float v) { return tanhf(v); }
__device__ __forceinline__ double m_tanh(double v) { return tanh(v); }
__device__ __forceinline__ float m_pow(float a, float b) { return powf(a, b); }
__device__ __forceinline__ double m_pow(double a, double b) { return pow(a, b); }

#define DP_INV_SQRT2 0.70710678118654752440
#define DP_INV_SQRT_2PI 0.39894228040143267794

// ---- Unary functors: y = f(x), the CPU's dispatch_unary --------------------------------------

struct NegFn { template <typename A> __device__ A operator()(A x) const { return -x; } };
struct ExpFn { template <typename A> __device__ A operator()(A x) const { return m_exp(x); } };
struct LogFn { template <typename A> __device__ A operator()(A x) const { return m_log(x); } };
struct SqrtFn { template <typename A> __device__ A operator()(A x) const { return m_sqrt(x); } };
struct RsqrtFn { template <typename A> __device__ A operator()(A x) const { return A(1) / m_sqrt(x); } };
struct AbsFn { template <typename A> __device__ A operator()(A x) const { return m_abs(x); } };
struct SquareFn { template <typename A> __device__ A operator()(A x) const { return x * x; } };
struct ReciprocalFn { template <typename A> __device__ A operator()(A x) const { return A(1) / x; } };
struct ReluFn { template <typename A> __device__ A operator()(A x) const { return x > A(0) ? x : A(0); } };
struct GeluFn {
  template <typename A> __device__ A operator()(A x) const {
    return A(0.5) * x * (A(1) + m_erf(x * A(DP_INV_SQRT2)));
  }
};
struct TanhFn { template <typename A> __device__ A operator()(A x) const { return m_tanh(x); } };
struct SigmoidFn { template <typename A> __device__ A operator()(A x) const { return A(1) / (A(1) + m_exp(-x)); } };
struct SiluFn { template <typename A> __device__ A operator()(A x) const { return x / (A(1) + m_exp(-x)); } };

// ---- Gradient functors: dx = g(x, y, dy), the CPU's dispatch_unary_backward -------------------
// kReadsX / kReadsY: which of x, y the formula uses (the other is not loaded, and may be null).

template <bool X, bool Y>
struct Reads {
  static constexpr bool kReadsX = X;
  static constexpr bool kReadsY = Y;
};

struct NegGrad : Reads<false, false> {
  template <typename A> __device__ A operator()(A, A, A dy) const { return -dy; }
};
struct ExpGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return dy * y; }
};
struct LogGrad : Reads<true, false> {
  template <typename A> __device__ A operator()(A x, A, A dy) const { return dy / x; }
};
struct SqrtGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return dy / (A(2) * y); }
};
struct RsqrtGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return A(-0.5) * dy * y * y * y; }
};
struct AbsGrad : Reads<true, false> {
  template <typename A> __device__ A operator()(A x, A, A dy) const {
    return x > A(0) ? dy : (x < A(0) ? -dy : A(0));
  }
};
struct SquareGrad : Reads<true, false> {
  template <typename A> __device__ A operator()(A x, A, A dy) const { return A(2) * x * dy; }
};
struct ReciprocalGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return -dy * y * y; }
};
struct ReluGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return y > A(0) ? dy : A(0); }
};
struct GeluGrad : Reads<true, false> {
  template <typename A> __device__ A operator()(A x, A, A dy) const {
    const A cdf = A(0.5) * (A(1) + m_erf(x * A(DP_INV_SQRT2)));
    const A pdf = A(DP_INV_SQRT_2PI) * m_exp(A(-0.5) * x * x);
    return dy * (cdf + x * pdf);
  }
};
struct TanhGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return dy * (A(1) - y * y); }
};
struct SigmoidGrad : Reads<false, true> {
  template <typename A> __device__ A operator()(A, A y, A dy) const { return dy * y * (A(1) - y); }
};
struct SiluGrad : Reads<true, false> {
  template <typename A> __device__ A operator()(A x, A, A dy) const {
    const A s = A(1) / (A(1) + m_exp(-x));
    return dy * s * (A(1) + x * (A(1) - s));
  }
};

// ---- Binary functors: out = f(a, b), the CPU's dispatch_binary --------------------------------
// Maximum/Minimum keep the CPU's NaN behaviour: `a > b ? a : b` gives b when either is NaN.

struct AddFn { template <typename A> __device__ A operator()(A a, A b) const { return a + b; } };
struct SubFn { template <typename A> __device__ A operator()(A a, A b) const { return a - b; } };
struct MulFn { template <typename A> __device__ A operator()(A a, A b) const { return a * b; } };
struct DivFn { template <typename A> __device__ A operator()(A a, A b) const { return a / b; } };
struct MaximumFn { template <typename A> __device__ A operator()(A a, A b) const { return a > b ? a : b; } };
struct MinimumFn { template <typename A> __device__ A operator()(A a, A b) const { return a < b ? a : b; } };
struct PowFn { template <typename A> __device__ A operator()(A a, A b) const { return m_pow(a, b); } };
struct EqualFn { template <typename A> __device__ A operator()(A a, A b) const { return a == b ? A(1) : A(0); } };

// A binary functor with its right operand fixed: the unary kernels run binary_scalar.
template <typename Fn, typename A>
struct BoundScalar {
  Fn fn;
  A s;
  __device__ A operator()(A x) const { return fn(x, s); }
};

// ---- Kernels ----------------------------------------------------------------------------------

// unary_forward (and binary_scalar): x [n] contiguous, y [n] contiguous (may be x).
// V = kVec<T> when x and y are 16-byte aligned: n / V vectors, then the n % V tail; V = 1 else.
template <typename T, typename Fn, int V>
__global__ void unary_forward_contiguous_kernel(const T* x, T* y, int64_t n, Fn fn) {
  using A = acc_t<T>;
  const int64_t nvec = n / V;
  const Vec<T, V>* xv = reinterpret_cast<const Vec<T, V>*>(x);
  Vec<T, V>* yv = reinterpret_cast<Vec<T, V>*>(y);
  for (int64_t i = first_index(); i < nvec; i += grid_stride()) {
    const Vec<T, V> in = xv[i];
    Vec<T, V> res;
#pragma unroll
    for (int k = 0; k < V; ++k) res.v[k] = convert<T>(fn(convert<A>(in.v[k])));
    yv[i] = res;
  }
  if constexpr (V > 1) {
    const int64_t t = nvec * V + first_index();  // fewer than V elements: the first threads
    if (t < n) y[t] = convert<T>(fn(convert<A>(x[t])));
  }
}

// unary_forward (and binary_scalar), strided x: element i of the loop at y[off[0]], x[off[1]].
template <typename T, typename Fn, typename Index>
__global__ void unary_forward_strided_kernel(const T* x, T* y, OffsetCalculator<2, Index> calc, int64_t n, Fn fn) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    Index off[2];
    calc.offsets(static_cast<Index>(i), off);
    y[off[0]] = convert<T>(fn(convert<A>(x[off[1]])));
  }
}

// unary_backward: x, y, dy, dx [n] contiguous; x (y) only read when Fn::kReadsX (kReadsY).
template <typename T, typename Fn, int V>
__global__ void unary_backward_kernel(const T* x, const T* y, const T* dy, T* dx, int64_t n, Fn fn) {
  using A = acc_t<T>;
  const int64_t nvec = n / V;
  for (int64_t i = first_index(); i < nvec; i += grid_stride()) {
    Vec<T, V> xv{}, yv{};
    if constexpr (Fn::kReadsX) xv = reinterpret_cast<const Vec<T, V>*>(x)[i];
    if constexpr (Fn::kReadsY) yv = reinterpret_cast<const Vec<T, V>*>(y)[i];
    const Vec<T, V> gv = reinterpret_cast<const Vec<T, V>*>(dy)[i];
    Vec<T, V> res;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const A xa = Fn::kReadsX ? convert<A>(xv.v[k]) : A(0);
      const A ya = Fn::kReadsY ? convert<A>(yv.v[k]) : A(0);
      res.v[k] = convert<T>(fn(xa, ya, convert<A>(gv.v[k])));
    }
    reinterpret_cast<Vec<T, V>*>(dx)[i] = res;
  }
  if constexpr (V > 1) {
    const int64_t t = nvec * V + first_index();
    if (t < n) {
      const A xa = Fn::kReadsX ? convert<A>(x[t]) : A(0);
      const A ya = Fn::kReadsY ? convert<A>(y[t]) : A(0);
      dx[t] = convert<T>(fn(xa, ya, convert<A>(dy[t])));
    }
  }
}

// binary_forward: a, b, out [n] contiguous; V as unary_forward_contiguous_kernel.
template <typename T, typename Fn, int V>
__global__ void binary_forward_contiguous_kernel(const T* a, const T* b, T* out, int64_t n, Fn fn) {
  using A = acc_t<T>;
  const int64_t nvec = n / V;
  for (int64_t i = first_index(); i < nvec; i += grid_stride()) {
    const Vec<T, V> av = reinterpret_cast<const Vec<T, V>*>(a)[i];
    const Vec<T, V> bv = reinterpret_cast<const Vec<T, V>*>(b)[i];
    Vec<T, V> res;
#pragma unroll
    for (int k = 0; k < V; ++k) res.v[k] = convert<T>(fn(convert<A>(av.v[k]), convert<A>(bv.v[k])));
    reinterpret_cast<Vec<T, V>*>(out)[i] = res;
  }
  if constexpr (V > 1) {
    const int64_t t = nvec * V + first_index();
    if (t < n) out[t] = convert<T>(fn(convert<A>(a[t]), convert<A>(b[t])));
  }
}

// binary_forward, strided/broadcast a and b: element i at out[off[0]], a[off[1]], b[off[2]].
template <typename T, typename Fn, typename Index>
__global__ void binary_forward_strided_kernel(const T* a, const T* b, T* out, OffsetCalculator<3, Index> calc,
                                              int64_t n, Fn fn) {
  using A = acc_t<T>;
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    Index off[3];
    calc.offsets(static_cast<Index>(i), off);
    out[off[0]] = convert<T>(fn(convert<A>(a[off[1]]), convert<A>(b[off[2]])));
  }
}

// axpby on one element: mode 0: alpha x (y not read); mode 1: y + x; mode 2: alpha x + beta y.
template <typename A>
__device__ __forceinline__ A axpby_value(int mode, A alpha, A x, A beta, A y) {
  if (mode == 0) return alpha * x;
  if (mode == 1) return y + x;
  return alpha * x + beta * y;
}

// axpby: x, y [n] contiguous (may be the same tensor); y = axpby_value(mode, ...). In mode 0
// y is never loaded, so NaN or uninitialised memory in y does not leak into the result.
template <typename T, int V>
__global__ void axpby_kernel(acc_t<T> alpha, const T* x, acc_t<T> beta, T* y, int64_t n, int mode) {
  using A = acc_t<T>;
  const int64_t nvec = n / V;
  for (int64_t i = first_index(); i < nvec; i += grid_stride()) {
    const Vec<T, V> xv = reinterpret_cast<const Vec<T, V>*>(x)[i];
    Vec<T, V> yv{};
    if (mode != 0) yv = reinterpret_cast<const Vec<T, V>*>(y)[i];
    Vec<T, V> res;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const A ya = mode != 0 ? convert<A>(yv.v[k]) : A(0);
      res.v[k] = convert<T>(axpby_value(mode, alpha, convert<A>(xv.v[k]), beta, ya));
    }
    reinterpret_cast<Vec<T, V>*>(y)[i] = res;
  }
  if constexpr (V > 1) {
    const int64_t t = nvec * V + first_index();
    if (t < n) {
      const A ya = mode != 0 ? convert<A>(y[t]) : A(0);
      y[t] = convert<T>(axpby_value(mode, alpha, convert<A>(x[t]), beta, ya));
    }
  }
}

// ---- Host-side dispatch -----------------------------------------------------------------------

template <typename Fn>
void dispatch_unary(UnaryKind op, Fn&& fn) {
  switch (op) {
    case UnaryKind::Neg: fn(NegFn{}); return;
    case UnaryKind::Exp: fn(ExpFn{}); return;
    case UnaryKind::Log: fn(LogFn{}); return;
    case UnaryKind::Sqrt: fn(SqrtFn{}); return;
    case UnaryKind::Rsqrt: fn(RsqrtFn{}); return;
    case UnaryKind::Abs: fn(AbsFn{}); return;
    case UnaryKind::Square: fn(SquareFn{}); return;
    case UnaryKind::Reciprocal: fn(ReciprocalFn{}); return;
    case UnaryKind::Relu: fn(ReluFn{}); return;
    case UnaryKind::Gelu: fn(GeluFn{}); return;
    case UnaryKind::Tanh: fn(TanhFn{}); return;
    case UnaryKind::Sigmoid: fn(SigmoidFn{}); return;
    case UnaryKind::Silu: fn(SiluFn{}); return;
  }
}

template <typename Fn>
void dispatch_unary_backward(UnaryKind op, Fn&& fn) {
  switch (op) {
    case UnaryKind::Neg: fn(NegGrad{}); return;
    case UnaryKind::Exp: fn(ExpGrad{}); return;
    case UnaryKind::Log: fn(LogGrad{}); return;
    case UnaryKind::Sqrt: fn(SqrtGrad{}); return;
    case UnaryKind::Rsqrt: fn(RsqrtGrad{}); return;
    case UnaryKind::Abs: fn(AbsGrad{}); return;
    case UnaryKind::Square: fn(SquareGrad{}); return;
    case UnaryKind::Reciprocal: fn(ReciprocalGrad{}); return;
    case UnaryKind::Relu: fn(ReluGrad{}); return;
    case UnaryKind::Gelu: fn(GeluGrad{}); return;
    case UnaryKind::Tanh: fn(TanhGrad{}); return;
    case UnaryKind::Sigmoid: fn(SigmoidGrad{}); return;
    case UnaryKind::Silu: fn(SiluGrad{}); return;
  }
}

template <typename Fn>
void dispatch_binary(BinaryKind op, Fn&& fn) {
  switch (op) {
    case BinaryKind::Add: fn(AddFn{}); return;
    case BinaryKind::Sub: fn(SubFn{}); return;
    case BinaryKind::Mul: fn(MulFn{}); return;
    case BinaryKind::Div: fn(DivFn{}); return;
    case BinaryKind::Maximum: fn(MaximumFn{}); return;
    case BinaryKind::Minimum: fn(MinimumFn{}); return;
    case BinaryKind::Pow: fn(PowFn{}); return;
    case BinaryKind::Equal: fn(EqualFn{}); return;
  }
}

// y = fn(x) elementwise: the contiguous (vector or scalar) kernel or the strided one.
template <typename T, typename Fn>
void run_unary(const T* x, T* y, const StridedShape<2>& shape, int64_t numel, Fn fn, cudaStream_t stream) {
  if (is_contiguous(shape)) {
    if (aligned16(x) && aligned16(y)) {
      constexpr int V = kVec<T>;
      unary_forward_contiguous_kernel<T, Fn, V><<<blocks_for(numel / V), kThreads, 0, stream>>>(x, y, numel, fn);
    } else {
      unary_forward_contiguous_kernel<T, Fn, 1><<<blocks_for(numel), kThreads, 0, stream>>>(x, y, numel, fn);
    }
    return;
  }
  with_offset_calculator(shape, numel, [&](auto calc) {
    unary_forward_strided_kernel<<<blocks_for(numel), kThreads, 0, stream>>>(x, y, calc, numel, fn);
  });
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

bool unary_backward_reads_x(UnaryKind op) {
  bool reads = false;
  dispatch_unary_backward(op, [&](auto fn) { reads = decltype(fn)::kReadsX; });
  return reads;
}

bool unary_backward_reads_y(UnaryKind op) {
  bool reads = false;
  dispatch_unary_backward(op, [&](auto fn) { reads = decltype(fn)::kReadsY; });
  return reads;
}

cudaError_t launch_unary(UnaryKind op, const void* x, void* y, DType dtype, const StridedShape<2>& shape,
                         int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary(op, [&](auto fn) {
      run_unary(static_cast<const T*>(x), static_cast<T*>(y), shape, numel, fn, stream);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_unary_backward(UnaryKind op, const void* x, const void* y, const void* dy, void* dx,
                                  DType dtype, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary_backward(op, [&](auto fn) {
      using Fn = decltype(fn);
      const T* xp = Fn::kReadsX ? static_cast<const T*>(x) : nullptr;
      const T* yp = Fn::kReadsY ? static_cast<const T*>(y) : nullptr;
      const T* gp = static_cast<const T*>(dy);
      T* outp = static_cast<T*>(dx);
      // A null pointer (not read) counts as aligned.
      if (aligned16(xp) && aligned16(yp) && aligned16(gp) && aligned16(outp)) {
        constexpr int V = kVec<T>;
        unary_backward_kernel<T, Fn, V><<<blocks_for(numel / V), kThreads, 0, stream>>>(xp, yp, gp, outp, numel, fn);
      } else {
        unary_backward_kernel<T, Fn, 1><<<blocks_for(numel), kThreads, 0, stream>>>(xp, yp, gp, outp, numel, fn);
      }
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_binary(BinaryKind op, const void* a, const void* b, void* out, DType dtype,
                          const StridedShape<3>& shape, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* ap = static_cast<const T*>(a);
    const T* bp = static_cast<const T*>(b);
    T* op_ = static_cast<T*>(out);
    dispatch_binary(op, [&](auto fn) {
      using Fn = decltype(fn);
      if (is_contiguous(shape)) {
        if (aligned16(ap) && aligned16(bp) && aligned16(op_)) {
          constexpr int V = kVec<T>;
          binary_forward_contiguous_kernel<T, Fn, V>
              <<<blocks_for(numel / V), kThreads, 0, stream>>>(ap, bp, op_, numel, fn);
        } else {
          binary_forward_contiguous_kernel<T, Fn, 1>
              <<<blocks_for(numel), kThreads, 0, stream>>>(ap, bp, op_, numel, fn);
        }
        return;
      }
      with_offset_calculator(shape, numel, [&](auto calc) {
        binary_forward_strided_kernel<<<blocks_for(numel), kThreads, 0, stream>>>(ap, bp, op_, calc, numel, fn);
      });
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_binary_scalar(BinaryKind op, const void* a, double s, void* out, DType dtype,
                                 const StridedShape<2>& shape, int64_t numel, cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    dispatch_binary(op, [&](auto fn) {
      // The scalar in the compute type (the CPU's static_cast<T>(s) for float32 and float64).
      const BoundScalar<decltype(fn), A> bound{fn, static_cast<A>(s)};
      run_unary(static_cast<const T*>(a), static_cast<T*>(out), shape, numel, bound, stream);
    });
  });
  return cudaGetLastError();
}

cudaError_t launch_axpby(double alpha, const void* x, double beta, void* y, DType dtype, int64_t numel,
                         cudaStream_t stream) {
  if (numel == 0) return cudaSuccess;
  // The CPU's three loops: beta == 0 never reads y (NaN-safe overwrite).
  const int mode = beta == 0.0 ? 0 : (alpha == 1.0 && beta == 1.0 ? 1 : 2);
  dispatch_floating_dtype(dtype, [&](auto tag) {
    using T = decltype(tag);
    using A = acc_t<T>;
    const T* xp = static_cast<const T*>(x);
    T* yp = static_cast<T*>(y);
    const A a = static_cast<A>(alpha), b = static_cast<A>(beta);
    if (aligned16(xp) && aligned16(yp)) {
      constexpr int V = kVec<T>;
      axpby_kernel<T, V><<<blocks_for(numel / V), kThreads, 0, stream>>>(a, xp, b, yp, numel, mode);
    } else {
      axpby_kernel<T, 1><<<blocks_for(numel), kThreads, 0, stream>>>(a, xp, b, yp, numel, mode);
    }
  });
  return cudaGetLastError();
}

}  // namespace dp::cuda
