// Helpers shared by the CPU kernel files: dtype dispatch and OpenMP thresholds.
#pragma once

#include <Eigen/Core>
#include <omp.h>

#include "runtime/core/error.h"
#include "runtime/tensor/tensor.h"

namespace dp::cpu {

// Below this many elements a pointwise kernel runs on one thread (fork/join costs ~1 µs).
inline constexpr int64_t kParallelGrain = 32768;

// Parallel loop over [0, n) for contiguous kernels: body(begin, end) once per thread. The body
// should copy what it reads into locals (and its pointers into __restrict locals) before its
// loop: values reached through captures or the OpenMP region's shared data may alias the
// stores, and GCC then keeps the loop scalar (it did, for the optimiser updates).
template <typename Body>
void parallel_range(int64_t n, int threads, Body&& body) {
  if (threads <= 1 || n < kParallelGrain) {
    body(int64_t{0}, n);
    return;
  }
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    // Chunks aligned to 16 elements so each thread's stores start on a cache line.
    const int64_t b = (n * t / nt) & ~int64_t(15), e = t == nt - 1 ? n : (n * (t + 1) / nt) & ~int64_t(15);
    if (e > b) body(b, e);
  }
}

// Calls fn(T{}) with T = float or double according to `dtype`; other dtypes are an error
// naming the op.
template <typename Fn>
decltype(auto) dispatch_floating(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    default:
      throw Error(detail::concat(op, ": CPU kernel supports float32 and float64, got ",
                                 dtype_name(dtype)));
  }
}

// Kernels that take float16/bfloat16 read each value, compute in float32 and round once on
// store (as PyTorch's CPU kernels): compute_t<T> is the type the arithmetic runs in.
template <typename T> struct ComputeType { using type = T; };
template <> struct ComputeType<Eigen::half> { using type = float; };
template <> struct ComputeType<Eigen::bfloat16> { using type = float; };
template <typename T> using compute_t = typename ComputeType<T>::type;

// As dispatch_floating, plus T = Eigen::half and Eigen::bfloat16 (compute in compute_t<T>).
template <typename Fn>
decltype(auto) dispatch_floating_and_half(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(Eigen::half{});
    case DType::BFloat16: return fn(Eigen::bfloat16{});
    default:
      throw Error(detail::concat(op, ": CPU kernel supports float32, float64, float16 and bfloat16, got ",
                                 dtype_name(dtype)));
  }
}

// Calls fn(T{}) for every dtype (casts, copies, fills).
template <typename Fn>
decltype(auto) dispatch_all(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::Float16: return fn(Eigen::half{});
    case DType::BFloat16: return fn(Eigen::bfloat16{});
    case DType::Int32: return fn(int32_t{});
    case DType::Int64: return fn(int64_t{});
    case DType::UInt8: return fn(uint8_t{});
    case DType::Bool: return fn(bool{});
  }
  throw Error("unknown dtype");
}

// Converts between any two element types (through float for the 16-bit ones).
template <typename To, typename From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<From, Eigen::half> || std::is_same_v<From, Eigen::bfloat16>) {
    return static_cast<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, Eigen::half> || std::is_same_v<To, Eigen::bfloat16>) {
    return To(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

}  // namespace dp::cpu
