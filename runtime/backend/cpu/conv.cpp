// 2-D convolution on the CPU as im2col + GEMM, where oneDNN's convolutions do not take the call
// (NOTE [ CPU convolution on oneDNN ], dnnl_conv.h).
//
// NOTE [ Convolution as chunked GEMM ]
// Images are processed in chunks: a chunk's column matrices sit side by side, [Cg*KH*KW,
// chunk*OH*OW], so one GEMM covers the chunk. Small feature maps (ResNet's 4×4, 2×2, 1×1) thus
// still give BLAS a wide operand instead of a matrix-vector product per image, while a chunk's
// scratch (columns plus one output-sized buffer) stays within ~1 MB so it lives in L2. Chunks
// are spread over the OpenMP threads; each runs single-threaded BLAS on its own chunks. With a
// single chunk there is no parallel region and OpenBLAS threads the GEMM itself.
// Outputs of a chunk are channel-major [Kg, chunk*OH*OW] and are transposed into NCHW (and dy
// the other way) — a chunk of one image needs neither, nor any im2col when the conv is 1×1,
// stride 1, unpadded (the image already is its column matrix).
// Kernel taps that only ever read padding (a 3×3 conv on a 1×1 map uses only its centre) are
// cropped away: the GEMM runs on the live taps' weights, packed per call, and their gradient
// is scattered back with zeros elsewhere.
// Scratch buffers are per thread and reused across calls. The weight gradient is accumulated
// per thread (thread 0 directly into dw) and the partial sums are added at the end.
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "runtime/backend/cpu/bf16_gemm.h"
#include "runtime/backend/cpu/compute_operands.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/dnnl_conv.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/backend/cpu/im2col.h"

namespace dp {

using namespace cpu;

namespace {

constexpr int64_t kChunkScratchBytes = int64_t(1) << 20;  // about one core's L2
constexpr int64_t kMinGemmColumns = 128;  // chunk images until the GEMM is at least this wide

// How one convolution is split into per-group, per-chunk GEMMs.
struct ConvPlan {
  int64_t N, C, K, groups, Cg, Kg;
  int64_t in_plane;  // H * W
  int64_t KH, KW;  // the full kernel
  TapRange live_h, live_w;  // its taps that see the image
  bool cropped;  // live taps are fewer than the kernel's: GEMMs use the cropped kernel
  Im2colGeometry geo;  // one group of one image, cropped kernel
  int64_t rows, spatial;  // Cg*KH'*KW' (cropped), OH*OW
  int64_t chunk, chunks;  // images per chunk, number of chunks
  int threads;
  bool direct;  // 1×1, stride 1, no padding: the input is the column matrix

  // x [N, C, H, W], w [K, C/g, KH, KW], y [N, K, OH, OW]
  ConvPlan(const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p, int max_threads)
      : N(x.size(0)), C(x.size(1)), K(w.size(0)), groups(p.groups), Cg(C / p.groups), Kg(K / p.groups),
        in_plane(x.size(2) * x.size(3)), KH(w.size(2)), KW(w.size(3)),
        live_h(live_taps(x.size(2), y.size(2), KH, p.stride_h, p.pad_h, p.dilation_h)),
        live_w(live_taps(x.size(3), y.size(3), KW, p.stride_w, p.pad_w, p.dilation_w)) {
    cropped = live_h.hi > live_h.lo && live_w.hi > live_w.lo && (live_h.hi - live_h.lo < KH || live_w.hi - live_w.lo < KW);
    if (!cropped) live_h = {0, KH}, live_w = {0, KW};
    Conv2dParams q = p;  // the cropped kernel starts live.lo taps later: less padding
    q.pad_h -= live_h.lo * p.dilation_h;
    q.pad_w -= live_w.lo * p.dilation_w;
    geo = {Cg, x.size(2), x.size(3), live_h.hi - live_h.lo, live_w.hi - live_w.lo, y.size(2), y.size(3), q};
    rows = geo.rows();
    spatial = geo.columns();
    direct = geo.KH == 1 && geo.KW == 1 && q.stride_h == 1 && q.stride_w == 1 && q.pad_h == 0 && q.pad_w == 0;
    const int64_t image_bytes = (rows + Kg) * spatial * static_cast<int64_t>(x.element_size());
    const int64_t per_thread = (N + max_threads - 1) / max_threads;
    chunk = std::min({(kMinGemmColumns + spatial - 1) / spatial, std::max<int64_t>(1, kChunkScratchBytes / image_bytes),
                      per_thread});
    chunk = std::max<int64_t>(chunk, 1);
    chunks = (N + chunk - 1) / chunk;
    threads = static_cast<int>(std::clamp<int64_t>(chunks, 1, max_threads));
  }

  bool needs_columns() const { return !(direct && chunk == 1); }
  int64_t images_in(int64_t c) const { return std::min(chunk, N - c * chunk); }
};

// Runs fn(thread, first_image, images, first_of_thread) for every chunk; each thread takes a
// contiguous range of chunks.
template <typename Fn>
void for_each_chunk(const ConvPlan& plan, Fn&& fn) {
  if (plan.threads == 1) {  // no region at all: BLAS's own region would be nested (see gemm.cpp)
    for (int64_t c = 0; c < plan.chunks; ++c) fn(0, c * plan.chunk, plan.images_in(c), c == 0);
    return;
  }
#pragma omp parallel num_threads(plan.threads)
  {
    const int t = omp_get_thread_num(), team = omp_get_num_threads();
    const int64_t begin = plan.chunks * t / team, end = plan.chunks * (t + 1) / team;
    for (int64_t c = begin; c < end; ++c) fn(t, c * plan.chunk, plan.images_in(c), c == begin);
  }
}

// Row-major C = op(A)·op(B) + beta·C with A, B in T and C in the accumulation type: float32 for
// bfloat16 (oneDNN, NOTE [ CPU bfloat16 GEMM ]), else T itself (BLAS). `threads` is the team
// for a GEMM called outside a parallel region (BLAS decides for itself).
template <typename T>
void conv_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb,
               compute_t<T> beta, compute_t<T>* C, int64_t ldc, int threads) {
  if constexpr (std::is_same_v<T, Eigen::bfloat16>) {
    if (M == 0 || N == 0) return;
    if (K == 0) {  // no products: C = beta·C
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
      return;
    }
    Bf16GemmArgs g;
    g.ta = ta, g.tb = tb, g.M = M, g.N = N, g.K = K, g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.beta = beta, g.ldc = ldc;
    bf16_gemm(g, C, threads);
  } else {
    const auto a = ta ? CblasTrans : CblasNoTrans, b = tb ? CblasTrans : CblasNoTrans;
    if constexpr (std::is_same_v<T, float>) cblas_sgemm(CblasRowMajor, a, b, M, N, K, 1.0f, A, lda, B, ldb, beta, C, ldc);
    else cblas_dgemm(CblasRowMajor, a, b, M, N, K, 1.0, A, lda, B, ldb, beta, C, ldc);
  }
}

// Calls fn(T{}) with T = float, double or (natively, where oneDNN has it) bfloat16. Other dtypes
// are converted to float32 by the callers first (NOTE [ CPU float16/bfloat16 GEMM and
// convolution ] in gemm.cpp).
bool native_dtype(DType dtype) {
  return dtype == kFloat32 || dtype == kFloat64 || (dtype == kBFloat16 && bf16_gemm_available());
}
template <typename Fn>
void dispatch_conv(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: return fn(float{});
    case DType::Float64: return fn(double{});
    case DType::BFloat16: return fn(Eigen::bfloat16{});
    default: DP_ASSERT(false);
  }
}

// Per-thread buffer `Slot` of at least n elements, reused across calls (grown, never shrunk).
enum ScratchSlot { kColumns, kChannelMajor, kWeightPartial, kCroppedWeight, kInputGrad };
template <typename T, ScratchSlot Slot>
T* scratch(int64_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < static_cast<size_t>(n)) buffer.resize(n);
  return buffer.data();
}

// dst[0, n) = src[0, n) + bias, rounded to T.
template <typename T, typename A>
void store_plus(const A* src, A bias, T* dst, int64_t n) {
  if constexpr (is_half_type_v<T>) {
    alignas(64) float block[kConvertBlock];
    for (int64_t s = 0; s < n; s += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, n - s);
      for (int64_t i = 0; i < m; ++i) block[i] = src[s + i] + bias;
      narrow(block, dst + s, m);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i] + bias;
  }
}

// Σ row[0, n) in the accumulation type (float16/bfloat16 widened in blocks, see half_convert.h).
template <typename T>
compute_t<T> row_sum(const T* row, int64_t n) {
  using A = compute_t<T>;
  A sum = 0;
  if constexpr (is_half_type_v<T>) {
    alignas(64) float block[kConvertBlock];
    for (int64_t s = 0; s < n; s += kConvertBlock) {
      const int64_t m = std::min(kConvertBlock, n - s);
      widen(row + s, block, m);
#pragma omp simd reduction(+ : sum)
      for (int64_t i = 0; i < m; ++i) sum += block[i];
    }
  } else {
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < n; ++i) sum += row[i];
  }
  return sum;
}

// dst [channels, images*S] (channel-major) from `images` NCHW blocks of [channels, S] each
// `image_stride` apart.
template <typename T>
void to_channel_major(const T* src, int64_t image_stride, int64_t images, int64_t channels, int64_t S, T* dst) {
  for (int64_t k = 0; k < channels; ++k)
    for (int64_t b = 0; b < images; ++b) std::memcpy(dst + (k * images + b) * S, src + b * image_stride + k * S, S * sizeof(T));
}

// The inverse of to_channel_major from the accumulation type A, adding bias[k] (when given) and
// rounding to T on the way.
template <typename T, typename A>
void from_channel_major(const A* src, int64_t images, int64_t channels, int64_t S, const T* bias, T* dst,
                        int64_t image_stride) {
  for (int64_t k = 0; k < channels; ++k) {
    const A b = bias ? static_cast<A>(bias[k]) : A(0);
    for (int64_t i = 0; i < images; ++i) store_plus(src + (k * images + i) * S, b, dst + i * image_stride + k * S, S);
  }
}

// Calls fn(full, live) for every live tap of a [K, Cg, KH, KW] weight, spread over the plan's
// threads (the weight can be megabytes): `full` its offset in the weight, `live` in the cropped
// [K, Cg, KH', KW'] one.
template <typename Fn>
void for_each_live_tap(const ConvPlan& plan, Fn&& fn) {
  const int64_t kh_live = plan.live_h.hi - plan.live_h.lo, kw_live = plan.live_w.hi - plan.live_w.lo;
#pragma omp parallel for num_threads(plan.threads) schedule(static)
  for (int64_t kc = 0; kc < plan.K * plan.Cg; ++kc)
    for (int64_t kh = 0; kh < kh_live; ++kh)
      for (int64_t kw = 0; kw < kw_live; ++kw)
        fn((kc * plan.KH + kh + plan.live_h.lo) * plan.KW + kw + plan.live_w.lo, (kc * kh_live + kh) * kw_live + kw);
}

// The GEMMs' weight [K, rows]: w itself, or its live taps packed into the caller's scratch.
template <typename T>
const T* gemm_weight(const ConvPlan& plan, const T* w) {
  if (!plan.cropped) return w;
  T* live = scratch<T, kCroppedWeight>(plan.K * plan.rows);
  for_each_live_tap(plan, [&](int64_t full, int64_t i) { live[i] = w[full]; });
  return live;
}

// Column matrix of images [n0, n0+images) of group g: the input itself when direct, else
// im2col'd into the thread's scratch.
template <typename T>
const T* columns_of(const ConvPlan& plan, const T* x, int64_t n0, int64_t images, int64_t g) {
  const T* first = x + (n0 * plan.C + g * plan.Cg) * plan.in_plane;
  if (!plan.needs_columns()) return first;
  const int64_t ld = images * plan.spatial;
  T* col = scratch<T, kColumns>(plan.rows * ld);
  for (int64_t b = 0; b < images; ++b) im2col(first + b * plan.C * plan.in_plane, plan.geo, col + b * plan.spatial, ld);
  return col;
}

// dy of images [n0, n0+images), group g, as [Kg, images*OH*OW]: in place for one image,
// else gathered into the thread's scratch.
template <typename T>
const T* output_grad_of(const ConvPlan& plan, const T* dy, int64_t n0, int64_t images, int64_t g) {
  const T* first = dy + (n0 * plan.K + g * plan.Kg) * plan.spatial;
  if (images == 1) return first;
  T* gathered = scratch<T, kChannelMajor>(plan.Kg * images * plan.spatial);
  to_channel_major(first, plan.K * plan.spatial, images, plan.Kg, plan.spatial, gathered);
  return gathered;
}

// NOTE [ Weight gradient tap by tap ]
// On small maps most (tap, output) pairs of a 3×3 kernel read padding: on 32×32 images
// ResNet-18's layer3 (2×2 maps) and its stride-2 entry into layer4 have 16 live pairs of 36,
// layer4 (1×1 maps) 1 of 9. im2col and oneDNN's kernels multiply the zeros as well (oneDNN's
// weight gradient took 1.6 ms for layer3's 256→256, 2.1 ms for 256→512 stride 2). Here each
// live tap is one GEMM over only the outputs where it reads the image:
//   dw[:, :, kh, kw] = dy_t · x_tᵀ,  dy_t [K, N·V], x_t [C, N·V] gathered from dy and x,
// V = the tap's live outputs. The FLOPs are the live ones; the gathers move (K + C)·N·V values
// per tap. The taps' [K, C] results are written into dw in one parallel pass, dead taps as
// zeros. Chosen (groups = 1) when at most half of the pairs are live (taps_worth_running_alone).
struct LiveTap {
  int64_t kh, kw;
  TapRange rows, cols;  // output rows / columns at which the tap reads inside the image
  int64_t outputs() const { return (rows.hi - rows.lo) * (cols.hi - cols.lo); }
};

std::vector<LiveTap> live_taps_of(int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t KH, int64_t KW,
                                  const Conv2dParams& p) {
  std::vector<LiveTap> taps;
  for (int64_t kh = 0; kh < KH; ++kh) {
    const TapRange rows = outputs_inside(H, OH, kh, p.stride_h, p.pad_h, p.dilation_h);
    if (rows.hi <= rows.lo) continue;
    for (int64_t kw = 0; kw < KW; ++kw) {
      const TapRange cols = outputs_inside(W, OW, kw, p.stride_w, p.pad_w, p.dilation_w);
      if (cols.hi > cols.lo) taps.push_back({kh, kw, rows, cols});
    }
  }
  return taps;
}

// The live taps of this weight gradient when running it tap by tap pays; empty otherwise.
std::vector<LiveTap> taps_worth_running_alone(const Tensor& x, const Tensor& dw, const Tensor& dy,
                                              const Conv2dParams& p) {
  if (p.groups != 1 || x.size(0) == 0 || dw.size(2) * dw.size(3) == 1) return {};
  const int64_t OH = dy.size(2), OW = dy.size(3);
  std::vector<LiveTap> taps = live_taps_of(x.size(2), x.size(3), OH, OW, dw.size(2), dw.size(3), p);
  int64_t live = 0;
  for (const LiveTap& t : taps) live += t.outputs();
  if (live == 0 || 2 * live > dw.size(2) * dw.size(3) * OH * OW) return {};
  return taps;
}

// dw [K, C, KH, KW] (overwritten) and dbias [K] (optional) from dy [N, K, OH, OW], x [N, C, H, W];
// `taps` from taps_worth_running_alone.
template <typename T>
void conv2d_backward_weight_by_tap(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                   const Conv2dParams& p, const std::vector<LiveTap>& taps, int threads) {
  using A = compute_t<T>;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t K = dw.size(0), KH = dw.size(2), KW = dw.size(3), OH = dy.size(2), OW = dy.size(3);
  const T *dyp = dy.data<T>(), *xp = x.data<T>();
  A* results = scratch<A, kWeightPartial>(static_cast<int64_t>(taps.size()) * K * C);
  // Gathers tap t's operands into the calling thread's scratch and runs its GEMM.
  auto run_tap = [&](int64_t t, int gemm_threads) {
    const LiveTap& tap = taps[static_cast<size_t>(t)];
    const int64_t cols = tap.cols.hi - tap.cols.lo, V = tap.outputs(), ld = N * V;
    T* dy_t = scratch<T, kChannelMajor>(K * ld);
    T* x_t = scratch<T, kColumns>(C * ld);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t v = 0; v < V; ++v) {
        const int64_t oh = tap.rows.lo + v / cols, ow = tap.cols.lo + v % cols;
        const int64_t ih = oh * p.stride_h + tap.kh * p.dilation_h - p.pad_h;
        const int64_t iw = ow * p.stride_w + tap.kw * p.dilation_w - p.pad_w;
        const T* dy_at = dyp + n * K * OH * OW + oh * OW + ow;
        const T* x_at = xp + n * C * H * W + ih * W + iw;
        for (int64_t k = 0; k < K; ++k) dy_t[k * ld + n * V + v] = dy_at[k * OH * OW];
        for (int64_t c = 0; c < C; ++c) x_t[c * ld + n * V + v] = x_at[c * H * W];
      }
    conv_gemm<T>(false, true, K, C, ld, dy_t, ld, x_t, ld, A(0), results + t * K * C, C, gemm_threads);
  };
  if (taps.size() == 1 || threads == 1) {  // BLAS threads each GEMM itself
    for (size_t t = 0; t < taps.size(); ++t) run_tap(static_cast<int64_t>(t), threads);
  } else {
    // Taps spread over the threads, each GEMM single-threaded (they are small: K·C·N·V with
    // V ≤ OH·OW), largest first.
    std::vector<int64_t> order(taps.size());
    for (size_t t = 0; t < taps.size(); ++t) order[t] = static_cast<int64_t>(t);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return taps[a].outputs() > taps[b].outputs(); });
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (size_t i = 0; i < order.size(); ++i) run_tap(order[i], 1);
  }
  // dw in one parallel pass over its (k, c) rows: zeros, then the live taps from their GEMMs.
  T* dwp = dw.data<T>();
  const int64_t taps_per_row = KH * KW, live = static_cast<int64_t>(taps.size());
#pragma omp parallel num_threads(threads)
  {
    const int team = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t begin = K * C * me / team, end = K * C * (me + 1) / team;
    std::fill(dwp + begin * taps_per_row, dwp + end * taps_per_row, T(0));
    for (int64_t t = 0; t < live; ++t) {
      T* to = dwp + taps[static_cast<size_t>(t)].kh * KW + taps[static_cast<size_t>(t)].kw;
      const A* from = results + t * K * C;
      for (int64_t kc = begin; kc < end; ++kc) to[kc * taps_per_row] = static_cast<T>(from[kc]);
    }
  }
  if (!dbias.defined()) return;
  T* db = dbias.data<T>();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t k = 0; k < K; ++k) {
    A sum = 0;
    for (int64_t n = 0; n < N; ++n) sum += row_sum(dyp + (n * K + k) * OH * OW, OH * OW);
    db[k] = static_cast<T>(sum);
  }
}

}  // namespace

// NOTE [ CPU float16/bfloat16 GEMM and convolution ] (gemm.cpp): bfloat16 runs natively —
// columns and weights stay bfloat16 (half the memory traffic of float32), every GEMM
// accumulates in float32, and what several GEMMs or taps add up (dx, dw, dbias) is summed in
// float32 and rounded once.

namespace {
// Every CPU path below reads and writes weights as [K, C/g, KH, KW] contiguous; a channels-last
// weight or weight gradient (the backend contract allows one: NOTE [ Channels-last weights under
// autocast ] in runtime/ops/conv.cpp, whose channels-last casts are for GPUs) goes through a
// contiguous copy.
Tensor contiguous_weight(CpuBackend& backend, const Tensor& w) {
  Tensor c = Tensor::empty(w.shape(), w.dtype(), w.device());
  backend.copy(w, c);
  return c;
}
}  // namespace

// x [N, C, H, W], w [K, C/g, KH, KW], bias [K] (optional) → y [N, K, OH, OW]
void CpuBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                                const Conv2dParams& p) {
  if (!w.is_contiguous()) return conv2d_forward(x, contiguous_weight(*this, w), bias, y, p);
  if (!native_dtype(y.dtype())) {
    ComputeOperands f32(kFloat32, y.device());
    conv2d_forward(f32.in(x), f32.in(w), f32.in(bias), f32.out(y, false), p);
    f32.finish();
    return;
  }
  if (cpu::dnnl_conv2d_forward(x, w, bias, y, p, num_threads_, conv_)) return;  // NOTE [ CPU convolution on oneDNN ]
  if (common_memory_format("conv2d_forward", {&x, &y}) == MemoryFormat::ChannelsLast) {  // im2col is NCHW only
    const Tensor y_nchw = Tensor::empty(y.shape(), y.dtype(), y.device());
    conv2d_forward(x.contiguous(), w, bias, y_nchw, p);
    copy(y_nchw, y);
    return;
  }
  const ConvPlan plan(x, w, y, p, num_threads_);
  dispatch_conv(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    const T *xp = x.data<T>(), *wp = gemm_weight(plan, w.data<T>()), *bp = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = y.data<T>();
    for_each_chunk(plan, [&](int, int64_t n0, int64_t images, bool) {
      const int64_t ld = images * plan.spatial;
      for (int64_t g = 0; g < plan.groups; ++g) {
        const T* cols = columns_of(plan, xp, n0, images, g);
        const T* wg = wp + g * plan.Kg * plan.rows;
        const T* bg = bp ? bp + g * plan.Kg : nullptr;
        T* yg = yp + (n0 * plan.K + g * plan.Kg) * plan.spatial;
        if constexpr (std::is_same_v<T, A>) {
          if (images == 1) {  // y_g [Kg, S] = bias + w_g [Kg, R] @ cols [R, S], written in place
            for (int64_t k = 0; k < plan.Kg; ++k) std::fill(yg + k * ld, yg + (k + 1) * ld, bg ? bg[k] : T(0));
            conv_gemm<T>(false, false, plan.Kg, ld, plan.rows, wg, plan.rows, cols, ld, A(1), yg, ld, num_threads_);
            continue;
          }
        }
        // out [Kg, images*S] = w_g @ cols, then bias + transpose into NCHW (+ rounding to T)
        A* out = scratch<A, kChannelMajor>(plan.Kg * ld);
        conv_gemm<T>(false, false, plan.Kg, ld, plan.rows, wg, plan.rows, cols, ld, A(0), out, ld, num_threads_);
        from_channel_major(out, images, plan.Kg, plan.spatial, bg, yg, plan.K * plan.spatial);
      }
    });
  });
}

// dy [N, K, OH, OW], w [K, C/g, KH, KW] → dx [N, C, H, W] (=, or += with accumulate)
void CpuBackend::conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                                       bool accumulate) {
  if (!w.is_contiguous()) return conv2d_backward_input(dy, contiguous_weight(*this, w), dx, p, accumulate);
  if (!native_dtype(dx.dtype())) {
    ComputeOperands f32(kFloat32, dx.device());
    conv2d_backward_input(f32.in(dy), f32.in(w), f32.out(dx, accumulate), p, accumulate);
    f32.finish();
    return;
  }
  if (cpu::dnnl_conv2d_backward_input(dy, w, dx, p, accumulate, num_threads_, conv_)) return;
  if (common_memory_format("conv2d_backward_input", {&dy, &dx}) == MemoryFormat::ChannelsLast) {
    const Tensor dx_nchw = accumulate ? dx.contiguous() : Tensor::empty(dx.shape(), dx.dtype(), dx.device());
    conv2d_backward_input(dy.contiguous(), w, dx_nchw, p, accumulate);
    copy(dx_nchw, dx);
    return;
  }
  const ConvPlan plan(dx, w, dy, p, num_threads_);
  dispatch_conv(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    constexpr bool accumulate_apart = !std::is_same_v<T, A>;  // dx summed in A, rounded at the end
    const T *dyp = dy.data<T>(), *wp = gemm_weight(plan, w.data<T>());
    T* dxp = dx.data<T>();
    for_each_chunk(plan, [&](int, int64_t n0, int64_t images, bool) {
      const int64_t ld = images * plan.spatial, chunk_size = images * plan.C * plan.in_plane;
      T* dx_chunk = dxp + n0 * plan.C * plan.in_plane;
      A* dxn;
      if constexpr (accumulate_apart) {
        dxn = scratch<A, kInputGrad>(chunk_size);
        if (accumulate) widen(dx_chunk, dxn, chunk_size);
      } else {
        dxn = dx_chunk;
      }
      if (plan.needs_columns() && !accumulate) std::fill(dxn, dxn + chunk_size, A(0));
      // A direct GEMM writes dx itself: onto its sum with beta = 1 when accumulating.
      const A beta = !plan.needs_columns() && accumulate ? A(1) : A(0);
      for (int64_t g = 0; g < plan.groups; ++g) {
        const T* dyg = output_grad_of(plan, dyp, n0, images, g);
        const T* wg = wp + g * plan.Kg * plan.rows;
        A* dxg = dxn + g * plan.Cg * plan.in_plane;
        // dcols [R, images*S] = w_gᵀ [R, Kg] @ dy_g [Kg, images*S]; direct: dcols is dx_g itself
        A* dcols = plan.needs_columns() ? scratch<A, kColumns>(plan.rows * ld) : dxg;
        conv_gemm<T>(true, false, plan.rows, ld, plan.Kg, wg, plan.rows, dyg, ld, beta, dcols, ld,
                     num_threads_);
        if (!plan.needs_columns()) continue;
        for (int64_t b = 0; b < images; ++b)
          col2im_add(dcols + b * plan.spatial, ld, plan.geo, dxg + b * plan.C * plan.in_plane);
      }
      if constexpr (accumulate_apart) narrow(dxn, dx_chunk, chunk_size);
    });
  });
}

// dy [N, K, OH, OW], x [N, C, H, W] → dw [K, C/g, KH, KW] (overwritten), dbias [K] (optional)
void CpuBackend::conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                        const Conv2dParams& p) {
  if (!dw.is_contiguous()) {
    const Tensor dw_contiguous = Tensor::empty(dw.shape(), dw.dtype(), dw.device());
    conv2d_backward_weight(dy, x, dw_contiguous, dbias, p);
    copy(dw_contiguous, dw);
    return;
  }
  if (!native_dtype(dw.dtype())) {
    ComputeOperands f32(kFloat32, dw.device());
    conv2d_backward_weight(f32.in(dy), f32.in(x), f32.out(dw, false), f32.out(dbias, false), p);
    f32.finish();
    return;
  }
  const bool channels_last =
      common_memory_format("conv2d_backward_weight", {&dy, &x}) == MemoryFormat::ChannelsLast;
  if (conv_ != ConvPath::Dnnl && !channels_last) {  // NOTE [ Weight gradient tap by tap ]
    const std::vector<LiveTap> taps = taps_worth_running_alone(x, dw, dy, p);
    if (!taps.empty()) {
      dispatch_conv(dy.dtype(), [&](auto tag) {
        conv2d_backward_weight_by_tap<decltype(tag)>(dy, x, dw, dbias, p, taps, num_threads_);
      });
      return;
    }
  }
  if (cpu::dnnl_conv2d_backward_weight(dy, x, dw, dbias, p, num_threads_, conv_)) return;
  if (channels_last) {  // im2col is NCHW only
    conv2d_backward_weight(dy.contiguous(), x.contiguous(), dw, dbias, p);
    return;
  }
  const ConvPlan plan(x, dw, dy, p, num_threads_);
  dispatch_conv(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    using A = compute_t<T>;
    constexpr bool accumulate_apart = !std::is_same_v<T, A>;  // sums in A, rounded at the end
    const T *dyp = dy.data<T>(), *xp = x.data<T>();
    const int64_t weight_size = plan.K * plan.rows;
    const bool with_bias = dbias.defined();
    if (plan.chunks == 0) {  // empty batch: zero gradients
      std::fill_n(dw.data<T>(), dw.numel(), T(0));
      if (with_bias) std::fill_n(dbias.data<T>(), plan.K, T(0));
      return;
    }
    // Thread t's sums: dw (its live taps when cropped) and dbias for thread 0, scratch for others
    // (and for thread 0 too when the sums are kept apart from T).
    std::vector<A*> dw_of(plan.threads), db_of(plan.threads);
    for_each_chunk(plan, [&](int t, int64_t n0, int64_t images, bool first) {
      if (first) {
        if (t == 0 && (plan.cropped || accumulate_apart)) {
          dw_of[t] = scratch<A, kCroppedWeight>(weight_size + plan.K);
          db_of[t] = dw_of[t] + weight_size;
        } else if (t == 0) {
          if constexpr (!accumulate_apart) dw_of[t] = dw.data<T>(), db_of[t] = with_bias ? dbias.data<T>() : nullptr;
        } else {
          dw_of[t] = scratch<A, kWeightPartial>(weight_size + plan.K);
          db_of[t] = dw_of[t] + weight_size;
        }
      }
      const int64_t ld = images * plan.spatial;
      for (int64_t g = 0; g < plan.groups; ++g) {
        const T* dyg = output_grad_of(plan, dyp, n0, images, g);
        const T* cols = columns_of(plan, xp, n0, images, g);
        // dw_g [Kg, R] (+)= dy_g [Kg, images*S] @ colsᵀ [images*S, R]
        conv_gemm<T>(false, true, plan.Kg, plan.rows, ld, dyg, ld, cols, ld, first ? A(0) : A(1),
                     dw_of[t] + g * plan.Kg * plan.rows, plan.rows, num_threads_);
        if (!with_bias) continue;
        A* db = db_of[t] + g * plan.Kg;
        for (int64_t k = 0; k < plan.Kg; ++k) {
          const A sum = row_sum(dyg + k * ld, ld);
          db[k] = first ? sum : db[k] + sum;
        }
      }
    });
    A* dwp = dw_of[0];
    A* dbp = db_of[0];
    if (plan.threads > 1) {
#pragma omp parallel for num_threads(plan.threads) schedule(static)
      for (int64_t i = 0; i < weight_size + plan.K; ++i) {
        if (i >= weight_size && !with_bias) continue;
        A sum = 0;
        for (int t = 1; t < plan.threads; ++t) sum += dw_of[t][i];
        if (i < weight_size) dwp[i] += sum;
        else dbp[i - weight_size] += sum;
      }
    }
    if (plan.cropped) {  // taps that only saw padding get no gradient
      T* full = dw.data<T>();
      std::fill_n(full, dw.numel(), T(0));
      for_each_live_tap(plan, [&](int64_t f, int64_t i) { full[f] = static_cast<T>(dwp[i]); });
    } else if constexpr (accumulate_apart) {
      narrow(dwp, dw.data<T>(), weight_size);
    }
    if constexpr (accumulate_apart) {
      if (with_bias) narrow(dbp, dbias.data<T>(), plan.K);
    } else {
      if (with_bias && plan.cropped) std::copy_n(dbp, plan.K, dbias.data<T>());
    }
  });
}

}  // namespace dp
