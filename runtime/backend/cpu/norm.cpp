// Batch and layer normalisation. Statistics accumulate in double (float32 inputs too) in one
// pass over the data (NOTE [ Shifted moments ]); batch norm splits channels between OpenMP
// threads, layer norm splits rows. Activations (x, y, dy, dx: type T) may be float16/bfloat16
// with the per-feature tensors in float32 (mixed precision): the kernels take the per-feature
// tensors in one type P, the statistics dtype (ComputeOperands).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/compute_operands.h"
#include "runtime/backend/cpu/cpu_dispatch.h"

namespace dp {

using namespace cpu;

namespace {

template <typename T>
double as_double(T v) {
  return static_cast<double>(static_cast<compute_t<T>>(v));
}

// Calls fn(T{}, P{}) for x's dtype T and the statistics type P (float for float16/bfloat16).
template <typename Fn>
void dispatch_norm(DType x_dtype, const char* op, Fn&& fn) {
  dispatch_floating_and_half(x_dtype, op, [&](auto tag) {
    using T = decltype(tag);
    fn(tag, compute_t<T>{});
  });
}

// NOTE [ Shifted moments ]
// Mean and variance from one pass: Σ(x - K) and Σ(x - K)² with K one element of the data.
// Unlike Σx and Σx², this keeps full precision when |mean| >> std, because K lies within a few
// standard deviations of the mean.
struct ShiftedMoments {
  double shift = 0, sum = 0, sum_sq = 0;

  template <typename T>
  void add(const T* x, int64_t n) {
    double s = 0, ss = 0;
    const double k = shift;
#pragma omp simd reduction(+ : s, ss)
    for (int64_t i = 0; i < n; ++i) {
      const double d = as_double(x[i]) - k;
      s += d;
      ss += d * d;
    }
    sum += s;
    sum_sq += ss;
  }
  double mean(double count) const { return shift + sum / count; }
  double biased_variance(double count) const {
    const double m = sum / count;
    return std::max(sum_sq / count - m * m, 0.0);
  }
};

// NOTE [ Batch norm's relu mask, recomputed ]
// The fused forward writes y = relu(v), v = (x − mean)·scale + shift per channel. A backward
// through that relu (BatchNormGradPrologue) masks dy where y is not positive by recomputing v from
// x instead of reading y, which saves relu's own backward pass (read y and dy, write the masked
// gradient). It is the same mask bit for bit because both sides take the coefficients from
// ChannelAffine::of — built from the statistics as saved (rounded to P), not the wider values the
// forward had in hand — and apply them with one fma; and the mask tests v as stored in T (a
// positive v that rounds to zero in float16 gave y = 0). norm.cu does the same on the GPU.
template <typename C>
struct ChannelAffine {
  C mean, scale, shift;
  // Channel c's coefficients from its saved mean and 1/sqrt(var + eps); w, b null: ones, zeros.
  template <typename P>
  static ChannelAffine of(P mean, P invstd, const P* w, const P* b, int64_t c) {
    static_assert(std::is_same_v<C, P>, "the statistics are kept in the compute type");
    return {mean, w ? invstd * w[c] : invstd, b ? b[c] : C(0)};
  }
};

template <typename C>
inline C affine(C x, C mean, C scale, C shift) {
  return std::fma(x - mean, scale, shift);
}

// relu(v) as the forward stored it in T is positive (NOTE [ Batch norm's relu mask, recomputed ]).
template <typename T, typename C>
inline bool relu_passes(C v) {
  return static_cast<C>(static_cast<T>(v)) > C(0);
}

// g where keep, else +0 (the select relu's backward makes), as a bitwise AND: GCC 12 leaves
// `keep ? g : 0` on a compare of another array's values as a branch, which kept the whole
// gradient-sum loop scalar (5x slower in a micro-benchmark); the AND vectorises.
template <typename C>
inline C keep_or_zero(bool keep, C g) {
  using Bits = std::conditional_t<sizeof(C) == 4, uint32_t, uint64_t>;
  static_assert(sizeof(Bits) == sizeof(C));
  Bits bits;
  std::memcpy(&bits, &g, sizeof bits);
  bits &= Bits(0) - static_cast<Bits>(keep);
  std::memcpy(&g, &bits, sizeof bits);
  return g;
}

// dy as the backward's sums and dx read it: with kRelu, masked where relu(bn(x)) was not positive.
template <bool kRelu, typename T, typename C>
inline C masked_grad(T dy, T x, C mean, C scale, C shift) {
  if constexpr (kRelu)
    return keep_or_zero(relu_passes<T>(affine(static_cast<C>(x), mean, scale, shift)), static_cast<C>(dy));
  else
    return static_cast<C>(dy);
}

// Per-channel coefficients of a block of channels, as arrays for the vector loops.
template <typename C>
struct BlockAffine {
  std::vector<C> mean, scale, shift;
  explicit BlockAffine(int64_t n) : mean(n), scale(n), shift(n) {}
  void set(int64_t i, const ChannelAffine<C>& f) {
    mean[i] = f.mean;
    scale[i] = f.scale;
    shift[i] = f.shift;
  }
  ChannelAffine<C> at(int64_t i) const { return {mean[i], scale[i], shift[i]}; }
};

// Σ dy and Σ dy·(x - mean) over a contiguous run, added to the two accumulators; with kRelu, dy
// masked by the run's channel coefficients f.
template <bool kRelu, typename T, typename C>
void add_grad_sums(const T* dy, const T* x, double mean, const ChannelAffine<C>& f, int64_t n, double& sum_dy,
                   double& sum_dy_xc) {
  double s = 0, sx = 0;
  const C fm = f.mean, fs = f.scale, fh = f.shift;
#pragma omp simd reduction(+ : s, sx)
  for (int64_t i = 0; i < n; ++i) {
    const double g = masked_grad<kRelu>(dy[i], x[i], fm, fs, fh);  // exact in double
    s += g;
    sx += g * (as_double(x[i]) - mean);
  }
  sum_dy += s;
  sum_dy_xc += sx;
}

// out = (in - mean) * scale + shift (shift optional) over a contiguous run, in C = compute_t<T>.
// Subtracting the mean first keeps float32 accurate when |mean| >> std.
template <typename T, typename C = compute_t<T>>
void affine_run(const T* in, T* out, int64_t n, C mean, C scale, C shift) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>((static_cast<C>(in[i]) - mean) * scale + shift);
}

// Batch norm's fused epilogue (BatchNormEpilogue) on a value in C: + residual, then relu (NaN → 0,
// as the relu kernels). Compile-time flags: with neither, the value passes through unchanged.
template <bool kResidual, bool kRelu, typename C, typename T>
inline C apply_epilogue(C v, const T* residual, int64_t i) {
  if constexpr (kResidual) v += static_cast<C>(residual[i]);
  if constexpr (kRelu) v = v > C(0) ? v : C(0);
  return v;
}

// Calls fn(std::bool_constant<flag>{}).
template <typename Fn>
void dispatch_flag(bool flag, Fn&& fn) {
  if (flag) fn(std::true_type{});
  else fn(std::false_type{});
}

// Calls fn(std::bool_constant<residual>{}, std::bool_constant<relu>{}).
template <typename Fn>
void dispatch_epilogue(bool residual, bool relu, Fn&& fn) {
  dispatch_flag(residual, [&](auto r) { dispatch_flag(relu, [&](auto u) { fn(r, u); }); });
}

// x viewed as [N, C, S]: the S-element run of sample n in channel c. A channels-last x
// [N, C, H, W] is [N·H·W, C, 1] (NOTE [ Channels-last ]): runs of one element, rows of C.
struct ChannelLayout {
  int64_t N, C, S;
  ChannelLayout(const char* op, std::initializer_list<const Tensor*> activations) {
    const Tensor& x = **activations.begin();
    const bool channels_last = x.dim() == 4 && common_memory_format(op, activations) == MemoryFormat::ChannelsLast;
    C = x.size(1);
    const int64_t per_channel = C > 0 ? x.numel() / C : 0;
    N = channels_last ? per_channel : x.size(0);
    S = channels_last ? 1 : (N > 0 ? per_channel / N : 0);
  }
  int64_t run(int64_t n, int64_t c) const { return (n * C + c) * S; }
  double count() const { return static_cast<double>(N * S); }
};

// NOTE [ Batch norm memory order ]
// Each OpenMP thread owns a block of channels [begin, end) and walks its runs sample by sample,
// so it streams contiguous blocks of (end - begin)·S elements. Walking channel by channel
// instead jumps C·S elements between runs: with ResNet's 4x4 and 8x8 maps (64-256 byte runs)
// every run starts on a new page, and the normalisation pass was 2-3x slower.
struct ChannelBlock {
  int64_t begin, end;
  // The calling thread's block inside an OpenMP parallel region.
  static ChannelBlock of_this_thread(int64_t C) {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    return {C * t / nt, C * (t + 1) / nt};
  }
  int64_t size() const { return end - begin; }
  // Calls fn(c, offset of run (n, c)) for every run of the block, in memory order.
  template <typename Fn>
  void for_each_run(const ChannelLayout& L, Fn&& fn) const {
    for (int64_t n = 0; n < L.N; ++n)
      for (int64_t c = begin; c < end; ++c) fn(c, L.run(n, c));
  }
  // S = 1 (channels-last, or [N, C]): the block as a matrix of L.N rows and size() channels, row r
  // of channel begin + c0 at offset row_at(L, r, c0). Calls fn(r0, r1, c0, width) for parts of
  // it — rows [r0, r1) of channels [c0, c0 + width) — that cover it, each element once, each
  // channel's rows in order (NOTE [ Channels-last batch norm in tiles ]). Narrow blocks come in
  // tiles of kTileRows rows by kLanes channels, the width a std::integral_constant (fn keeps that
  // many channels' values in locals across the tile's rows), and a narrower last chunk whose width
  // is a count; a wide block comes whole, all its rows at once, its width a count.
  static constexpr int64_t kLanes = 16, kTileRows = 64, kMaxTiledChannels = 256;
  template <typename Fn>
  void for_each_tile(const ChannelLayout& L, Fn&& fn) const {
    const int64_t nb = size();
    if (nb > kMaxTiledChannels) return fn(int64_t(0), L.N, int64_t(0), nb);
    for (int64_t r0 = 0; r0 < L.N; r0 += kTileRows) {
      const int64_t r1 = std::min(L.N, r0 + kTileRows);
      int64_t c0 = 0;
      for (; c0 + kLanes <= nb; c0 += kLanes) fn(r0, r1, c0, std::integral_constant<int64_t, kLanes>{});
      if (c0 < nb) fn(r0, r1, c0, nb - c0);
    }
  }
  int64_t row_at(const ChannelLayout& L, int64_t r, int64_t c0) const { return r * L.C + begin + c0; }
};

// NOTE [ Channels-last batch norm in tiles ]
// Channels-last, a channel's values are one column of an [N·H·W, C] matrix, and each thread walks
// its block of columns. Row by row, with a vector loop across each row's channels, every channel's
// accumulators (or coefficients) are loaded and stored once per element: when the block is narrow
// (ResNet's 64-256 channels over two threads), those loads and stores chain from one row to the
// next and the loop waits on them — three times as slow as the NCHW kernels, whose accumulators
// live in registers (norm_bench, ResNet-50 b8: 38 ms against 12 over its batch norms). So a narrow
// block is walked in tiles of 64 rows by 16 channels: a chunk's accumulators and coefficients sit
// in locals (registers) across the tile's rows, and the tile's other chunks find its rows in cache
// (norm_bench: 38 → 26 ms). A wide block keeps the row walk: its rows hold enough independent
// channels to hide the chain, and tiles there cost more than they save (columns 4-8 KB apart). Each
// channel still adds its rows one after another in row order, so every sum is the same additions
// in the same order whichever walk a block takes, bit for bit.

// Whether fn's width is a compile-time chunk (kept in locals) rather than a count. The chunk's
// locals are sized by decltype(width)::value and filled by plain loops: sized by the parameter
// and filled with std::copy_n(..., width, ...), the ASan build (GCC 12, detect_stack_use_after_return)
// read a wild address in the gradient sums' copy.
template <typename W>
constexpr bool is_chunk_width = !std::is_same_v<W, int64_t>;

// Σ(x − K) and Σ(x − K)² per channel of a block from its rows (S = 1): one vector loop across
// the channels of each row instead of a call per element.
template <typename T>
void add_moments_by_rows(const ChannelLayout& L, const ChannelBlock& block, const T* xp,
                         std::vector<ShiftedMoments>& moments) {
  const int64_t nb = block.size();
  std::vector<double> shift(nb), sum(nb, 0.0), sum_sq(nb, 0.0);
  for (int64_t i = 0; i < nb; ++i) shift[i] = moments[i].shift;
  // Rows [r0, r1) of n channels from c0, k the shifts, into s and ss.
  const auto add_rows = [&](int64_t r0, int64_t r1, int64_t c0, auto n, const double* k, double* s, double* ss) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* row = xp + block.row_at(L, r, c0);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const double d = as_double(row[i]) - k[i];
        s[i] += d;
        ss[i] += d * d;
      }
    }
  };
  block.for_each_tile(L, [&](int64_t r0, int64_t r1, int64_t c0, auto width) {
    if constexpr (is_chunk_width<decltype(width)>) {
      constexpr int64_t kW = decltype(width)::value;
      double k[kW], s[kW], ss[kW];
      for (int64_t i = 0; i < kW; ++i) {
        k[i] = shift[c0 + i];
        s[i] = sum[c0 + i];
        ss[i] = sum_sq[c0 + i];
      }
      add_rows(r0, r1, c0, width, k, s, ss);
      for (int64_t i = 0; i < kW; ++i) {
        sum[c0 + i] = s[i];
        sum_sq[c0 + i] = ss[i];
      }
    } else {
      add_rows(r0, r1, c0, width, shift.data() + c0, sum.data() + c0, sum_sq.data() + c0);
    }
  });
  for (int64_t i = 0; i < nb; ++i) {
    moments[i].sum += sum[i];
    moments[i].sum_sq += sum_sq[i];
  }
}

// Σ dy and Σ dy·(x − mean) per channel of a block from its rows (S = 1); with kRelu, dy masked
// by the block's coefficients f.
template <bool kRelu, typename T, typename P, typename C>
void add_grad_sums_by_rows(const ChannelLayout& L, const ChannelBlock& block, const T* dyp, const T* xp,
                           const P* mean, const BlockAffine<C>& f, double* sum_dy, double* sum_dy_xc) {
  const int64_t nb = block.size();
  std::vector<double> mean_d(nb);
  for (int64_t i = 0; i < nb; ++i) mean_d[i] = static_cast<double>(mean[block.begin + i]);
  const C *f_mean = f.mean.data(), *f_scale = f.scale.data(), *f_shift = f.shift.data();
  // Rows [r0, r1) of n channels from c0: m the means, fm/fs/fh relu's coefficients, into s and sx.
  const auto add_rows = [&](int64_t r0, int64_t r1, int64_t c0, auto n, const double* m, const C* fm, const C* fs,
                            const C* fh, double* s, double* sx) {
    for (int64_t r = r0; r < r1; ++r) {
      const T* g = dyp + block.row_at(L, r, c0);
      const T* xr = xp + block.row_at(L, r, c0);
#pragma omp simd
      for (int64_t i = 0; i < n; ++i) {
        const double gi = masked_grad<kRelu>(g[i], xr[i], fm[i], fs[i], fh[i]);
        s[i] += gi;
        sx[i] += gi * (as_double(xr[i]) - m[i]);
      }
    }
  };
  block.for_each_tile(L, [&](int64_t r0, int64_t r1, int64_t c0, auto width) {
    if constexpr (is_chunk_width<decltype(width)>) {
      constexpr int64_t kW = decltype(width)::value;
      double m[kW], s[kW], sx[kW];
      C fm[kW], fs[kW], fh[kW];
      for (int64_t i = 0; i < kW; ++i) {
        m[i] = mean_d[c0 + i];
        s[i] = sum_dy[c0 + i];
        sx[i] = sum_dy_xc[c0 + i];
        fm[i] = f_mean[c0 + i];
        fs[i] = f_scale[c0 + i];
        fh[i] = f_shift[c0 + i];
      }
      add_rows(r0, r1, c0, width, m, fm, fs, fh, s, sx);
      for (int64_t i = 0; i < kW; ++i) {
        sum_dy[c0 + i] = s[i];
        sum_dy_xc[c0 + i] = sx[i];
      }
    } else {
      add_rows(r0, r1, c0, width, mean_d.data() + c0, f_mean + c0, f_scale + c0, f_shift + c0, sum_dy + c0,
               sum_dy_xc + c0);
    }
  });
}

template <typename T>
const T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}
template <typename T>
T* mutable_data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

}  // namespace

// x, y, epilogue.residual [N, C, *] contiguous (or all channels-last); weight, bias, running_mean,
// running_var, save_mean, save_invstd [C]. Two passes in memory order (NOTE [ Batch norm memory
// order ]): statistics, then y with the epilogue.
void CpuBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                    const Tensor& running_mean, const Tensor& running_var,
                                    const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd,
                                    bool training, double momentum, double eps, const BatchNormEpilogue& epilogue) {
  DP_ASSERT(x.dim() >= 2);
  DP_ASSERT(training ? (save_mean.defined() && save_invstd.defined())
                     : (running_mean.defined() && running_var.defined()));
  const Tensor& residual = epilogue.residual;
  DP_CHECK(!residual.defined() || (residual.shape() == x.shape() && residual.dtype() == x.dtype() &&
                                   residual.device() == x.device()),
           "batch_norm_forward: residual ", residual.str(), " must match the input ", x.str());
  const ChannelLayout L = residual.defined() ? ChannelLayout("batch_norm_forward", {&x, &y, &residual})
                                             : ChannelLayout("batch_norm_forward", {&x, &y});
  const double count = L.count();
  // Running variance uses the unbiased batch variance, as PyTorch (the output uses the biased one).
  const double unbias = count > 1 ? count / (count - 1) : 1.0;
  const int threads = x.numel() >= kParallelGrain ? num_threads_ : 1;
  ComputeOperands f(compute_dtype(x.dtype()), x.device());
  const Tensor weight_p = f.in(weight), bias_p = f.in(bias);
  const Tensor running_mean_p = f.out(running_mean, true), running_var_p = f.out(running_var, true);
  const Tensor save_mean_p = f.out(save_mean, false), save_invstd_p = f.out(save_invstd, false);
  dispatch_norm(x.dtype(), "batch_norm_forward", [&](auto tag, auto ptag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T* rp = data_or_null<T>(residual);
    const P* w = data_or_null<P>(weight_p);
    const P* b = data_or_null<P>(bias_p);
    P* rm = mutable_data_or_null<P>(running_mean_p);
    P* rv = mutable_data_or_null<P>(running_var_p);
    P* sm = mutable_data_or_null<P>(save_mean_p);
    P* si = mutable_data_or_null<P>(save_invstd_p);
#pragma omp parallel num_threads(threads)
    {
      const ChannelBlock block = ChannelBlock::of_this_thread(L.C);
      std::vector<ShiftedMoments> moments(training ? block.size() : 0);
      if (training) {
        for (int64_t c = block.begin; c < block.end; ++c) moments[c - block.begin].shift = as_double(xp[L.run(0, c)]);
        if (L.S == 1) add_moments_by_rows(L, block, xp, moments);
        else block.for_each_run(L, [&](int64_t c, int64_t off) { moments[c - block.begin].add(xp + off, L.S); });
      }
      // Per channel: y = epilogue((x - mean)·scale + shift), the coefficients from the statistics
      // as saved (NOTE [ Batch norm's relu mask, recomputed ]).
      BlockAffine<C> f(block.size());
      for (int64_t c = block.begin; c < block.end; ++c) {
        P mean, invstd;
        if (training) {
          const ShiftedMoments& m = moments[c - block.begin];
          const double mean_d = m.mean(count);
          const double var = m.biased_variance(count);
          mean = sm[c] = static_cast<P>(mean_d);
          invstd = si[c] = static_cast<P>(1.0 / std::sqrt(var + eps));
          if (rm) rm[c] = static_cast<P>((1 - momentum) * rm[c] + momentum * mean_d);
          if (rv) rv[c] = static_cast<P>((1 - momentum) * rv[c] + momentum * var * unbias);
        } else {
          mean = rm[c];
          invstd = static_cast<P>(1.0 / std::sqrt(static_cast<double>(rv[c]) + eps));
        }
        f.set(c - block.begin, ChannelAffine<C>::of(mean, invstd, w, b, c));
      }
      dispatch_epilogue(rp != nullptr, epilogue.relu, [&](auto has_residual, auto relu) {
        constexpr bool kResidual = decltype(has_residual)::value, kRelu = decltype(relu)::value;
        if (L.S == 1) {
          // Rows [r0, r1) of n channels from c0 with the coefficients mc, sc, hc.
          const auto apply_rows = [&](int64_t r0, int64_t r1, int64_t c0, auto n, const C* mc, const C* sc,
                                      const C* hc) {
            for (int64_t r = r0; r < r1; ++r) {
              const int64_t off = block.row_at(L, r, c0);
              const T* in = xp + off;
              const T* res = kResidual ? rp + off : nullptr;
              T* out = yp + off;
#pragma omp simd
              for (int64_t i = 0; i < n; ++i)
                out[i] = static_cast<T>(
                    apply_epilogue<kResidual, kRelu>(affine(static_cast<C>(in[i]), mc[i], sc[i], hc[i]), res, i));
            }
          };
          block.for_each_tile(L, [&](int64_t r0, int64_t r1, int64_t c0, auto width) {
            if constexpr (is_chunk_width<decltype(width)>) {
              constexpr int64_t kW = decltype(width)::value;
              C mc[kW], sc[kW], hc[kW];
              for (int64_t i = 0; i < kW; ++i) {
                mc[i] = f.mean[c0 + i];
                sc[i] = f.scale[c0 + i];
                hc[i] = f.shift[c0 + i];
              }
              apply_rows(r0, r1, c0, width, mc, sc, hc);
            } else {
              apply_rows(r0, r1, c0, width, f.mean.data() + c0, f.scale.data() + c0, f.shift.data() + c0);
            }
          });
        } else {
          block.for_each_run(L, [&](int64_t c, int64_t off) {
            const int64_t j = c - block.begin;
            const C mean = f.mean[j], scale = f.scale[j], shift = f.shift[j];
            const T* in = xp + off;
            const T* res = kResidual ? rp + off : nullptr;
            T* out = yp + off;
#pragma omp simd
            for (int64_t i = 0; i < L.S; ++i)
              out[i] = static_cast<T>(
                  apply_epilogue<kResidual, kRelu>(affine(static_cast<C>(in[i]), mean, scale, shift), res, i));
          });
        }
      });
    }
  });
  f.finish();
}

// dy, x, dx [N, C, *] contiguous; weight, save_mean, save_invstd, dweight, dbias, prologue.bias [C].
// dx, dweight and dbias are each optional (undefined: not computed); weight optional (ones).
// Training: dx = w·invstd·(dy - mean(dy) - x̂·mean(dy·x̂)), x̂ = (x - mean)·invstd.
// Eval: the statistics are constants, so dx = w·invstd·dy.
// With the relu prologue, dy is masked where relu(bn(x)) was not positive, in both passes (NOTE
// [ Batch norm's relu mask, recomputed ]).
// Two passes in memory order (NOTE [ Batch norm memory order ]): channel sums, then dx.
void CpuBackend::batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dx,
                                     const Tensor& dweight, const Tensor& dbias, bool training,
                                     const BatchNormGradPrologue& prologue) {
  DP_ASSERT(x.dim() >= 2);
  const ChannelLayout L = dx.defined() ? ChannelLayout("batch_norm_backward", {&x, &dy, &dx})
                                       : ChannelLayout("batch_norm_backward", {&x, &dy});
  const double count = L.count();
  const bool need_sums = batch_norm_takes_sums(training, dx, dweight, dbias);
  check_grad_prologue("batch_norm_backward", prologue, dy, training, need_sums);
  if (prologue.relu_output.defined()) {
    // The CPU masks in a pass of its own (its caches make that pass cheap; the fold is for the
    // GPU's memory-bound step), over the three dense tensors laid out alike, as flat runs.
    const auto flat = [](const Tensor& t) { return t.detached_as_strided({t.numel()}, {1}); };
    const Tensor y = flat(prologue.relu_output);
    unary_backward(UnaryOp::Relu, y, y, flat(dy), flat(prologue.masked_dy));
    batch_norm_backward(prologue.masked_dy, x, weight, save_mean, save_invstd, dx, dweight, dbias, training, {});
    return;
  }
  const int threads = x.numel() >= kParallelGrain ? num_threads_ : 1;
  ComputeOperands f(compute_dtype(x.dtype()), x.device());
  const Tensor weight_p = f.in(weight), save_mean_p = f.in(save_mean), save_invstd_p = f.in(save_invstd);
  const Tensor bias_p = f.in(prologue.bias);
  const Tensor dweight_p = f.out(dweight, false), dbias_p = f.out(dbias, false);
  dispatch_norm(x.dtype(), "batch_norm_backward", [&](auto tag, auto ptag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using C = compute_t<T>;
    const T* dyp = dy.data<T>();
    const T* xp = x.data<T>();
    const P* w = data_or_null<P>(weight_p);
    const P* b = data_or_null<P>(bias_p);
    const P* sm = save_mean_p.data<P>();
    const P* si = save_invstd_p.data<P>();
    T* dxp = mutable_data_or_null<T>(dx);
    P* dw = mutable_data_or_null<P>(dweight_p);
    P* db = mutable_data_or_null<P>(dbias_p);
    dispatch_flag(prologue.relu, [&](auto relu) {
      constexpr bool kRelu = decltype(relu)::value;
#pragma omp parallel num_threads(threads)
      {
        const ChannelBlock block = ChannelBlock::of_this_thread(L.C);
        // The forward's coefficients: its mean for dx, all three for relu's mask.
        BlockAffine<C> fwd(block.size());
        for (int64_t c = block.begin; c < block.end; ++c)
          fwd.set(c - block.begin, ChannelAffine<C>::of(sm[c], si[c], w, b, c));
        std::vector<double> sum_dy(block.size(), 0.0), sum_dy_xc(block.size(), 0.0);
        if (need_sums && L.S == 1) {
          add_grad_sums_by_rows<kRelu>(L, block, dyp, xp, sm, fwd, sum_dy.data(), sum_dy_xc.data());
        } else if (need_sums) {
          block.for_each_run(L, [&](int64_t c, int64_t off) {
            const int64_t i = c - block.begin;
            add_grad_sums<kRelu>(dyp + off, xp + off, static_cast<double>(sm[c]), fwd.at(i), L.S, sum_dy[i],
                                 sum_dy_xc[i]);
          });
        }
        // Per channel: dx = a·(dy - mean_dy - (x - mean)·k); in eval mean_dy = k = 0.
        std::vector<C> a_c(dxp ? block.size() : 0), mean_dy_c(a_c.size()), k_c(a_c.size());
        for (int64_t c = block.begin; c < block.end; ++c) {
          const int64_t i = c - block.begin;
          const double invstd = si[c];
          if (dw) dw[c] = static_cast<P>(sum_dy_xc[i] * invstd);
          if (db) db[c] = static_cast<P>(sum_dy[i]);
          if (!dxp) continue;
          a_c[i] = static_cast<C>((w ? static_cast<double>(w[c]) : 1.0) * invstd);
          mean_dy_c[i] = training ? static_cast<C>(sum_dy[i] / count) : C(0);
          k_c[i] = training ? static_cast<C>(sum_dy_xc[i] * invstd * invstd / count) : C(0);
        }
        if (dxp && L.S == 1) {
          // Rows [r0, r1) of n channels from c0; cf: a, mean_dy, k, then the forward's mean, scale, shift.
          const auto dx_rows = [&](int64_t r0, int64_t r1, int64_t c0, auto n, const C* const* cf) {
            const C *ac = cf[0], *mdc = cf[1], *kc = cf[2], *fm = cf[3], *fs = cf[4], *fh = cf[5];
            for (int64_t r = r0; r < r1; ++r) {
              const int64_t off = block.row_at(L, r, c0);
              const T* g = dyp + off;
              const T* xr = xp + off;
              T* out = dxp + off;
#pragma omp simd
              for (int64_t i = 0; i < n; ++i) {
                const C gi = masked_grad<kRelu>(g[i], xr[i], fm[i], fs[i], fh[i]);
                out[i] = static_cast<T>(ac[i] * (gi - mdc[i] - (static_cast<C>(xr[i]) - fm[i]) * kc[i]));
              }
            }
          };
          const C* coefficients[6] = {a_c.data(), mean_dy_c.data(), k_c.data(),
                                      fwd.mean.data(), fwd.scale.data(), fwd.shift.data()};
          block.for_each_tile(L, [&](int64_t r0, int64_t r1, int64_t c0, auto width) {
            if constexpr (is_chunk_width<decltype(width)>) {
              constexpr int64_t kW = decltype(width)::value;
              C local[6][kW];
              const C* cf[6];
              for (int j = 0; j < 6; ++j) {
                for (int64_t i = 0; i < kW; ++i) local[j][i] = coefficients[j][c0 + i];
                cf[j] = local[j];
              }
              dx_rows(r0, r1, c0, width, cf);
            } else {
              const C* cf[6];
              for (int j = 0; j < 6; ++j) cf[j] = coefficients[j] + c0;
              dx_rows(r0, r1, c0, width, cf);
            }
          });
        } else if (dxp) {
          block.for_each_run(L, [&](int64_t c, int64_t off) {
            const int64_t i = c - block.begin;
            const T* g = dyp + off;
            const T* xr = xp + off;
            T* out = dxp + off;
            const C a = a_c[i], mean_dy = mean_dy_c[i], k = k_c[i];
            const ChannelAffine<C> fi = fwd.at(i);
            const C fm = fi.mean, fs = fi.scale, fh = fi.shift;
#pragma omp simd
            for (int64_t s = 0; s < L.S; ++s) {
              const C gs = masked_grad<kRelu>(g[s], xr[s], fm, fs, fh);
              out[s] = static_cast<T>(a * (gs - mean_dy - (static_cast<C>(xr[s]) - fm) * k));
            }
          });
        }
      }
    });
  });
  f.finish();
}

// x, y [M, N] contiguous, normalised over N; weight, bias [N] optional; save_mean, save_rstd [M].
void CpuBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                                    const Tensor& save_mean, const Tensor& save_rstd, double eps) {
  DP_ASSERT(x.is_contiguous() && y.is_contiguous() && x.dim() == 2);
  const int64_t M = x.size(0), N = x.size(1);
  const int threads = x.numel() >= kParallelGrain ? num_threads_ : 1;
  ComputeOperands f(compute_dtype(x.dtype()), x.device());
  const Tensor weight_p = f.in(weight), bias_p = f.in(bias);
  const Tensor save_mean_p = f.out(save_mean, false), save_rstd_p = f.out(save_rstd, false);
  dispatch_norm(x.dtype(), "layer_norm_forward", [&](auto tag, auto ptag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using C = compute_t<T>;
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const P* w = data_or_null<P>(weight_p);
    const P* b = data_or_null<P>(bias_p);
    P* sm = save_mean_p.data<P>();
    P* sr = save_rstd_p.data<P>();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      const T* xr = xp + m * N;
      T* yr = yp + m * N;
      ShiftedMoments mo{as_double(xr[0])};
      mo.add(xr, N);
      const double mean = mo.mean(static_cast<double>(N));
      const double rstd = 1.0 / std::sqrt(mo.biased_variance(static_cast<double>(N)) + eps);
      sm[m] = static_cast<P>(mean);
      sr[m] = static_cast<P>(rstd);
      const C tmean = static_cast<C>(mean), trstd = static_cast<C>(rstd);
      if (w || b) {
#pragma omp simd
        for (int64_t j = 0; j < N; ++j)
          yr[j] = static_cast<T>((static_cast<C>(xr[j]) - tmean) * trstd * (w ? static_cast<C>(w[j]) : C(1)) +
                                 (b ? static_cast<C>(b[j]) : C(0)));
      } else {
        affine_run(xr, yr, N, tmean, trstd, C(0));
      }
    }
  });
  f.finish();
}

// dy, x, dx [M, N] contiguous; weight, dweight, dbias [N]; save_mean, save_rstd [M].
// dx, dweight and dbias are each optional; weight optional (ones). With g = dy·w and
// x̂ = (x - mean)·rstd: dx = rstd·(g - mean(g) - x̂·mean(g·x̂)); dweight = Σ_m dy·x̂; dbias = Σ_m dy.
void CpuBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                     const Tensor& save_mean, const Tensor& save_rstd, const Tensor& dx,
                                     const Tensor& dweight, const Tensor& dbias) {
  DP_ASSERT(dy.is_contiguous() && x.is_contiguous() && x.dim() == 2);
  DP_ASSERT(!dx.defined() || dx.is_contiguous());
  const int64_t M = x.size(0), N = x.size(1);
  const int threads = x.numel() >= kParallelGrain ? num_threads_ : 1;
  ComputeOperands f(compute_dtype(x.dtype()), x.device());
  const Tensor weight_p = f.in(weight), save_mean_p = f.in(save_mean), save_rstd_p = f.in(save_rstd);
  const Tensor dweight_p = f.out(dweight, false), dbias_p = f.out(dbias, false);
  dispatch_norm(x.dtype(), "layer_norm_backward", [&](auto tag, auto ptag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using C = compute_t<T>;
    const T* dyp = dy.data<T>();
    const T* xp = x.data<T>();
    const P* w = data_or_null<P>(weight_p);
    const P* sm = save_mean_p.data<P>();
    const P* sr = save_rstd_p.data<P>();
    T* dxp = mutable_data_or_null<T>(dx);
    P* dw = mutable_data_or_null<P>(dweight_p);
    P* db = mutable_data_or_null<P>(dbias_p);

    if (dxp) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (int64_t m = 0; m < M; ++m) {
        const T* g = dyp + m * N;
        const T* xr = xp + m * N;
        T* out = dxp + m * N;
        const double mean = sm[m], rstd = sr[m];
        double sum_g = 0, sum_g_xc = 0;  // Σ g and Σ g·(x - mean), g = dy·w
#pragma omp simd reduction(+ : sum_g, sum_g_xc)
        for (int64_t j = 0; j < N; ++j) {
          const double gj = as_double(g[j]) * (w ? static_cast<double>(w[j]) : 1.0);
          sum_g += gj;
          sum_g_xc += gj * (as_double(xr[j]) - mean);
        }
        const C trstd = static_cast<C>(rstd), tmean = static_cast<C>(mean);
        const C mean_g = static_cast<C>(sum_g / N);
        const C k = static_cast<C>(sum_g_xc * rstd * rstd / N);
#pragma omp simd
        for (int64_t j = 0; j < N; ++j)
          out[j] = static_cast<T>(trstd * (static_cast<C>(g[j]) * (w ? static_cast<C>(w[j]) : C(1)) - mean_g -
                                           (static_cast<C>(xr[j]) - tmean) * k));
      }
    }

    if (dw || db) {
      // Column sums over rows: each thread owns a block of columns (no races, no reduction
      // step) and walks the rows in memory order with double accumulators.
      const int col_threads = static_cast<int>(std::min<int64_t>(threads, std::max<int64_t>(N / 16, 1)));
#pragma omp parallel num_threads(col_threads)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t j0 = N * t / nt, j1 = N * (t + 1) / nt, width = j1 - j0;
        std::vector<double> acc_w(dw ? width : 0, 0.0), acc_b(db ? width : 0, 0.0);
        for (int64_t m = 0; m < M; ++m) {
          const T* g = dyp + m * N + j0;
          const T* xr = xp + m * N + j0;
          const double mean = sm[m], rstd = sr[m];
          if (dw) {
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) acc_w[j] += as_double(g[j]) * ((as_double(xr[j]) - mean) * rstd);
          }
          if (db) {
#pragma omp simd
            for (int64_t j = 0; j < width; ++j) acc_b[j] += as_double(g[j]);
          }
        }
        for (int64_t j = 0; j < width; ++j) {
          if (dw) dw[j0 + j] = static_cast<P>(acc_w[j]);
          if (db) db[j0 + j] = static_cast<P>(acc_b[j]);
        }
      }
    }
  });
  f.finish();
}

}  // namespace dp
