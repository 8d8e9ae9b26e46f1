// batch_norm_probe: dptrain's channels-last batch-norm kernels (runtime/backend/cuda/norm.cu)
// against cuDNN's persistent NHWC batch norm, at every batch-norm shape of ResNet-50 — measured
// before deciding whether ResNet-50's batch norm should go to cuDNN on a GPU.
//
// Why (issue 11's >= 1.3x PyTorch eager in fp16): call 5 measured PyTorch's fp16 ResNet-50 step
// 5 ms shorter than its bf16 one, while dptrain's two are within 1 ms. PyTorch sends float16
// channels-last batch norm to cuDNN's CUDNN_BATCHNORM_SPATIAL_PERSISTENT mode through the Ex API
// (cudnnBatchNormalizationForwardTrainingEx / BackwardEx) and bfloat16 to its own kernels (14.4
// ms of kernels a step in call 5); dptrain's column kernels took 10.8 ms in bf16. The Ex API can
// also apply ReLU and the residual add in the same kernels (bnOps BN_ACTIVATION,
// BN_ADD_ACTIVATION), as dptrain's epilogue does. Which is faster at ResNet-50's shapes, in
// which dtype, is only known on the GPU: this program times both on the same buffers.
//
// Per layer shape (N·H·W rows × C channels, with the epilogue ResNet-50 applies there) and dtype:
//   forward   training: statistics, running stats, y = epilogue(bn(x)) with the epilogue
//             (relu, or residual add + relu, or none);
//   backward  what dptrain's autograd runs in training: dx, dweight, dbias, with ReLU's mask
//             recomputed from x inside (relu alone) or read from y in the sums pass, which also
//             writes the masked gradient, the residual's (with a residual) (cuDNN: BackwardEx
//             with the same bnOps, which also writes the residual's gradient);
// each for dptrain's kernels and for cuDNN (median of --iters runs, CUDA events), dptrain's
// achieved bandwidth (bytes its passes move / time), and the totals of a ResNet-50 step (each
// shape times the number of its layers). Both sides run on the same buffers over and over, so
// the smaller layers partly live in L2 for both. Checks (layers of at most --check-max-elems):
// cuDNN's y, saved statistics, dx, residual gradient, dweight and dbias against dptrain's.
//
// Usage: batch_norm_probe [--dtypes fp16,bf16] [--batch 128] [--iters 20] [--budget-s 60]
//                         [--check-max-elems 67108864] [--describe]
// --describe (no GPU needed): builds every layer's cuDNN descriptors and prints the table.
// Exit: 0 probed (whatever cuDNN does or does not support), 1 a check failed or dptrain's kernels
// failed, 3 no GPU.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <vector>

#include "bench/gpu/probe_util.h"
#include "runtime/backend/cuda/norm_kernels.h"

namespace {

using probe::download;
using probe::from_low;
using probe::to_low;

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"  // cuDNN's legacy batch-norm API is the subject

constexpr double kMomentum = 0.1, kEps = 1e-5;

// ---- ResNet-50 v1.5's batch norms (stride on the 3x3 convolution) ------------------------------

enum class Epilogue { None, Relu, AddRelu };
const char* epilogue_name(Epilogue e) {
  return e == Epilogue::None ? "bn" : e == Epilogue::Relu ? "bn+relu" : "bn+add+relu";
}

struct Layer {
  const char* name;
  int64_t c, hw;  // channels, height = width
  Epilogue epilogue;
  int count;  // layers of this shape and epilogue in the network
};

// bn1 and bn2 of a bottleneck end in ReLU, bn3 in the residual add and ReLU, the downsample's BN
// in neither; the first block of layers 2-4 has bn1 at the input resolution.
constexpr Layer kLayers[] = {
    {"stem bn1", 64, 112, Epilogue::Relu, 1},
    {"layer1 bn1/bn2", 64, 56, Epilogue::Relu, 6},
    {"layer1 bn3", 256, 56, Epilogue::AddRelu, 3},
    {"layer1 downsample", 256, 56, Epilogue::None, 1},
    {"layer2.0 bn1", 128, 56, Epilogue::Relu, 1},
    {"layer2 bn1/bn2", 128, 28, Epilogue::Relu, 7},
    {"layer2 bn3", 512, 28, Epilogue::AddRelu, 4},
    {"layer2 downsample", 512, 28, Epilogue::None, 1},
    {"layer3.0 bn1", 256, 28, Epilogue::Relu, 1},
    {"layer3 bn1/bn2", 256, 14, Epilogue::Relu, 11},
    {"layer3 bn3", 1024, 14, Epilogue::AddRelu, 6},
    {"layer3 downsample", 1024, 14, Epilogue::None, 1},
    {"layer4.0 bn1", 512, 14, Epilogue::Relu, 1},
    {"layer4 bn1/bn2", 512, 7, Epilogue::Relu, 5},
    {"layer4 bn3", 2048, 7, Epilogue::AddRelu, 3},
    {"layer4 downsample", 2048, 7, Epilogue::None, 1},
};
constexpr int kResNet50BatchNorms = 53;

// ---- cuDNN descriptors --------------------------------------------------------------------------

// The descriptors of one layer: x (NHWC; also y, dy, dx, z, dz), the per-channel parameters
// (derived for the persistent mode: float32 for half x) and ReLU.
struct CudnnLayer {
  cudnnTensorDescriptor_t x = nullptr, param = nullptr;
  cudnnActivationDescriptor_t relu = nullptr;
  CudnnLayer(cudnnDataType_t dtype, int64_t n, const Layer& l) {
    const std::string what = std::string(l.name) + " descriptors";
    try {
      CHECK_CUDNN(cudnnCreateTensorDescriptor(&x), what);
      CHECK_CUDNN(cudnnCreateTensorDescriptor(&param), what);
      CHECK_CUDNN(cudnnCreateActivationDescriptor(&relu), what);
      CHECK_CUDNN(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NHWC, dtype, static_cast<int>(n), static_cast<int>(l.c),
                                             static_cast<int>(l.hw), static_cast<int>(l.hw)),
                  what);
      CHECK_CUDNN(cudnnDeriveBNTensorDescriptor(param, x, CUDNN_BATCHNORM_SPATIAL_PERSISTENT), what);
      CHECK_CUDNN(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0), what);
    } catch (...) {
      destroy();
      throw;
    }
  }
  ~CudnnLayer() { destroy(); }
  CudnnLayer(const CudnnLayer&) = delete;
  CudnnLayer& operator=(const CudnnLayer&) = delete;

 private:
  void destroy() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (param) cudnnDestroyTensorDescriptor(param);
    if (relu) cudnnDestroyActivationDescriptor(relu);
  }
};

cudnnBatchNormOps_t bn_ops(Epilogue e) {
  return e == Epilogue::None ? CUDNN_BATCHNORM_OPS_BN
         : e == Epilogue::Relu ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION
                               : CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION;
}

// ---- Device memory ------------------------------------------------------------------------------

struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (n) CHECK_CUDA(cudaMalloc(&p, n));
  }
  ~DeviceBuffer() {
    if (p) cudaFree(p);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p(o.p), bytes(o.bytes) { o.p = nullptr; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p, o.p);
    std::swap(bytes, o.bytes);
    return *this;
  }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Uniform values in [lo, hi) as the low dtype's bits: a fast counter hash (hundreds of millions of
// values per run; the distribution's quality does not matter here).
std::vector<uint16_t> random_low(int64_t n, float lo, float hi, cudnnDataType_t dtype, uint64_t seed) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  uint64_t s = seed;
  for (auto& b : v) {
    s += 0x9E3779B97F4A7C15ull;
    uint64_t z = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    b = to_low(lo + (hi - lo) * static_cast<float>(z >> 40) * (1.0f / 16777216.0f), dtype);
  }
  return v;
}

// ---- Comparisons --------------------------------------------------------------------------------

// Low-precision tensors: where ReLU's mask flips between the two sides (y within a rounding of 0)
// a gradient element differs by a whole dy, so the check is on the fraction of elements off by
// more than `tol` (relative, floor 1), and reports the largest difference too.
struct Agreement {
  double worst = 0, off_fraction = 0;
};
Agreement compare_low(const void* got, const void* want, int64_t n, cudnnDataType_t dtype, double tol) {
  const std::vector<uint16_t> a = download<uint16_t>(got, n), b = download<uint16_t>(want, n);
  Agreement r;
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = from_low(a[i], dtype), y = from_low(b[i], dtype);
    const double d = std::abs(x - y) / std::max(1.0, std::abs(y));
    r.worst = probe::worse(r.worst, d);
    if (!(d <= tol)) ++off;  // a NaN on either side is off
  }
  r.off_fraction = n ? static_cast<double>(off) / static_cast<double>(n) : 0.0;
  return r;
}
// Per-channel float32 arrays: max |got - want| / max(1, max |want|).
double compare_channels(const void* got, const void* want, int64_t c) {
  const std::vector<float> a = download<float>(got, c), b = download<float>(want, c);
  double diff = 0, scale = 1;
  for (int64_t i = 0; i < c; ++i) {
    diff = probe::worse(diff, static_cast<double>(std::abs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::abs(b[i])));
  }
  return diff / scale;
}

struct Times {
  double ours_fwd = -1, ours_bwd = -1, cudnn_fwd = -1, cudnn_bwd = -1;
};

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dtypes = {"fp16", "bf16"};
  int64_t batch = 128, check_max_elems = int64_t(1) << 26;
  int iters = 20;
  double budget_s = 60;
  bool describe = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return probe::option_value(argc, argv, i, "batch_norm_probe"); };
    if (a == "--dtypes") {
      dtypes = probe::parse_dtypes(value(), "batch_norm_probe");
    } else if (a == "--batch") {
      batch = std::atoll(value().c_str());
    } else if (a == "--iters") {
      iters = std::atoi(value().c_str());
    } else if (a == "--budget-s") {
      budget_s = std::atof(value().c_str());
    } else if (a == "--check-max-elems") {
      check_max_elems = std::atoll(value().c_str());
    } else if (a == "--describe") {
      describe = true;
    } else {
      std::fprintf(stderr,
                   "usage: batch_norm_probe [--dtypes fp16,bf16] [--batch 128] [--iters 20] [--budget-s 60] "
                   "[--check-max-elems N] [--describe]\n");
      return 2;
    }
  }
  if (batch < 1 || iters < 1 || budget_s <= 0 || check_max_elems < 0) {
    std::fprintf(stderr, "batch_norm_probe: --batch, --iters and --budget-s must be positive\n");
    return 2;
  }
  int layers = 0;
  for (const Layer& l : kLayers) layers += l.count;
  if (layers != kResNet50BatchNorms) {
    std::fprintf(stderr, "batch_norm_probe: the layer table has %d batch norms, ResNet-50 has %d\n", layers,
                 kResNet50BatchNorms);
    return 1;
  }

  if (describe) {
    // No GPU: the descriptors of every layer and dtype are built (cuDNN checks their dims then).
    try {
      for (const std::string& d : dtypes)
        for (const Layer& l : kLayers) {
          const CudnnLayer desc(d == "fp16" ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16, batch, l);
          std::printf("  %-20s %-5s x [%lld, %lld, %lld, %lld] NHWC  %-12s x%d\n", l.name, d.c_str(),
                      static_cast<long long>(batch), static_cast<long long>(l.c), static_cast<long long>(l.hw),
                      static_cast<long long>(l.hw), epilogue_name(l.epilogue), l.count);
        }
    } catch (const std::exception& e) {
      std::printf("batch_norm_probe: %s\n", e.what());
      return 1;
    }
    std::printf("--describe: %d layer shapes (%d batch norms) a dtype, descriptors built, no GPU used (cuDNN %zu)\n",
                static_cast<int>(std::size(kLayers)), layers, cudnnGetVersion());
    return 0;
  }

  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("batch_norm_probe: no CUDA GPU is visible; nothing probed\n");
    return 3;
  }
  const auto started = std::chrono::steady_clock::now();
  const auto deadline = started + std::chrono::milliseconds(static_cast<int64_t>(budget_s * 1e3));
  int failures = 0;
  try {
    cudaDeviceProp prop{};
    CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
    std::printf("GPU: %s (sm_%d%d), cuDNN %zu, ResNet-50's batch norms at batch %lld, NHWC, float32 parameters, "
                "training mode, median of %d runs\n",
                prop.name, prop.major, prop.minor, cudnnGetVersion(), static_cast<long long>(batch), iters);
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    CHECK_CUDNN(cudnnCreate(&handle), "cudnnCreate");
    CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK_CUDNN(cudnnSetStream(handle, stream), "cudnnSetStream");

    int64_t max_elems = 0, max_c = 0;
    for (const Layer& l : kLayers) {
      max_elems = std::max(max_elems, batch * l.hw * l.hw * l.c);
      max_c = std::max(max_c, l.c);
    }
    const size_t act_bytes = static_cast<size_t>(max_elems) * 2, chan_bytes = static_cast<size_t>(max_c) * 4;
    // Activations: inputs x, z (the residual), dy; each side's y, dx; dptrain's masked dy; cuDNN's dz.
    DeviceBuffer x(act_bytes), z(act_bytes), dy(act_bytes), y_ours(act_bytes), y_cudnn(act_bytes), dx_ours(act_bytes),
        dx_cudnn(act_bytes), dy_masked(act_bytes), dz_cudnn(act_bytes);
    // Per channel: weight, bias; each side's running stats, saved statistics, dweight, dbias.
    DeviceBuffer weight(chan_bytes), bias(chan_bytes);
    struct SideChannels {
      DeviceBuffer rmean, rvar, smean, sinvstd, dweight, dbias;
    };
    auto side_channels = [&] {
      return SideChannels{DeviceBuffer(chan_bytes), DeviceBuffer(chan_bytes), DeviceBuffer(chan_bytes),
                          DeviceBuffer(chan_bytes), DeviceBuffer(chan_bytes), DeviceBuffer(chan_bytes)};
    };
    SideChannels ours = side_channels(), theirs = side_channels();
    {
      std::vector<float> w(static_cast<size_t>(max_c)), b(w.size()), ones(w.size(), 1.0f), zeros(w.size(), 0.0f);
      for (size_t c = 0; c < w.size(); ++c) {
        w[c] = 0.5f + static_cast<float>((c * 37) % 101) / 101.0f;
        b[c] = -0.5f + static_cast<float>((c * 53) % 97) / 97.0f;
      }
      probe::upload(weight.p, w.data(), max_c);
      probe::upload(bias.p, b.data(), max_c);
      for (SideChannels* s : {&ours, &theirs}) {
        probe::upload(s->rmean.p, zeros.data(), max_c);
        probe::upload(s->rvar.p, ones.data(), max_c);
      }
    }

    struct Row {
      const Layer* layer;
      std::string dtype;
      Times t;
      std::string cudnn_error;
    };
    std::vector<Row> rows;
    bool out_of_budget = false;

    for (const std::string& dname : dtypes) {
      const cudnnDataType_t low = dname == "fp16" ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
      const dp::DType dtype = dname == "fp16" ? dp::DType::Float16 : dp::DType::BFloat16;
      {  // inputs once a dtype: every layer reads a prefix
        const auto hx = random_low(max_elems, -2.0f, 2.0f, low, 1), hz = random_low(max_elems, -1.5f, 1.5f, low, 2),
                   hdy = random_low(max_elems, -1.0f, 1.0f, low, 3);
        probe::upload(x.p, hx.data(), max_elems);
        probe::upload(z.p, hz.data(), max_elems);
        probe::upload(dy.p, hdy.data(), max_elems);
      }
      std::printf("\n%s (ms; dptrain's achieved GB/s after its times)\n", dname.c_str());
      std::printf("  %-20s %-12s %5s  %-24s %-24s %-17s %-17s\n", "layer", "epilogue", "count", "dptrain forward",
                  "dptrain backward", "cuDNN forward", "cuDNN backward");
      for (const Layer& l : kLayers) {
        if (std::chrono::steady_clock::now() > deadline) {
          out_of_budget = true;
          break;
        }
        const int64_t rows_nhw = batch * l.hw * l.hw, elems = rows_nhw * l.c;
        const dp::cuda::BatchNormShape shape{rows_nhw, l.c, 1};
        const bool relu = l.epilogue != Epilogue::None, residual = l.epilogue == Epilogue::AddRelu;
        Row row{&l, dname, {}, {}};

        // dptrain: launch_batch_norm_forward with the epilogue; backward as the autograd runs it
        // (ops/norm.cpp: ReLU's mask from y, then the batch-norm backward).
        DeviceBuffer workspace(dp::cuda::batch_norm_workspace_bytes(dtype, shape));
        auto check_launch = [&](cudaError_t e, const char* what) {
          if (e != cudaSuccess)
            throw std::runtime_error(std::string(l.name) + " " + what + ": " + cudaGetErrorString(e));
        };
        dp::cuda::BatchNormForwardArgs fa;
        fa.x = x.p;
        fa.y = y_ours.p;
        fa.residual = residual ? z.p : nullptr;
        fa.relu = relu;
        fa.weight = weight.p;
        fa.bias = bias.p;
        fa.running_mean = ours.rmean.p;
        fa.running_var = ours.rvar.p;
        fa.save_mean = ours.smean.p;
        fa.save_invstd = ours.sinvstd.p;
        auto ours_forward = [&] {
          check_launch(dp::cuda::launch_batch_norm_forward(fa, dtype, dp::DType::Float32, shape, true, kMomentum, kEps,
                                                           workspace.p, stream),
                       "dptrain forward");
        };
        // As the autograd runs it in training (runtime/ops/norm.cpp): relu without a residual masks
        // inside the backward (the relu prologue, the mask recomputed from x); with one, the mask
        // comes from y, folded into the sums pass, which also writes the masked gradient (the
        // residual's) to masked_dy.
        dp::cuda::BatchNormBackwardArgs ba;
        ba.dy = dy.p;
        ba.relu = relu && !residual;
        if (relu && residual) {
          ba.relu_output = y_ours.p;
          ba.masked_dy = dy_masked.p;
        }
        ba.bias = bias.p;
        ba.x = x.p;
        ba.weight = weight.p;
        ba.save_mean = ours.smean.p;
        ba.save_invstd = ours.sinvstd.p;
        ba.dx = dx_ours.p;
        ba.dweight = ours.dweight.p;
        ba.dbias = ours.dbias.p;
        auto ours_backward = [&] {
          check_launch(dp::cuda::launch_batch_norm_backward(ba, dtype, dp::DType::Float32, shape, true, workspace.p,
                                                            stream),
                       "dptrain backward");
        };
        try {
          row.t.ours_fwd = probe::median_ms(stream, 2, iters, ours_forward);
          row.t.ours_bwd = probe::median_ms(stream, 2, iters, ours_backward);
        } catch (const std::exception& e) {
          std::printf("  %-20s %s: dptrain's kernels failed: %s\n", l.name, dname.c_str(), e.what());
          ++failures;
          continue;
        }

        // cuDNN: the Ex API in the persistent mode with the same epilogue.
        try {
          const CudnnLayer d(low, batch, l);
          const cudnnBatchNormOps_t ops = bn_ops(l.epilogue);
          const cudnnActivationDescriptor_t act = relu ? d.relu : nullptr;
          const cudnnTensorDescriptor_t zd = residual ? d.x : nullptr;
          const cudnnBatchNormMode_t mode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
          const std::string what = std::string(l.name) + " " + dname;
          size_t fwd_ws = 0, bwd_ws = 0, reserve_bytes = 0;
          CHECK_CUDNN(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(handle, mode, ops, d.x, zd, d.x, d.param,
                                                                               act, &fwd_ws),
                      what);
          const cudnnTensorDescriptor_t yd = relu ? d.x : nullptr;  // read by the activation's backward
          CHECK_CUDNN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(handle, mode, ops, d.x, yd, d.x, zd, d.x,
                                                                        d.param, act, &bwd_ws),
                      what);
          CHECK_CUDNN(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, mode, ops, act, d.x, &reserve_bytes),
                      what);
          DeviceBuffer fwd_workspace(fwd_ws), bwd_workspace(bwd_ws), reserve(reserve_bytes);
          const float one = 1.0f, zero = 0.0f;
          auto cudnn_forward = [&] {
            CHECK_CUDNN(cudnnBatchNormalizationForwardTrainingEx(
                            handle, mode, ops, &one, &zero, d.x, x.p, zd, residual ? z.p : nullptr, d.x, y_cudnn.p,
                            d.param, weight.p, bias.p, kMomentum, theirs.rmean.p, theirs.rvar.p, kEps, theirs.smean.p,
                            theirs.sinvstd.p, act, fwd_workspace.p, fwd_ws, reserve.p, reserve_bytes),
                        what + " forward");
          };
          auto cudnn_backward = [&] {
            CHECK_CUDNN(cudnnBatchNormalizationBackwardEx(
                            handle, mode, ops, &one, &zero, &one, &zero, d.x, x.p, yd, relu ? y_cudnn.p : nullptr,
                            d.x, dy.p, zd, residual ? dz_cudnn.p : nullptr, d.x, dx_cudnn.p,
                            d.param, weight.p, bias.p, theirs.dweight.p, theirs.dbias.p, kEps, theirs.smean.p,
                            theirs.sinvstd.p, act, bwd_workspace.p, bwd_ws, reserve.p, reserve_bytes),
                        what + " backward");
          };
          row.t.cudnn_fwd = probe::median_ms(stream, 2, iters, cudnn_forward);
          row.t.cudnn_bwd = probe::median_ms(stream, 2, iters, cudnn_backward);
        } catch (const std::exception& e) {
          row.cudnn_error = e.what();
        }

        // dptrain's passes: forward statistics (read x) + apply (read x [+ z], write y); backward
        // sums (read dy, x [+ y, write the masked dy, with a residual]) + dx (read dy, x, write dx).
        const double bytes = static_cast<double>(elems) * 2;
        const double fwd_gbs = bytes * (residual ? 4 : 3) / (row.t.ours_fwd * 1e6);
        const double bwd_gbs = bytes * (residual ? 7 : 5) / (row.t.ours_bwd * 1e6);
        char cudnn_cols[96];
        if (row.cudnn_error.empty())
          std::snprintf(cudnn_cols, sizeof cudnn_cols, "%8.3f          %8.3f", row.t.cudnn_fwd, row.t.cudnn_bwd);
        else
          std::snprintf(cudnn_cols, sizeof cudnn_cols, "%s", "refused (below)");
        std::printf("  %-20s %-12s %5d  %8.3f (%5.0f GB/s)     %8.3f (%5.0f GB/s)     %s\n", l.name,
                    epilogue_name(l.epilogue), l.count, row.t.ours_fwd, fwd_gbs, row.t.ours_bwd, bwd_gbs, cudnn_cols);
        if (!row.cudnn_error.empty()) std::printf("      cuDNN: %s\n", row.cudnn_error.substr(0, 400).c_str());

        // Checks: the last runs of both sides saw the same inputs.
        if (row.cudnn_error.empty() && elems <= check_max_elems) {
          CHECK_CUDA(cudaStreamSynchronize(stream));
          const double tol = low == CUDNN_DATA_BFLOAT16 ? 2e-2 : 4e-3, max_off = 1e-4;
          const Agreement ay = compare_low(y_cudnn.p, y_ours.p, elems, low, tol);
          const Agreement adx = compare_low(dx_cudnn.p, dx_ours.p, elems, low, 2 * tol);
          Agreement adz;
          if (residual) adz = compare_low(dz_cudnn.p, dy_masked.p, elems, low, tol);
          const double e_mean = compare_channels(theirs.smean.p, ours.smean.p, l.c);
          const double e_invstd = compare_channels(theirs.sinvstd.p, ours.sinvstd.p, l.c);
          const double e_dw = compare_channels(theirs.dweight.p, ours.dweight.p, l.c);
          const double e_db = compare_channels(theirs.dbias.p, ours.dbias.p, l.c);
          const bool ok = ay.off_fraction <= max_off && adx.off_fraction <= max_off && adz.off_fraction <= max_off &&
                          e_mean < 1e-3 && e_invstd < 1e-3 && e_dw < 1e-2 && e_db < 1e-2;
          std::printf("      check vs dptrain: y off %.1e (worst %.1e), dx off %.1e (worst %.1e)%s, mean %.1e, "
                      "invstd %.1e, dweight %.1e, dbias %.1e: %s\n",
                      ay.off_fraction, ay.worst, adx.off_fraction, adx.worst,
                      residual ? (", dz off " + std::to_string(adz.off_fraction)).c_str() : "", e_mean, e_invstd, e_dw,
                      e_db, ok ? "agree" : "DISAGREE");
          if (!ok) ++failures;
        }
        std::fflush(stdout);
        rows.push_back(row);
      }
      if (out_of_budget) break;
    }
    if (out_of_budget) std::printf("budget of %.0f s spent: the rest was not probed\n", budget_s);

    // A ResNet-50 step's batch norms: each shape's times by its layer count.
    std::printf("\nsummary: ResNet-50's %d batch norms a step (batch %lld), ms\n", kResNet50BatchNorms,
                static_cast<long long>(batch));
    for (const std::string& dname : dtypes) {
      double of = 0, ob = 0, cf = 0, cb = 0;
      int covered = 0, cudnn_ran = 0;
      for (const Row& r : rows) {
        if (r.dtype != dname) continue;
        covered += r.layer->count;
        of += r.layer->count * r.t.ours_fwd;
        ob += r.layer->count * r.t.ours_bwd;
        if (r.cudnn_error.empty()) {
          cudnn_ran += r.layer->count;
          cf += r.layer->count * r.t.cudnn_fwd;
          cb += r.layer->count * r.t.cudnn_bwd;
        }
      }
      if (covered == 0) continue;
      std::printf("  %s: dptrain forward %.2f + backward %.2f = %.2f", dname.c_str(), of, ob, of + ob);
      if (cudnn_ran == covered)
        std::printf(";  cuDNN persistent forward %.2f + backward %.2f = %.2f  (cuDNN / dptrain %.2f)", cf, cb, cf + cb,
                    (cf + cb) / (of + ob));
      else
        std::printf(";  cuDNN ran %d of the %d layers", cudnn_ran, covered);
      std::printf("%s\n", covered < kResNet50BatchNorms ? "  (budget: not every layer)" : "");
    }
    cudnnDestroy(handle);
    cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::printf("batch_norm_probe: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "batch_norm_probe: FAILED (see above)" : "batch_norm_probe: done");
  return failures ? 1 : 0;
}
