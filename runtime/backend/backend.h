// The backend interface: the short list of kernels a device must provide.
//
// NOTE [ Backend contract ]
// Ops in runtime/ops/ validate arguments, allocate outputs on the input's device and call one of
// these kernels; everything else is composed from them. A kernel may assume what its comment
// says (shapes already checked, "contiguous" inputs really contiguous, outputs allocated).
// Dtypes: floating kernels support float32 and float64 on every backend; float16/bfloat16 are
// supported where a kernel says so (casts, copies, fills and GEMM everywhere). A kernel that a
// backend does not provide throws dp::Error naming the op and the device (see unsupported()).
// Kernels run on the backend's stream (CUDA) or its thread pool (CPU); none synchronises
// with the host except synchronize() and copy_to_host().
#pragma once

#include <cstddef>
#include <cstdint>
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

struct SgdParams {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffer starts as the (decayed) gradient, as in PyTorch
};

// Adam moments with bias correction, shared by adamw_update and lamb_direction.
struct AdamParams {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  int64_t step = 1;          // this parameter's update count, 1-based (bias correction)
  double grad_divisor = 1;   // the gradient is used as g / grad_divisor (LAMB's global clipping)
};

struct LarsParams {
  double lr = 0, momentum = 0, weight_decay = 0;
  double trust = 1;                  // the trust ratio, computed by the caller from the norms
  bool lr_outside_momentum = false;  // the two forms: see lars_update
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType device_type() const = 0;
  virtual int device_index() const = 0;
  Device device() { return Device(this); }

  // ---- Memory ----
  virtual void* allocate(size_t nbytes) = 0;
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual void copy_from_host(void* dst, const void* host_src, size_t nbytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t nbytes) = 0;
  // Waits for all work queued on this backend.
  virtual void synchronize() = 0;

  // ---- Copies, casts, fills (dst any strides unless said) ----
  // dst = src, element-wise; same shape and device; any strides (stride 0 in src broadcasts);
  // any dtypes (casts). Every dtype pair is supported.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // Contiguous dst: dst[i] = start + i * step.
  virtual void arange(const Tensor& dst, double start, double step) = 0;
  // Contiguous floating dst from a counter-based generator (Philox-4x32-10): element i uses
  // counter (offset + i), so CPU and CUDA produce the same numbers for the same seed/offset.
  virtual void random(const Tensor& dst, RandomDist dist, double a, double b, uint64_t seed,
                      uint64_t offset) = 0;

  // ---- Pointwise (floating) ----
  // y = op(x); same shape; x any strides, y contiguous.
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& y) = 0;
  // dx = dy * op'(x) for contiguous x, y = op(x), dy, dx (each kernel reads what it needs).
  virtual void unary_backward(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor& dx) = 0;
  // out = a op b; a and b already expanded to out's shape (stride 0 where broadcast); out
  // contiguous. The three dtypes are equal.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = a op s, a any strides, out contiguous.
  virtual void binary_scalar(BinaryOp op, const Tensor& a, double s, const Tensor& out) = 0;
  // y = alpha * x + beta * y; x and y contiguous, same shape and dtype. With beta == 0, y is
  // overwritten without being read (NaN-safe). Gradient accumulation and optimisers use it.
  virtual void axpby(double alpha, const Tensor& x, double beta, const Tensor& y) = 0;

  // ---- Reductions ----
  // out = reduce(x) over the dims where out has size 1 and x does not (out keeps all dims).
  // x any strides; out contiguous.
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out) = 0;
  // out[m] = argmax_n x[m, n] for contiguous 2-D x; out int64 [M]. First maximum wins.
  virtual void argmax_rows(const Tensor& x, const Tensor& out) = 0;

  // ---- Matrix multiply (floating; float16/bfloat16 where the device has it) ----
  // c = alpha * a @ b + beta * c; a [B?, M, K], b [B?, K, N], c [B?, M, N] contiguous. a and b
  // each have a unit stride in one of their last two dims (row-major or transposed view);
  // batch strides are free (0 broadcasts). With beta == 0, c is not read.
  virtual void gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha,
                    double beta) = 0;

  // ---- Convolution, NCHW, all contiguous; weight [Cout, Cin/groups, KH, KW] ----
  virtual void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias /*opt*/,
                              const Tensor& y, const Conv2dParams& p) = 0;
  virtual void conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx,
                                     const Conv2dParams& p) = 0;
  // dw (and dbias when defined) are overwritten.
  virtual void conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw,
                                      const Tensor& dbias /*opt*/, const Conv2dParams& p) = 0;

  // ---- Pooling, NCHW contiguous ----
  // indices: int32 flat offsets into each (n, c) input plane, for backward.
  virtual void max_pool2d_forward(const Tensor& x, const Tensor& y, const Tensor& indices,
                                  const Pool2dParams& p) = 0;
  virtual void max_pool2d_backward(const Tensor& dy, const Tensor& indices, const Tensor& dx) = 0;
  virtual void avg_pool2d_forward(const Tensor& x, const Tensor& y, const Pool2dParams& p) = 0;
  virtual void avg_pool2d_backward(const Tensor& dy, const Tensor& dx, const Pool2dParams& p) = 0;
  // Output size from y's shape; windows as in PyTorch (floor/ceil of proportional bounds).
  virtual void adaptive_avg_pool2d_forward(const Tensor& x, const Tensor& y) = 0;
  virtual void adaptive_avg_pool2d_backward(const Tensor& dy, const Tensor& dx) = 0;

  // ---- Normalisation (contiguous) ----
  // x [N, C, *]. Training: batch statistics, saved mean/invstd [C], running stats (optional in
  // training) updated in place with `momentum` (unbiased variance, as PyTorch). Eval: running
  // stats; save_* unused (may be undefined). weight/bias [C] optional.
  virtual void batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& running_mean, const Tensor& running_var,
                                  const Tensor& y, const Tensor& save_mean,
                                  const Tensor& save_invstd, bool training, double momentum,
                                  double eps) = 0;
  // Gradients through batch statistics (training) or through the running stats (eval, when
  // save_mean/save_invstd hold running mean and 1/sqrt(var+eps)). dx, dweight, dbias each
  // optional: undefined ones are not computed.
  virtual void batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_invstd,
                                   const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                                   bool training) = 0;
  // x [M, N], normalised over N; weight/bias [N] optional; save_mean/save_rstd [M].
  // Backward: dx, dweight, dbias each optional (undefined: not computed).
  virtual void layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  const Tensor& y, const Tensor& save_mean,
                                  const Tensor& save_rstd, double eps) = 0;
  virtual void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                   const Tensor& save_mean, const Tensor& save_rstd,
                                   const Tensor& dx, const Tensor& dweight,
                                   const Tensor& dbias) = 0;

  // ---- Softmax and loss (contiguous [M, N], over the last dim) ----
  virtual void softmax_forward(const Tensor& x, const Tensor& y, bool log) = 0;
  virtual void softmax_backward(const Tensor& y, const Tensor& dy, const Tensor& dx,
                                bool log) = 0;
  // logits [M, C], target int64 [M]. Writes log_probs [M, C] and per-sample losses [M]
  // (0 where target == ignore_index). Label smoothing as PyTorch: (1-ε)·nll + ε·mean(-log p).
  // Target values are data, so the kernel validates them: one outside [0, C) that is not
  // ignore_index is a dp::Error naming the value and C.
  virtual void cross_entropy_forward(const Tensor& logits, const Tensor& target,
                                     const Tensor& log_probs, const Tensor& losses,
                                     int64_t ignore_index, double label_smoothing) = 0;
  // dlogits = dloss[m] * (softmax - smoothed one-hot); zero rows where ignored.
  virtual void cross_entropy_backward(const Tensor& log_probs, const Tensor& target,
                                      const Tensor& dlosses, const Tensor& dlogits,
                                      int64_t ignore_index, double label_smoothing) = 0;

  // ---- Embedding ----
  // out [K, D] = weight[indices[k]]; indices int64 [K] contiguous; weight [V, D] contiguous.
  // An index outside [0, V) is a dp::Error naming it and V (validated by the kernel: data).
  virtual void embedding_forward(const Tensor& weight, const Tensor& indices,
                                 const Tensor& out) = 0;
  // dweight (zeroed by the caller) += scatter of dout rows; rows equal to padding_idx skipped.
  virtual void embedding_backward(const Tensor& dout, const Tensor& indices,
                                  const Tensor& dweight, int64_t padding_idx) = 0;

  // ---- Fused optimiser updates over contiguous (flat) buffers ----
  // PyTorch SGD: g += wd*p; buf = first ? g : momentum*buf + (1-dampening)*g;
  // g = nesterov ? g + momentum*buf : buf; p -= lr*g. momentum_buf unused when momentum == 0.
  virtual void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                          const SgdParams& p) = 0;
  // torch.optim.AdamW, bc_k = 1 − beta_k^step: p *= 1 − lr·wd; m = b1·m + (1−b1)·g;
  // v = b2·v + (1−b2)·g²; p −= (lr/bc1) · m / (√v/√bc2 + eps); g = grad / grad_divisor.
  // param, grad, exp_avg, exp_avg_sq: same numel, contiguous, one dtype.
  virtual void adamw_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, const AdamParams& p) = 0;
  // LAMB's first stage (apex FusedLAMB, adam_w_mode): the moments as adamw_update, then
  // update = (m/bc1) / (√(v/bc2) + eps) + wd·p. param is read, not written; update has its numel.
  virtual void lamb_direction(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                              const Tensor& exp_avg_sq, const Tensor& update,
                              const AdamParams& p) = 0;
  // LARS with the trust ratio given, d = g + wd·p:
  //   lr inside (MLPerf reference):  buf = momentum·buf − lr·trust·d;  p += buf
  //   lr outside (torch-SGD style):  buf = momentum·buf + trust·d;     p −= lr·buf
  // momentum_buf starts zeroed (allocated by the caller).
  virtual void lars_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buf,
                           const LarsParams& p) = 0;
  // out[i] = Σ xs[i]² accumulated in float64; xs contiguous float32/float64 on this device (any
  // mix), out float64 [xs.size()] contiguous. One call covers every tensor (global-norm
  // clipping, LARS/LAMB per-tensor norms).
  virtual void squared_norms(const std::vector<Tensor>& xs, const Tensor& out) = 0;

 protected:
  // For kernels a backend does not have yet: throws "<op>: no <device> kernel yet".
  [[noreturn]] void unsupported(const char* op) const;
};

}  // namespace dp
