// Batch norm (cuDNN, with norm.cu's kernels for what cuDNN leaves) and layer norm (norm.cu).
//
// Why cuDNN's LEGACY batch-norm API (cudnnBatchNormalizationForwardTraining /
// ForwardInference / Backward): PyTorch's own cuDNN batch-norm path calls exactly these; they
// are stable and documented in cuDNN 9 (marked deprecated in favour of the graph API, not
// removed); and they are far less code than the raw backend (graph) API without cudnn-frontend,
// which is not available here. That matters for code written before a GPU could run it: every
// line of descriptor plumbing is a line that cannot be tested yet.
//
// cuDNN runs batch norm (CUDNN_BATCHNORM_SPATIAL, x described as 4-D [N, C, L, 1], L the product
// of the trailing dims) when all of these hold, else norm.cu's kernels do (same semantics;
// channels-last x as [N·H·W, C, 1]):
//   - x is NCHW-contiguous: channels-last x always takes norm.cu's kernels (measured: cuDNN's
//     legacy SPATIAL mode on NHWC is ~10x slower, see cudnn_batch_norm_ok);
//   - x is float32, float64 or float16 (PyTorch does not use cuDNN batch norm for bfloat16
//     either); cuDNN's parameters/statistics are float32 (float64 for float64 x), so
//     per-channel tensors in another dtype are cast into temporaries and the results
//     (running stats, save_*, dweight, dbias) cast back in place;
//   - N <= 880801 (training) or N <= 65535 (eval), PyTorch's limits for the spatial mode, and
//     x.numel() fits the descriptors' int;
//   - forward: eps >= CUDNN_BN_MIN_EPSILON (cuDNN refuses a smaller one), and no fused epilogue
//     (BatchNormEpilogue: residual add, relu), which the legacy API cannot apply;
//   - backward: training mode, dx wanted and no relu prologue (BatchNormGradPrologue: it
//     recomputes the forward that norm.cu ran). Eval-mode backward (the statistics are constants)
//     and parameter-only gradients are norm.cu's reductions.
// Semantics, as the CPU backend: running stats updated with `momentum` as cuDNN's
// exponentialAverageFactor and the unbiased batch variance (cuDNN does this too); save_invstd =
// 1/sqrt(var + eps) (cuDNN's resultSaveInvVariance). Undefined weight/bias → temporaries of
// ones/zeros for cuDNN; undefined dx/dweight/dbias → temporaries that are dropped; undefined
// running stats in training → NULL (cuDNN then skips the update).
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/norm_kernels.h"

namespace dp::cuda {

namespace {

// float32 for float16/bfloat16/float32, float64 for float64: what cuDNN wants for batch-norm
// parameters and what norm.cu accumulates in.
DType acc_dtype(DType dtype) { return dtype == kFloat64 ? kFloat64 : kFloat32; }

// The one dtype the per-feature tensors are handed to the kernels in (norm_kernels.h): x's
// dtype when every defined one already is (and is contiguous), else the accumulation type.
DType choose_param_dtype(DType x_dtype, std::initializer_list<const Tensor*> params) {
  for (const Tensor* p : params)
    if (p->defined() && (p->dtype() != x_dtype || !p->is_contiguous())) return acc_dtype(x_dtype);
  return x_dtype;
}

// Per-feature operands in one dtype: tensors already in it (and contiguous) are used as they
// are; others go through temporaries (device-side casts on the backend's stream), and outputs
// are cast back by finish().
class ParamOperands {
 public:
  ParamOperands(CudaBackend& backend, DType dtype) : backend_(backend), dtype_(dtype) {}

  DType dtype() const { return dtype_; }

  // A read-only operand; undefined stays undefined.
  Tensor in(const Tensor& t) {
    if (!t.defined() || fits(t)) return t;
    Tensor tmp = Tensor::empty(t.shape(), dtype_, backend_.device());
    backend_.copy(t, tmp);
    return tmp;
  }

  // An output (read too when `read`), written back into t by finish(); undefined stays undefined.
  Tensor out(const Tensor& t, bool read = false) {
    if (!t.defined() || fits(t)) return t;
    Tensor tmp = read ? in(t) : Tensor::empty(t.shape(), dtype_, backend_.device());
    write_back_.emplace_back(tmp, t);
    return tmp;
  }

  // A temporary [n] filled with `value` (cuDNN's stand-in for an undefined weight or bias).
  Tensor filled(int64_t n, double value) {
    Tensor tmp = Tensor::empty({n}, dtype_, backend_.device());
    backend_.fill(tmp, value);
    return tmp;
  }

  // A temporary [n] for an output nobody asked for (dropped afterwards).
  Tensor scratch(int64_t n) { return Tensor::empty({n}, dtype_, backend_.device()); }

  void finish() {
    for (auto& [tmp, original] : write_back_) backend_.copy(tmp, original);
    write_back_.clear();
  }

 private:
  bool fits(const Tensor& t) const { return t.dtype() == dtype_ && t.is_contiguous(); }

  CudaBackend& backend_;
  DType dtype_;
  std::vector<std::pair<Tensor, Tensor>> write_back_;  // (temporary, original)
};

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// A batch-norm problem: x [N, C, *] as norm.cu's kernels see it ([N, C, S], or [N·H·W, C, 1]
// when channels-last: NOTE [ Channels-last ]), and as cuDNN's descriptors describe it.
struct BatchNormProblem {
  BatchNormShape kernel;     // for norm.cu
  bool channels_last = false;
  int64_t n = 0, c = 0, s = 0;  // cuDNN: x as [n, c, s, 1] NCHW (channels-last never reaches cuDNN)
};

// `activations`: x and the other tensors of x's shape in the call, one memory format for all.
BatchNormProblem batch_norm_problem(const char* op, std::initializer_list<const Tensor*> activations) {
  const Tensor& x = **activations.begin();
  BatchNormProblem q;
  q.channels_last = x.dim() == 4 && common_memory_format(op, activations) == MemoryFormat::ChannelsLast;
  const int64_t N = x.size(0), C = x.size(1), S = N * C > 0 ? x.numel() / (N * C) : 0;
  q.kernel = q.channels_last ? BatchNormShape{N * S, C, 1} : BatchNormShape{N, C, S};
  q.n = N;
  q.c = C;
  q.s = S;  // [N, C, S, 1] covers every trailing shape
  return q;
}

// See the top of the file: when cuDNN runs batch norm.
bool cudnn_batch_norm_ok(const Tensor& x, const BatchNormProblem& q, bool training) {
  const DType d = x.dtype();
  if (d != kFloat32 && d != kFloat64 && d != kFloat16) return false;
  // Channels-last: the legacy API's SPATIAL mode on NHWC was the whole cost of a ResNet-50 step
  // (H200, b128, 2026-11-27: 439 ms in float32 and 406 in float16 against 51 in bfloat16, which
  // took norm.cu's column kernels; PyTorch 43 / 24 / 30 ms), so NHWC goes to norm.cu.
  if (q.channels_last) return false;
  if (q.n > (training ? 880801 : 65535)) return false;
  return x.numel() <= INT_MAX;
}

void check_per_feature(const char* op, const char* name, const Tensor& t, int64_t n) {
  if (!t.defined()) return;
  DP_CHECK(t.numel() == n, op, ": ", name, " must have ", n, " elements, got ", t.str());
}

// ---- cuDNN ------------------------------------------------------------------------------------

class TensorDescriptor {
 public:
  explicit TensorDescriptor(int device) { DP_CUDNN_CHECK(device, cudnnCreateTensorDescriptor(&desc_)); }
  ~TensorDescriptor() {
    if (desc_) cudnnDestroyTensorDescriptor(desc_);
  }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

cudnnDataType_t cudnn_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}

// cuDNN's alpha/beta: double for double data, float otherwise.
struct BlendFactor {
  explicit BlendFactor(double v) : as_double(v), as_float(static_cast<float>(v)) {}
  const void* for_dtype(DType dtype) const {
    return dtype == kFloat64 ? static_cast<const void*>(&as_double) : &as_float;
  }
  double as_double;
  float as_float;
};

// x as [N, C, S, 1] NCHW (cudnn_batch_norm_ok keeps channels-last x away) and the derived
// [1, C, 1, 1] parameter descriptor.
struct BatchNormDescriptors {
  TensorDescriptor x, param;
  BatchNormDescriptors(int device, DType dtype, const BatchNormProblem& q) : x(device), param(device) {
    DP_CUDNN_CHECK(device,
                   cudnnSetTensor4dDescriptor(x.get(), CUDNN_TENSOR_NCHW, cudnn_dtype(dtype), static_cast<int>(q.n),
                                              static_cast<int>(q.c), static_cast<int>(q.s), 1),
                   "batch norm input [", q.n, ", ", q.c, ", ", q.s, ", 1]");
// The legacy batch-norm API is deprecated in cuDNN 9 (in favour of the graph API) and used on
// purpose (see the top of this file); the warning (only with CUDNN_WARN_DEPRECATED) is silenced
// for these calls alone.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    DP_CUDNN_CHECK(device, cudnnDeriveBNTensorDescriptor(param.get(), x.get(), CUDNN_BATCHNORM_SPATIAL));
#pragma GCC diagnostic pop
  }
};

// The backward never sees eps. cuDNN asks for the forward's; with savedMean/savedInvVariance
// given (always, here) it does not use it, so any value cuDNN accepts will do.
constexpr double kBackwardEpsilon = CUDNN_BN_MIN_EPSILON > 1e-5 ? CUDNN_BN_MIN_EPSILON : 1e-5;

}  // namespace

// x, y [N, C, *] contiguous, or both channels-last; weight, bias, running_mean, running_var,
// save_mean, save_invstd [C].
void CudaBackend::batch_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                     const Tensor& running_mean, const Tensor& running_var, const Tensor& y,
                                     const Tensor& save_mean, const Tensor& save_invstd, bool training,
                                     double momentum, double eps, const BatchNormEpilogue& epilogue) {
  constexpr const char* op = "batch_norm_forward";
  const Tensor& residual = epilogue.residual;
  for (const Tensor* t :
       {&x, &weight, &bias, &running_mean, &running_var, &y, &save_mean, &save_invstd, &residual})
    if (t->defined()) check_operand(op, *t);
  check_supported(Kernel::BatchNormForward, x.dtype());
  DP_CHECK(x.dim() >= 2, op, ": expected an input [N, C, *], got ", x.str());
  DP_CHECK(y.shape() == x.shape() && y.dtype() == x.dtype(), op, ": output ", y.str(), " must match the input ",
           x.str());
  DP_CHECK(running_mean.defined() == running_var.defined(), op,
           ": give both running_mean and running_var, or neither");
  DP_CHECK(training ? (save_mean.defined() && save_invstd.defined()) : running_mean.defined(), op,
           training ? ": training needs save_mean and save_invstd" : ": eval needs running_mean and running_var");
  DP_CHECK(!residual.defined() || (residual.shape() == x.shape() && residual.dtype() == x.dtype()), op,
           ": residual ", residual.str(), " must match the input ", x.str());
  const BatchNormProblem q =
      residual.defined() ? batch_norm_problem(op, {&x, &y, &residual}) : batch_norm_problem(op, {&x, &y});
  const BatchNormShape s = q.kernel;
  for (auto [name, t] : {std::pair{"weight", &weight}, {"bias", &bias}, {"running_mean", &running_mean},
                         {"running_var", &running_var}, {"save_mean", &save_mean}, {"save_invstd", &save_invstd}})
    check_per_feature(op, name, *t, s.C);
  if (x.numel() == 0) return;
  activate();

  // cuDNN's legacy API has no epilogue: a fused one takes norm.cu's kernels, one pass over y.
  const bool fused = residual.defined() || epilogue.relu;
  const bool use_cudnn = !fused && eps >= CUDNN_BN_MIN_EPSILON && cudnn_batch_norm_ok(x, q, training);
  ParamOperands params(*this, use_cudnn ? acc_dtype(x.dtype())
                                        : choose_param_dtype(x.dtype(), {&weight, &bias, &running_mean, &running_var,
                                                                         &save_mean, &save_invstd}));
  Tensor w = params.in(weight), b = params.in(bias);
  // Training updates the running stats in place; eval only reads them.
  Tensor rmean = training ? params.out(running_mean, /*read=*/true) : params.in(running_mean);
  Tensor rvar = training ? params.out(running_var, /*read=*/true) : params.in(running_var);
  Tensor smean = training ? params.out(save_mean) : Tensor();
  Tensor sinvstd = training ? params.out(save_invstd) : Tensor();

  if (use_cudnn) {
    if (!w.defined()) w = params.filled(s.C, 1.0);
    if (!b.defined()) b = params.filled(s.C, 0.0);
    cudnnHandle_t handle = cudnn();
    const BatchNormDescriptors desc(device_, x.dtype(), q);
    const BlendFactor one(1.0), zero(0.0);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // legacy API on purpose (top of file)
    if (training) {
      DP_CUDNN_CHECK(device_,
                     cudnnBatchNormalizationForwardTraining(
                         handle, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(x.dtype()), zero.for_dtype(x.dtype()),
                         desc.x.get(), x.raw_data(), desc.x.get(), y.raw_data(), desc.param.get(), w.raw_data(),
                         b.raw_data(), momentum, ptr_or_null(rmean), ptr_or_null(rvar), eps, smean.raw_data(),
                         sinvstd.raw_data()),
                     op, " ", x.str());
    } else {
      DP_CUDNN_CHECK(device_,
                     cudnnBatchNormalizationForwardInference(
                         handle, CUDNN_BATCHNORM_SPATIAL, one.for_dtype(x.dtype()), zero.for_dtype(x.dtype()),
                         desc.x.get(), x.raw_data(), desc.x.get(), y.raw_data(), desc.param.get(), w.raw_data(),
                         b.raw_data(), rmean.raw_data(), rvar.raw_data(), eps),
                     op, " ", x.str());
    }
#pragma GCC diagnostic pop
  } else {
    Tensor workspace = Tensor::empty({static_cast<int64_t>(batch_norm_workspace_bytes(x.dtype(), s))}, kUInt8,
                                     device());
    BatchNormForwardArgs args;
    args.x = x.raw_data();
    args.y = y.raw_data();
    args.residual = ptr_or_null(residual);
    args.relu = epilogue.relu;
    args.weight = ptr_or_null(w);
    args.bias = ptr_or_null(b);
    args.running_mean = ptr_or_null(rmean);
    args.running_var = ptr_or_null(rvar);
    args.save_mean = ptr_or_null(smean);
    args.save_invstd = ptr_or_null(sinvstd);
    DP_CUDA_CHECK(device_,
                  launch_batch_norm_forward(args, x.dtype(), params.dtype(), s, training, momentum, eps,
                                            workspace.raw_data(), stream_),
                  op, " ", x.str());
  }
  params.finish();
}

// dy, x, dx [N, C, *] contiguous, or all channels-last; weight, save_mean, save_invstd, dweight,
// dbias, prologue.bias [C]. relu's prologue recomputes the forward's y with norm.cu's arithmetic,
// which is also what ran that forward (a fused epilogue never takes cuDNN), in the accumulation
// type, as that forward's parameters were (its saved statistics are in it).
void CudaBackend::batch_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const Tensor& save_mean, const Tensor& save_invstd, const Tensor& dx,
                                      const Tensor& dweight, const Tensor& dbias, bool training,
                                      const BatchNormGradPrologue& prologue) {
  constexpr const char* op = "batch_norm_backward";
  for (const Tensor* t : {&dy, &x, &weight, &save_mean, &save_invstd, &dx, &dweight, &dbias, &prologue.bias,
                          &prologue.relu_output, &prologue.masked_dy})
    if (t->defined()) check_operand(op, *t);
  check_grad_prologue(op, prologue, dy, training, batch_norm_takes_sums(training, dx, dweight, dbias));
  check_supported(Kernel::BatchNormBackward, x.dtype());
  DP_CHECK(x.dim() >= 2, op, ": expected an input [N, C, *], got ", x.str());
  DP_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype(), op, ": gradient ", dy.str(),
           " must match the input ", x.str());
  DP_CHECK(!dx.defined() || (dx.shape() == x.shape() && dx.dtype() == x.dtype()), op, ": dx ",
           dx.defined() ? dx.str() : "", " must match the input ", x.str());
  DP_CHECK(save_mean.defined() && save_invstd.defined(), op, ": save_mean and save_invstd are required");
  const BatchNormProblem q =
      dx.defined() ? batch_norm_problem(op, {&x, &dy, &dx}) : batch_norm_problem(op, {&x, &dy});
  const BatchNormShape s = q.kernel;
  for (auto [name, t] : {std::pair{"weight", &weight}, {"save_mean", &save_mean}, {"save_invstd", &save_invstd},
                         {"dweight", &dweight}, {"dbias", &dbias}, {"bias", &prologue.bias}})
    check_per_feature(op, name, *t, s.C);
  if (x.numel() == 0 || (!dx.defined() && !dweight.defined() && !dbias.defined())) return;
  activate();

  const bool use_cudnn = training && dx.defined() && !prologue.relu && !prologue.relu_output.defined() &&
                         cudnn_batch_norm_ok(x, q, /*training=*/true);
  const DType param_dtype = use_cudnn || prologue.relu
                                ? acc_dtype(x.dtype())
                                : choose_param_dtype(x.dtype(), {&weight, &save_mean, &save_invstd, &dweight, &dbias});
  ParamOperands params(*this, param_dtype);
  Tensor w = params.in(weight), mean = params.in(save_mean), invstd = params.in(save_invstd);
  Tensor b = params.in(prologue.bias);
  Tensor dw = params.out(dweight), db = params.out(dbias);

  if (use_cudnn) {
    if (!w.defined()) w = params.filled(s.C, 1.0);
    if (!dw.defined()) dw = params.scratch(s.C);
    if (!db.defined()) db = params.scratch(s.C);
    cudnnHandle_t handle = cudnn();
    const BatchNormDescriptors desc(device_, x.dtype(), q);
    const BlendFactor one(1.0), zero(0.0);
    const void* a = one.for_dtype(x.dtype());
    const void* z = zero.for_dtype(x.dtype());
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // legacy API on purpose (top of file)
    DP_CUDNN_CHECK(device_,
                   cudnnBatchNormalizationBackward(handle, CUDNN_BATCHNORM_SPATIAL, a, z, a, z, desc.x.get(),
                                                   x.raw_data(), desc.x.get(), dy.raw_data(), desc.x.get(),
                                                   dx.raw_data(), desc.param.get(), w.raw_data(), dw.raw_data(),
                                                   db.raw_data(), kBackwardEpsilon, mean.raw_data(),
                                                   invstd.raw_data()),
                   op, " ", x.str());
#pragma GCC diagnostic pop
  } else {
    Tensor workspace = Tensor::empty({static_cast<int64_t>(batch_norm_workspace_bytes(x.dtype(), s))}, kUInt8,
                                     device());
    BatchNormBackwardArgs args;
    args.dy = dy.raw_data();
    args.x = x.raw_data();
    args.weight = ptr_or_null(w);
    args.save_mean = mean.raw_data();
    args.save_invstd = invstd.raw_data();
    args.dx = ptr_or_null(dx);
    args.dweight = ptr_or_null(dw);
    args.dbias = ptr_or_null(db);
    args.relu = prologue.relu;
    args.bias = ptr_or_null(b);
    args.relu_output = ptr_or_null(prologue.relu_output);
    args.masked_dy = ptr_or_null(prologue.masked_dy);
    DP_CUDA_CHECK(device_,
                  launch_batch_norm_backward(args, x.dtype(), params.dtype(), s, training, workspace.raw_data(),
                                             stream_),
                  op, " ", x.str());
  }
  params.finish();
}

// x, y [M, N] contiguous, normalised over N; weight, bias [N] optional; save_mean, save_rstd [M].
void CudaBackend::layer_norm_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& y,
                                     const Tensor& save_mean, const Tensor& save_rstd, double eps) {
  constexpr const char* op = "layer_norm_forward";
  for (const Tensor* t : {&x, &weight, &bias, &y, &save_mean, &save_rstd})
    if (t->defined()) check_operand(op, *t);
  check_supported(Kernel::LayerNormForward, x.dtype());
  DP_CHECK(x.dim() == 2 && x.is_contiguous(), op, ": expected a contiguous input [M, N], got ", x.str());
  DP_CHECK(y.shape() == x.shape() && y.dtype() == x.dtype() && y.is_contiguous(), op, ": output ", y.str(),
           " must be contiguous and match the input ", x.str());
  DP_CHECK(save_mean.defined() && save_rstd.defined(), op, ": save_mean and save_rstd are required");
  const int64_t M = x.size(0), N = x.size(1);
  check_per_feature(op, "weight", weight, N);
  check_per_feature(op, "bias", bias, N);
  check_per_feature(op, "save_mean", save_mean, M);
  check_per_feature(op, "save_rstd", save_rstd, M);
  if (x.numel() == 0) return;
  activate();

  ParamOperands params(*this, choose_param_dtype(x.dtype(), {&weight, &bias, &save_mean, &save_rstd}));
  Tensor w = params.in(weight), b = params.in(bias);
  Tensor mean = params.out(save_mean), rstd = params.out(save_rstd);
  DP_CUDA_CHECK(device_,
                launch_layer_norm_forward(x.raw_data(), ptr_or_null(w), ptr_or_null(b), y.raw_data(), mean.raw_data(),
                                          rstd.raw_data(), x.dtype(), params.dtype(), M, N, eps, stream_),
                op, " ", x.str());
  params.finish();
}

// dy, x, dx [M, N] contiguous; weight, dweight, dbias [N]; save_mean, save_rstd [M].
void CudaBackend::layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight,
                                      const Tensor& save_mean, const Tensor& save_rstd, const Tensor& dx,
                                      const Tensor& dweight, const Tensor& dbias) {
  constexpr const char* op = "layer_norm_backward";
  for (const Tensor* t : {&dy, &x, &weight, &save_mean, &save_rstd, &dx, &dweight, &dbias})
    if (t->defined()) check_operand(op, *t);
  check_supported(Kernel::LayerNormBackward, x.dtype());
  DP_CHECK(x.dim() == 2 && x.is_contiguous(), op, ": expected a contiguous input [M, N], got ", x.str());
  DP_CHECK(dy.shape() == x.shape() && dy.dtype() == x.dtype() && dy.is_contiguous(), op, ": gradient ", dy.str(),
           " must be contiguous and match the input ", x.str());
  DP_CHECK(!dx.defined() || (dx.shape() == x.shape() && dx.dtype() == x.dtype() && dx.is_contiguous()), op,
           ": dx ", dx.defined() ? dx.str() : "", " must be contiguous and match the input ", x.str());
  DP_CHECK(save_mean.defined() && save_rstd.defined(), op, ": save_mean and save_rstd are required");
  const int64_t M = x.size(0), N = x.size(1);
  check_per_feature(op, "weight", weight, N);
  check_per_feature(op, "dweight", dweight, N);
  check_per_feature(op, "dbias", dbias, N);
  check_per_feature(op, "save_mean", save_mean, M);
  check_per_feature(op, "save_rstd", save_rstd, M);
  if (x.numel() == 0 || (!dx.defined() && !dweight.defined() && !dbias.defined())) return;
  activate();

  ParamOperands params(*this,
                       choose_param_dtype(x.dtype(), {&weight, &save_mean, &save_rstd, &dweight, &dbias}));
  Tensor w = params.in(weight), mean = params.in(save_mean), rstd = params.in(save_rstd);
  Tensor dw = params.out(dweight), db = params.out(dbias);
  const size_t workspace_bytes =
      layer_norm_workspace_bytes(x.dtype(), M, N, dweight.defined() || dbias.defined());
  Tensor workspace;
  if (workspace_bytes > 0)
    workspace = Tensor::empty({static_cast<int64_t>(workspace_bytes)}, kUInt8, device());
  DP_CUDA_CHECK(device_,
                launch_layer_norm_backward(dy.raw_data(), x.raw_data(), ptr_or_null(w), mean.raw_data(),
                                           rstd.raw_data(), ptr_or_null(dx), ptr_or_null(dw), ptr_or_null(db),
                                           x.dtype(), params.dtype(), M, N, ptr_or_null(workspace), stream_),
                op, " ", x.str());
  params.finish();
}

}  // namespace dp::cuda
