// Pointwise kernels. Each op is a small functor; dispatch picks the functor once, outside the
// loop, so the inner loops vectorise. Contiguous runs of float16/bfloat16 go through float32
// blocks (NOTE [ Low-precision element-wise kernels on the CPU ] in half_convert.h).
#include <cmath>
#include <type_traits>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/backend/cpu/strided_loop.h"
#include "runtime/backend/cpu/vector_math.h"

namespace dp {

using namespace cpu;

namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

template <typename Fn>
decltype(auto) dispatch_unary(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Neg: return fn([](auto x) { return -x; });
    case UnaryOp::Exp: return fn([](auto x) { return std::exp(x); });
    case UnaryOp::Log: return fn([](auto x) { return std::log(x); });
    case UnaryOp::Sqrt: return fn([](auto x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt: return fn([](auto x) { return decltype(x)(1) / std::sqrt(x); });
    case UnaryOp::Abs: return fn([](auto x) { return std::abs(x); });
    case UnaryOp::Square: return fn([](auto x) { return x * x; });
    case UnaryOp::Reciprocal: return fn([](auto x) { return decltype(x)(1) / x; });
    case UnaryOp::Relu: return fn([](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); });
    case UnaryOp::Gelu:
      return fn([](auto x) {
        using T = decltype(x);
        return T(0.5) * x * (T(1) + std::erf(x * T(kInvSqrt2)));
      });
    case UnaryOp::Tanh: return fn([](auto x) { return std::tanh(x); });
    case UnaryOp::Sigmoid: return fn([](auto x) { return decltype(x)(1) / (decltype(x)(1) + std::exp(-x)); });
    case UnaryOp::Silu: return fn([](auto x) { return x / (decltype(x)(1) + std::exp(-x)); });
  }
  throw Error("unknown unary op");
}

// Gradient functors: (x, y, dy) → dx.
template <typename Fn>
decltype(auto) dispatch_unary_backward(UnaryOp op, Fn&& fn) {
  switch (op) {
    case UnaryOp::Neg: return fn([](auto, auto, auto dy) { return -dy; });
    case UnaryOp::Exp: return fn([](auto, auto y, auto dy) { return dy * y; });
    case UnaryOp::Log: return fn([](auto x, auto, auto dy) { return dy / x; });
    case UnaryOp::Sqrt: return fn([](auto, auto y, auto dy) { return dy / (decltype(y)(2) * y); });
    case UnaryOp::Rsqrt: return fn([](auto, auto y, auto dy) { return decltype(y)(-0.5) * dy * y * y * y; });
    case UnaryOp::Abs:
      return fn([](auto x, auto, auto dy) {
        using T = decltype(x);
        return x > T(0) ? dy : (x < T(0) ? -dy : T(0));
      });
    case UnaryOp::Square: return fn([](auto x, auto, auto dy) { return decltype(x)(2) * x * dy; });
    case UnaryOp::Reciprocal: return fn([](auto, auto y, auto dy) { return -dy * y * y; });
    case UnaryOp::Relu: return fn([](auto, auto y, auto dy) { return y > decltype(y)(0) ? dy : decltype(y)(0); });
    case UnaryOp::Gelu:
      return fn([](auto x, auto, auto dy) {
        using T = decltype(x);
        T cdf = T(0.5) * (T(1) + std::erf(x * T(kInvSqrt2)));
        T pdf = T(kInvSqrt2Pi) * std::exp(T(-0.5) * x * x);
        return dy * (cdf + x * pdf);
      });
    case UnaryOp::Tanh: return fn([](auto, auto y, auto dy) { return dy * (decltype(y)(1) - y * y); });
    case UnaryOp::Sigmoid: return fn([](auto, auto y, auto dy) { return dy * y * (decltype(y)(1) - y); });
    case UnaryOp::Silu:
      return fn([](auto x, auto, auto dy) {
        using T = decltype(x);
        T s = T(1) / (T(1) + std::exp(-x));
        return dy * s * (T(1) + x * (T(1) - s));
      });
  }
  throw Error("unknown unary op");
}

// Whether the gradient functor above reads x (the others need only y and dy).
bool backward_reads_input(UnaryOp op) {
  switch (op) {
    case UnaryOp::Log:
    case UnaryOp::Abs:
    case UnaryOp::Square:
    case UnaryOp::Gelu:
    case UnaryOp::Silu: return true;
    default: return false;
  }
}

template <typename Fn>
decltype(auto) dispatch_binary(BinaryOp op, Fn&& fn) {
  switch (op) {
    case BinaryOp::Add: return fn([](auto a, auto b) { return a + b; });
    case BinaryOp::Sub: return fn([](auto a, auto b) { return a - b; });
    case BinaryOp::Mul: return fn([](auto a, auto b) { return a * b; });
    case BinaryOp::Div: return fn([](auto a, auto b) { return a / b; });
    case BinaryOp::Maximum: return fn([](auto a, auto b) { return a > b ? a : b; });
    case BinaryOp::Minimum: return fn([](auto a, auto b) { return a < b ? a : b; });
    case BinaryOp::Pow: return fn([](auto a, auto b) { return std::pow(a, b); });
    case BinaryOp::Equal: return fn([](auto a, auto b) { return a == b ? decltype(a)(1) : decltype(a)(0); });
  }
  throw Error("unknown binary op");
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& y) {
  DP_ASSERT(y.is_contiguous() && x.shape() == y.shape());
  dispatch_floating_and_half(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    dispatch_unary(op, [&](auto f) {
      const T* xp = x.data<T>();
      T* yp = y.data<T>();
      if (x.is_contiguous()) {
        parallel_range(x.numel(), num_threads_, [&](int64_t b, int64_t e) {
          for_each_block<T, 1>(b, e, yp, {xp}, [&](auto* o, const auto& in, int64_t n) {
            for (int64_t i = 0; i < n; ++i) o[i] = f(in[0][i]);
          });
        });
        return;
      }
      strided_loop<2>(x.shape(), {&y.strides(), &x.strides()}, num_threads_,
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                        for (int64_t k = 0; k < n; ++k)
                          yp[off[0] + k * st[0]] = static_cast<T>(f(static_cast<C>(xp[off[1] + k * st[1]])));
                      });
    });
  });
}

void CpuBackend::unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& dx) {
  DP_ASSERT(x.is_contiguous() && y.is_contiguous() && dy.is_contiguous() && dx.is_contiguous());
  dispatch_floating_and_half(x.dtype(), unary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    dispatch_unary_backward(op, [&](auto f) {
      const T *xp = x.data<T>(), *yp = y.data<T>(), *gp = dy.data<T>();
      T* dp_ = dx.data<T>();
      const bool reads_x = backward_reads_input(op);
      parallel_range(x.numel(), num_threads_, [&](int64_t b, int64_t e) {
        if (!reads_x) {  // one input stream fewer (ReLU's gradient needs only y and dy)
          for_each_block<T, 2>(b, e, dp_, {yp, gp}, [&](auto* o, const auto& in, int64_t n) {
            for (int64_t i = 0; i < n; ++i) o[i] = f(in[0][i], in[0][i], in[1][i]);  // x unread
          });
          return;
        }
        for_each_block<T, 3>(b, e, dp_, {xp, yp, gp}, [&](auto* o, const auto& in, int64_t n) {
          for (int64_t i = 0; i < n; ++i) o[i] = f(in[0][i], in[1][i], in[2][i]);
        });
      });
    });
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  DP_ASSERT(out.is_contiguous() && a.shape() == out.shape() && b.shape() == out.shape());
  dispatch_floating_and_half(out.dtype(), binary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    dispatch_binary(op, [&](auto f) {
      const T *ap = a.data<T>(), *bp = b.data<T>();
      T* op_ = out.data<T>();
      auto g = [&f](T x, T y) { return static_cast<T>(f(static_cast<C>(x), static_cast<C>(y))); };
      auto both = [&f](auto* o, const auto& in, int64_t n) {
        for (int64_t i = 0; i < n; ++i) o[i] = f(in[0][i], in[1][i]);
      };
      if (a.is_contiguous() && b.is_contiguous()) {
        parallel_range(out.numel(), num_threads_, [&](int64_t s, int64_t e) {
          for_each_block<T, 2>(s, e, op_, {ap, bp}, both);
        });
        return;
      }
      strided_loop<3>(out.shape(), {&out.strides(), &a.strides(), &b.strides()}, num_threads_,
                      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
                        T* o = op_ + off[0];
                        const T* pa = ap + off[1];
                        const T* pb = bp + off[2];
                        if (st[1] == 1 && st[2] == 0) {  // row op scalar (e.g. bias per channel)
                          const C s = static_cast<C>(*pb);
                          for_each_block<T, 1>(0, n, o, {pa}, [&](auto* oo, const auto& in, int64_t m) {
                            for (int64_t k = 0; k < m; ++k) oo[k] = f(in[0][k], s);
                          });
                        } else if (st[1] == 1 && st[2] == 1) {
                          for_each_block<T, 2>(0, n, o, {pa, pb}, both);
                        } else if (st[1] == 0 && st[2] == 1) {
                          const C s = static_cast<C>(*pa);
                          for_each_block<T, 1>(0, n, o, {pb}, [&](auto* oo, const auto& in, int64_t m) {
                            for (int64_t k = 0; k < m; ++k) oo[k] = f(s, in[0][k]);
                          });
                        } else {
                          for (int64_t k = 0; k < n; ++k) o[k] = g(pa[k * st[1]], pb[k * st[2]]);
                        }
                      });
    });
  });
}

void CpuBackend::binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) {
  DP_ASSERT(out.is_contiguous() && a.shape() == out.shape());
  dispatch_floating_and_half(out.dtype(), binary_op_name(op), [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C sv = static_cast<C>(s);
    dispatch_binary(op, [&](auto f) {
      const T* ap = a.data<T>();
      T* op_ = out.data<T>();
      if (a.is_contiguous()) {
        parallel_range(out.numel(), num_threads_, [&](int64_t b, int64_t e) {
          for_each_block<T, 1>(b, e, op_, {ap}, [&](auto* o, const auto& in, int64_t n) {
            for (int64_t i = 0; i < n; ++i) o[i] = f(in[0][i], sv);
          });
        });
        return;
      }
      strided_loop<2>(out.shape(), {&out.strides(), &a.strides()}, num_threads_,
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                        for (int64_t k = 0; k < n; ++k)
                          op_[off[0] + k * st[0]] = static_cast<T>(f(static_cast<C>(ap[off[1] + k * st[1]]), sv));
                      });
    });
  });
}

void CpuBackend::axpby(double alpha, const Tensor& x, double beta, const Tensor& y) {
  DP_ASSERT(x.is_contiguous() && y.is_contiguous() && x.numel() == y.numel());
  dispatch_floating_and_half(y.dtype(), "axpby", [&](auto tag) {
    using T = decltype(tag);
    using C = compute_t<T>;
    const C a = static_cast<C>(alpha), b = static_cast<C>(beta);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_range(y.numel(), num_threads_, [&](int64_t s, int64_t e) {
      if (beta == 0.0) {  // y is not read: it may hold NaN, and 0·NaN would keep it
        for_each_block<T, 1>(s, e, yp, {xp}, [&](auto* o, const auto& in, int64_t n) {
          for (int64_t i = 0; i < n; ++i) o[i] = a * in[0][i];
        });
      } else if (alpha == 1.0 && beta == 1.0) {
        for_each_block<T, 2>(s, e, yp, {xp, yp}, [&](auto* o, const auto& in, int64_t n) {
          for (int64_t i = 0; i < n; ++i) o[i] = in[1][i] + in[0][i];
        });
      } else {
        for_each_block<T, 2>(s, e, yp, {xp, yp}, [&](auto* o, const auto& in, int64_t n) {
          for (int64_t i = 0; i < n; ++i) o[i] = a * in[0][i] + b * in[1][i];
        });
      }
    });
  });
}

}  // namespace dp
