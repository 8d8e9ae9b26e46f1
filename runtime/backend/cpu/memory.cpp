// CPU memory, copies/casts, fills and random numbers.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/backend/cpu/cpu_dispatch.h"
#include "runtime/backend/cpu/half_convert.h"
#include "runtime/backend/cpu/strided_loop.h"
#include "runtime/core/host_memory.h"
#include "runtime/tensor/generator.h"

#include <cblas.h>

namespace dp {

using namespace cpu;

CpuBackend::CpuBackend(int num_threads, std::optional<CpuGemm> gemm, std::optional<cpu::ConvPath> conv)
    : num_threads_(1),
      gemm_(gemm ? *gemm : gemm_from_environment()),
      conv_(conv ? *conv : cpu::conv_path_from_environment()) {
  set_num_threads(num_threads);
}

bool CpuBackend::supports(Kernel kernel, DType dtype) const {
  switch (kernel) {
    case Kernel::Copy: case Kernel::Fill: case Kernel::Arange: return true;
    case Kernel::Random: return is_floating(dtype);
    // The loss scale is float32, as PyTorch's GradScaler keeps it.
    case Kernel::AmpUpdateScale: return dtype == kFloat32;
    // Step bookkeeping: fixed dtypes inside (int64 counters, float64 tables and norms, a float32
    // verdict), serving float32 and float64 steps.
    case Kernel::CountSteps: case Kernel::LrLookup: case Kernel::ClipCoefficient: case Kernel::ScaleBy:
      return dtype == kFloat32 || dtype == kFloat64;
    // Optimiser state, norms and loss scaling stay float32/float64 (master weights), softmax and
    // cross-entropy run in float32 under autocast, embeddings keep their float32 tables.
    case Kernel::SgdUpdate: case Kernel::AdamwUpdate: case Kernel::LambDirection: case Kernel::LambUpdate:
    case Kernel::LarsUpdate: case Kernel::LarsTrustRatios: case Kernel::SquaredNorms: case Kernel::AmpUnscaleAndCheck:
    case Kernel::SoftmaxForward: case Kernel::SoftmaxBackward: case Kernel::CrossEntropyForward:
    case Kernel::CrossEntropyBackward: case Kernel::EmbeddingForward: case Kernel::EmbeddingBackward:
      return dtype == kFloat32 || dtype == kFloat64;
    // Pointwise, reductions, GEMM, convolution, pooling, normalisation: float16/bfloat16 too,
    // computed in float32 (NOTE [ CPU float16/bfloat16 GEMM and convolution ] in gemm.cpp).
    default: return is_floating(dtype);
  }
}

void CpuBackend::set_num_threads(int n) {
  DP_CHECK(n >= 1, "CPU backend: thread count must be at least 1, got ", n);
  num_threads_ = n;
  openblas_set_num_threads(n);  // GEMM runs on the same number of threads as our kernels
}

size_t CpuBlockCache::rounded(size_t nbytes) {
  constexpr size_t kMiB = size_t(1) << 20;
  if (nbytes <= kMiB) return (nbytes + 255) / 256 * 256;
  // Four size classes per doubling: 1, 1.25, 1.5, 1.75 x 2^k (NOTE [ CPU caching allocator ]).
  const size_t top = size_t(1) << (63 - __builtin_clzll(static_cast<unsigned long long>(nbytes)));  // 2^k <= nbytes
  const size_t unit = top / 4;
  return (nbytes + unit - 1) / unit * unit;
}

void* CpuBlockCache::allocate(size_t nbytes) {
  const size_t size = rounded(nbytes);
  // Takes a cached block of this size, else counts `size` as held (NOTE [ CPU memory limit ]):
  // false when that would pass the limit.
  const auto take = [&](void*& block) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = free_.find(size);
    if (it != free_.end() && !it->second.empty()) {
      block = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= size;
      return true;
    }
    if (limit_ != 0 && (size > limit_ || held_bytes_ > limit_ - size)) return false;
    held_bytes_ += size;
    return true;
  };
  void* p = nullptr;
  if (!take(p)) {
    release_cached();  // the cached blocks of other sizes count too: give them back, then ask again
    if (!take(p)) {
      std::lock_guard<std::mutex> lock(mutex_);
      throw Error(detail::concat("CPU memory: a tensor of ", gib_text(static_cast<double>(nbytes), 2),
                                 " would bring what this process holds for tensors to ",
                                 gib_text(static_cast<double>(held_bytes_) + static_cast<double>(size), 2),
                                 ", over its limit of ", gib_text(static_cast<double>(limit_), 2), " (", limit_source_,
                                 "); past it Linux would kill the run without a message. Lower the batch size or "
                                 "the model's size"));
    }
  }
  if (p != nullptr) return p;
  // 64-byte alignment: one cache line, and aligned AVX-512 loads.
  p = std::aligned_alloc(64, size);
  if (!p) {  // give the cache back and try once more before failing
    release_cached();
    p = std::aligned_alloc(64, size);
  }
  if (!p) {
    std::lock_guard<std::mutex> lock(mutex_);
    held_bytes_ -= size;
  }
  DP_CHECK(p != nullptr, "CPU backend: out of memory allocating ", nbytes, " bytes");
  return p;
}

void CpuBlockCache::deallocate(void* ptr, size_t nbytes) {
  const size_t size = rounded(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  free_[size].push_back(ptr);
  cached_bytes_ += size;
}

void CpuBlockCache::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) std::free(p);
  free_.clear();
  held_bytes_ -= cached_bytes_;
  cached_bytes_ = 0;
}

size_t CpuBlockCache::held_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return held_bytes_;
}

void CpuBlockCache::set_limit(size_t bytes, std::string source) {
  std::lock_guard<std::mutex> lock(mutex_);
  limit_ = bytes;
  limit_source_ = std::move(source);
}

size_t CpuBlockCache::limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

size_t CpuBlockCache::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

CpuBlockCache::~CpuBlockCache() { release_cached(); }

void* CpuBackend::allocate(size_t nbytes) { return cache_.allocate(nbytes); }
void CpuBackend::deallocate(void* ptr, size_t nbytes) { cache_.deallocate(ptr, nbytes); }

// An empty tensor's data pointer may be null, and memcpy with a null pointer is undefined even
// for 0 bytes (UBSan's nonnull-attribute check).
void CpuBackend::copy_from_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}
void CpuBackend::copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  DP_CHECK(src.shape() == dst.shape(), "copy: shape mismatch ", src.str(), " → ", dst.str());
  if (src.numel() == 0) return;
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
    return;
  }
  dispatch_all(src.dtype(), [&](auto s) {
    using S = decltype(s);
    dispatch_all(dst.dtype(), [&](auto d) {
      using D = decltype(d);
      const S* sp = src.data<S>();
      D* dp_ = dst.data<D>();
      strided_loop<2>(src.shape(), {&dst.strides(), &src.strides()}, num_threads_,
                      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
                        D* o = dp_ + off[0];
                        const S* i = sp + off[1];
                        if constexpr (is_half_type_v<S> && std::is_same_v<D, float>) {
                          if (st[0] == 1 && st[1] == 1) return widen(i, o, n);  // vectorised casts
                        } else if constexpr (std::is_same_v<S, float> && is_half_type_v<D>) {
                          if (st[0] == 1 && st[1] == 1) return narrow(i, o, n);
                        }
                        if (st[0] == 1 && st[1] == 1) {
                          for (int64_t k = 0; k < n; ++k) o[k] = convert<D>(i[k]);
                        } else {
                          for (int64_t k = 0; k < n; ++k) o[k * st[0]] = convert<D>(i[k * st[1]]);
                        }
                      });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  if (dst.numel() == 0) return;
  dispatch_all(dst.dtype(), [&](auto d) {
    using D = decltype(d);
    const D v = convert<D>(value);
    D* p = dst.data<D>();
    strided_loop<1>(dst.shape(), {&dst.strides()}, num_threads_,
                    [&](const std::array<int64_t, 1>& off, int64_t n, const std::array<int64_t, 1>& st) {
                      D* o = p + off[0];
                      if (st[0] == 1) {
                        std::fill(o, o + n, v);
                      } else {
                        for (int64_t k = 0; k < n; ++k) o[k * st[0]] = v;
                      }
                    });
  });
}

void CpuBackend::arange(const Tensor& dst, double start, double step) {
  DP_ASSERT(dst.is_contiguous());
  dispatch_all(dst.dtype(), [&](auto d) {
    using D = decltype(d);
    D* p = dst.data<D>();
    // std::fma pins the rounding to what the CUDA kernel computes, whatever -march allows.
    for (int64_t i = 0; i < dst.numel(); ++i) p[i] = convert<D>(std::fma(static_cast<double>(i), step, start));
  });
}

namespace {
// Uniform in [0, 1) with 24 (float) or 53 (double) random bits.
inline double uniform01(const uint32_t r[4], bool wide) {
  if (wide) return static_cast<double>((static_cast<uint64_t>(r[0]) << 21) ^ (r[1] >> 11)) * 0x1.0p-53;
  return static_cast<double>(r[0] >> 8) * 0x1.0p-24;
}

// Philox4x32::generate for the counters first .. first + kLanes - 1 at once: the same rounds,
// lane by lane, so GCC turns them into vector multiplies (one counter at a time it cannot; the
// dropout masks of a BERT step were 8 % of it). out[w][lane] = word w of counter first + lane.
// Kept out of line: compiled (and vectorised) once, not inside each caller, where GCC's cost
// model kept some instantiations scalar.
constexpr int kLanes = 16;
[[gnu::noinline]] void philox_lanes(uint64_t seed, uint64_t first, uint32_t (&out)[4][kLanes]) {
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes] = {}, c3[kLanes] = {};
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t counter = first + static_cast<uint64_t>(l);
    c0[l] = static_cast<uint32_t>(counter);
    c1[l] = static_cast<uint32_t>(counter >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
#pragma omp simd
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(Philox4x32::kM0) * c0[l], p1 = static_cast<uint64_t>(Philox4x32::kM1) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = static_cast<uint32_t>(p1);
      c3[l] = static_cast<uint32_t>(p0);
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += Philox4x32::kW0;
    k1 += Philox4x32::kW1;
  }
  for (int l = 0; l < kLanes; ++l) out[0][l] = c0[l], out[1][l] = c1[l], out[2][l] = c2[l], out[3][l] = c3[l];
}

// p[i] = value(words of counter offset + i), kLanes counters at a time.
template <typename D, typename Value>
void fill_random(D* p, int64_t n, uint64_t seed, uint64_t offset, int threads, Value value) {
  parallel_range(n, threads, [&](int64_t begin, int64_t end) {
    alignas(64) uint32_t words[4][kLanes];
    for (int64_t i = begin; i < end; i += kLanes) {
      philox_lanes(seed, offset + static_cast<uint64_t>(i), words);
      const int64_t m = std::min<int64_t>(kLanes, end - i);
      for (int64_t l = 0; l < m; ++l) {
        const uint32_t r[4] = {words[0][l], words[1][l], words[2][l], words[3][l]};
        p[i + l] = convert<D>(value(r));
      }
    }
  });
}
}  // namespace

// Element i takes the words of Philox counter offset + i (as the CUDA kernel), whatever the split
// over threads.
void CpuBackend::random(const Tensor& dst, RandomDist dist, double a, double b, uint64_t seed, uint64_t offset,
                        const Tensor& offset_base) {
  DP_ASSERT(dst.is_contiguous());
  check_floating("random", dst);
  if (offset_base.defined()) {  // NOTE [ Random numbers in CUDA graphs ]; the same contract here
    DP_CHECK(offset_base.dtype() == kInt64 && offset_base.numel() == 1 && offset_base.device() == dst.device(),
             "random: offset_base must be one int64 on ", dst.device().str(), ", got ", offset_base.str());
    offset += static_cast<uint64_t>(offset_base.data<int64_t>()[0]);
  }
  const bool wide = dst.dtype() == kFloat64;
  dispatch_all(dst.dtype(), [&](auto d) {
    using D = decltype(d);
    D* p = dst.data<D>();
    const int64_t n = dst.numel();
    switch (dist) {
      case RandomDist::Uniform:  // fma: the CUDA kernel's rounding
        fill_random(p, n, seed, offset, num_threads_, [&](const uint32_t* r) { return std::fma(b - a, uniform01(r, wide), a); });
        break;
      case RandomDist::Normal:  // Box–Muller on two independent words
        fill_random(p, n, seed, offset, num_threads_, [&](const uint32_t* r) {
          const double u1 = (static_cast<double>(r[2]) + 1.0) * 0x1.0p-32;  // (0, 1]
          const double u2 = static_cast<double>(r[3]) * 0x1.0p-32;
          return std::fma(b * std::sqrt(-2.0 * std::log(u1)), std::cos(6.283185307179586 * u2), a);
        });
        break;
      case RandomDist::Bernoulli:
        fill_random(p, n, seed, offset, num_threads_, [&](const uint32_t* r) { return uniform01(r, wide) < a ? 1.0 : 0.0; });
        break;
    }
  });
}

}  // namespace dp
