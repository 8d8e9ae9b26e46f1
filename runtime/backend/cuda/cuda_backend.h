// CUDA backend: one GPU, one non-blocking stream, cuBLAS/cuBLASLt handles bound to that stream,
// and the device's stream-ordered memory pool. Kernels are queued on the stream and return at
// once; only synchronize(), copy_to_host() and the explicit waits below block the host.
//
// Files, one family each, mirroring cpu/: cuda_backend.cpp (lifetime, device count, supports(),
// device errors), memory.{cpp,cu} (allocation, host/device copies, pinned buffers, events,
// copy/fill/arange/random), gemm.cpp (cuBLASLt), pointwise, reduce, conv (cuDNN), pool, norm,
// softmax_loss, embedding, optim. A family's host front-end (<family>.cpp: checks, views, cuDNN
// calls) is C++20; its kernels and launchers (<family>.cu, declared in <family>_kernels.h) are
// C++17 for nvcc. Shared: kernel_types.h (both sides), device_utils.cuh (kernels),
// strided_shape.h (front-ends), cuda_check.h (checked calls).
//
// NOTE [ CUDA memory pool ]
// allocate()/deallocate() are cudaMallocAsync/cudaFreeAsync on the backend's stream, from the
// device's default memory pool with its release threshold raised to "never": freed blocks stay
// reserved and are handed out again, so a training step allocates nothing from the driver after
// the first one. A block freed on this stream is reusable by later work on this stream at once;
// work on another stream that uses this backend's memory must be ordered after this stream
// (event) before the memory is freed.
//
// NOTE [ Graph memory ]
// While a capture records (begin_capture() … end_capture(), graph.cpp), allocate() hands out
// blocks of a private pool (a BlockArena over cudaMalloc'd segments) instead of the stream-ordered
// pool: a graph replays the addresses it was captured with, so its working memory must never be
// handed to anyone else. A block freed during the capture is reused by the capture's later
// allocations (the graph runs them in stream order, as the capture did). Blocks still live after
// it (the step's loss) stay the graph's outputs, rewritten by each replay. All graphs of a backend
// share the pool: they replay one after another on the stream, so one graph's temporaries may
// be another's. An ordinary block freed during a capture (the previous step's gradients) may be
// read by every replay: it is kept until no graph is left, then freed. Before a capture the
// stream-ordered pool gives its unused blocks back to the driver, so the graph's pool mostly takes
// their place instead of doubling the step's memory.
//
// This header needs no CUDA headers: CUDA handle types are forward-declared.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "runtime/backend/backend.h"

struct CUstream_st;         // cudaStream_t
struct CUevent_st;          // cudaEvent_t
struct CUmemPoolHandle_st;  // cudaMemPool_t
struct cublasContext;       // cublasHandle_t
struct cublasLtContext;     // cublasLtHandle_t
struct cudnnContext;       // cudnnHandle_t

namespace dp::cuda {

// Number of usable GPUs: 0 when there is no driver or no device (cudaErrorInsufficientDriver,
// cudaErrorNoDevice, cudaErrorStubLibrary); any other failure throws.
int device_count();

struct CudaOptions {
  // float32 GEMM on tensor cores with TF32 inputs (10-bit mantissa, several times faster, ~1e-3
  // relative error). Off by default: float32 GEMM is exact f32 like the CPU backend.
  bool allow_tf32 = false;
  // cuBLASLt workspace; 32 MiB is what NVIDIA recommends for Hopper.
  size_t gemm_workspace_bytes = size_t(32) << 20;
  // Convolution algorithms chosen by timing every candidate once per problem (cuDNN's Find, as
  // torch.backends.cudnn.benchmark) instead of by cuDNN's heuristic (run.cudnn_benchmark).
  bool cudnn_benchmark = true;
};

// Page-locked host memory (cudaHostAlloc, portable to all devices): the only kind of host memory
// a host→device copy can read asynchronously. The data loader stages batches in these.
class PinnedHostBuffer {
 public:
  PinnedHostBuffer() = default;
  explicit PinnedHostBuffer(size_t nbytes);
  ~PinnedHostBuffer();
  PinnedHostBuffer(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer& operator=(PinnedHostBuffer&& other) noexcept;
  PinnedHostBuffer(const PinnedHostBuffer&) = delete;
  PinnedHostBuffer& operator=(const PinnedHostBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// A point in a backend's stream (cudaEvent without timing). Move-only.
class CudaEvent {
 public:
  CudaEvent() = default;
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  // True once the stream has passed the event (never blocks).
  bool ready() const;
  // Blocks the calling thread until the stream has passed the event.
  void synchronize() const;

 private:
  friend class CudaBackend;
  CudaEvent(int device, CUevent_st* event) : device_(device), event_(event) {}
  int device_ = -1;
  CUevent_st* event_ = nullptr;
};

// Bytes of the device's memory pool: handed out now, and held from the driver (in use + cached).
struct PoolStats {
  uint64_t used_bytes = 0;
  uint64_t reserved_bytes = 0;
};

struct DeviceErrors;  // kernel_types.h

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index, const CudaOptions& options = {});
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  DeviceType device_type() const override { return DeviceType::CUDA; }
  bool supports(Kernel kernel, DType dtype) const override;
  int device_index() const override { return device_; }
  CUstream_st* stream() const { return stream_; }  // a cudaStream_t
  const CudaOptions& options() const { return options_; }
  void set_allow_tf32(bool allow) { options_.allow_tf32 = allow; }

  // ---- Memory (see NOTE [ CUDA memory pool ]) ----
  void* allocate(size_t nbytes) override;
  void deallocate(void* ptr, size_t nbytes) override;
  // The host source may be released as soon as this returns (pageable memory is staged by the
  // driver before the call returns; pinned memory makes the call wait for its copy).
  void copy_from_host(void* dst, const void* host_src, size_t nbytes) override;
  // Waits for the stream, then returns with host_dst filled.
  void copy_to_host(void* host_dst, const void* src, size_t nbytes) override;
  // Device → device on this backend's stream (both pointers on this GPU).
  void copy_on_device(void* dst, const void* src, size_t nbytes);
  // Queues a host→device copy of `nbytes` from pinned memory at src.data() + src_offset and
  // returns at once. The returned event completes when the copy has read the source: `src` must
  // stay alive and unmodified until then (event.ready() / event.synchronize()). Kernels queued
  // later on this backend see the data without any wait.
  CudaEvent copy_from_pinned_async(void* dst, const PinnedHostBuffer& src, size_t src_offset,
                                   size_t nbytes);
  // Records an event at the current end of the stream.
  CudaEvent record_event();
  // A timing event on this backend's stream (DeviceMarker).
  std::unique_ptr<DeviceMarker> make_marker() override;
  void synchronize() override;
  // cudaProfilerStart/Stop: a profiler started with `ncu --profile-from-start off` records only
  // the kernels between the two (bench/gpu: the profile step skips warm-up and cuDNN's search).
  void profiler_start();
  void profiler_stop();
  PoolStats pool_stats() const;

  // ---- Capture (graph.cpp, NOTE [ Graph memory ]) ----
  bool supports_capture() const override { return true; }
  void begin_capture() override;
  std::unique_ptr<DeviceGraph> end_capture() override;
  void abort_capture() noexcept override;
  bool capturing() const override { return capturing_; }
  // Bytes the graphs' private pool holds from the driver.
  size_t graph_pool_bytes() const;
  // Called by a graph's destructor.
  void graph_destroyed() noexcept;

  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void arange(const Tensor& dst, double start, double step) override;
  void random(const Tensor& dst, RandomDist dist, double a, double b, uint64_t seed,
              uint64_t offset, const Tensor& offset_base = Tensor()) override;

  // cuBLASLt; float32 (exact unless allow_tf32), float64, float16 and bfloat16 (both with
  // float32 accumulation). Row-major views are passed to column-major cuBLAS as C^T = B^T A^T.
  void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) override;

  // ---- Pointwise (pointwise.cpp / pointwise.cu) ----
  void unary(UnaryOp op, const Tensor& x, const Tensor& y) override;
  void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                      const Tensor& dx) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) override;
  void axpby(double alpha, const Tensor& x, double beta, const Tensor& y) override;

  // ---- Reductions (reduce.cpp / reduce.cu) ----
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  void argmax_rows(const Tensor& x, const Tensor& out) override;

  // ---- Convolution (conv.cpp, cuDNN) ----
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                      const Conv2dParams& p) override;
  void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                             bool accumulate) override;
  void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                              const Tensor& dbias, const Conv2dParams& p) override;

  // ---- Pooling (pool.cpp / pool.cu) ----
  void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                          const Pool2dParams& p) override;
  void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx, const Pool2dParams& p) override;
  void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) override;
  void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) override;
  void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) override;
  void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) override;

  // ---- Normalisation (norm.cpp / norm.cu) ----
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

  // ---- Softmax and loss (softmax_loss.cpp / softmax_loss.cu) ----
  void softmax_forward(const Tensor& x, const Tensor& y, bool log) override;
  void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, bool log) override;
  void attention_softmax_forward(const Tensor& x, const Tensor& mask, const Tensor& y, double scale) override;
  void attention_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx, double scale) override;
  // A target outside [0, C) is a device error (NOTE [ Device errors ]), thrown at the next sync.
  void cross_entropy_forward(const Tensor& logits, const Tensor& target, const Tensor& log_probs,
                             const Tensor& losses, int64_t ignore_index,
                             double label_smoothing) override;
  void cross_entropy_backward(const Tensor& log_probs, const Tensor& target,
                              const Tensor& dlosses, const Tensor& dlogits, int64_t ignore_index,
                              double label_smoothing) override;

  // ---- Embedding (embedding.cpp / embedding.cu) ----
  // An index outside [0, V) is a device error (NOTE [ Device errors ]), thrown at the next sync.
  void embedding_forward(const Tensor& weight, const Tensor& indices, const Tensor& out) override;
  void embedding_backward(const Tensor& dout, const Tensor& indices, const Tensor& dweight,
                          int64_t padding_idx) override;

  // ---- Optimiser updates (optim.cpp / optim.cu) ----
  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                  const SgdParams& p) override;
  void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                    const AdamParams& p) override;
  void lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                      const Tensor& update, const AdamParams& p) override;
  void lamb_update(const Tensor& param, const Tensor& update, const LambUpdateParams& p) override;
  void lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                   const LarsParams& p) override;
  // Multi-tensor forms: every item checked first (nothing queued for a bad list), then one
  // launch per run of consecutive items that share their scalars and dtype (a parameter group),
  // kMultiTensorChunk tensors at most per launch; the single-tensor forms are these with one item.
  void sgd_update_multi(const std::vector<SgdUpdateItem>& items) override;
  void adamw_update_multi(const std::vector<AdamwUpdateItem>& items) override;
  void lamb_direction_multi(const std::vector<LambDirectionItem>& items) override;
  void lamb_update_multi(const std::vector<LambUpdateItem>& items) override;
  void lars_update_multi(const std::vector<LarsUpdateItem>& items) override;
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

  // ---- For the kernel front-ends ----
  // The device's view of the error record kernels write (NOTE [ Device errors ]).
  DeviceErrors* device_errors() const { return device_errors_device_; }
  // The cuDNN handle bound to this backend's stream, created on first use (loading cuDNN costs
  // ~100 ms, which runs without convolutions never pay).
  cudnnContext* cudnn();
  // Convolution problems whose algorithm has been chosen (one search each; tests check reuse).
  size_t conv_algo_cache_size() const;
  // Throws unless t is on this backend (op names the caller).
  void check_operand(const char* op, const Tensor& t) const;
  // Throws unless supports(kernel, dtype): "<op>: the CUDA kernel supports ..., got <dtype>".
  void check_supported(Kernel kernel, DType dtype) const;

 private:
  struct GemmAlgoCache;  // cuBLASLt algorithms by problem, gemm.cpp
  struct ConvAlgoCache;  // cuDNN convolution algorithms by problem, conv.cpp

  // Makes this backend's GPU current on the calling thread (every entry point calls it).
  void activate() const;
  // Waits for the stream and frees what the constructor created (also after a failed one).
  void release() noexcept;
  // After the stream has been waited for: throws the recorded device error, if any, and clears
  // it (NOTE [ Device errors ]).
  void raise_device_errors();
  // softmax_backward and attention_softmax_backward: checks, then one launch (softmax_loss.cpp).
  void rows_backward(const char* op, Kernel kernel, const Tensor& y, const Tensor& dy, const Tensor& dx, bool log,
                     double scale);

  // NOTE [ Graph memory ] (graph.cpp).
  struct GraphMemory;
  void* allocate_for_capture(size_t nbytes);
  // Takes ptr when it is the graphs' (or a capture is recording); false: an ordinary block.
  bool free_graph_block(void* ptr) noexcept;
  void release_graph_memory_if_unused() noexcept;

  int device_;
  CudaOptions options_;
  CUstream_st* stream_ = nullptr;
  CUmemPoolHandle_st* pool_ = nullptr;
  cublasContext* blas_ = nullptr;
  cublasLtContext* blas_lt_ = nullptr;
  void* workspace_ = nullptr;
  std::unique_ptr<GemmAlgoCache> gemm_algos_;
  cudnnContext* cudnn_ = nullptr;
  std::mutex cudnn_mutex_;
  std::unique_ptr<ConvAlgoCache> conv_algos_;
  // Mapped pinned host memory: the host's and the device's address of one DeviceErrors.
  DeviceErrors* device_errors_host_ = nullptr;
  DeviceErrors* device_errors_device_ = nullptr;
  std::unique_ptr<GraphMemory> graph_memory_;  // from the first capture
  bool capturing_ = false;
  int live_graphs_ = 0;
};

}  // namespace dp::cuda
