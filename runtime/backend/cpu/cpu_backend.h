// CPU backend: own vectorised loops and Eigen for pointwise work, OpenBLAS (cblas) or Eigen for
// GEMM (selectable: OpenBLAS is ~15 % faster on AVX-512 for sgemm), OpenMP threads.
// Kernels are grouped by family, one file each: memory.cpp, pointwise.cpp, reduce.cpp,
// gemm.cpp, conv.cpp, pool.cpp, norm.cpp, softmax_loss.cpp, embedding.cpp, optim.cpp.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/backend/cpu/dnnl_conv.h"

namespace dp {

// NOTE [ CPU caching allocator ]
// Training allocates the same activation sizes every step. Fresh large allocations come from
// the kernel zero-filled and page-fault on first touch (about 1 ms per 12 MB here), so freed
// blocks are kept in per-size free lists and handed out again. Sizes are rounded so that near
// sizes share blocks: to 256 B up to 1 MiB, above it to four classes per doubling (1, 1.25, 1.5,
// 1.75 x 2^k; at most 25 % more than asked, and the untouched tail of a large block is never
// paged in). Coarse classes matter when the shapes change every step (token batching: each batch
// has its own rows and padded length): with exact sizes every distinct shape kept its own blocks
// and a BERT-tiny run held 1.3 GB. For a fixed-shape run the memory held is the peak of one step;
// release_cached() returns it to the system.
//
// NOTE [ CPU memory limit ]
// Linux hands out memory it does not have (overcommit) and, when a process touches more than the
// machine or its cgroup holds (a batch too large for the CPU, a GPU recipe run on the CPU, ranks
// sharing a node), its out-of-memory killer ends the process with SIGKILL: no message, exit 137,
// and under Slurm one line about an "oom_kill event". So the cache counts the bytes it holds from
// the system (in use and cached) and refuses, with a dp::Error naming the sizes and where the
// limit comes from, an allocation that would take them past the limit — after giving its cached
// blocks back first. What is counted: every tensor and oneDNN convolution's blocked copies and
// scratchpad (tensors too), by their size classes — up to 25 % more than asked, in tails a tensor
// never touches, so it is an upper bound on their resident memory. Not counted: the im2col
// path's per-thread scratch, the libraries' own buffers, the program. The Runtime sets the limit
// to 90 % of what this machine had available at the start (host_memory()); dptrain divides that
// among the ranks on a node or takes run.cpu_memory_limit_gib.
class CpuBlockCache {
 public:
  ~CpuBlockCache();
  void* allocate(size_t nbytes);
  void deallocate(void* ptr, size_t nbytes);
  void release_cached();
  size_t cached_bytes() const;
  size_t held_bytes() const;  // from the system: in use and cached
  // 0: no limit. `source` says where the figure comes from, for the error.
  void set_limit(size_t bytes, std::string source);
  size_t limit() const;

 private:
  static size_t rounded(size_t nbytes);
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // rounded size → free blocks
  size_t cached_bytes_ = 0;
  size_t held_bytes_ = 0;
  size_t limit_ = 0;
  std::string limit_source_;
};

// float32 GEMM: OpenBLAS, oneDNN (NOTE [ CPU float32 GEMM on oneDNN ] in gemm.cpp) or Eigen;
// float64 always OpenBLAS but with Eigen.
enum class CpuGemm : uint8_t { OpenBlas, OneDnn, Eigen };
// DPTRAIN_CPU_GEMM=onednn | openblas | eigen, read when the backend is made (onednn when unset);
// a dp::Error for another value.
CpuGemm gemm_from_environment();

class CpuBackend final : public Backend {
 public:
  // num_threads: OpenMP threads for parallel kernels (and GEMM). conv: oneDNN or im2col
  // convolutions (NOTE [ CPU convolution on oneDNN ]); unset: DPTRAIN_CPU_CONV, else auto.
  // gemm unset: DPTRAIN_CPU_GEMM, else oneDNN.
  explicit CpuBackend(int num_threads = 1, std::optional<CpuGemm> gemm = std::nullopt,
                      std::optional<cpu::ConvPath> conv = std::nullopt);
  int num_threads() const { return num_threads_; }
  void set_num_threads(int n);
  CpuGemm gemm_library() const { return gemm_; }
  cpu::ConvPath conv_path() const { return conv_; }

  DeviceType device_type() const override { return DeviceType::CPU; }
  int device_index() const override { return 0; }
  // Copies, fills, arange and random numbers take every dtype (random: floating ones); every
  // other kernel float32 and float64.
  bool supports(Kernel kernel, DType dtype) const override;

  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  // Returns cached free blocks to the system (see NOTE [ CPU caching allocator ]).
  void release_cached() { cache_.release_cached(); }
  size_t cached_bytes() const { return cache_.cached_bytes(); }
  // NOTE [ CPU memory limit ]: 0 for none; `source` is named in the error.
  void set_memory_limit(size_t bytes, std::string source) { cache_.set_limit(bytes, std::move(source)); }
  size_t memory_limit() const { return cache_.limit(); }
  size_t held_bytes() const { return cache_.held_bytes(); }
  void copy_from_host(void* dst, const void* host_src, size_t nbytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t nbytes) override;
  void synchronize() override {}

  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void random(const Tensor& dst, RandomDist dist, double a, double b, uint64_t seed,
              uint64_t offset, const Tensor& offset_base = Tensor()) override;

  void unary(UnaryOp op, const Tensor& x, const Tensor& y) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                      const Tensor& dx) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) override;
  void axpby(double alpha, const Tensor& x, double beta, const Tensor& y) override;

  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  void argmax_rows(const Tensor& x, const Tensor& out) override;

  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) override;

  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                      const Conv2dParams& p) override;
  void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                             bool accumulate) override;
  void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor& dbias, const Conv2dParams& p) override;

  void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                          const Pool2dParams& p) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx, const Pool2dParams& p) override;
  void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) override;
  void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) override;
  void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) override;
  void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) override;

  void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                          const Tensor& save_mean, const Tensor& save_invstd, bool training,
                          double momentum, double eps, const BatchNormEpilogue& epilogue) override;
  void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias, bool training,
                           const BatchNormGradPrologue& prologue) override;
  void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                          const Tensor& y, const Tensor& save_mean, const Tensor& save_rstd,
                          double eps) override;
  void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                           const Tensor& save_mean, const Tensor& save_rstd, const Tensor& dx,
                           const Tensor& dweight, const Tensor& dbias) override;

  void softmax_forward(const Tensor& x, const Tensor& y, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) override;
  void attention_softmax_forward(const Tensor& x, const Tensor& mask, const Tensor& y, double scale) override;
  void attention_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) override;
  void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& log_probs,
                             const Tensor& losses, int64_t ignore_index,
                             double label_smoothing) override;
  void cross_entropy_backward(const Tensor& log_probs, const Tensor& target,
                              const Tensor& dlosses, const Tensor& dlogits, int64_t ignore_index,
                              double label_smoothing) override;

  void embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& indices, const Tensor& dweight,
                          int64_t padding_idx) override;

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                  const SgdParams& p) override;
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamParams& p) override;
  void lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const Tensor& update, const AdamParams& p) override;
  void lamb_update(const Tensor& param, const Tensor& update, const LambUpdateParams& p) override;
  void lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                   const LarsParams& p) override;
  void lars_trust_ratios(const Tensor& squared_norms, double weight_decay, double eta, double eps,
                         const Tensor& out) override;
  void squared_norms(const std::vector<Tensor>& xs, const Tensor& out) override;
  void amp_unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf,
                             const Tensor& scale) override;
  void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                        double growth_factor, double backoff_factor, int64_t growth_interval) override;
  void count_steps(const std::vector<Tensor>& counters, const Tensor& found_inf, StepCounting how) override;
  void lr_lookup(const Tensor& table, const Tensor& clock, const Tensor& out) override;
  void clip_coefficient(const Tensor& squared_norms, double max_norm, const Tensor& found_inf,
                        const Tensor& out) override;
  void scale_by(const std::vector<Tensor>& xs, const Tensor& factor) override;

 private:
  // gemm() for bfloat16 on oneDNN (NOTE [ CPU float16/bfloat16 GEMM and convolution ], gemm.cpp).
  void bf16_batched_gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta);

  int num_threads_;
  CpuGemm gemm_;
  cpu::ConvPath conv_;
  CpuBlockCache cache_;
};

}  // namespace dp
