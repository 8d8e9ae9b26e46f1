// 2-D convolution through cuDNN 9's legacy convolution API: cudnnConvolutionForward /
// BackwardData / BackwardFilter / BackwardBias, and cudnnAddTensor for the forward's bias.
//
// Why the legacy API: it is what PyTorch's own legacy cuDNN path and most training frameworks
// still call; it is fully documented and stable in cuDNN 9 (marked deprecated in favour of the
// graph API, not removed); and it is far less code than the raw backend-descriptor graph API
// without NVIDIA's cudnn-frontend (not available here), which matters for code written before a
// GPU is at hand to run it. Its deprecation warnings are silenced for this file only (below).
//
// NOTE [ cuDNN convolution algorithms ]
// Each (pass, dtype, TF32, layout, shape, parameters) problem picks its algorithm once and keeps
// it in CudaBackend::ConvAlgoCache:
//   - options().cudnn_benchmark (the default): cudnnFind*AlgorithmEx times every algorithm on the
//     call's own buffers (the output it writes, y / dx / dw, is overwritten by the real call that
//     follows; an output the call adds to is replaced by a scratch buffer), with a search
//     workspace from the stream-ordered pool of up to 1 GiB (less when less memory is free).
//     Find blocks the host until its timings are done: once per problem. It runs twice and each
//     algorithm keeps its better time (merge_find_runs): Find times each algorithm once, and the
//     first launch of a kernel can include loading its module (CUDA's lazy loading), so in one
//     run an algorithm can time several times slower than it runs — on an H200 ResNet-50's 7×7
//     stem got a 2.0 ms kernel in one run and the 1.0 ms CUTLASS kernel (PyTorch's) in another.
//   - otherwise cuDNN's heuristic (cudnnGet*Algorithm_v7), in its ranking order.
// Among the successful candidates with an allowed math type: the fastest, unless a deterministic
// algorithm is within 10% (+5 µs) of it, which is then taken (forward algorithms all are; for the
// backward passes the non-deterministic ones use atomics). The heuristic gives no timings, so it
// takes its first-ranked candidate as is.
// Math type: float32 without allow_tf32 must not round to TF32, and cuDNN's DEFAULT_MATH allows
// TF32 on Ampere and later, so it gets CUDNN_FMA_MATH (as PyTorch) and only FMA candidates are
// accepted; float32 with allow_tf32 gets DEFAULT_MATH; float16/bfloat16 TENSOR_OP_MATH with a
// float32 compute type; float64 a float64 compute type. Each run sets the math type its
// algorithm was chosen with.
// float64 channels-last: cuDNN 9 has no NHWC algorithm for float64 (on an H200 every pass reported
// CUDNN_STATUS_NOT_SUPPORTED), and PyTorch runs float64 convolutions contiguous for the same
// reason (cudnn_conv_suggest_memory_format). Such a call runs on NCHW copies and writes its
// result back in the caller's layout (needs_nchw_detour), so the op keeps its memory format.
// Workspace: allocated per call from the stream-ordered pool and freed right after the call is
// queued (stream-ordered: safe). Descriptors: created per call (a few µs), freed by RAII.
// Tensors over 2^31 elements (the legacy API's limit) are processed in batch chunks; the weight
// gradient and bias gradient of later chunks are accumulated with beta = 1.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/backend/cuda/conv_algo_cache.h"
#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"

// The legacy convolution API is deprecated (not removed) in cuDNN 9: see the file comment.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace dp::cuda {

namespace {


constexpr size_t kMaxSearchWorkspace = size_t(1) << 30;  // 1 GiB

// ---- Problem description ----------------------------------------------------------------------

// One convolution as cuDNN sees it: x [n, c, h, w], w [k, c/groups, r, s], y [n, k, oh, ow].
struct ConvProblem {
  ConvLayout layout = ConvLayout::NCHW;
  DType dtype = kFloat32;
  bool allow_tf32 = false;
  int n = 0, c = 0, h = 0, w = 0;
  int k = 0, r = 0, s = 0;
  int oh = 0, ow = 0;
  int stride[2] = {1, 1}, pad[2] = {0, 0}, dilation[2] = {1, 1};
  int groups = 1;

  int64_t x_image() const { return int64_t(c) * h * w; }   // elements of one image of x
  int64_t y_image() const { return int64_t(k) * oh * ow; }  // of y

  // alignment: the buffers' common alignment in bytes (buffer_alignment()).
  ConvProblemKey key(ConvPass pass, bool benchmark, int64_t alignment) const {
    return {static_cast<int64_t>(pass), static_cast<int64_t>(dtype), allow_tf32, static_cast<int64_t>(layout),
            benchmark, n, c, h, w, k, r, s, stride[0], stride[1], pad[0], pad[1], dilation[0], dilation[1], groups,
            alignment};
  }
};

int to_int(const char* op, const char* what, int64_t v) {
  DP_CHECK(v >= 0 && v <= INT_MAX, op, ": ", what, " ", v, " exceeds cuDNN's int range");
  return static_cast<int>(v);
}

// The layout of a call's activations (x and y, or dy and dx): NCHW-contiguous or channels-last
// (NOTE [ Channels-last ]). The weight (or its gradient) is [K, C/g, KH, KW], contiguous or
// channels-last in either layout (NOTE [ Channels-last weights under autocast ] in
// runtime/ops/conv.cpp); filter_for() and the weight gradient give cuDNN the one it needs.
ConvLayout layout_of(const char* op, const Tensor& w, std::initializer_list<const Tensor*> activations) {
  for (const Tensor* t : activations)
    DP_CHECK(t->dim() == 4, op, ": expected 4-D activations [N, C, H, W], got ", t->str());
  DP_CHECK(w.dim() == 4 && (w.is_contiguous() || w.is_contiguous(MemoryFormat::ChannelsLast)), op,
           ": expected a weight [K, C/g, KH, KW], contiguous or channels-last, got ", w.str());
  return common_memory_format(op, activations) == MemoryFormat::ChannelsLast ? ConvLayout::NHWC : ConvLayout::NCHW;
}

// The filter's memory format for a layout: cuDNN's NHWC convolutions take it in NHWC too ([K, KH,
// KW, C/g] in memory).
MemoryFormat filter_format(ConvLayout layout) {
  return layout == ConvLayout::NCHW ? MemoryFormat::Contiguous : MemoryFormat::ChannelsLast;
}

// `w` in the layout's filter format: itself when it is already (a channels-last weight of a
// channels-last call: NOTE [ Channels-last weights under autocast ] in runtime/ops/conv.cpp), else
// a transposed copy (a float32 weight keeps PyTorch's layout; weights are small next to the
// activations: ResNet-50's largest layer has 2.4 M of them).
Tensor filter_for(CudaBackend& backend, const Tensor& w, ConvLayout layout) {
  const MemoryFormat format = filter_format(layout);
  if (w.is_contiguous(format)) return w;
  Tensor t = Tensor::empty(w.shape(), w.dtype(), w.device(), format);
  backend.copy(w, t);
  return t;
}

// NOTE [ cuDNN convolution algorithms ], float64 channels-last: cuDNN has no NHWC kernel for it.
bool needs_nchw_detour(DType dtype, ConvLayout layout) {
  return layout == ConvLayout::NHWC && dtype == DType::Float64;
}

// A contiguous (NCHW) copy of a channels-last activation, for the float64 detour.
Tensor nchw_copy(CudaBackend& backend, const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype(), t.device());
  backend.copy(t, c);
  return c;
}

// x [N, C, H, W], w [K, C/g, KH, KW], y [N, K, OH, OW] (images: the batch of one chunk).
ConvProblem make_problem(const char* op, const Tensor& x, const Tensor& w, const Tensor& y, const Conv2dParams& p,
                         ConvLayout layout, bool allow_tf32) {
  DP_CHECK(x.size(0) == y.size(0) && w.size(0) == y.size(1) && p.groups >= 1 && x.size(1) == w.size(1) * p.groups,
           op, ": inconsistent shapes x ", x.str(), ", weight ", w.str(), ", y ", y.str(), " for groups ", p.groups);
  ConvProblem q;
  q.layout = layout;
  q.dtype = x.dtype();
  q.allow_tf32 = allow_tf32;
  q.n = to_int(op, "batch", x.size(0));
  q.c = to_int(op, "channels", x.size(1));
  q.h = to_int(op, "height", x.size(2));
  q.w = to_int(op, "width", x.size(3));
  q.k = to_int(op, "output channels", w.size(0));
  q.r = to_int(op, "kernel height", w.size(2));
  q.s = to_int(op, "kernel width", w.size(3));
  q.oh = to_int(op, "output height", y.size(2));
  q.ow = to_int(op, "output width", y.size(3));
  q.stride[0] = to_int(op, "stride", p.stride_h);
  q.stride[1] = to_int(op, "stride", p.stride_w);
  q.pad[0] = to_int(op, "padding", p.pad_h);
  q.pad[1] = to_int(op, "padding", p.pad_w);
  q.dilation[0] = to_int(op, "dilation", p.dilation_h);
  q.dilation[1] = to_int(op, "dilation", p.dilation_w);
  q.groups = to_int(op, "groups", p.groups);
  DP_CHECK(w.numel() <= INT_MAX, op, ": weight ", w.str(), " exceeds cuDNN's 2^31-element tensor limit");
  DP_CHECK(q.x_image() <= INT_MAX && q.y_image() <= INT_MAX, op, ": one image of x ", x.str(), " or y ", y.str(),
           " exceeds cuDNN's 2^31-element tensor limit");
  return q;
}

// Images per cuDNN call so that no tensor passes 2^31 elements (all of them when they fit).
int64_t images_per_chunk(const ConvProblem& q) {
  const int64_t per_image = std::max<int64_t>({q.x_image(), q.y_image(), 1});
  return std::max<int64_t>(1, std::min<int64_t>(q.n, INT_MAX / per_image));
}

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return CUDNN_DATA_FLOAT;
    case DType::Float64: return CUDNN_DATA_DOUBLE;
    case DType::Float16: return CUDNN_DATA_HALF;
    case DType::BFloat16: return CUDNN_DATA_BFLOAT16;
    default: throw Error(detail::concat("conv2d: cuDNN has no convolution for ", dtype_name(dtype)));
  }
}

// Accumulation type of the convolution: float64 for float64, float32 otherwise (16-bit types too).
cudnnDataType_t compute_type(DType dtype) { return dtype == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT; }

// See NOTE [ cuDNN convolution algorithms ].
cudnnMathType_t requested_math(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::Float32: return allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    case DType::Float16: case DType::BFloat16: return CUDNN_TENSOR_OP_MATH;
    default: return CUDNN_DEFAULT_MATH;
  }
}

// Whether an algorithm found with `math` may run: float32 without TF32 takes FMA only.
bool math_allowed(const ConvProblem& q, cudnnMathType_t math) {
  return !(q.dtype == DType::Float32 && !q.allow_tf32) || math == CUDNN_FMA_MATH;
}

// alpha / beta in the scaling type cuDNN expects (double for float64 data, float otherwise).
struct Scalars {
  explicit Scalars(DType dtype) : is_double(dtype == DType::Float64) {}
  const void* one() const { return is_double ? static_cast<const void*>(&d1) : &f1; }
  const void* zero() const { return is_double ? static_cast<const void*>(&d0) : &f0; }
  const void* beta(bool accumulate) const { return accumulate ? one() : zero(); }
  bool is_double;
  float f1 = 1.0f, f0 = 0.0f;
  double d1 = 1.0, d0 = 0.0;
};

// ---- Descriptors (RAII) -----------------------------------------------------------------------

class TensorDesc {
 public:
  explicit TensorDesc(int device) { DP_CUDNN_CHECK(device, cudnnCreateTensorDescriptor(&desc_)); }
  ~TensorDesc() { if (desc_) cudnnDestroyTensorDescriptor(desc_); }
  TensorDesc(const TensorDesc&) = delete;
  TensorDesc& operator=(const TensorDesc&) = delete;
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDesc {
 public:
  explicit FilterDesc(int device) { DP_CUDNN_CHECK(device, cudnnCreateFilterDescriptor(&desc_)); }
  ~FilterDesc() { if (desc_) cudnnDestroyFilterDescriptor(desc_); }
  FilterDesc(const FilterDesc&) = delete;
  FilterDesc& operator=(const FilterDesc&) = delete;
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvDesc {
 public:
  explicit ConvDesc(int device) { DP_CUDNN_CHECK(device, cudnnCreateConvolutionDescriptor(&desc_)); }
  ~ConvDesc() { if (desc_) cudnnDestroyConvolutionDescriptor(desc_); }
  ConvDesc(const ConvDesc&) = delete;
  ConvDesc& operator=(const ConvDesc&) = delete;
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

// A logical [n, c, h, w] tensor in `layout` (packed).
void describe_tensor(cudnnTensorDescriptor_t desc, DType dtype, ConvLayout layout, int n, int c, int h, int w,
                     int device) {
  const int dims[4] = {n, c, h, w};
  int strides[4];
  if (layout == ConvLayout::NCHW) {
    strides[3] = 1, strides[2] = w, strides[1] = h * w, strides[0] = c * h * w;
  } else {  // NHWC: channel innermost
    strides[1] = 1, strides[3] = c, strides[2] = w * c, strides[0] = h * w * c;
  }
  DP_CUDNN_CHECK(device, cudnnSetTensorNdDescriptor(desc, data_type(dtype), 4, dims, strides), "tensor [", n, ", ", c,
                 ", ", h, ", ", w, "]");
}

// Every descriptor of one problem: x, y (dx, dy), w (dw), the convolution, and the bias [1, k, 1, 1].
struct ConvDescriptors {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;

  ConvDescriptors(const ConvProblem& q, int device) : x(device), y(device), bias(device), w(device), conv(device) {
    describe_tensor(x.get(), q.dtype, q.layout, q.n, q.c, q.h, q.w, device);
    describe_tensor(y.get(), q.dtype, q.layout, q.n, q.k, q.oh, q.ow, device);
    describe_tensor(bias.get(), q.dtype, ConvLayout::NCHW, 1, q.k, 1, 1, device);  // a plain vector either way
    const int filter_dims[4] = {q.k, q.c / q.groups, q.r, q.s};
    const cudnnTensorFormat_t format = q.layout == ConvLayout::NCHW ? CUDNN_TENSOR_NCHW : CUDNN_TENSOR_NHWC;
    DP_CUDNN_CHECK(device, cudnnSetFilterNdDescriptor(w.get(), data_type(q.dtype), format, 4, filter_dims));
    DP_CUDNN_CHECK(device, cudnnSetConvolutionNdDescriptor(conv.get(), 2, q.pad, q.stride, q.dilation,
                                                           CUDNN_CROSS_CORRELATION, compute_type(q.dtype)));
    DP_CUDNN_CHECK(device, cudnnSetConvolutionGroupCount(conv.get(), q.groups));
    DP_CUDNN_CHECK(device, cudnnSetConvolutionMathType(conv.get(), requested_math(q.dtype, q.allow_tf32)));
    // Our output size (the op layer's formula) must be cuDNN's.
    int out[4] = {0, 0, 0, 0};
    DP_CUDNN_CHECK(device, cudnnGetConvolutionNdForwardOutputDim(conv.get(), x.get(), w.get(), 4, out));
    DP_CHECK(out[0] == q.n && out[1] == q.k && out[2] == q.oh && out[3] == q.ow, "conv2d: cuDNN computes an output of [",
             out[0], ", ", out[1], ", ", out[2], ", ", out[3], "], expected [", q.n, ", ", q.k, ", ", q.oh, ", ", q.ow,
             "]");
  }
};

// Device memory from the backend's stream-ordered pool for the scope (freed stream-ordered, so
// freeing right after queuing the work that uses it is safe).
class Workspace {
 public:
  Workspace(CudaBackend& backend, size_t bytes)
      : backend_(backend), bytes_(bytes), ptr_(bytes ? backend.allocate(bytes) : nullptr) {}
  ~Workspace() { if (ptr_) backend_.deallocate(ptr_, bytes_); }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  void* get() const { return ptr_; }
  size_t size() const { return ptr_ ? bytes_ : 0; }

 private:
  CudaBackend& backend_;
  size_t bytes_;
  void* ptr_;
};

// The most workspace an algorithm may take: 1 GiB, or less when the device has less free
// (counting what the pool holds unused), with a tenth kept back.
size_t workspace_limit(CudaBackend& backend) {
  size_t free_bytes = 0, total_bytes = 0;
  DP_CUDA_CHECK(backend.device_index(), cudaMemGetInfo(&free_bytes, &total_bytes));
  const PoolStats pool = backend.pool_stats();
  const size_t pooled = pool.reserved_bytes > pool.used_bytes ? pool.reserved_bytes - pool.used_bytes : 0;
  return std::min(kMaxSearchWorkspace, (free_bytes + pooled) / 10 * 9);
}

// The search workspace: workspace_limit(), or smaller tries after a failed allocation, down to
// none.
std::optional<Workspace> search_workspace(CudaBackend& backend) {
  size_t bytes = workspace_limit(backend);
  for (int attempt = 0; attempt < 3 && bytes > 0; ++attempt, bytes /= 4) {
    try {
      return std::optional<Workspace>(std::in_place, backend, bytes);
    } catch (const Error&) {
      (void)cudaGetLastError();  // the failed cudaMallocAsync must not surface in a later launch
    }
  }
  return std::nullopt;
}

// ---- Algorithm choice -------------------------------------------------------------------------

// The pick among cuDNN's results (sorted fastest first by Find, best-ranked first by the
// heuristic); see NOTE [ cuDNN convolution algorithms ]. nullopt when none is usable.
template <typename Perf>
std::optional<ConvAlgoChoice> pick(const ConvProblem& q, const Perf* results, int count, bool timed,
                                   size_t max_workspace) {
  const Perf* fastest = nullptr;
  const Perf* deterministic = nullptr;
  for (int i = 0; i < count; ++i) {
    const Perf& r = results[i];
    if (r.status != CUDNN_STATUS_SUCCESS || !math_allowed(q, r.mathType) || r.memory > max_workspace) continue;
    if (timed && r.time < 0) continue;  // not timed (Find reports -1 for algorithms it skipped)
    if (fastest == nullptr) fastest = &r;
    if (deterministic == nullptr && r.determinism == CUDNN_DETERMINISTIC) deterministic = &r;
  }
  if (fastest == nullptr) return std::nullopt;
  const Perf* chosen = fastest;
  if (timed && deterministic != nullptr && deterministic->time <= fastest->time * 1.1f + 0.005f) chosen = deterministic;
  return ConvAlgoChoice{static_cast<int>(chosen->algo), static_cast<int>(chosen->mathType), chosen->memory};
}

// The buffers a pass reads and writes (Find runs the convolution on them).
struct ConvBuffers {
  const void* x = nullptr;  // forward, backward filter
  const void* w = nullptr;  // forward, backward data
  const void* dy = nullptr; // backward data, backward filter
  void* out = nullptr;      // y, dx or dw
  // out holds values the call adds to (beta = 1): Find, which overwrites its output, then
  // times into a scratch buffer of out_bytes instead.
  bool out_is_summed_into = false;
  size_t out_bytes = 0;
};

// The largest power of two up to 16 that divides every buffer's address. Part of the algorithm
// cache's key, as in PyTorch's ConvolutionParams: an algorithm chosen for 16-byte-aligned buffers
// may refuse, or run slower on, a view that starts mid-image (a narrowed batch, a later chunk of
// images_per_chunk()), so such calls get a search of their own.
int64_t buffer_alignment(const ConvBuffers& b) {
  uintptr_t bits = 16;
  for (const void* p : {b.x, b.w, b.dy, static_cast<const void*>(b.out)})
    if (p != nullptr) bits |= reinterpret_cast<uintptr_t>(p);
  return static_cast<int64_t>(bits & (~bits + 1));  // the lowest set bit
}

// The pass's cuDNN calls, so the search code is written once.
struct ForwardApi {
  using Perf = cudnnConvolutionFwdAlgoPerf_t;
  using Algo = cudnnConvolutionFwdAlgo_t;
  static constexpr Algo kFallback = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) { return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n); }
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvDescriptors& d, int n, int* found, Perf* out) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), n, found, out);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescriptors& d, const ConvBuffers& b, int n, int* found,
                            Perf* out, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, d.x.get(), b.x, d.w.get(), b.w, d.conv.get(), d.y.get(), b.out, n,
                                                  found, out, ws, ws_bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, d.x.get(), d.w.get(), d.conv.get(), d.y.get(), algo, bytes);
  }
};

struct BackwardDataApi {
  using Perf = cudnnConvolutionBwdDataAlgoPerf_t;
  using Algo = cudnnConvolutionBwdDataAlgo_t;
  static constexpr Algo kFallback = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;  // deterministic
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvDescriptors& d, int n, int* found, Perf* out) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), n, found, out);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescriptors& d, const ConvBuffers& b, int n, int* found,
                            Perf* out, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, d.w.get(), b.w, d.y.get(), b.dy, d.conv.get(), d.x.get(),
                                                       b.out, n, found, out, ws, ws_bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w.get(), d.y.get(), d.conv.get(), d.x.get(), algo, bytes);
  }
};

struct BackwardFilterApi {
  using Perf = cudnnConvolutionBwdFilterAlgoPerf_t;
  using Algo = cudnnConvolutionBwdFilterAlgo_t;
  static constexpr Algo kFallback = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;  // deterministic
  static cudnnStatus_t max_count(cudnnHandle_t h, int* n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristic(cudnnHandle_t h, const ConvDescriptors& d, int n, int* found, Perf* out) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), n, found,
                                                         out);
  }
  static cudnnStatus_t find(cudnnHandle_t h, const ConvDescriptors& d, const ConvBuffers& b, int n, int* found,
                            Perf* out, void* ws, size_t ws_bytes) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d.x.get(), b.x, d.y.get(), b.dy, d.conv.get(), d.w.get(),
                                                         b.out, n, found, out, ws, ws_bytes);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const ConvDescriptors& d, Algo algo, size_t* bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x.get(), d.y.get(), d.conv.get(), d.w.get(), algo,
                                                          bytes);
  }
};

// Searches the pass's algorithm (Find or heuristic), leaving the descriptor's math type as the
// choice's. Falls back to the pass's plain GEMM-based algorithm when nothing usable comes back.
template <typename Api>
ConvAlgoChoice search(CudaBackend& backend, cudnnHandle_t handle, const ConvProblem& q, const ConvDescriptors& d,
                      const ConvBuffers& buffers, bool benchmark) {
  const int device = backend.device_index();
  int max_count = 0;
  DP_CUDNN_CHECK(device, Api::max_count(handle, &max_count));
  std::vector<typename Api::Perf> results(static_cast<size_t>(std::max(max_count, 1)));
  int found = 0;
  std::optional<ConvAlgoChoice> choice;
  if (benchmark) {
    std::optional<Workspace> scratch_out;
    ConvBuffers find_buffers = buffers;
    if (buffers.out_is_summed_into) {
      // Offset as the real output is from 16 bytes: the choice is cached under its alignment.
      const uintptr_t offset = reinterpret_cast<uintptr_t>(buffers.out) % 16;
      scratch_out.emplace(backend, buffers.out_bytes + offset);
      find_buffers.out = static_cast<char*>(scratch_out->get()) + offset;
    }
    // Two Finds, each algorithm keeping its better time (NOTE [ cuDNN convolution algorithms ]).
    std::optional<Workspace> ws = search_workspace(backend);
    std::vector<typename Api::Perf> runs[2];
    for (auto& run : runs) {
      run.resize(results.size());
      DP_CUDNN_CHECK(device,
                     Api::find(handle, d, find_buffers, static_cast<int>(run.size()), &found, run.data(),
                               ws ? ws->get() : nullptr, ws ? ws->size() : 0),
                     "timing convolution algorithms");
      run.resize(static_cast<size_t>(found));
    }
    results = merge_find_runs(runs[0], runs[1],
                              [](const typename Api::Perf& r) { return r.status == CUDNN_STATUS_SUCCESS; });
    choice = pick(q, results.data(), static_cast<int>(results.size()), /*timed=*/true, ws ? ws->size() : 0);
  } else {
    DP_CUDNN_CHECK(device, Api::heuristic(handle, d, static_cast<int>(results.size()), &found, results.data()));
    choice = pick(q, results.data(), found, /*timed=*/false, workspace_limit(backend));
  }
  if (!choice) choice = ConvAlgoChoice{static_cast<int>(Api::kFallback), requested_math(q.dtype, q.allow_tf32), 0};
  // The exact workspace of the algorithm under its math type (the larger of this and the reported one).
  DP_CUDNN_CHECK(device, cudnnSetConvolutionMathType(d.conv.get(), static_cast<cudnnMathType_t>(choice->math_type)));
  size_t bytes = 0;
  DP_CUDNN_CHECK(device, Api::workspace(handle, d, static_cast<typename Api::Algo>(choice->algo), &bytes),
                 "workspace of convolution algorithm ", choice->algo);
  choice->workspace_bytes = std::max(choice->workspace_bytes, bytes);
  return *choice;
}

// The cached choice for (pass, problem), searched on a miss (under the cache's lock, so one
// problem is searched once). Sets the descriptor's math type to the choice's.
template <typename Api>
ConvAlgoChoice algo_for(CudaBackend& backend, std::mutex& mutex, std::map<ConvProblemKey, ConvAlgoChoice>& choices,
                        ConvPass pass, const ConvProblem& q, const ConvDescriptors& d, const ConvBuffers& buffers) {
  const bool benchmark = backend.options().cudnn_benchmark;
  const ConvProblemKey key = q.key(pass, benchmark, buffer_alignment(buffers));
  ConvAlgoChoice choice;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = choices.find(key);
    if (it == choices.end()) it = choices.emplace(key, search<Api>(backend, backend.cudnn(), q, d, buffers, benchmark)).first;
    choice = it->second;
  }
  DP_CUDNN_CHECK(backend.device_index(),
                 cudnnSetConvolutionMathType(d.conv.get(), static_cast<cudnnMathType_t>(choice.math_type)));
  return choice;
}

bool unsupported_by_cudnn(cudnnStatus_t status) {
  const int category = CUDNN_STATUS_CATEGORY(static_cast<int>(status));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

// y [n, K, OH, OW] += bias [K] over n, OH, OW: cudnnAddTensor, or the backend's own broadcast add
// where cuDNN does not take the dtype.
void add_bias(CudaBackend& backend, cudnnHandle_t handle, const Scalars& scalars, ConvLayout layout, const Tensor& bias,
              const Tensor& y) {
  const int device = backend.device_index();
  const int k = static_cast<int>(y.size(1));
  TensorDesc y_desc(device), b_desc(device);
  describe_tensor(y_desc.get(), y.dtype(), layout, static_cast<int>(y.size(0)), k, static_cast<int>(y.size(2)),
                  static_cast<int>(y.size(3)), device);
  describe_tensor(b_desc.get(), y.dtype(), ConvLayout::NCHW, 1, k, 1, 1, device);
  const cudnnStatus_t status =
      cudnnAddTensor(handle, scalars.one(), b_desc.get(), bias.raw_data(), scalars.one(), y_desc.get(), y.raw_data());
  if (status == CUDNN_STATUS_SUCCESS) return;
  if (!unsupported_by_cudnn(status)) throw_cudnn_error("cudnnAddTensor", status, device, detail::concat("conv2d bias ", bias.str()));
  if (layout == ConvLayout::NCHW) {
    backend.binary(BinaryOp::Add, y, bias.reshape({1, k, 1, 1}).expand(y.shape()), y);  // elementwise in place
    return;
  }
  // NHWC: y is a contiguous [pixels, K] matrix; add the bias to every row.
  const int64_t pixels = y.numel() / k;
  const Tensor rows = y.detached_as_strided({pixels, k}, {k, 1});
  backend.binary(BinaryOp::Add, rows, bias.reshape({1, k}).expand({pixels, k}), rows);
}

// dbias [K] (=, or += when accumulate) Σ dy [n, K, OH, OW] over n, OH, OW: cuDNN's
// BackwardBias, or the backend's own reduction where cuDNN does not take the dtype.
void bias_gradient(CudaBackend& backend, cudnnHandle_t handle, const Scalars& scalars, ConvLayout layout,
                   const Tensor& dy, const Tensor& dbias, bool accumulate) {
  const int device = backend.device_index();
  const int k = static_cast<int>(dy.size(1));
  TensorDesc y_desc(device), b_desc(device);
  describe_tensor(y_desc.get(), dy.dtype(), layout, static_cast<int>(dy.size(0)), k, static_cast<int>(dy.size(2)),
                  static_cast<int>(dy.size(3)), device);
  describe_tensor(b_desc.get(), dy.dtype(), ConvLayout::NCHW, 1, k, 1, 1, device);
  const cudnnStatus_t status = cudnnConvolutionBackwardBias(handle, scalars.one(), y_desc.get(), dy.raw_data(),
                                                            scalars.beta(accumulate), b_desc.get(), dbias.raw_data());
  if (status == CUDNN_STATUS_SUCCESS) return;
  if (!unsupported_by_cudnn(status))
    throw_cudnn_error("cudnnConvolutionBackwardBias", status, device, detail::concat("conv2d bias gradient ", dbias.str()));
  const Tensor db = dbias.reshape({1, k, 1, 1});
  if (!accumulate) {
    backend.reduce(ReduceOp::Sum, dy, db);
    return;
  }
  const Tensor part = Tensor::empty({1, k, 1, 1}, dy.dtype(), backend.device());
  backend.reduce(ReduceOp::Sum, dy, part);
  backend.axpby(1.0, part, 1.0, db);
}

// Images [n0, n0 + count) of an [N, ...] tensor (a contiguous view: N is the outermost dim).
Tensor images(const Tensor& t, int64_t n0, int64_t count) { return t.narrow(0, n0, count); }

void check_conv_operands(const char* op, const Tensor& a, const Tensor& b, const Tensor& c) {
  DP_CHECK(a.dtype() == b.dtype() && a.dtype() == c.dtype(), op, ": dtypes differ: ", a.str(), ", ", b.str(), ", ",
           c.str());
}

}  // namespace

size_t CudaBackend::conv_algo_cache_size() const {
  std::lock_guard<std::mutex> lock(conv_algos_->mutex);
  return conv_algos_->choices.size();
}

// x [N, C, H, W], w [K, C/g, KH, KW], bias [K] (optional) → y [N, K, OH, OW]
void CudaBackend::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& y,
                                 const Conv2dParams& p) {
  const char* op = "conv2d_forward";
  for (const Tensor* t : {&x, &w, &y}) check_operand(op, *t);
  if (bias.defined()) check_operand(op, bias);
  check_supported(Kernel::Conv2dForward, x.dtype());
  check_conv_operands(op, x, w, y);
  DP_CHECK(!bias.defined() || (bias.dtype() == x.dtype() && bias.dim() == 1 && bias.size(0) == w.size(0) &&
                               bias.is_contiguous()),
           op, ": bias ", bias.str(), " does not match weight ", w.str());
  const ConvLayout layout = layout_of(op, w, {&x, &y});
  const ConvProblem whole = make_problem(op, x, w, y, p, layout, options_.allow_tf32);
  if (y.numel() == 0) return;
  if (needs_nchw_detour(x.dtype(), layout)) {
    const Tensor y_nchw = Tensor::empty(y.shape(), y.dtype(), y.device());
    conv2d_forward(nchw_copy(*this, x), w, bias, y_nchw, p);
    copy(y_nchw, y);
    return;
  }
  activate();
  const Tensor filter = filter_for(*this, w, layout);
  cudnnHandle_t handle = cudnn();
  const Scalars scalars(x.dtype());
  const bool flows = x.numel() > 0 && w.numel() > 0;
  if (!flows) {  // no input channels or empty images (all padding): y = bias, or 0
    DP_CUDA_CHECK(device_, cudaMemsetAsync(y.raw_data(), 0, y.nbytes(), stream_), op, " ", y.str());
    if (!bias.defined()) return;
  }
  const int64_t chunk = images_per_chunk(whole);
  for (int64_t n0 = 0; n0 < whole.n; n0 += chunk) {
    const int64_t count = std::min<int64_t>(chunk, whole.n - n0);
    const Tensor y_part = images(y, n0, count);
    if (flows) {
      ConvProblem q = whole;
      q.n = static_cast<int>(count);
      const ConvDescriptors d(q, device_);
      ConvBuffers buffers;
      buffers.x = images(x, n0, count).raw_data();
      buffers.w = filter.raw_data();
      buffers.out = y_part.raw_data();
      const ConvAlgoChoice choice =
          algo_for<ForwardApi>(*this, conv_algos_->mutex, conv_algos_->choices, ConvPass::Forward, q, d, buffers);
      const Workspace ws(*this, choice.workspace_bytes);
      DP_CUDNN_CHECK(device_,
                     cudnnConvolutionForward(handle, scalars.one(), d.x.get(), buffers.x, d.w.get(), buffers.w,
                                             d.conv.get(), static_cast<cudnnConvolutionFwdAlgo_t>(choice.algo),
                                             ws.get(), ws.size(), scalars.zero(), d.y.get(), buffers.out),
                     op, " ", x.str(), " * ", w.str(), " (algorithm ", choice.algo, ")");
    }
    if (bias.defined()) add_bias(*this, handle, scalars, layout, bias, y_part);
  }
}

// dy [N, K, OH, OW], w [K, C/g, KH, KW] → dx [N, C, H, W] (overwritten, or added to with accumulate:
// cuDNN's beta = 1, blended in float32 and rounded once)
void CudaBackend::conv2d_backward_input(const Tensor& dy, const Tensor& w, const Tensor& dx, const Conv2dParams& p,
                                        bool accumulate) {
  const char* op = "conv2d_backward_input";
  for (const Tensor* t : {&dy, &w, &dx}) check_operand(op, *t);
  check_supported(Kernel::Conv2dBackwardInput, dy.dtype());
  check_conv_operands(op, dy, w, dx);
  const ConvLayout layout = layout_of(op, w, {&dy, &dx});
  const ConvProblem whole = make_problem(op, dx, w, dy, p, layout, options_.allow_tf32);
  if (dx.numel() == 0) return;
  if (needs_nchw_detour(dy.dtype(), layout)) {
    const Tensor dx_nchw = accumulate ? nchw_copy(*this, dx) : Tensor::empty(dx.shape(), dx.dtype(), dx.device());
    conv2d_backward_input(nchw_copy(*this, dy), w, dx_nchw, p, accumulate);
    copy(dx_nchw, dx);
    return;
  }
  activate();
  if (dy.numel() == 0 || w.numel() == 0) {  // nothing flows back: dx = 0 (or dx += 0)
    if (!accumulate)
      DP_CUDA_CHECK(device_, cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), stream_), op, " ", dx.str());
    return;
  }
  const Tensor filter = filter_for(*this, w, layout);
  cudnnHandle_t handle = cudnn();
  const Scalars scalars(dy.dtype());
  const int64_t chunk = images_per_chunk(whole);
  for (int64_t n0 = 0; n0 < whole.n; n0 += chunk) {
    const int64_t count = std::min<int64_t>(chunk, whole.n - n0);
    ConvProblem q = whole;
    q.n = static_cast<int>(count);
    const ConvDescriptors d(q, device_);
    ConvBuffers buffers;
    buffers.w = filter.raw_data();
    buffers.dy = images(dy, n0, count).raw_data();
    const Tensor dx_part = images(dx, n0, count);
    buffers.out = dx_part.raw_data();
    buffers.out_is_summed_into = accumulate;
    buffers.out_bytes = dx_part.nbytes();
    const ConvAlgoChoice choice = algo_for<BackwardDataApi>(*this, conv_algos_->mutex, conv_algos_->choices,
                                                            ConvPass::BackwardData, q, d, buffers);
    const Workspace ws(*this, choice.workspace_bytes);
    const auto run = [&](void* out, bool blend) {
      return cudnnConvolutionBackwardData(handle, scalars.one(), d.w.get(), buffers.w, d.y.get(), buffers.dy,
                                          d.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(choice.algo),
                                          ws.get(), ws.size(), scalars.beta(blend), d.x.get(), out);
    };
    const cudnnStatus_t status = run(buffers.out, accumulate);
    if (status == CUDNN_STATUS_SUCCESS) continue;
    const auto context = [&] {
      return detail::concat(op, " ", dy.str(), " → ", dx.str(), " (algorithm ", choice.algo,
                            accumulate ? ", adding into dx)" : ")");
    };
    if (!accumulate || !unsupported_by_cudnn(status))
      throw_cudnn_error("cudnnConvolutionBackwardData", status, device_, context());
    // An algorithm that does not blend: its gradient apart, then one add.
    const Tensor fresh = Tensor::empty(dx_part.shape(), dx.dtype(), dx.device(), dx.suggest_memory_format());
    DP_CUDNN_CHECK(device_, run(fresh.raw_data(), false), context());
    binary(BinaryOp::Add, dx_part, fresh, dx_part);
  }
}

// dy [N, K, OH, OW], x [N, C, H, W] → dw [K, C/g, KH, KW] (overwritten), dbias [K] (optional, overwritten)
void CudaBackend::conv2d_backward_weight(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& dbias,
                                         const Conv2dParams& p) {
  const char* op = "conv2d_backward_weight";
  for (const Tensor* t : {&dy, &x, &dw}) check_operand(op, *t);
  if (dbias.defined()) check_operand(op, dbias);
  check_supported(Kernel::Conv2dBackwardWeight, dy.dtype());
  check_conv_operands(op, dy, x, dw);
  DP_CHECK(!dbias.defined() || (dbias.dtype() == dy.dtype() && dbias.dim() == 1 && dbias.size(0) == dw.size(0) &&
                                dbias.is_contiguous()),
           op, ": bias gradient ", dbias.str(), " does not match weight gradient ", dw.str());
  const ConvLayout layout = layout_of(op, dw, {&dy, &x});
  const ConvProblem whole = make_problem(op, x, dw, dy, p, layout, options_.allow_tf32);
  if (needs_nchw_detour(dy.dtype(), layout)) {
    conv2d_backward_weight(nchw_copy(*this, dy), nchw_copy(*this, x), dw, dbias, p);
    return;
  }
  const bool with_weight = dw.numel() > 0, with_bias = dbias.defined() && dbias.numel() > 0;
  if (!with_weight && !with_bias) return;
  activate();
  const bool weight_flows = with_weight && x.numel() > 0 && dy.numel() > 0;
  const bool bias_flows = with_bias && dy.numel() > 0;
  if (with_weight && !weight_flows)  // empty batch or empty images: zero gradient
    DP_CUDA_CHECK(device_, cudaMemsetAsync(dw.raw_data(), 0, dw.nbytes(), stream_), op, " ", dw.str());
  if (with_bias && !bias_flows)
    DP_CUDA_CHECK(device_, cudaMemsetAsync(dbias.raw_data(), 0, dbias.nbytes(), stream_), op, " ", dbias.str());
  if (!weight_flows && !bias_flows) return;
  cudnnHandle_t handle = cudnn();
  const Scalars scalars(dy.dtype());
  // cuDNN writes the filter gradient in the layout's filter format ([K, KH, KW, C/g] for NHWC); a
  // dw in the other format gets it transposed at the end.
  const Tensor filter_grad = !weight_flows || dw.is_contiguous(filter_format(layout))
                                 ? dw
                                 : Tensor::empty(dw.shape(), dw.dtype(), dw.device(), filter_format(layout));
  const int64_t chunk = images_per_chunk(whole);
  for (int64_t n0 = 0; n0 < whole.n; n0 += chunk) {
    const int64_t count = std::min<int64_t>(chunk, whole.n - n0);
    const bool accumulate = n0 > 0;  // later chunks add to the first chunk's sums
    const Tensor dy_part = images(dy, n0, count);
    if (weight_flows) {
      ConvProblem q = whole;
      q.n = static_cast<int>(count);
      const ConvDescriptors d(q, device_);
      ConvBuffers buffers;
      buffers.x = images(x, n0, count).raw_data();
      buffers.dy = dy_part.raw_data();
      buffers.out = filter_grad.raw_data();
      // Past the first chunk dw holds a partial sum: a search there (a last chunk of another
      // size) must not overwrite it.
      buffers.out_is_summed_into = accumulate;
      buffers.out_bytes = filter_grad.nbytes();
      const ConvAlgoChoice choice = algo_for<BackwardFilterApi>(*this, conv_algos_->mutex, conv_algos_->choices,
                                                                ConvPass::BackwardFilter, q, d, buffers);
      const Workspace ws(*this, choice.workspace_bytes);
      DP_CUDNN_CHECK(device_,
                     cudnnConvolutionBackwardFilter(handle, scalars.one(), d.x.get(), buffers.x, d.y.get(), buffers.dy,
                                                    d.conv.get(),
                                                    static_cast<cudnnConvolutionBwdFilterAlgo_t>(choice.algo),
                                                    ws.get(), ws.size(), scalars.beta(accumulate), d.w.get(),
                                                    filter_grad.raw_data()),
                     op, " ", dy.str(), " → ", dw.str(), " (algorithm ", choice.algo, ")");
    }
    if (bias_flows) bias_gradient(*this, handle, scalars, layout, dy_part, dbias, accumulate);
  }
  if (weight_flows && !filter_grad.same(dw)) copy(filter_grad, dw);
}

}  // namespace dp::cuda

#pragma GCC diagnostic pop
