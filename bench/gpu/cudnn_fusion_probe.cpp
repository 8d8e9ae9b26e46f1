// cudnn_fusion_probe: which of the convolution + batch-norm fusions ResNet-50 could use does cuDNN 9's
// graph API run on this GPU, and how fast — measured before any of them is built into dptrain.
//
// Why (issue 11: ResNet-50 bf16/fp16 with CUDA graphs at >= 1.3x PyTorch eager's images/s; call 5
// measured 1.16x in bf16 and 1.00x in fp16): with the convolutions at cuDNN's speed on both sides,
// what is left is memory traffic around them. Every batch norm after a convolution reads the
// convolution's output for its statistics, reads it again to normalise it (+ ReLU) and writes the
// result, which the next convolution reads; backward mirrors that. NVIDIA's MLPerf ResNet-50
// instead folds the statistics into the convolution's epilogue (a per-channel sum and sum of
// squares of Y written as Y is) and the normalisation + ReLU into the next convolution's prologue
// (scale, bias and ReLU applied to X as it is loaded), so a batch norm costs a small finalize
// kernel instead of passes over the activations. cuDNN exposes these as operation graphs: a
// convolution with a GenStats or reduction epilogue, and pointwise prologues on X for forward and
// weight-gradient convolutions. Whether an engine for each graph exists on a given GPU and cuDNN
// version is only known by asking cuDNN on that GPU: this program asks, for ResNet-50's shapes at
// batch 128 in NHWC, times every graph it can run against the plain convolution, and checks the
// fused results against unfused ones.
//
// Per shape and dtype it reports, for each graph: how many engine configurations cuDNN's
// heuristics (mode A) offer, how many finalise into a plan, the fastest plan's time (median of
// timed runs, CUDA events) and its engine (global index; "rtc" when cuDNN compiles it at run time),
// or why none ran. Graphs:
//   fprop            Y = conv(X, W)                                   (the baseline)
//   fprop+genstats   ... and sum, sum of squares of Y per channel     (GenStats op)
//   fprop+colsum     ... the same through reduction ops (ADD over N, H, W of Y and of Y*Y)
//   sbr+fprop+genstats  X' = relu(X*scale + bias) computed as X is loaded, then as above
//   sbr+fprop+colsum
//   wgrad            dW = conv_bwd_filter(X, dY)
//   sbr+wgrad        dW from X' = relu(X*scale + bias) computed as X is loaded
//   dgrad            dX = conv_bwd_data(dY, W)
//   dgrad+drelu      dZ = relu_bwd(conv_bwd_data(dY, W), Z)           (ReLU's backward in the epilogue)
// Checks (first shape of each dtype): the statistics against sums of the fused Y in double on the
// host; the sbr convolution's Y against the plain convolution of X' prepared on the host.
//
// Usage: cudnn_fusion_probe [--dtypes fp16,bf16] [--batch 128] [--configs 3] [--iters 10]
//                           [--budget-s 120] [--only NAME]
// Exit: 0 probed (whatever is or is not supported), 1 a check failed or the baseline convolution
// did not run (then this program's use of the API is wrong), 3 no GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpu/probe_util.h"

namespace {

using probe::from_low;
using probe::ProbeError;
using probe::to_low;

// ---- Backend descriptors -----------------------------------------------------------------------

// One cuDNN backend descriptor, destroyed with its owner.
class Desc {
 public:
  Desc() = default;
  Desc(cudnnBackendDescriptorType_t type, std::string what) : what_(std::move(what)) {
    CHECK_CUDNN(cudnnBackendCreateDescriptor(type, &d_), what_);
  }
  ~Desc() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)), what_(std::move(o.what_)) {}
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      if (d_) cudnnBackendDestroyDescriptor(d_);
      d_ = std::exchange(o.d_, nullptr);
      what_ = std::move(o.what_);
    }
    return *this;
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;

  cudnnBackendDescriptor_t get() const { return d_; }
  template <class T>
  Desc& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, int64_t count = 1) {
    CHECK_CUDNN(cudnnBackendSetAttribute(d_, name, type, count, values), what_ + " attribute " + std::to_string(name));
    return *this;
  }
  Desc& set_desc(cudnnBackendAttributeName_t name, const Desc& other) {
    cudnnBackendDescriptor_t o = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &o);
  }
  Desc& finalize() {
    CHECK_CUDNN(cudnnBackendFinalize(d_), what_ + " finalize");
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string what_;
};

// ---- Tensors -----------------------------------------------------------------------------------


struct Dims {
  int64_t n, c, h, w;
  int64_t numel() const { return n * c * h * w; }
};

// NHWC strides for dimensions given in cuDNN's N, C, H, W order (filters: K, C, R, S as KRSC).
std::vector<int64_t> nhwc_strides(const Dims& d) { return {d.h * d.w * d.c, 1, d.w * d.c, d.c}; }

Desc tensor(int64_t uid, cudnnDataType_t dtype, const Dims& d, bool is_virtual, const std::string& name) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor " + name);
  const std::vector<int64_t> dims = {d.n, d.c, d.h, d.w}, strides = nhwc_strides(d);
  const int64_t alignment = 16;
  const bool v = is_virtual;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &dtype)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &v)
      .finalize();
  return t;
}

// ---- The problem -------------------------------------------------------------------------------

struct ConvShape {
  const char* name;
  int64_t c, k, hw, r, stride, pad;
  int64_t out_hw() const { return (hw + 2 * pad - r) / stride + 1; }
};

// ResNet-50 v1.5 at 224x224: convolutions a batch norm follows (the stride sits in the 3x3).
const ConvShape kShapes[] = {
    {"layer1.0.conv1 1x1 64->64 @56", 64, 64, 56, 1, 1, 0},
    {"layer1.0.conv2 3x3 64->64 @56", 64, 64, 56, 3, 1, 1},
    {"layer1.0.conv3 1x1 64->256 @56", 64, 256, 56, 1, 1, 0},
    {"layer2.0.conv2 3x3/2 128->128 @56", 128, 128, 56, 3, 2, 1},
    {"layer3.1.conv2 3x3 256->256 @14", 256, 256, 14, 3, 1, 1},
    {"layer4.1.conv3 1x1 512->2048 @7", 512, 2048, 7, 1, 1, 0},
};

enum Uid : int64_t {
  kX = 1, kW, kY, kSum, kSqSum, kScale, kBias, kScaleLow, kBiasLow, kDY, kDW, kDX, kZ, kDZ,
  kVirtualBase = 100,  // intermediates
};

// Two dtype recipes for the scale-bias-ReLU prologue, since an engine may take one and not the
// other: scale, bias and the intermediates in float32 (what dptrain's batch norm keeps), or all in
// the activations' dtype (cudnn-frontend's own genstats sample).
enum class Sbr { kFloat32, kIoDtype };
const char* sbr_name(Sbr v) { return v == Sbr::kFloat32 ? "float32 prologue" : "io-dtype prologue"; }
int64_t scale_uid(Sbr v) { return v == Sbr::kFloat32 ? kScale : kScaleLow; }
int64_t bias_uid(Sbr v) { return v == Sbr::kFloat32 ? kBias : kBiasLow; }
// The real tensors of a graph with the prologue and a statistics epilogue.
std::vector<int64_t> sbr_stats_uids(Sbr v) { return {kX, scale_uid(v), bias_uid(v), kW, kY, kSum, kSqSum}; }

// The graphs' real tensors in device memory (none with --describe: no GPU is needed to build ops).
struct Buffers {
  explicit Buffers(bool on_device) : on_device(on_device) {}
  ~Buffers() {
    for (auto& [uid, p] : ptr)
      if (p) cudaFree(p);
  }
  Buffers(const Buffers&) = delete;
  Buffers& operator=(const Buffers&) = delete;
  void alloc(int64_t uid, size_t bytes) {
    void* p = nullptr;
    if (on_device) CHECK_CUDA(cudaMalloc(&p, bytes));
    ptr[uid] = p;
  }
  bool on_device;
  std::map<int64_t, void*> ptr;
};

struct Precision {
  const char* name;
  cudnnDataType_t dtype;
};

// ---- One operation graph: build, ask the heuristics, time the plans ---------------------------

struct GraphResult {
  int offered = 0, finalized = 0;
  double best_ms = -1;
  int64_t engine = -1;
  bool runtime_compiled = false;
  double plan_seconds = 0;  // building (and compiling) the plans tried
  bool described = false;   // --describe: only the ops were built
  bool skipped = false;     // --budget-s was spent before this graph
  bool fallback = false;    // the configurations came from the fallback list (mode A had none)
  bool io_dtype_prologue = false;  // sbr graphs: ran with the io-dtype recipe (the float32 one did not)
  std::string why_not;      // when nothing ran
};

class Probe {
 public:
  using Clock = std::chrono::steady_clock;
  Probe(cudnnHandle_t handle, cudaStream_t stream, int max_configs, int iters, Clock::time_point deadline)
      : handle_(handle), stream_(stream), max_configs_(max_configs), iters_(iters), deadline_(deadline) {}
  bool out_of_time() const { return Clock::now() > deadline_; }

  // Builds the graph from `ops` (whose non-virtual tensors are `uids`), then tries up to
  // max_configs of the heuristics' configurations.
  GraphResult run(const std::vector<Desc*>& ops, const std::vector<int64_t>& uids, Buffers& buf,
                  const std::string& what, bool timed = true) {
    GraphResult r;
    if (handle_ == nullptr) {  // --describe: the ops were built and finalised; no graph without a GPU
      r.described = true;
      return r;
    }
    std::vector<cudnnBackendDescriptor_t> raw;
    for (Desc* op : ops) raw.push_back(op->get());
    Desc graph;
    try {
      graph = Desc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what + " operation graph");
      graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(), static_cast<int64_t>(raw.size()))
          .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle_)
          .finalize();
    } catch (const ProbeError& e) {
      r.why_not = std::string("graph refused: ") + e.what();
      return r;
    }
    // Heuristics mode A's configurations; when it has none, the fallback list's.
    std::vector<Desc> configs;
    for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
      try {
        configs = heuristics(graph, mode, what);
      } catch (const ProbeError& e) {
        r.why_not = std::string("heuristics: ") + e.what();
      }
      r.offered = static_cast<int>(configs.size());
      r.fallback = mode == CUDNN_HEUR_MODE_FALLBACK;
      if (!configs.empty()) break;
    }
    if (configs.empty()) {
      if (r.why_not.empty()) r.why_not = "the heuristics offered no engine (mode A nor fallback)";
      return r;
    }
    // Past the deadline no further plan is built (a runtime-compiled one can take seconds), but
    // the first always is, so that a graph that ran is never reported as unsupported. An untimed
    // run (a check) goes on past it until one plan has run, and stops there: the check's outputs
    // then come from exactly one execution.
    for (size_t i = 0; i < configs.size() && static_cast<int>(i) < max_configs_ && (i == 0 || !timed || !out_of_time());
         ++i) {
      if (!timed && r.best_ms >= 0) break;
      const auto t0 = std::chrono::steady_clock::now();
      try {
        Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, what + " plan");
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle_)
            .set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, configs[i])
            .finalize();
        r.plan_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        ++r.finalized;
        const double ms = time_plan(plan, uids, buf, what, timed ? iters_ : 0);
        if (r.best_ms < 0 || ms < r.best_ms) {
          r.best_ms = ms;
          engine_facts(configs[i], what, r);
        }
      } catch (const std::exception& e) {  // cuDNN's refusal, or e.g. no memory for the workspace
        r.plan_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r.why_not.empty()) r.why_not = e.what();
      }
    }
    if (r.best_ms >= 0) r.why_not.clear();
    return r;
  }

  // Runs the graph of `ops` once, by the first of its plans that runs, for the checks; false when
  // none runs.
  bool run_once(const std::vector<Desc*>& ops, const std::vector<int64_t>& uids, Buffers& buf,
                const std::string& what) {
    const GraphResult r = run(ops, uids, buf, what, /*timed=*/false);
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    return r.best_ms >= 0;
  }

 private:
  std::vector<Desc> heuristics(const Desc& graph, cudnnBackendHeurMode_t mode, const std::string& what) {
    Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, what + " heuristics");
    heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph).set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
    heur.finalize();
    int64_t count = 0;
    CHECK_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                         &count, nullptr),
                what + " heuristics count");
    std::vector<Desc> configs;
    std::vector<cudnnBackendDescriptor_t> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, what + " engine config");
      raw.push_back(configs.back().get());
    }
    int64_t got = 0;
    if (count > 0)
      CHECK_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                           &got, raw.data()),
                  what + " heuristics results");
    configs.resize(static_cast<size_t>(std::min(got, count)));
    return configs;
  }

  // Runs the plan once, then (iters > 0) times `iters` runs after 2 warm-up runs: the median ms.
  double time_plan(const Desc& plan, const std::vector<int64_t>& uids, Buffers& buf, const std::string& what,
                   int iters) {
    int64_t workspace_bytes = 0;
    int64_t got = 0;
    CHECK_CUDNN(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                         &workspace_bytes),
                what + " workspace size");
    void* workspace = nullptr;
    if (workspace_bytes > 0) CHECK_CUDA(cudaMalloc(&workspace, static_cast<size_t>(workspace_bytes)));
    std::unique_ptr<void, void (*)(void*)> ws_guard(workspace, [](void* p) {
      if (p) cudaFree(p);
    });
    std::vector<void*> ptrs;
    for (int64_t uid : uids) ptrs.push_back(buf.ptr.at(uid));
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, what + " variant pack");
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), static_cast<int64_t>(uids.size()))
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, ptrs.data(), static_cast<int64_t>(ptrs.size()))
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
        .finalize();
    auto execute = [&] { CHECK_CUDNN(cudnnBackendExecute(handle_, plan.get(), pack.get()), what + " execute"); };
    execute();
    CHECK_CUDA(cudaStreamSynchronize(stream_));
    if (iters == 0) return 0.0;
    return probe::median_ms(stream_, /*warmup=*/2, iters, execute);
  }

  void engine_facts(const Desc& config, const std::string& what, GraphResult& r) {
    try {
      Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR, what + " engine");
      cudnnBackendDescriptor_t e = engine.get();
      int64_t got = 0;
      CHECK_CUDNN(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                           &got, &e),
                  what + " engine of config");
      CHECK_CUDNN(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got, &r.engine),
                  what + " engine index");
      cudnnBackendBehaviorNote_t notes[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
      int64_t n = 0;
      CHECK_CUDNN(cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                           CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &n, notes),
                  what + " behaviour notes");
      r.runtime_compiled = false;
      for (int64_t i = 0; i < n; ++i)
        if (notes[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) r.runtime_compiled = true;
    } catch (const ProbeError&) {
      r.engine = -1;  // facts only: the timing stands
    }
  }

  cudnnHandle_t handle_;
  cudaStream_t stream_;
  int max_configs_;
  int iters_;
  Clock::time_point deadline_;
};

// ---- Graph builders ----------------------------------------------------------------------------

Desc conv_desc(const ConvShape& s) {
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution");
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;  // PyTorch's convolution
  const int64_t spatial = 2;
  const int64_t dil[2] = {1, 1}, stride[2] = {s.stride, s.stride}, pad[2] = {s.pad, s.pad};
  c.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dil, 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, stride, 2)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pad, 2)
      .finalize();
  return c;
}

Desc pointwise_desc(cudnnPointwiseMode_t mode) {
  Desc p(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  p.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode)
      .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec)
      .finalize();
  return p;
}

// Pointwise op: y = mode(x[, b]).
Desc pointwise_op(const Desc& mode_desc, const Desc& x, const Desc* b, const Desc& y) {
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode_desc).set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y).finalize();
  return op;
}

// ReLU's backward: dx = dy where x > 0.
Desc relu_backward_op(const Desc& mode_desc, const Desc& dy, const Desc& x, const Desc& dx) {
  Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "relu backward op");
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, mode_desc)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_DYDESC, dy)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_DXDESC, dx)
      .finalize();
  return op;
}

Desc reduction_op(const Desc& x, const Desc& y) {
  Desc red(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
  const cudnnReduceTensorOp_t op_type = CUDNN_REDUCE_TENSOR_ADD;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  red.set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, &op_type)
      .set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &comp)
      .finalize();
  Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
  op.set_desc(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y)
      .set_desc(CUDNN_ATTR_OPERATION_REDUCTION_DESC, red)
      .finalize();
  return op;
}

Desc genstats_op(const Desc& x, const Desc& sum, const Desc& sqsum) {
  Desc op(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR, "genstats op");
  const cudnnGenStatsMode_t mode = CUDNN_GENSTATS_SUM_SQSUM;
  const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
  op.set(CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, &mode)
      .set(CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &prec)
      .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_XDESC, x)
      .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, sum)
      .set_desc(CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, sqsum)
      .finalize();
  return op;
}

// The three convolution directions: one op each, its two operands and its result named by
// direction-specific attributes.
struct ConvDirection {
  cudnnBackendDescriptorType_t type;
  const char* name;
  cudnnBackendAttributeName_t in1, in2, out, conv, alpha, beta;
};
constexpr ConvDirection kFprop{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "conv fprop op",
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA};
constexpr ConvDirection kWgrad{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "conv wgrad op",
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA};
constexpr ConvDirection kDgrad{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "conv dgrad op",
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                               CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};

Desc conv_op(const ConvDirection& d, const Desc& conv, const Desc& in1, const Desc& in2, const Desc& out) {
  Desc op(d.type, d.name);
  const float alpha = 1.0f, beta = 0.0f;
  op.set_desc(d.in1, in1)
      .set_desc(d.in2, in2)
      .set_desc(d.out, out)
      .set_desc(d.conv, conv)
      .set(d.alpha, CUDNN_TYPE_FLOAT, &alpha)
      .set(d.beta, CUDNN_TYPE_FLOAT, &beta)
      .finalize();
  return op;
}
Desc fprop_op(const Desc& conv, const Desc& x, const Desc& w, const Desc& y) { return conv_op(kFprop, conv, x, w, y); }
Desc wgrad_op(const Desc& conv, const Desc& x, const Desc& dy, const Desc& dw) { return conv_op(kWgrad, conv, x, dy, dw); }
Desc dgrad_op(const Desc& conv, const Desc& dy, const Desc& w, const Desc& dx) { return conv_op(kDgrad, conv, dy, w, dx); }

struct Row {
  std::string shape, dtype, graph;
  GraphResult result;
};

// Fills a low-precision buffer with uniform values in [lo, hi).
std::vector<uint16_t> random_low(int64_t n, float lo, float hi, cudnnDataType_t dtype, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto& b : v) b = to_low(dist(rng), dtype);
  return v;
}

std::vector<float> random_float(int64_t n, float lo, float hi, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& f : v) f = dist(rng);
  return v;
}

template <class T>
void upload(Buffers& buf, int64_t uid, const std::vector<T>& host) {
  if (!buf.on_device) return;
  probe::upload(buf.ptr.at(uid), host.data(), static_cast<int64_t>(host.size()));
}
template <class T>
std::vector<T> download(Buffers& buf, int64_t uid, int64_t n) {
  return probe::download<T>(buf.ptr.at(uid), n);
}

std::string fmt_result(const GraphResult& r) {
  char line[256];
  if (r.described) return "ops built";
  if (r.skipped) return "not run: --budget-s spent";
  if (r.best_ms < 0) {
    std::snprintf(line, sizeof line, "none of %d config(s) ran", r.offered);
    return line;
  }
  std::snprintf(line, sizeof line, "%8.3f ms  engine %3lld%s  %d/%d%s finalised  plans %.1f s", r.best_ms,
                static_cast<long long>(r.engine), r.runtime_compiled ? " rtc" : "    ", r.finalized, r.offered,
                r.fallback ? " (fallback list)" : "", r.plan_seconds);
  if (r.io_dtype_prologue) return std::string(line) + "  (io-dtype prologue)";
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> dtypes = {"fp16", "bf16"};
  int64_t batch = 128;
  int max_configs = 3, iters = 10;
  double budget_s = 120;
  std::string only;
  bool describe = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&] { return probe::option_value(argc, argv, i, "cudnn_fusion_probe"); };
    if (a == "--dtypes") {
      dtypes = probe::parse_dtypes(value(), "cudnn_fusion_probe");
    } else if (a == "--batch") {
      batch = std::atoll(value().c_str());
    } else if (a == "--configs") {
      max_configs = std::atoi(value().c_str());
    } else if (a == "--iters") {
      iters = std::atoi(value().c_str());
    } else if (a == "--budget-s") {
      budget_s = std::atof(value().c_str());
    } else if (a == "--only") {
      only = value();
    } else if (a == "--describe") {
      describe = true;
    } else {
      std::fprintf(stderr,
                   "usage: cudnn_fusion_probe [--dtypes fp16,bf16] [--batch 128] [--configs 3] [--iters 10] "
                   "[--budget-s 120] [--only NAME-SUBSTRING] [--describe]\n");
      return 2;
    }
  }
  if (batch < 1 || max_configs < 1 || iters < 1 || budget_s <= 0) {
    std::fprintf(stderr, "cudnn_fusion_probe: --batch, --configs, --iters and --budget-s must be positive\n");
    return 2;
  }

  int devices = 0;
  if (!describe && (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)) {
    std::printf("cudnn_fusion_probe: no CUDA GPU is visible; nothing probed\n");
    return 3;
  }
  const auto started = std::chrono::steady_clock::now();
  int failures = 0;
  try {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    if (describe) {
      std::printf("--describe: every graph's operations built and finalised, no GPU used (cuDNN %zu)\n",
                  cudnnGetVersion());
    } else {
      cudaDeviceProp prop{};
      CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
      std::printf("GPU: %s (sm_%d%d), cuDNN %zu, batch %lld, NHWC, float32 accumulation, up to %d engine configs a "
                  "graph\n",
                  prop.name, prop.major, prop.minor, cudnnGetVersion(), static_cast<long long>(batch), max_configs);
      CHECK_CUDNN(cudnnCreate(&handle), "cudnnCreate");
      CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      CHECK_CUDNN(cudnnSetStream(handle, stream), "cudnnSetStream");
    }
    const auto deadline = started + std::chrono::milliseconds(static_cast<int64_t>(budget_s * 1e3));
    Probe probe(handle, stream, max_configs, iters, deadline);
    std::mt19937 rng(1234);
    std::vector<Row> rows;
    bool out_of_budget = false;

    for (const std::string& dname : dtypes) {
      const Precision prec{dname == "fp16" ? "fp16" : "bf16", dname == "fp16" ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16};
      bool checked = false;
      for (const ConvShape& s : kShapes) {
        if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
        if (probe.out_of_time()) {
          out_of_budget = true;
          break;
        }
        const int64_t oh = s.out_hw();
        const Dims x{batch, s.c, s.hw, s.hw}, w{s.k, s.c, s.r, s.r}, y{batch, s.k, oh, oh}, per_c{1, s.c, 1, 1},
            per_k{1, s.k, 1, 1};
        const cudnnDataType_t low = prec.dtype, f32 = CUDNN_DATA_FLOAT;
        const std::string tag = std::string(s.name) + " " + prec.name;

        Buffers buf(!describe);
        buf.alloc(kX, x.numel() * 2);
        buf.alloc(kW, w.numel() * 2);
        buf.alloc(kY, y.numel() * 2);
        buf.alloc(kSum, per_k.numel() * 4);
        buf.alloc(kSqSum, per_k.numel() * 4);
        buf.alloc(kScale, per_c.numel() * 4);
        buf.alloc(kBias, per_c.numel() * 4);
        buf.alloc(kScaleLow, per_c.numel() * 2);
        buf.alloc(kBiasLow, per_c.numel() * 2);
        buf.alloc(kDY, y.numel() * 2);
        buf.alloc(kDW, w.numel() * 2);  // in the low dtype, widened afterwards as dptrain's autocast does
        buf.alloc(kDX, x.numel() * 2);
        buf.alloc(kZ, x.numel() * 2);
        buf.alloc(kDZ, x.numel() * 2);
        const std::vector<uint16_t> hx = random_low(x.numel(), -1.0f, 1.0f, low, rng);
        const std::vector<uint16_t> hw = random_low(w.numel(), -0.1f, 0.1f, low, rng);
        // Scale and bias hold values the low dtype represents exactly, so both recipes apply the same ones.
        std::vector<float> hscale = random_float(per_c.numel(), 0.5f, 1.5f, rng);
        std::vector<float> hbias = random_float(per_c.numel(), -0.5f, 0.5f, rng);
        std::vector<uint16_t> hscale_low(hscale.size()), hbias_low(hbias.size());
        for (size_t c = 0; c < hscale.size(); ++c) {
          hscale_low[c] = to_low(hscale[c], low);
          hscale[c] = from_low(hscale_low[c], low);
          hbias_low[c] = to_low(hbias[c], low);
          hbias[c] = from_low(hbias_low[c], low);
        }
        upload(buf, kX, hx);
        upload(buf, kW, hw);
        upload(buf, kScale, hscale);
        upload(buf, kBias, hbias);
        upload(buf, kScaleLow, hscale_low);
        upload(buf, kBiasLow, hbias_low);
        upload(buf, kDY, random_low(y.numel(), -1.0f, 1.0f, low, rng));
        upload(buf, kZ, random_low(x.numel(), -1.0f, 1.0f, low, rng));

        // Tensors (descriptors) shared by the graphs.
        const Desc tX = tensor(kX, low, x, false, "X"), tW = tensor(kW, low, w, false, "W"),
                   tY = tensor(kY, low, y, false, "Y"), tSum = tensor(kSum, f32, per_k, false, "sum"),
                   tSq = tensor(kSqSum, f32, per_k, false, "sqsum"), tScale = tensor(kScale, f32, per_c, false, "scale"),
                   tBias = tensor(kBias, f32, per_c, false, "bias"),
                   tScaleLow = tensor(kScaleLow, low, per_c, false, "scale (io dtype)"),
                   tBiasLow = tensor(kBiasLow, low, per_c, false, "bias (io dtype)"), tDY = tensor(kDY, low, y, false, "dY"),
                   tDW = tensor(kDW, low, w, false, "dW"), tDX = tensor(kDX, low, x, false, "dX"),
                   tZ = tensor(kZ, low, x, false, "Z"), tDZ = tensor(kDZ, low, x, false, "dZ");
        const Desc conv = conv_desc(s);
        const Desc pw_mul = pointwise_desc(CUDNN_POINTWISE_MUL), pw_add = pointwise_desc(CUDNN_POINTWISE_ADD),
                   pw_relu = pointwise_desc(CUDNN_POINTWISE_RELU_FWD),
                   pw_relu_bwd = pointwise_desc(CUDNN_POINTWISE_RELU_BWD);

        auto record = [&](const std::string& graph, const GraphResult& r) {
          rows.push_back({s.name, prec.name, graph, r});
          std::printf("  %-36s %-5s %-20s %s%s\n", s.name, prec.name, graph.c_str(), fmt_result(r).c_str(),
                      r.best_ms < 0 && !r.described && !r.skipped ? ("  [" + r.why_not.substr(0, 300) + "]").c_str() : "");
          std::fflush(stdout);
        };
        // Each graph's ops are built inside a try: an op cuDNN refuses to build is a result too.
        auto attempt = [&](const std::string& graph, const std::function<GraphResult()>& body) {
          GraphResult r;
          if (probe.out_of_time()) {
            out_of_budget = true;
            r.skipped = true;
            record(graph, r);
            return r;
          }
          try {
            r = body();
          } catch (const ProbeError& e) {
            r.why_not = std::string("op refused: ") + e.what();
            if (describe) ++failures;  // without a GPU only building the ops is checked: it must work
          }
          record(graph, r);
          return r;
        };

        // The prologue X' = relu(X*scale + bias): virtual intermediates, X' in the low dtype; ops at
        // keep[first + 3 .. first + 5] where first is keep's size on entry.
        auto prologue = [&](std::vector<Desc>& keep, int64_t first_uid, Sbr v) -> const Desc& {
          const cudnnDataType_t mid = v == Sbr::kFloat32 ? f32 : low;
          const Desc& scale = v == Sbr::kFloat32 ? tScale : tScaleLow;
          const Desc& bias = v == Sbr::kFloat32 ? tBias : tBiasLow;
          keep.push_back(tensor(first_uid, mid, x, true, "X*scale"));
          keep.push_back(tensor(first_uid + 1, mid, x, true, "X*scale+bias"));
          keep.push_back(tensor(first_uid + 2, low, x, true, "X'"));
          keep.push_back(pointwise_op(pw_mul, tX, &scale, keep[keep.size() - 3]));
          keep.push_back(pointwise_op(pw_add, keep[keep.size() - 4], &bias, keep[keep.size() - 3]));
          keep.push_back(pointwise_op(pw_relu, keep[keep.size() - 4], nullptr, keep[keep.size() - 3]));
          return keep[keep.size() - 4];  // X'
        };
        auto ops_of = [](std::vector<Desc>& keep, std::initializer_list<size_t> idx) {
          std::vector<Desc*> ops;
          for (size_t i : idx) ops.push_back(&keep[i]);
          return ops;
        };

        const GraphResult base = attempt("fprop", [&] {
          std::vector<Desc> k;
          k.push_back(fprop_op(conv, tX, tW, tY));
          return probe.run(ops_of(k, {0}), {kX, kW, kY}, buf, tag + " fprop");
        });
        if (base.best_ms < 0 && !base.described && !base.skipped) ++failures;  // the baseline must run: else this program is wrong
        attempt("fprop+genstats", [&] {
          std::vector<Desc> k;
          k.push_back(fprop_op(conv, tX, tW, tY));
          k.push_back(genstats_op(tY, tSum, tSq));
          return probe.run(ops_of(k, {0, 1}), {kX, kW, kY, kSum, kSqSum}, buf, tag + " fprop+genstats");
        });
        // Y -> sum over N, H, W; Y*Y (virtual, float32) -> sum over N, H, W.
        auto colsum_ops = [&](std::vector<Desc>& k) {
          k.push_back(tensor(kVirtualBase + 10, f32, y, true, "Y*Y"));
          const size_t yy = k.size() - 1;
          k.push_back(reduction_op(tY, tSum));
          k.push_back(pointwise_op(pw_mul, tY, &tY, k[yy]));
          k.push_back(reduction_op(k[yy], tSq));
          return std::vector<size_t>{yy + 1, yy + 2, yy + 3};
        };
        attempt("fprop+colsum", [&] {
          std::vector<Desc> k;
          k.reserve(16);
          k.push_back(fprop_op(conv, tX, tW, tY));
          const auto red = colsum_ops(k);
          return probe.run({&k[0], &k[red[0]], &k[red[1]], &k[red[2]]}, {kX, kW, kY, kSum, kSqSum}, buf,
                           tag + " fprop+colsum");
        });
        // A graph with the prologue: the float32 recipe, then (when it did not run) the io-dtype one;
        // without a GPU both are built.
        auto attempt_sbr = [&](const std::string& graph, const std::function<GraphResult(Sbr)>& body) {
          // One recipe; on a GPU an op cuDNN refuses is that recipe's result (without one, a failure).
          auto recipe = [&](Sbr v) {
            GraphResult r;
            try {
              r = body(v);
            } catch (const ProbeError& e) {
              if (describe) throw;
              r.why_not = std::string("op refused: ") + e.what();
            }
            return r;
          };
          return attempt(graph, [&] {
            const GraphResult first = recipe(Sbr::kFloat32);
            if (first.best_ms >= 0 || first.skipped || probe.out_of_time()) return first;
            GraphResult second = recipe(Sbr::kIoDtype);
            second.io_dtype_prologue = second.best_ms >= 0;
            if (second.best_ms < 0 && !second.described)
              second.why_not = std::string(sbr_name(Sbr::kFloat32)) + ": " + first.why_not + "; " +
                               sbr_name(Sbr::kIoDtype) + ": " + second.why_not;
            return second;
          });
        };
        // Prologue + forward convolution + a statistics epilogue (GenStats, or reduction ops): its ops
        // (in `k`, which must not reallocate while they are used).
        auto sbr_fprop_stats = [&](std::vector<Desc>& k, Sbr v, bool genstats) {
          k.reserve(16);
          const Desc& xp = prologue(k, kVirtualBase, v);
          k.push_back(fprop_op(conv, xp, tW, tY));
          std::vector<Desc*> ops = ops_of(k, {3, 4, 5, 6});
          if (genstats) {
            k.push_back(genstats_op(tY, tSum, tSq));
            ops.push_back(&k.back());
          } else {
            for (size_t i : colsum_ops(k)) ops.push_back(&k[i]);
          }
          return ops;
        };
        GraphResult sbr_genstats = attempt_sbr("sbr+fprop+genstats", [&](Sbr v) {
          std::vector<Desc> k;
          return probe.run(sbr_fprop_stats(k, v, true), sbr_stats_uids(v), buf, tag + " sbr+fprop+genstats");
        });
        GraphResult sbr_colsum = attempt_sbr("sbr+fprop+colsum", [&](Sbr v) {
          std::vector<Desc> k;
          return probe.run(sbr_fprop_stats(k, v, false), sbr_stats_uids(v), buf, tag + " sbr+fprop+colsum");
        });
        attempt("wgrad", [&] {
          std::vector<Desc> k;
          k.push_back(wgrad_op(conv, tX, tDY, tDW));
          return probe.run(ops_of(k, {0}), {kX, kDY, kDW}, buf, tag + " wgrad");
        });
        attempt_sbr("sbr+wgrad", [&](Sbr v) {
          std::vector<Desc> k;
          k.reserve(16);
          const Desc& xp = prologue(k, kVirtualBase, v);
          k.push_back(wgrad_op(conv, xp, tDY, tDW));
          return probe.run(ops_of(k, {3, 4, 5, 6}), {kX, scale_uid(v), bias_uid(v), kDY, kDW}, buf, tag + " sbr+wgrad");
        });
        attempt("dgrad", [&] {
          std::vector<Desc> k;
          k.push_back(dgrad_op(conv, tDY, tW, tDX));
          return probe.run(ops_of(k, {0}), {kDY, kW, kDX}, buf, tag + " dgrad");
        });
        attempt("dgrad+drelu", [&] {
          std::vector<Desc> k;
          k.reserve(8);
          k.push_back(tensor(kVirtualBase + 20, f32, x, true, "dX (virtual)"));
          k.push_back(dgrad_op(conv, tDY, tW, k[0]));
          k.push_back(relu_backward_op(pw_relu_bwd, k[0], tZ, tDZ));
          return probe.run(ops_of(k, {1, 2}), {kDY, kW, kZ, kDZ}, buf, tag + " dgrad+drelu");
        });

        // Checks, once a dtype: the fused statistics against the fused Y's sums, and the fused
        // prologue's Y against the plain convolution of X' made on the host.
        if (!checked && (sbr_genstats.best_ms >= 0 || sbr_colsum.best_ms >= 0)) {
          checked = true;
          const bool genstats = sbr_genstats.best_ms >= 0;
          const Sbr recipe = (genstats ? sbr_genstats : sbr_colsum).io_dtype_prologue ? Sbr::kIoDtype : Sbr::kFloat32;
          try {
            std::vector<Desc> k;
            // Zeroed first: whether the fused statistics overwrite or add, one run's sums are compared.
            CHECK_CUDA(cudaMemset(buf.ptr.at(kSum), 0, static_cast<size_t>(s.k) * 4));
            CHECK_CUDA(cudaMemset(buf.ptr.at(kSqSum), 0, static_cast<size_t>(s.k) * 4));
            CHECK_CUDA(cudaDeviceSynchronize());
            const std::vector<Desc*> fused = sbr_fprop_stats(k, recipe, genstats);
            if (!probe.run_once(fused, sbr_stats_uids(recipe), buf, tag + " check, fused"))
              throw std::runtime_error("the fused graph, which ran when timed, did not run again for the check");
            const std::vector<uint16_t> y_fused = download<uint16_t>(buf, kY, y.numel());
            const std::vector<float> sum = download<float>(buf, kSum, s.k), sq = download<float>(buf, kSqSum, s.k);
            std::vector<double> want_sum(s.k, 0.0), want_sq(s.k, 0.0);
            for (int64_t i = 0; i < y.numel(); ++i) {
              const double v = from_low(y_fused[static_cast<size_t>(i)], low);
              want_sum[static_cast<size_t>(i % s.k)] += v;  // NHWC: the channel is the fastest index
              want_sq[static_cast<size_t>(i % s.k)] += v * v;
            }
            double stat_err = 0;
            for (int64_t c = 0; c < s.k; ++c) {
              const double scale_sum = std::max(1.0, std::abs(want_sq[c]));  // |sum| <= sqrt(n * sumsq)
              stat_err = probe::worse(stat_err, std::abs(sum[c] - want_sum[c]) / std::sqrt(scale_sum * y.n * oh * oh));
              stat_err = probe::worse(stat_err, std::abs(sq[c] - want_sq[c]) / std::max(1.0, want_sq[c]));
            }
            // X' on the host, rounded to the low dtype as the prologue's output is (the io-dtype
            // recipe also rounds X*scale and X*scale+bias).
            auto round_mid = [&](float v) { return recipe == Sbr::kIoDtype ? from_low(to_low(v, low), low) : v; };
            std::vector<uint16_t> hxp(hx.size());
            for (size_t i = 0; i < hx.size(); ++i) {
              const size_t c = i % static_cast<size_t>(s.c);
              const float t = round_mid(round_mid(from_low(hx[i], low) * hscale[c]) + hbias[c]);
              hxp[i] = to_low(std::max(0.0f, t), low);
            }
            upload(buf, kX, hxp);
            std::vector<Desc> plain;
            plain.push_back(fprop_op(conv, tX, tW, tY));
            if (!probe.run_once(ops_of(plain, {0}), {kX, kW, kY}, buf, tag + " check, plain"))
              throw std::runtime_error("the plain convolution did not run for the check");
            upload(buf, kX, hx);
            const std::vector<uint16_t> y_plain = download<uint16_t>(buf, kY, y.numel());
            double y_err = 0, y_max = 0;
            for (size_t i = 0; i < y_plain.size(); ++i) {
              const double a = from_low(y_fused[i], low), b = from_low(y_plain[i], low);
              y_err = probe::worse(y_err, std::abs(a - b));
              y_max = std::max(y_max, std::abs(b));
            }
            const double y_rel = y_err / std::max(1e-30, y_max);
            // One rounding of Y in the low dtype (bf16: 2^-8, fp16: 2^-11 relative), a few ulps of slack.
            const double y_tol = prec.dtype == CUDNN_DATA_BFLOAT16 ? 3e-2 : 4e-3;
            const bool ok = stat_err < 1e-3 && y_rel < y_tol;
            std::printf("  check %s %s (%s, %s): statistics vs the fused Y's sums: max error %.2e (< 1e-3); "
                        "fused prologue's Y vs plain conv of X': max |diff| / max |Y| = %.2e (< %.0e): %s\n",
                        s.name, prec.name, genstats ? "genstats" : "colsum", sbr_name(recipe), stat_err, y_rel, y_tol,
                        ok ? "ok" : "FAILED");
            if (!ok) ++failures;
          } catch (const std::exception& e) {  // the other shapes and the summary still come
            std::printf("  check %s %s: FAILED: %s\n", s.name, prec.name, e.what());
            ++failures;
          }
        }
      }
      if (out_of_budget) break;
    }
    if (out_of_budget) std::printf("budget of %.0f s spent: the rest was not probed\n", budget_s);

    // Summary: each fused graph's time against the plain convolution's of the same shape.
    if (describe) rows.clear();
    if (!rows.empty()) std::printf("\nsummary (ms; fused graph / plain convolution of the same direction):\n");
    std::map<std::pair<std::string, std::string>, std::map<std::string, double>> table;
    for (const Row& r : rows) table[{r.shape, r.dtype}][r.graph] = r.result.best_ms;
    for (const auto& [key, g] : table) {
      std::printf("  %-36s %-5s", key.first.c_str(), key.second.c_str());
      for (const char* name : {"fprop", "fprop+genstats", "fprop+colsum", "sbr+fprop+genstats", "sbr+fprop+colsum",
                               "wgrad", "sbr+wgrad", "dgrad", "dgrad+drelu"}) {
        const auto it = g.find(name);
        if (it == g.end()) continue;
        const std::string base_name = std::string(name).find("wgrad") != std::string::npos   ? "wgrad"
                                      : std::string(name).find("dgrad") != std::string::npos ? "dgrad"
                                                                                             : "fprop";
        const double base = g.count(base_name) ? g.at(base_name) : -1;
        if (it->second < 0)
          std::printf("  %s -", name);
        else if (base > 0 && base_name != name)
          std::printf("  %s %.3f (%.2fx)", name, it->second, it->second / base);
        else
          std::printf("  %s %.3f", name, it->second);
      }
      std::printf("\n");
    }
    if (handle) cudnnDestroy(handle);
    if (stream) cudaStreamDestroy(stream);
  } catch (const std::exception& e) {
    std::printf("cudnn_fusion_probe: %s\n", e.what());
    return 1;
  }
  std::printf("%s\n", failures ? "cudnn_fusion_probe: FAILED (see above)" : "cudnn_fusion_probe: done");
  return failures ? 1 : 0;
}
