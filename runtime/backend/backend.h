// The backend interface: the short list of kernels a device must provide.
//
// NOTE [ Backend contract ]
// Ops in runtime/ops/ validate arguments, allocate outputs on the input's device and call one of
// these kernels; everything else is composed from them. A kernel may assume what its comment
// says (shapes already checked, "contiguous" inputs really contiguous, outputs allocated).
// Memory, copies, fills and random numbers are required of every backend; every other entry
// point has a default here that throws dp::Error naming the op and the device (unsupported()),
// so a backend overrides exactly what it implements, and supports(kernel, dtype) says which
// dtypes it takes (the op harness compares backends on what both support).
// Dtypes: floating kernels support float32 and float64 on every backend; float16/bfloat16 are
// supported where supports() says so (casts, copies and fills everywhere), computed in float32.
// Kernels run on the backend's stream (CUDA) or its thread pool (CPU); none synchronises
// with the host except synchronize() and copy_to_host(). Errors in data that only a kernel sees
// (a class index out of range) are thrown at once by the CPU backend and, on CUDA, recorded on
// the device and thrown at the next synchronize() or copy_to_host() (NOTE [ Device errors ] in
// cuda/cuda_backend.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/device.h"
#include "runtime/tensor/tensor.h"

namespace dp {

enum class UnaryOp : uint8_t {
  Neg, Exp, Log, Sqrt, Rsqrt, Abs, Square, Reciprocal,
  Relu, Gelu /* exact, erf-based like torch */, Tanh, Sigmoid, Silu,
};
// Equal gives 1 where a == b, else 0 (in the operands' dtype).
enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Maximum, Minimum, Pow, Equal };
enum class ReduceOp : uint8_t { Sum, Mean, Max, Min };
enum class RandomDist : uint8_t { Uniform /* [a, b) */, Normal /* mean a, std b */, Bernoulli /* p = a */ };

// Every entry point a backend may implement (for supports() and messages).
enum class Kernel : uint8_t {
  Copy, Fill, Arange, Random,
  Unary, UnaryBackward, Binary, BinaryScalar, Axpby,
  Reduce, ArgmaxRows,
  Gemm,
  Conv2dForward, Conv2dBackwardInput, Conv2dBackwardWeight,
  MaxPool2dForward, MaxPool2dBackward, AvgPool2dForward, AvgPool2dBackward,
  AdaptiveAvgPool2dForward, AdaptiveAvgPool2dBackward,
  BatchNormForward, BatchNormBackward, LayerNormForward, LayerNormBackward,
  SoftmaxForward, SoftmaxBackward, AttentionSoftmaxForward, AttentionSoftmaxBackward,
  CrossEntropyForward, CrossEntropyBackward,
  EmbeddingForward, EmbeddingBackward,
  SgdUpdate, AdamwUpdate, LambDirection, LambUpdate, LarsUpdate, LarsTrustRatios, SquaredNorms,
  AmpUnscaleAndCheck, AmpUpdateScale,
  CountSteps, LrLookup, ClipCoefficient, ScaleBy,
  kCount
};

const char* kernel_name(Kernel kernel);  // "conv2d_forward", as the entry point is named
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);

struct Conv2dParams {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

struct Pool2dParams {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  bool count_include_pad = true;  // avg pool only
};

// NOTE [ Device-resident optimiser step ] (optim/optimizer.h): what a fused update may read
// from device memory instead of the host, so that a step never waits for the host and can be
// captured as a CUDA graph. Each tensor is optional (undefined: the host value in the params
// applies) and lives on the parameter's device:
//   found_inf   float32 []: when nonzero the update writes nothing (GradScaler's verdict, a
//               non-finite clipping norm);
//   lr          float64 []: the learning rate is lr[0] · lr_scale instead of the params' lr (a
//               schedule looked up on the device: lr_lookup);
//   step_count  int64 []: the updates applied to this parameter before this one; the update is
//               number step_count[0] + 1 (Adam's bias correction, SGD's first step). The kernel
//               reads it; count_steps advances it after the update.
// Scalars derived from them (bias corrections, lr·trust, ...) are computed in double exactly as
// from the host values, so a device-controlled update is bit-identical to a host-controlled one.
struct StepControl {
  Tensor found_inf;
  Tensor lr;
  double lr_scale = 1;
  Tensor step_count;
};

// How count_steps advances its counters from a found_inf verdict (see there).
enum class StepCounting : uint8_t {
  IfApplied,     // c += 1 unless found_inf (optimiser step counts, the schedule clock)
  IfSkipped,     // c += 1 when found_inf (skipped-step totals)
  SkipRun,       // c = found_inf ? c + 1 : 0 (skipped steps in a row)
  Always,        // c += 1
};

struct SgdParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer starts as the (decayed) gradient, as in PyTorch
  // control.step_count, when given, decides first_step (count 0) and the buffer must then be
  // initialised (zeroed) memory: a skipped first step leaves it as it was.
  StepControl control;
};

// Adam moments with bias correction, shared by adamw_update and lamb_direction.
struct AdamParams {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;          // this parameter's update count, 1-based (bias correction)
  double grad_divisor = 1;   // the gradient is used as g / grad_divisor (LAMB's global clipping)
  // LAMB's global clipping decided on the device: when defined, float64 [] on the parameter's
  // device holding the global gradient norm N, and the divisor is apex's N / max_grad_norm when
  // N > max_grad_norm, else 1 — computed in double where the kernel runs — instead of grad_divisor.
  Tensor grad_norm;
  double max_grad_norm = 0;
  StepControl control;       // control.step_count, when given, replaces `step` (count + 1)
};

// LAMB's second stage (lamb_update): the trust ratio from the host or, when trust_ratios is
// defined, trust_ratios[trust_index] (float64 on the parameter's device, e.g. written by
// lars_trust_ratios); found_inf and lr from the control (step_count unused).
struct LambUpdateParams {
  double lr = 0;
  double trust = 1;
  Tensor trust_ratios;
  int64_t trust_index = 0;
  StepControl control;
};

struct LarsParams {
  double lr = 0, momentum = 0, weight_decay = 0;
  double trust = 1;                  // the trust ratio, computed by the caller from the norms
  bool lr_outside_momentum = false;  // the two forms: see lars_update
  // When defined, the trust ratio is trust_ratios[trust_index] instead of `trust`: float64 on
  // the parameter's device, written there by lars_trust_ratios, so no norm reaches the host.
  Tensor trust_ratios;
  int64_t trust_index = 0;
  StepControl control;  // step_count unused
};

// One parameter's operands of a multi-tensor update (the *_update_multi entry points): the
// buffers and params the single-tensor entry point takes.
struct SgdUpdateItem {
  Tensor param, grad, momentum_buf;
  SgdParams p;
};
struct AdamwUpdateItem {
  Tensor param, grad, exp_avg, exp_avg_sq;
  AdamParams p;
};
struct LambDirectionItem {
  Tensor param, grad, exp_avg, exp_avg_sq, update;
  AdamParams p;
};
struct LambUpdateItem {
  Tensor param, update;
  LambUpdateParams p;
};
struct LarsUpdateItem {
  Tensor param, grad, momentum_buf;
  LarsParams p;
};

// A point in a device's queue of work, for timing kernels on the device's own clock (a CUDA
// event with timing). Host-clock devices (the CPU) have none: Backend::make_marker() is null.
class DeviceMarker {
 public:
  virtual ~DeviceMarker() = default;
  // Marks the current end of the device's queue (no wait).
  virtual void record() = 0;
  // Milliseconds of device time from `earlier` to this marker (both recorded); waits until the
  // device has passed this marker.
  virtual double ms_since(const DeviceMarker& earlier) const = 0;
};

// A recorded stretch of a device's work, replayed with one launch (a CUDA graph; NOTE [ CUDA
// graphs ] in launch/graphed_step.h). Made by Backend::end_capture(). The graph reads and writes
// the addresses it was captured with: every tensor it touches must stay alive, unmoved, while
// it is replayed.
class DeviceGraph {
 public:
  virtual ~DeviceGraph() = default;
  // Queues the recorded work on the device's stream (returns at once).
  virtual void replay() = 0;
  // Kernels and other operations in the graph.
  virtual size_t node_count() const = 0;
};

// Batch norm forward's fused epilogue: y = relu(bn(x) + residual). residual: x's shape, dtype and
// memory format, undefined for none; relu: clamp at 0 (NaN → 0, as the relu kernels). ResNet's
// bn → relu and bn → add → relu then write y once instead of three times.
struct BatchNormEpilogue {
  Tensor residual;
  bool relu = false;
};

// Batch norm backward's fused prologue, the mirror of a relu-only epilogue: dy is the gradient of
// y = relu(bn(x)) (the training forward ran with BatchNormEpilogue{relu, no residual}), and the
// kernels mask it where y is not positive, recomputing y from x, the saved statistics, weight and
// bias exactly as this backend's forward computed it — bit for bit relu's own backward (y > 0 ?
// dy : 0), without its pass over y, dy and the masked gradient. bias: the forward's (undefined:
// zeros). Training only (eval's saved statistics are recomputed, not the forward's), and the
// per-feature tensors must be in the statistics dtype, as the forward's were.
// With a residual (y = relu(bn(x) + r)) recomputing y would need r, and the masked gradient is
// the residual's too, so it must be written anyway: relu_output (the forward's y) gives the mask
// (y > 0 ? dy : 0, relu's own backward), and the pass that takes the sums writes the masked
// gradient to masked_dy as it reads dy; dx is computed from it. That is relu's backward folded
// into a pass that runs anyway: its separate read of dy and y and write of the masked gradient
// become one more read (y) and the write. Training, with dx, dweight or dbias requested (so the
// sums are taken), not with relu; relu_output and masked_dy laid out as dy.
struct BatchNormGradPrologue {
  bool relu = false;
  Tensor bias;
  Tensor relu_output;
  Tensor masked_dy;
};

// Whether a batch_norm_backward call takes the per-channel sums: dx in training, dweight or dbias.
inline bool batch_norm_takes_sums(bool training, const Tensor& dx, const Tensor& dweight, const Tensor& dbias) {
  return (dx.defined() && training) || dweight.defined() || dbias.defined();
}

// Throws a dp::Error unless `prologue` may be applied to this batch_norm_backward call (the
// conditions above); need_sums: batch_norm_takes_sums.
void check_grad_prologue(const char* op, const BatchNormGradPrologue& prologue, const Tensor& dy, bool training,
                         bool need_sums);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType device_type() const = 0;
  virtual int device_index() const = 0;
  Device device() { return Device(this); }

  // Whether this backend runs `kernel` on operands of `dtype`: the op's floating dtype (its
  // activations, logits or parameters); for copies and fills the destination's.
  virtual bool supports(Kernel kernel, DType dtype) const = 0;

  // ---- Memory ----
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t nbytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t nbytes) = 0;
  // Waits for all work queued on this backend.
  virtual void synchronize() = 0;
  // A marker on this device's queue (DeviceMarker), or null when kernels run synchronously on
  // the host's clock (the CPU): then time them with the host clock.
  virtual std::unique_ptr<DeviceMarker> make_marker() { return nullptr; }

  // ---- Capture (CUDA graphs) ----
  // Whether begin_capture() can record this backend's work for replay.
  virtual bool supports_capture() const { return false; }
  // From here to end_capture(), work this thread queues on the backend is recorded, not run, and
  // its allocations come from a pool kept for replays. Reading a device value on the host, a
  // host→device copy and drawing random numbers are errors meanwhile (each would be frozen into
  // the graph).
  virtual void begin_capture() { unsupported("begin_capture"); }
  // Ends the capture and returns its work as a graph ready to replay (nothing of it has run yet).
  virtual std::unique_ptr<DeviceGraph> end_capture() { unsupported("end_capture"); }
  // Abandons a capture after an error (nothing recorded is kept); does nothing when none is in
  // progress.
  virtual void abort_capture() noexcept {}
  virtual bool capturing() const { return false; }

  // ---- Copies, casts, fills (dst any strides unless said) ----
  // dst = src, element-wise; same shape and device; any strides (stride 0 in src broadcasts);
  // any dtypes (casts). Every dtype pair is supported.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // Contiguous dst: dst[i] = start + i * step.
  virtual void arange(const Tensor& dst, double start, double step) = 0;
  // Contiguous floating dst from a counter-based generator (Philox-4x32-10): element i uses
  // counter (offset + i), so CPU and CUDA produce the same numbers for the same seed/offset. With
  // offset_base (one int64 on this device; NOTE [ Random numbers in CUDA graphs ]) the counter is
  // offset_base[0] + offset + i, read when the kernel runs.
  virtual void random(const Tensor& dst, RandomDist dist, double a, double b, uint64_t seed,
                      uint64_t offset, const Tensor& offset_base = Tensor()) = 0;

  // ---- Pointwise (floating) ----
  // y = op(x); same shape; x any strides, y contiguous.
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& y) { unsupported("unary"); }
  // dx = dy * op'(x) for contiguous x, y = op(x), dy, dx (each kernel reads what it needs).
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& dx) { unsupported("unary_backward"); }
  // out = a op b; a and b already expanded to out's shape (stride 0 where broadcast); out
  // contiguous. The three dtypes are equal.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) { unsupported("binary"); }
  // out = a op s, a any strides, out contiguous.
  virtual void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) { unsupported("binary_scalar"); }
  // y = alpha * x + beta * y; x and y contiguous, same shape and dtype. With beta == 0, y is
  // overwritten without being read (NaN-safe). Gradient accumulation and optimisers use it.
  virtual void axpby(double alpha, const Tensor& x, double beta, const Tensor& y) { unsupported("axpby"); }

  // ---- Reductions ----
  // out = reduce(x) over the dims where out has size 1 and x does not (out keeps all dims).
  // x any strides; out contiguous.
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out) { unsupported("reduce"); }
  // out[m] = argmax_n x[m, n] for contiguous 2-D x; out int64 [M]. First maximum wins.
  virtual void argmax_rows(const Tensor& x, const Tensor& out) { unsupported("argmax_rows"); }

  // ---- Matrix multiply (floating; float16/bfloat16 where the device has it) ----
  // c = alpha * a @ b + beta * c; a [B?, M, K], b [B?, K, N], c [B?, M, N] contiguous. a and b
  // each have a unit stride in one of their last two dims (row-major or transposed view);
  // batch strides are free (0 broadcasts). With beta == 0, c is not read.
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha,
                    double beta) { unsupported("gemm"); }

  // ---- Convolution; weight [Cout, Cin/groups, KH, KW] contiguous ----
  // x, y (dy, dx) [N, C, H, W] all NCHW-contiguous or all channels-last (NOTE [ Channels-last ],
  // common_memory_format); bias [Cout].
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias /*opt*/,
                              const Tensor& y, const Conv2dParams& p) { unsupported("conv2d_forward"); }
  // dx = the input gradient, or with `accumulate` dx += it (NOTE [ Summing into a pending
  // gradient ], autograd/engine.h: in the accumulation precision, rounded once).
  virtual void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                                     bool accumulate) { unsupported("conv2d_backward_input"); }
  // dw (and dbias when defined) are overwritten.
  virtual void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                      const Tensor& dbias /*opt*/, const Conv2dParams& p) { unsupported("conv2d_backward_weight"); }

  // ---- Pooling: x, y, indices (dy, dx) all NCHW-contiguous or all channels-last ----
  // indices: int32 offsets h·W + w into each (n, c) input plane, whatever the format.
  virtual void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                                  const Pool2dParams& p) { unsupported("max_pool2d_forward"); }
  // dx (overwritten) = Σ over the outputs o whose index points at it of dy[o], in output order; p
  // is the forward's window (a backend may gather through it; indices decide).
  virtual void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx,
                                   const Pool2dParams& p) { unsupported("max_pool2d_backward"); }
  virtual void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) { unsupported("avg_pool2d_forward"); }
  virtual void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) { unsupported("avg_pool2d_backward"); }
  // Output size from y's shape; windows as in PyTorch (floor/ceil of proportional bounds).
  virtual void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) { unsupported("adaptive_avg_pool2d_forward"); }
  virtual void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) { unsupported("adaptive_avg_pool2d_backward"); }

  // ---- Normalisation (contiguous; batch norm's 4-D x, y, dy, dx may be channels-last instead,
  // all four alike) ----
  // x, y, dy, dx share one dtype; the per-feature tensors (weight, bias, running and saved
  // statistics, dweight, dbias) have x's dtype or, for float16/bfloat16 x, float32 (mixed
  // precision); statistics are computed in float32 or wider.
  // x [N, C, *]. Training: batch statistics, saved mean/invstd [C], running stats (optional in
  // training) updated in place with `momentum` (unbiased variance, as PyTorch). Eval: running
  // stats; save_* unused (may be undefined). weight/bias [C] optional. The epilogue (residual add,
  // relu) is applied to y in the same pass (BatchNormEpilogue).
  virtual void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  const Tensor& y, const Tensor& save_mean,
                                  const Tensor& save_invstd, bool training, double momentum,
                                  double eps, const BatchNormEpilogue& epilogue) { unsupported("batch_norm_forward"); }
  // Gradients through batch statistics (training) or through the running stats (eval, when
  // save_mean/save_invstd hold running mean and 1/sqrt(var+eps)). dx, dweight, dbias each
  // optional: undefined ones are not computed. The prologue (relu's mask) is applied to dy as it
  // is read (BatchNormGradPrologue).
  virtual void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   bool training, const BatchNormGradPrologue& prologue) {
    unsupported("batch_norm_backward");
  }
  // x [M, N], normalised over N; weight/bias [N] optional; save_mean/save_rstd [M].
  // Backward: dx, dweight, dbias each optional (undefined: not computed).
  virtual void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& y, const Tensor& save_mean,
                                  const Tensor& save_rstd, double eps) { unsupported("layer_norm_forward"); }
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   const Tensor& dx, const Tensor& dweight,
                                   const Tensor& dbias) { unsupported("layer_norm_backward"); }

  // ---- Softmax and loss (contiguous [M, N], over the last dim) ----
  virtual void softmax_forward(const Tensor& x, const Tensor& y, bool log) { unsupported("softmax_forward"); }
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                                bool log) { unsupported("softmax_backward"); }
  // Attention's softmax (NOTE [ Attention softmax ] in runtime/ops/attention.h):
  // y = softmax(scale·x + mask) over the last dim, computed in float32 (float64 for float64) and
  // written in x's dtype. x, y [B, R, N] contiguous, one dtype; mask undefined or a contiguous
  // float32 [Bm, Q, N] with Bm 1 or B and R a multiple of Q: row r of batch b adds mask row
  // (Bm == 1 ? 0 : b)·Q + r mod Q.
  virtual void attention_softmax_forward(const Tensor& x, const Tensor& mask, const Tensor& y,
                                         double scale) { unsupported("attention_softmax_forward"); }
  // y (the forward output), dy, dx [M, N] contiguous, one dtype: dx = scale·y·(dy − Σ dy·y).
  virtual void attention_softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                                          double scale) { unsupported("attention_softmax_backward"); }
  // logits [M, C], target int64 [M]. Writes log_probs [M, C] and per-sample losses [M]
  // (0 where target == ignore_index). Label smoothing as PyTorch: (1-ε)·nll + ε·mean(-log p).
  // Target values are data, so the kernel validates them: one outside [0, C) that is not
  // ignore_index is a dp::Error naming the value and C.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                     const Tensor& log_probs, const Tensor& losses,
                                     int64_t ignore_index, double label_smoothing) { unsupported("cross_entropy_forward"); }
  // dlogits = dloss[m] * (softmax - smoothed one-hot); zero rows where ignored.
  virtual void cross_entropy_backward(const Tensor& log_probs, const Tensor& target,
                                      const Tensor& dlosses, const Tensor& dlogits,
                                      int64_t ignore_index, double label_smoothing) { unsupported("cross_entropy_backward"); }

  // ---- Embedding ----
  // out [K, D] = weight[indices[k]]; indices int64 [K] contiguous; weight [V, D] contiguous.
  // An index outside [0, V) is a dp::Error naming it and V (validated by the kernel: data).
  virtual void embedding_forward(const Tensor& weight, const Tensor& indices,
                                 const Tensor& out) { unsupported("embedding_forward"); }
  // dweight (zeroed by the caller) += scatter of dout rows; rows equal to padding_idx skipped.
  virtual void embedding_backward(const Tensor& dout, const Tensor& indices,
                                  const Tensor& dweight, int64_t padding_idx) { unsupported("embedding_backward"); }

  // ---- Fused optimiser updates over contiguous (flat) buffers ----
  // PyTorch SGD: g += wd*p; buf = first ? g : momentum*buf + (1-dampening)*g;
  // g = nesterov ? g + momentum*buf : buf; p -= lr*g. momentum_buf unused when momentum == 0.
  virtual void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                          const SgdParams& p) { unsupported("sgd_update"); }
  // torch.optim.AdamW, bc_k = 1 − beta_k^step: p *= 1 − lr·wd; m = b1·m + (1−b1)·g;
  // v = b2·v + (1−b2)·g²; p −= (lr/bc1) · m / (√v/√bc2 + eps); g = grad / grad_divisor.
  // param, grad, exp_avg, exp_avg_sq: same numel, contiguous, one dtype.
  virtual void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamParams& p) { unsupported("adamw_update"); }
  // LAMB's first stage (apex FusedLAMB, adam_w_mode): the moments as adamw_update, then
  // update = (m/bc1) / (√(v/bc2) + eps) + wd·p. param is read, not written; update has its numel.
  virtual void lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const Tensor& update,
                              const AdamParams& p) { unsupported("lamb_direction"); }
  // LAMB's second stage: param −= T(lr·trust)·update, one fused multiply-add per element (what
  // axpby(−lr·trust, update, 1, param) rounds to); nothing when found_inf is set. param and update:
  // same numel, contiguous, one dtype.
  virtual void lamb_update(const Tensor& param, const Tensor& update, const LambUpdateParams& p) {
    unsupported("lamb_update");
  }
  // LARS with the trust ratio given, d = g + wd·p:
  //   lr inside (MLPerf reference):  buf = momentum·buf − lr·trust·d;  p += buf
  //   lr outside (torch-SGD style):  buf = momentum·buf + trust·d;     p −= lr·buf
  // momentum_buf starts zeroed (allocated by the caller).
  virtual void lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                           const LarsParams& p) { unsupported("lars_update"); }
  // Multi-tensor forms (PyTorch's foreach optimisers): every item updated exactly as its
  // single-tensor call would update it, bit for bit, in one call per optimiser step. The base
  // class makes those calls in order; a backend that launches kernels overrides them to cover
  // many parameters per launch (CUDA: items that share their scalars go in one kernel).
  virtual void sgd_update_multi(const std::vector<SgdUpdateItem>& items);
  virtual void adamw_update_multi(const std::vector<AdamwUpdateItem>& items);
  virtual void lamb_direction_multi(const std::vector<LambDirectionItem>& items);
  virtual void lamb_update_multi(const std::vector<LambUpdateItem>& items);
  virtual void lars_update_multi(const std::vector<LarsUpdateItem>& items);
  // LARS trust ratios where the norms are: out[i] = eta·‖w_i‖ / (‖g_i‖ + wd·‖w_i‖ + eps), and 1
  // when either norm is 0 (LARS::trust_ratio), from squared_norms = (‖w_0‖², ‖g_0‖², ‖w_1‖², …)
  // float64 [2n] as squared_norms() writes them; out float64 [n]; both contiguous (views allowed).
  // One weight decay for all: call once per parameter group.
  virtual void lars_trust_ratios(const Tensor& squared_norms, double weight_decay, double eta, double eps,
                                 const Tensor& out) { unsupported("lars_trust_ratios"); }
  // out[i] = Σ xs[i]² accumulated in float64; xs contiguous float32/float64 on this device (any
  // mix), out float64 [xs.size()] contiguous. One call covers every tensor (global-norm
  // clipping, LARS/LAMB per-tensor norms).
  virtual void squared_norms(const std::vector<Tensor>& xs, const Tensor& out) { unsupported("squared_norms"); }

  // ---- Dynamic loss scaling, decided on the device (optim/grad_scaler.h) ----
  // PyTorch's _amp_foreach_non_finite_check_and_unscale_: every grads[k] (contiguous, floating,
  // any mix of dtypes the backend supports) is multiplied in place by inv = 1/scale[0] (the
  // reciprocal taken in double and rounded to float32, as GradScaler's inv_scale), the product
  // in float32 (float64 for float64 gradients), and found_inf[0] is set to 1 when any value was
  // inf or NaN. found_inf is never cleared here: several calls in one step accumulate, and the
  // caller zeroes it after the scale update. found_inf and scale: float32, one element, on this
  // device.
  virtual void amp_unscale_and_check(const std::vector<Tensor>& grads, const Tensor& found_inf,
                                     const Tensor& scale) { unsupported("amp_unscale_and_check"); }
  // PyTorch's _amp_update_scale_, in place: when found_inf[0] ≠ 0, scale ·= backoff_factor and
  // growth_tracker = 0; otherwise growth_tracker + 1 reaching growth_interval grows the scale by
  // growth_factor (unless that is not finite in float32: the scale then stays) and resets the
  // tracker, else the tracker counts up. Products in double, stored as float32. scale and
  // found_inf: float32, growth_tracker: int32, one element each, on this device.
  virtual void amp_update_scale(const Tensor& scale, const Tensor& growth_tracker, const Tensor& found_inf,
                                double growth_factor, double backoff_factor, int64_t growth_interval) {
    unsupported("amp_update_scale");
  }

  // ---- Device-resident step bookkeeping (NOTE [ Device-resident optimiser step ]) ----
  // Advances every int64 one-element counter in `counters` by the rule `how` from found_inf[0]
  // (float32 one element; undefined reads as 0, for StepCounting::Always and host-gated steps).
  virtual void count_steps(const std::vector<Tensor>& counters, const Tensor& found_inf, StepCounting how) {
    unsupported("count_steps");
  }
  // out[0] = table[min(clock[0], n − 1)]: a schedule's lr for the clock's step, looked up on the
  // device. table float64 [n ≥ 1] contiguous, clock int64 [], out float64 [].
  virtual void lr_lookup(const Tensor& table, const Tensor& clock, const Tensor& out) { unsupported("lr_lookup"); }
  // Gradient clipping's coefficient, clip_grad_norm_ on the device: total = Σ squared_norms[i]
  // summed in index order in float64, norm = √total; out = (norm, coef) float64 [2] with
  // coef = min(1, max_norm / (norm + 1e-6)), or 1 when norm is not finite, in which case
  // found_inf[0] is also set to 1 (never cleared). max_norm > 0.
  virtual void clip_coefficient(const Tensor& squared_norms, double max_norm, const Tensor& found_inf,
                                const Tensor& out) { unsupported("clip_coefficient"); }
  // xs[k] *= T(factor[0]) in place for every contiguous float32/float64 tensor of xs; factor is
  // float64 [] (or a one-element view) on this device. (clip_coefficient's coef: a factor of 1
  // changes nothing, exactly.)
  virtual void scale_by(const std::vector<Tensor>& xs, const Tensor& factor) { unsupported("scale_by"); }

 protected:
  // For kernels a backend does not provide: throws "<op>: no <CPU|CUDA> kernel (device ...)".
  [[noreturn]] void unsupported(const char* op) const;
};

// Records `work` on `backend` as a graph (begin_capture, work, end_capture); a throw from work or
// from the capture abandons the capture (abort_capture) and propagates.
std::unique_ptr<DeviceGraph> capture_graph(Backend& backend, const std::function<void()>& work);

}  // namespace dp
