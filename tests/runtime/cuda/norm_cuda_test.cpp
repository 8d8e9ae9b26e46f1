// Focused checks of the CUDA normalisation kernels (runtime/backend/cuda/norm.{cpp,cu}) against
// the CPU backend, for what a generic op comparison would miss: the switch between cuDNN and
// norm.cu's own batch-norm kernels (eps below cuDNN's minimum, eval-mode backward, bfloat16,
// batch sizes past cuDNN's limits, parameter-only gradients), undefined weight/bias/running
// stats/gradients, parameters in float32 with half activations (mixed precision), layer norm
// across the warp/block switch and the vector/scalar paths, and repeatable reductions.
// Every test skips when no GPU is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "runtime/backend/cpu/cpu_backend.h"
#include "common/batch_norm_fold.h"
#include "common/batch_norm_kink.h"
#include "common/expect_error.h"
#include "common/gpu_test.h"
#include "runtime/core/runtime.h"
#include "runtime/ops/creation.h"
#ifdef DPTRAIN_HAVE_CUDA
#include "runtime/backend/cuda/cuda_backend.h"
#endif

namespace dp {
namespace {

#ifdef DPTRAIN_HAVE_CUDA

const DType kFloatDtypes[] = {kFloat32, kFloat64, kFloat16, kBFloat16};

// Relative tolerance against max(1, |reference|): the CPU backend computes half types in half
// arithmetic (rounding every step), the GPU in float, so they differ by a few units in the last
// place of the intermediates.
double tolerance(DType dtype) {
  switch (dtype) {
    case DType::Float64: return 1e-9;
    case DType::Float32: return 2e-4;
    case DType::Float16: return 2e-2;
    default: return 8e-2;  // bfloat16
  }
}

class NormCudaTest : public testing::GpuTest {
 protected:
  Backend& gpu() { return gpu_.backend(); }
  Backend& cpu() { return cpu_.backend(); }

  // Uniform values in [lo, hi) on the CPU, rounded to `dtype` (so both devices see the same).
  Tensor uniform(const Shape& shape, DType dtype, double lo = -2.0, double hi = 3.0) {
    return rand(shape, gen_, kFloat64, cpu_, lo, hi).to(dtype);
  }
  Tensor to_gpu(const Tensor& t) { return t.defined() ? t.to(gpu_) : Tensor(); }
  Tensor to_cpu(const Tensor& t) { return t.defined() ? t.to(cpu_) : Tensor(); }
  Tensor empty_like_on(const Tensor& t, Device d) {
    return t.defined() ? Tensor::empty(t.shape(), t.dtype(), d) : Tensor();
  }
  std::vector<double> values(const Tensor& t) { return t.to(cpu_).to(kFloat64).contiguous().to_vector<double>(); }

  void expect_close(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
    ASSERT_TRUE(got.defined() && want.defined()) << what;
    ASSERT_EQ(got.shape(), want.shape()) << what;
    const std::vector<double> g = values(got), w = values(want);
    int reported = 0;
    for (size_t i = 0; i < g.size(); ++i) {
      const bool ok = std::abs(g[i] - w[i]) <= tol * std::max(1.0, std::abs(w[i])) ||
                      (std::isnan(g[i]) && std::isnan(w[i]));
      if (!ok && reported++ < 5) ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", want " << w[i];
    }
  }

  std::vector<uint8_t> bytes_of(const Tensor& t) {
    Tensor host = t.to(cpu_).contiguous();
    std::vector<uint8_t> out(host.nbytes());
    std::memcpy(out.data(), host.raw_data(), out.size());
    return out;
  }

  // ---- Batch norm: one configuration run on both backends ----
  struct BnCase {
    Shape shape;
    DType dtype = kFloat32;
    DType param_dtype = kFloat32;  // weight, bias, running stats, save_*, dweight, dbias on the GPU
    bool training = true;
    bool weight = true, bias = true, running = true;
    bool want_dx = true, want_dweight = true, want_dbias = true;
    bool channels_last = false;  // the GPU's x, dy, y, dx NHWC in memory (4-D); the CPU's stay NCHW
    bool residual = false, relu = false;  // the forward's epilogue (BatchNormEpilogue)
    int64_t misalign = 0;  // elements the GPU's x, dy, residual, y, dx start past their storage's start
    double eps = 1e-5, momentum = 0.1;
  };

  // A case as autocast gives it: float32 parameters for the half types, x's dtype otherwise.
  static BnCase autocast_case(const Shape& shape, DType dtype, bool training, bool channels_last) {
    BnCase c;
    c.shape = shape;
    c.dtype = dtype;
    c.param_dtype = dtype == kFloat16 || dtype == kBFloat16 ? kFloat32 : dtype;
    c.training = training;
    c.channels_last = channels_last;
    return c;
  }

  // `host` on the GPU, NHWC in memory when `channels_last`, starting `misalign` elements into
  // its storage (a view: dense, but off the allocation's alignment).
  Tensor to_gpu_as(const Tensor& host, bool channels_last, int64_t misalign = 0) {
    Tensor t = empty_gpu(host.shape(), host.dtype(), channels_last, misalign);
    t.copy_(host);
    return t;
  }
  Tensor empty_gpu(const Shape& shape, DType dtype, bool channels_last, int64_t misalign = 0) {
    if (misalign == 0)
      return Tensor::empty(shape, dtype, gpu_, channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
    const Tensor dense = Tensor::empty({numel_of(shape) + misalign}, dtype, gpu_).narrow(0, misalign, numel_of(shape));
    const Tensor t = channels_last ? dense.view({shape[0], shape[2], shape[3], shape[1]}).permute({0, 3, 1, 2})
                                   : dense.view(shape);
    EXPECT_TRUE(t.is_contiguous(channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous));
    return t;
  }

  // Runs forward then backward on the CPU (everything in the reference dtype: case.dtype, or
  // float32 when the GPU gets float32 parameters with half x, on x rounded to case.dtype) and
  // on the GPU, and compares every output.
  void check_batch_norm(const BnCase& c, const std::string& what) {
    SCOPED_TRACE(what);
    const int64_t C = c.shape[1];
    const DType ref = c.param_dtype == c.dtype ? c.dtype : kFloat32;
    const double tol = tolerance(c.dtype);
    Tensor x = uniform(c.shape, c.dtype), dy = uniform(c.shape, c.dtype, -1.0, 1.0);
    Tensor res = c.residual ? uniform(c.shape, c.dtype, -1.5, 1.5) : Tensor();
    Tensor w = c.weight ? uniform({C}, c.param_dtype, 0.5, 1.5) : Tensor();
    Tensor b = c.bias ? uniform({C}, c.param_dtype, -0.5, 0.5) : Tensor();
    Tensor rm, rv;
    if (c.running || !c.training) {
      rm = uniform({C}, c.param_dtype, -0.5, 0.5);
      rv = uniform({C}, c.param_dtype, 0.5, 2.0);
    }
    auto as_ref = [&](const Tensor& t) { return t.defined() ? t.to(ref) : Tensor(); };

    // CPU reference.
    Tensor x_c = as_ref(x), dy_c = as_ref(dy), w_c = as_ref(w), b_c = as_ref(b);
    Tensor rm_c = rm.defined() ? as_ref(rm).clone() : Tensor(), rv_c = rv.defined() ? as_ref(rv).clone() : Tensor();
    Tensor y_c = Tensor::empty(c.shape, ref, cpu_);
    Tensor sm_c, si_c;
    if (c.training) {
      sm_c = Tensor::empty({C}, ref, cpu_);
      si_c = Tensor::empty({C}, ref, cpu_);
    }
    cpu().batch_norm_forward(x_c, w_c, b_c, rm_c, rv_c, y_c, sm_c, si_c, c.training, c.momentum, c.eps,
                             BatchNormEpilogue{as_ref(res), c.relu});

    // GPU.
    Tensor x_g = to_gpu_as(x, c.channels_last, c.misalign), dy_g = to_gpu_as(dy, c.channels_last, c.misalign);
    Tensor w_g = to_gpu(w), b_g = to_gpu(b);
    Tensor rm_g = to_gpu(rm), rv_g = to_gpu(rv);
    Tensor y_g = empty_gpu(c.shape, c.dtype, c.channels_last, c.misalign);
    Tensor sm_g, si_g;
    if (c.training) {
      sm_g = Tensor::empty({C}, c.param_dtype, gpu_);
      si_g = Tensor::empty({C}, c.param_dtype, gpu_);
    }
    gpu().batch_norm_forward(x_g, w_g, b_g, rm_g, rv_g, y_g, sm_g, si_g, c.training, c.momentum, c.eps,
                             BatchNormEpilogue{res.defined() ? to_gpu_as(res, c.channels_last, c.misalign) : Tensor(), c.relu});

    expect_close(y_g, y_c, tol, "y");
    const double stat_tol = tolerance(c.param_dtype == c.dtype ? c.dtype : kFloat32);
    if (c.training) {
      expect_close(sm_g, sm_c, stat_tol, "save_mean");
      expect_close(si_g, si_c, stat_tol, "save_invstd");
      if (rm.defined()) {
        expect_close(rm_g, rm_c, stat_tol, "running_mean");
        expect_close(rv_g, rv_c, stat_tol, "running_var");
      }
    } else {
      expect_close(rm_g, as_ref(rm), 0.0, "running_mean (read only in eval)");
      expect_close(rv_g, as_ref(rv), 0.0, "running_var (read only in eval)");
    }

    // Backward. Eval: the statistics are the running mean and 1/sqrt(running var + eps).
    Tensor bm_g = c.training ? sm_g : rm_g, bi_g = c.training ? si_g : Tensor();
    if (!c.training) {
      std::vector<double> v = values(rv);
      for (double& e : v) e = 1.0 / std::sqrt(e + c.eps);
      bi_g = to_gpu(from_vector(v, {C}, cpu_).to(c.param_dtype));
    }
    Tensor dx_c = c.want_dx ? Tensor::empty(c.shape, ref, cpu_) : Tensor();
    Tensor dw_c = c.want_dweight ? Tensor::empty({C}, ref, cpu_) : Tensor();
    Tensor db_c = c.want_dbias ? Tensor::empty({C}, ref, cpu_) : Tensor();
    // The CPU reads the saved statistics as the GPU does: rounded to the GPU's parameter dtype.
    Tensor bm_ref = to_cpu(bm_g).to(ref), bi_ref = to_cpu(bi_g).to(ref);
    cpu().batch_norm_backward(dy_c, x_c, w_c, bm_ref, bi_ref, dx_c, dw_c, db_c, c.training, {});
    Tensor dx_g = c.want_dx ? empty_gpu(c.shape, c.dtype, c.channels_last, c.misalign) : Tensor();
    Tensor dw_g = c.want_dweight ? Tensor::empty({C}, c.param_dtype, gpu_) : Tensor();
    Tensor db_g = c.want_dbias ? Tensor::empty({C}, c.param_dtype, gpu_) : Tensor();
    gpu().batch_norm_backward(dy_g, x_g, w_g, bm_g, bi_g, dx_g, dw_g, db_g, c.training, {});
    if (c.want_dx) expect_close(dx_g, dx_c, tol, "dx");
    if (c.want_dweight) expect_close(dw_g, dw_c, tol, "dweight");
    if (c.want_dbias) expect_close(db_g, db_c, tol, "dbias");
  }

  // ---- Layer norm ----
  struct LnCase {
    int64_t M = 37, N = 7;
    DType dtype = kFloat32;
    DType param_dtype = kFloat32;  // weight, bias, dweight, dbias on the GPU
    DType stat_dtype = kFloat32;   // save_mean, save_rstd on the GPU
    bool weight = true, bias = true;
    bool want_dx = true, want_dweight = true, want_dbias = true;
    int64_t misalign = 0;  // elements x, dy, y, dx start past a 16-byte boundary on the GPU
    double eps = 1e-5;
  };

  // A contiguous [M, N] GPU tensor starting `misalign` elements into its storage.
  Tensor gpu_matrix(const Tensor& host, int64_t misalign) {
    const int64_t M = host.size(0), N = host.size(1);
    Tensor flat = Tensor::empty({M * N + misalign}, host.dtype(), gpu_);
    Tensor view = flat.narrow(0, misalign, M * N).view({M, N});
    view.copy_(host);
    return view;
  }

  void check_layer_norm(const LnCase& c, const std::string& what) {
    SCOPED_TRACE(what);
    const bool mixed = c.param_dtype != c.dtype || c.stat_dtype != c.dtype;
    const DType ref = mixed ? kFloat32 : c.dtype;
    const double tol = tolerance(c.dtype);
    Tensor x = uniform({c.M, c.N}, c.dtype), dy = uniform({c.M, c.N}, c.dtype, -1.0, 1.0);
    Tensor w = c.weight ? uniform({c.N}, c.param_dtype, 0.5, 1.5) : Tensor();
    Tensor b = c.bias ? uniform({c.N}, c.param_dtype, -0.5, 0.5) : Tensor();
    auto as_ref = [&](const Tensor& t) { return t.defined() ? t.to(ref) : Tensor(); };

    Tensor x_c = as_ref(x), dy_c = as_ref(dy), w_c = as_ref(w), b_c = as_ref(b);
    Tensor y_c = Tensor::empty({c.M, c.N}, ref, cpu_);
    Tensor sm_c = Tensor::empty({c.M}, ref, cpu_), sr_c = Tensor::empty({c.M}, ref, cpu_);
    cpu().layer_norm_forward(x_c, w_c, b_c, y_c, sm_c, sr_c, c.eps);

    Tensor x_g = gpu_matrix(x, c.misalign), dy_g = gpu_matrix(dy, c.misalign);
    Tensor w_g = to_gpu(w), b_g = to_gpu(b);
    Tensor y_g = gpu_matrix(Tensor::empty({c.M, c.N}, c.dtype, cpu_).zero_(), c.misalign);
    Tensor sm_g = Tensor::empty({c.M}, c.stat_dtype, gpu_), sr_g = Tensor::empty({c.M}, c.stat_dtype, gpu_);
    gpu().layer_norm_forward(x_g, w_g, b_g, y_g, sm_g, sr_g, c.eps);
    expect_close(y_g, y_c, tol, "y");
    const double stat_tol = tolerance(c.stat_dtype);
    expect_close(sm_g, sm_c, stat_tol, "save_mean");
    expect_close(sr_g, sr_c, stat_tol, "save_rstd");

    Tensor sm_ref = to_cpu(sm_g).to(ref), sr_ref = to_cpu(sr_g).to(ref);
    Tensor dx_c = c.want_dx ? Tensor::empty({c.M, c.N}, ref, cpu_) : Tensor();
    Tensor dw_c = c.want_dweight ? Tensor::empty({c.N}, ref, cpu_) : Tensor();
    Tensor db_c = c.want_dbias ? Tensor::empty({c.N}, ref, cpu_) : Tensor();
    cpu().layer_norm_backward(dy_c, x_c, w_c, sm_ref, sr_ref, dx_c, dw_c, db_c);
    Tensor dx_g = c.want_dx ? gpu_matrix(Tensor::empty({c.M, c.N}, c.dtype, cpu_).zero_(), c.misalign) : Tensor();
    Tensor dw_g = c.want_dweight ? Tensor::empty({c.N}, c.param_dtype, gpu_) : Tensor();
    Tensor db_g = c.want_dbias ? Tensor::empty({c.N}, c.param_dtype, gpu_) : Tensor();
    gpu().layer_norm_backward(dy_g, x_g, w_g, sm_g, sr_g, dx_g, dw_g, db_g);
    if (c.want_dx) expect_close(dx_g, dx_c, tol, "dx");
    // Column sums over M rows: the sum's magnitude grows like sqrt(M).
    if (c.want_dweight) expect_close(dw_g, dw_c, tol, "dweight");
    if (c.want_dbias) expect_close(db_g, db_c, tol, "dbias");
  }

  Generator gen_{2024};
};

std::string name_of(DType dtype, const Shape& shape) { return std::string(dtype_name(dtype)) + " " + shape_str(shape); }

// ---- Batch norm ---------------------------------------------------------------------------------

// [N, C] (described to cuDNN as [N, C, 1, 1]), [N, C, L] with L odd (scalar path of the own
// kernels), [N, C, H, W] with H·W a multiple of 8 (16-byte path). bfloat16 always takes the own
// kernels; the others cuDNN.
TEST_F(NormCudaTest, BatchNormTrainingMatchesCpu) {
  for (DType dtype : kFloatDtypes)
    for (const Shape& shape : {Shape{64, 5}, Shape{4, 3, 37}, Shape{8, 6, 4, 8}, Shape{2, 3, 1}}) {
      BnCase c;
      c.shape = shape;
      c.dtype = c.param_dtype = dtype;
      check_batch_norm(c, name_of(dtype, shape));
    }
}

TEST_F(NormCudaTest, BatchNormEvalForwardAndBackwardMatchCpu) {
  for (DType dtype : kFloatDtypes)
    for (const Shape& shape : {Shape{64, 5}, Shape{4, 3, 37}, Shape{8, 6, 4, 8}}) {
      BnCase c;
      c.shape = shape;
      c.dtype = c.param_dtype = dtype;
      c.training = false;
      check_batch_norm(c, name_of(dtype, shape) + " eval");
    }
}

// cuDNN refuses eps < CUDNN_BN_MIN_EPSILON: the own kernels run instead. cuDNN 9's minimum is 0
// (older versions: 1e-5), so a negative eps is below it in every version; the batch variance
// (data uniform in [-2, 3)) stays far above |eps|. (cudnn.h is not on the tests' include path.)
TEST_F(NormCudaTest, BatchNormEpsBelowCudnnMinimumUsesOwnKernels) {
  for (DType dtype : kFloatDtypes)
    for (bool training : {true, false}) {
      BnCase c;
      c.shape = {16, 4, 9};
      c.dtype = c.param_dtype = dtype;
      c.training = training;
      c.eps = -1e-3;
      check_batch_norm(c, name_of(dtype, c.shape) + (training ? " training" : " eval"));
    }
  BnCase c;  // eps = 0: cuDNN 9's minimum, so cuDNN still runs
  c.shape = {16, 4, 9};
  c.eps = 0.0;
  check_batch_norm(c, "eps = 0");
}

TEST_F(NormCudaTest, BatchNormWithoutWeightBiasOrRunningStats) {
  for (DType dtype : kFloatDtypes) {
    BnCase c;
    c.shape = {6, 3, 10};
    c.dtype = c.param_dtype = dtype;
    c.weight = c.bias = false;
    check_batch_norm(c, name_of(dtype, c.shape) + " no weight/bias");
    c.weight = true;
    check_batch_norm(c, name_of(dtype, c.shape) + " no bias");
    c.running = false;
    check_batch_norm(c, name_of(dtype, c.shape) + " no running stats");
    c.training = false;
    c.running = true;
    c.weight = false;
    check_batch_norm(c, name_of(dtype, c.shape) + " eval, no weight");
  }
}

// Only some gradients wanted: dx alone (cuDNN with dropped dweight/dbias temporaries), the
// parameter gradients alone (own reduction, no dx pass), one of each.
TEST_F(NormCudaTest, BatchNormBackwardWithSomeGradientsUndefined) {
  for (DType dtype : kFloatDtypes)
    for (int mask = 1; mask < 8; ++mask) {
      BnCase c;
      c.shape = {5, 4, 12};
      c.dtype = c.param_dtype = dtype;
      c.want_dx = mask & 1;
      c.want_dweight = mask & 2;
      c.want_dbias = mask & 4;
      check_batch_norm(c, name_of(dtype, c.shape) + " gradient mask " + std::to_string(mask));
    }
}

// Mixed precision: half activations with float32 parameters, statistics and parameter
// gradients (cuDNN's own convention; no casts), checked against the CPU in float32.
TEST_F(NormCudaTest, BatchNormHalfInputsWithFloatParameters) {
  for (DType dtype : {kFloat16, kBFloat16})
    for (bool training : {true, false}) {
      BnCase c;
      c.shape = {8, 5, 16};
      c.dtype = dtype;
      c.param_dtype = kFloat32;
      c.training = training;
      check_batch_norm(c, name_of(dtype, c.shape) + " with float32 parameters");
    }
}

// Batch sizes past PyTorch's cuDNN limits for the spatial mode (65535 in eval, 880801 in
// training) take the own kernels; a long reduction per channel also exercises many splits.
TEST_F(NormCudaTest, BatchNormLargeBatchUsesOwnKernels) {
  BnCase eval;
  eval.shape = {70000, 3};
  eval.training = false;
  check_batch_norm(eval, "[70000, 3] eval");
  BnCase train;
  train.shape = {900001, 2};
  check_batch_norm(train, "[900001, 2] training");
}

// Channels-last x takes norm.cu's column kernels in every dtype: the elementwise ones keep a
// column of V channels per thread (16-byte units when C·sizeof is a multiple of 16 — C = 40 —
// else one channel — C = 3), and past about one GPU wave of units (2^18) a thread walks several
// rows, whose coefficient reuse only large N·H·W reaches. Training and eval, every dtype,
// float32 parameters for the half types as autocast gives them.
TEST_F(NormCudaTest, BatchNormChannelsLastMatchesCpu) {
  for (DType dtype : kFloatDtypes)
    for (const Shape& shape : {Shape{2, 40, 5, 7}, Shape{128, 40, 24, 24}, Shape{3, 3, 5, 5}, Shape{64, 3, 48, 48}})
      for (bool training : {true, false}) {
        const BnCase c = autocast_case(shape, dtype, training, /*channels_last=*/true);
        check_batch_norm(c, name_of(dtype, shape) + " channels-last" + (training ? " training" : " eval"));
      }
}

// The forward's epilogue (residual add, relu) in every apply kernel: NCHW runs of 16-byte units
// (which cuDNN would otherwise take for float32/float16) and of single elements, channels-last
// columns of both widths with several rows per thread; training and eval, every dtype.
TEST_F(NormCudaTest, BatchNormEpilogueMatchesCpu) {
  for (DType dtype : kFloatDtypes)
    for (const auto& [shape, channels_last] :
         {std::pair{Shape{8, 6, 4, 8}, false}, {Shape{4, 3, 37}, false}, {Shape{2, 40, 5, 7}, true},
          {Shape{128, 40, 24, 24}, true}, {Shape{3, 3, 5, 5}, true}})
      for (bool training : {true, false})
        for (const auto& [residual, relu] : {std::pair{true, true}, {false, true}, {true, false}}) {
          BnCase c = autocast_case(shape, dtype, training, channels_last);
          c.residual = residual;
          c.relu = relu;
          c.want_dx = c.want_dweight = c.want_dbias = false;  // the backward has no epilogue
          check_batch_norm(c, name_of(dtype, shape) + (channels_last ? " channels-last" : "") +
                                  (training ? " training" : " eval") + (residual ? " +residual" : "") +
                                  (relu ? " relu" : ""));
        }
}

// Activations that start off a 16-byte boundary (a batch narrowed from a larger one: dense, but
// one element into its storage): cuDNN's batch norm and the own kernels' vector paths must either
// take them or fall back, in every layout and dtype, with the epilogue and without.
TEST_F(NormCudaTest, BatchNormMisalignedActivationsMatchCpu) {
  for (DType dtype : kFloatDtypes)
    for (const auto& [shape, channels_last] :
         {std::pair{Shape{4, 64, 8, 8}, true}, {Shape{4, 64, 8, 8}, false}, {Shape{8, 6, 4, 8}, false}})
      for (bool training : {true, false}) {
        const std::string name = name_of(dtype, shape) + (channels_last ? " channels-last" : "") +
                                 (training ? " training" : " eval") + " misaligned";
        BnCase c = autocast_case(shape, dtype, training, channels_last);
        c.misalign = 1;
        check_batch_norm(c, name);
        c.residual = c.relu = true;
        c.want_dx = c.want_dweight = c.want_dbias = false;
        check_batch_norm(c, name + " +residual relu");
      }
}

// The column kernels' unrolled walks (kColumnUnroll rows' loads before their sums or stores,
// then a remainder). ResNet's layer1 width, 64 channels, over 133056 rows: the apply and dx
// kernels' threads (2^18 units, rows 2^15 apart for 16-bit types) walk 4 or 5 rows — one
// unrolled group, some a remainder row — and 2^14 apart for float32, two groups and a remainder;
// the statistics' lanes walk 4 or 5 rows (16-bit) or 8 or 9 (float32). And C = 264 (33 vector
// columns: a block 32 columns wide and a second one mostly empty). Forward with the epilogue,
// then forward and backward without it (the backward has no epilogue); every dtype, training
// and eval.
TEST_F(NormCudaTest, BatchNormChannelsLastUnrolledColumnWalks) {
  for (DType dtype : kFloatDtypes)
    for (const Shape& shape : {Shape{33, 64, 64, 63}, Shape{5, 264, 7, 9}})
      for (bool training : {true, false}) {
        const std::string name = name_of(dtype, shape) + (training ? " training" : " eval");
        BnCase fused = autocast_case(shape, dtype, training, /*channels_last=*/true);
        fused.residual = fused.relu = true;
        fused.want_dx = fused.want_dweight = fused.want_dbias = false;
        check_batch_norm(fused, name + " +residual relu");
        check_batch_norm(autocast_case(shape, dtype, training, /*channels_last=*/true), name);
      }
}

// A training backward through the fused relu without a residual recomputes relu's mask from x
// (BatchNormGradPrologue) in every reduction and dx kernel. At the kink (pre-activations within an
// ulp of zero, common/batch_norm_kink.h) it must give the composition's results bit for bit, which
// also runs norm.cu's kernels where cuDNN does not take the composition's batch norm: channels-last
// (column kernels, vector with C = 16 and scalar with C = 9, several rows a thread with 2048 rows)
// in every dtype, and NCHW bfloat16 (run kernels, S = 25 scalar and S = 256 vector).
TEST_F(NormCudaTest, BatchNormReluMaskRecomputedAtTheKinkIsTheComposition) {
  struct KinkCase {
    Shape shape;
    bool channels_last;
    std::vector<DType> dtypes;
  };
  const std::vector<DType> all(std::begin(kFloatDtypes), std::end(kFloatDtypes));
  for (const KinkCase& k : {KinkCase{{4, 9, 5, 5}, true, all}, KinkCase{{8, 16, 16, 16}, true, all},
                            KinkCase{{4, 9, 5, 5}, false, {kBFloat16}}, KinkCase{{8, 16, 16, 16}, false, {kBFloat16}}})
    for (DType dtype : k.dtypes) {
      SCOPED_TRACE(name_of(dtype, k.shape) + (k.channels_last ? " channels-last" : ""));
      const MemoryFormat format = k.channels_last ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
      const testing::BatchNormKinkCase c = testing::batch_norm_kink_case(gpu_, cpu_, dtype, format, k.shape, 11, 1e-5);
      const auto fused = testing::batch_norm_relu_step(c, cpu_, true, 1e-5);
      EXPECT_EQ(fused, testing::batch_norm_relu_step(c, cpu_, false, 1e-5));
      const testing::KinkOutcomes o = testing::kink_outcomes(c, cpu_, fused[0]);
      EXPECT_EQ(o.positive + o.zero, c.at_kink);
      if (dtype != kFloat16) {  // float16 stores most kink values as 0
        EXPECT_GT(o.positive, 0);
        EXPECT_GT(o.zero, 0);
      }
    }
}

// The relu prologue recomputes a training forward: refused in eval mode.
TEST_F(NormCudaTest, BatchNormReluPrologueRefusedInEval) {
  const Shape shape{4, 3, 5};
  Tensor x = to_gpu(uniform(shape, kFloat32)), dy = to_gpu(uniform(shape, kFloat32));
  Tensor sm = to_gpu(uniform({3}, kFloat32)), si = to_gpu(uniform({3}, kFloat32, 0.5, 1.5));
  Tensor dx = Tensor::empty(shape, kFloat32, gpu_);
  EXPECT_ERROR_CONTAINS(gpu().batch_norm_backward(dy, x, Tensor(), sm, si, dx, Tensor(), Tensor(), false,
                                                  BatchNormGradPrologue{true, Tensor(), Tensor(), Tensor()}),
                        "relu prologue recomputes the training forward's output");
}

// bn → add → relu's backward on the GPU: relu's mask read from y and folded into the sums pass
// (MaskedGradTerms in the column kernels, bn_grad_partial_kernel's relu_y) writes relu's own
// backward's masked gradient and gives the two passes' dx, dweight, dbias, bit for bit.
TEST_F(NormCudaTest, BatchNormReluMaskFoldedIntoTheSumsPassIsTheTwoPasses) {
  testing::expect_relu_mask_fold_matches_two_passes(gpu_, cpu_);
  testing::expect_relu_mask_fold_refusals(gpu_);
}

// The own kernels' sums are a fixed-order two-stage reduction: the same bits every run.
TEST_F(NormCudaTest, BatchNormOwnReductionsAreRepeatable) {
  const Shape shape{32, 7, 33};
  Tensor x = to_gpu(uniform(shape, kBFloat16)), dy = to_gpu(uniform(shape, kBFloat16));
  Tensor w = to_gpu(uniform({7}, kBFloat16));
  Tensor y = Tensor::empty(shape, kBFloat16, gpu_);
  Tensor sm = Tensor::empty({7}, kBFloat16, gpu_), si = Tensor::empty({7}, kBFloat16, gpu_);
  gpu().batch_norm_forward(x, w, Tensor(), Tensor(), Tensor(), y, sm, si, true, 0.1, 1e-5, {});
  std::vector<uint8_t> first_dx, first_dw;
  for (int run = 0; run < 3; ++run) {
    Tensor dx = Tensor::empty(shape, kBFloat16, gpu_), dw = Tensor::empty({7}, kBFloat16, gpu_);
    gpu().batch_norm_backward(dy, x, w, sm, si, dx, dw, Tensor(), true, {});
    if (run == 0) {
      first_dx = bytes_of(dx);
      first_dw = bytes_of(dw);
    } else {
      EXPECT_EQ(bytes_of(dx), first_dx) << "run " << run;
      EXPECT_EQ(bytes_of(dw), first_dw) << "run " << run;
    }
  }
}

// ---- Layer norm ---------------------------------------------------------------------------------

// N = 1 (zero variance), 7 (scalar path), 1000 (16-byte path for float32, one warp per row),
// 1024/1025 (the warp/block switch), 4096 and 4097 (block per row, vector and scalar).
TEST_F(NormCudaTest, LayerNormMatchesCpuAcrossRowWidths) {
  for (DType dtype : kFloatDtypes)
    for (int64_t N : {1, 7, 1000, 1024, 1025, 4096, 4097}) {
      LnCase c;
      c.N = N;
      c.dtype = c.param_dtype = c.stat_dtype = dtype;
      check_layer_norm(c, name_of(dtype, {c.M, N}));
    }
}

TEST_F(NormCudaTest, LayerNormWithoutWeightOrBiasAndSomeGradients) {
  for (DType dtype : kFloatDtypes)
    for (int64_t N : {7, 1000, 4097}) {
      LnCase c;
      c.N = N;
      c.dtype = c.param_dtype = c.stat_dtype = dtype;
      c.weight = c.bias = false;
      c.want_dweight = c.want_dbias = false;
      check_layer_norm(c, name_of(dtype, {c.M, N}) + " no weight/bias");
      c.weight = true;
      c.want_dx = false;
      c.want_dweight = true;
      check_layer_norm(c, name_of(dtype, {c.M, N}) + " dweight only");
      c.want_dweight = false;
      c.want_dbias = true;
      check_layer_norm(c, name_of(dtype, {c.M, N}) + " dbias only");
    }
}

// Rows starting off a 16-byte boundary take the scalar path; many rows take many row splits
// in the dweight/dbias reduction.
TEST_F(NormCudaTest, LayerNormMisalignedRowsAndManyRows) {
  for (DType dtype : kFloatDtypes) {
    LnCase c;
    c.N = 1024;
    c.dtype = c.param_dtype = c.stat_dtype = dtype;
    c.misalign = 1;
    check_layer_norm(c, name_of(dtype, {c.M, c.N}) + " misaligned");
    c.misalign = 0;
    c.M = 5000;
    c.N = 64;
    check_layer_norm(c, name_of(dtype, {c.M, c.N}) + " many rows");
  }
}

// Mixed precision: float32 weight/bias with half x, the statistics either float32 (used as
// given) or in x's dtype (cast into float32 temporaries and back).
TEST_F(NormCudaTest, LayerNormHalfInputsWithFloatParameters) {
  for (DType dtype : {kFloat16, kBFloat16})
    for (DType stat_dtype : {kFloat32, dtype}) {
      LnCase c;
      c.N = 1000;
      c.dtype = dtype;
      c.param_dtype = kFloat32;
      c.stat_dtype = stat_dtype;
      check_layer_norm(c, name_of(dtype, {c.M, c.N}) + " with float32 parameters, statistics in " +
                              dtype_name(stat_dtype));
    }
}

TEST_F(NormCudaTest, LayerNormParameterGradientsAreRepeatable) {
  const int64_t M = 777, N = 333;
  Tensor x = to_gpu(uniform({M, N}, kFloat32)), dy = to_gpu(uniform({M, N}, kFloat32));
  Tensor y = Tensor::empty({M, N}, kFloat32, gpu_);
  Tensor sm = Tensor::empty({M}, kFloat32, gpu_), sr = Tensor::empty({M}, kFloat32, gpu_);
  gpu().layer_norm_forward(x, Tensor(), Tensor(), y, sm, sr, 1e-5);
  std::vector<uint8_t> first_dw, first_db;
  for (int run = 0; run < 3; ++run) {
    Tensor dw = Tensor::empty({N}, kFloat32, gpu_), db = Tensor::empty({N}, kFloat32, gpu_);
    gpu().layer_norm_backward(dy, x, Tensor(), sm, sr, Tensor(), dw, db);
    if (run == 0) {
      first_dw = bytes_of(dw);
      first_db = bytes_of(db);
    } else {
      EXPECT_EQ(bytes_of(dw), first_dw) << "run " << run;
      EXPECT_EQ(bytes_of(db), first_db) << "run " << run;
    }
  }
}

#endif  // DPTRAIN_HAVE_CUDA

}  // namespace
}  // namespace dp
