// NOTE [ CPU bfloat16 GEMM ] (bf16_gemm.h).
#include "runtime/backend/cpu/bf16_gemm.h"

#include <omp.h>

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "runtime/backend/cpu/omp_threads_scope.h"
#include "runtime/core/error.h"

namespace dp::cpu {

namespace {

using dnnl::memory;

// Everything a matmul primitive is compiled for.
struct Key {
  bool ta, tb, c_bf16;
  int64_t M, N, K, lda, ldb, ldc;
  float alpha, beta;
  bool operator==(const Key& o) const {
    return std::tie(ta, tb, c_bf16, M, N, K, lda, ldb, ldc, alpha, beta) ==
           std::tie(o.ta, o.tb, o.c_bf16, o.M, o.N, o.K, o.lda, o.ldb, o.ldc, o.alpha, o.beta);
  }
};

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the fields
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.ta) | uint64_t(k.tb) << 1 | uint64_t(k.c_bf16) << 2);
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(static_cast<uint64_t>(v));
    uint32_t a, b;
    std::memcpy(&a, &k.alpha, 4);
    std::memcpy(&b, &k.beta, 4);
    mix(uint64_t(a) << 32 | b);
    return static_cast<size_t>(h);
  }
};

struct Compiled {
  dnnl::matmul primitive;
  memory::desc a, b, c, scratch;
};

// A [rows, cols] matrix with leading dimension ld, stored row-major or (transposed) column-major.
memory::desc matrix(int64_t rows, int64_t cols, int64_t ld, bool transposed, memory::data_type dt) {
  const memory::dims strides = transposed ? memory::dims{1, ld} : memory::dims{ld, 1};
  return memory::desc({rows, cols}, dt, strides);
}

std::string describe(const Key& k) {
  return detail::concat("bfloat16 GEMM [", k.M, "x", k.K, "]", k.ta ? "ᵀ" : "", " @ [", k.K, "x", k.N, "]",
                        k.tb ? "ᵀ" : "", " → ", k.c_bf16 ? "bfloat16" : "float32");
}

// Per-thread engine, stream, compiled primitives and scratch (NOTE in bf16_gemm.h).
class ThreadCache {
 public:
  ThreadCache() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  const Compiled& get(const Key& k) {
    auto it = compiled_.find(k);
    if (it != compiled_.end()) return it->second;
    const auto bf16 = memory::data_type::bf16;
    Compiled c;
    c.a = matrix(k.M, k.K, k.lda, k.ta, bf16);
    c.b = matrix(k.K, k.N, k.ldb, k.tb, bf16);
    c.c = matrix(k.M, k.N, k.ldc, false, k.c_bf16 ? bf16 : memory::data_type::f32);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (k.alpha != 1.0f) attr.set_output_scales(0, {k.alpha});
    if (k.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(k.beta);
      attr.set_post_ops(ops);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(c.a, c.b, c.c), attr, engine_);
      c.scratch = pd.scratchpad_desc();
      c.primitive = dnnl::matmul(pd);
    } catch (const dnnl::error& e) {
      throw Error(detail::concat(describe(k), ": oneDNN refused it (", e.what(), ")"));
    }
    return compiled_.emplace(k, std::move(c)).first->second;
  }

  void run(const Compiled& c, const void* A, const void* B, void* C) {
    const size_t scratch_bytes = c.scratch.get_size();
    if (scratch_.size() < scratch_bytes) scratch_.resize(scratch_bytes);
    memory a(c.a, engine_, const_cast<void*>(A)), b(c.b, engine_, const_cast<void*>(B)), out(c.c, engine_, C);
    memory scratch(c.scratch, engine_, scratch_.data());
    c.primitive.execute(stream_, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, out},
                                  {DNNL_ARG_SCRATCHPAD, scratch}});
    stream_.wait();
  }

  const dnnl::engine& engine() const { return engine_; }

 private:
  dnnl::engine engine_;
  dnnl::stream stream_;
  std::unordered_map<Key, Compiled, KeyHash> compiled_;
  std::vector<unsigned char> scratch_;
};

ThreadCache& thread_cache() {
  thread_local ThreadCache cache;
  return cache;
}

template <typename CT>
void run_gemm(const Bf16GemmArgs& g, CT* C, int threads) {
  DP_ASSERT(g.M > 0 && g.N > 0 && g.K > 0);
  const Key k{g.ta, g.tb, std::is_same_v<CT, Eigen::bfloat16>, g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.alpha, g.beta};
  ThreadCache& cache = thread_cache();
  const Compiled& c = cache.get(k);
  OmpThreadsScope scope(threads);
  try {
    cache.run(c, g.A, g.B, C);
  } catch (const dnnl::error& e) {
    throw Error(detail::concat(describe(k), ": oneDNN failed (", e.what(), ")"));
  }
}

}  // namespace

bool bf16_gemm_available() {
  static const bool available = [] {
    try {
      // A native kernel names its ISA in its implementation string: "brg:avx512_core_bf16"
      // (Zen 4/5, Cooper Lake), "brg:avx512_core_amx" (Sapphire Rapids). oneDNN's reference
      // kernels say "ref"; its bf16 emulation on plain AVX-512 names neither ISA.
      const auto bf16 = memory::data_type::bf16;
      const memory::desc a({64, 64}, bf16, memory::format_tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, memory::desc({64, 64}, memory::data_type::f32, memory::format_tag::ab)),
                                      thread_cache().engine());
      const std::string impl = pd.impl_info_str();
      return impl.find("ref") == std::string::npos &&
             (impl.find("bf16") != std::string::npos || impl.find("amx") != std::string::npos);
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

void bf16_gemm(const Bf16GemmArgs& args, float* C, int threads) { run_gemm(args, C, threads); }
void bf16_gemm(const Bf16GemmArgs& args, Eigen::bfloat16* C, int threads) { run_gemm(args, C, threads); }

}  // namespace dp::cpu
