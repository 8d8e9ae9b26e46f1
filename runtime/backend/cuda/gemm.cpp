// GEMM through cuBLASLt, row-major with transposed views, 2-D and strided-batched 3-D.
//
// cuBLAS is column-major. A row-major [R, C] matrix with row stride ld is, read column-major, its
// transpose [C, R] with the same ld; so row-major c = a @ b is computed as column-major
// c^T = b^T a^T: cuBLAS's A is our b, its B is our a, m = N, n = M. An operand stored transposed
// (unit stride down its rows) is passed with op T instead of being copied.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "runtime/backend/cuda/cuda_backend.h"
#include "runtime/backend/cuda/cuda_check.h"
#include "runtime/backend/cuda/gemm_algo_cache.h"
#include "runtime/backend/cuda/memory_kernels.h"

namespace dp::cuda {

namespace {

struct OperandLayout {
  bool transposed;  // unit stride down the rows (a transposed view of a row-major matrix)
  int64_t ld;       // stride between rows (or, when transposed, between columns)
};

// A [rows, cols] operand with a unit stride in one of its last two dims; the rule of the CPU
// backend's layout_of (runtime/backend/cpu/gemm.cpp), so both accept the same views.
OperandLayout layout_of(const Tensor& t) {
  const int64_t n = t.dim();
  const int64_t rows = t.shape()[n - 2], cols = t.shape()[n - 1];
  const int64_t row_stride = t.strides()[n - 2], col_stride = t.strides()[n - 1];
  if (col_stride == 1 || cols == 1) return {false, std::max<int64_t>({row_stride, cols, 1})};
  DP_ASSERT(row_stride == 1 || rows == 1);
  return {true, std::max<int64_t>({col_stride, rows, 1})};
}

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  cudaDataType_t scale;
};

GemmTypes gemm_types(DType dtype, bool allow_tf32) {
  switch (dtype) {
    case DType::Float32:
      return {CUDA_R_32F, allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::Float64: return {CUDA_R_64F, CUBLAS_COMPUTE_64F, CUDA_R_64F};
    case DType::Float16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    case DType::BFloat16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, CUDA_R_32F};
    default:
      throw Error(detail::concat("gemm: CUDA kernel supports float32, float64, float16 and bfloat16, got ",
                                 dtype_name(dtype)));
  }
}

// alpha or beta in the GEMM's scale type (double for float64, else float).
struct Scale {
  explicit Scale(double v) : as_double(v), as_float(static_cast<float>(v)) {}
  const void* in(cudaDataType_t scale_type) const {
    return scale_type == CUDA_R_64F ? static_cast<const void*>(&as_double) : &as_float;
  }
  double as_double;
  float as_float;
};

// The problem as cuBLAS sees it (column-major): D[m, n] = op(A)[m, k] · op(B)[k, n] per batch.
struct ColumnMajorGemm {
  cublasOperation_t op_a, op_b;
  int64_t m, n, k;
  int64_t lda, ldb, ldc;
  int64_t batch;
  int64_t stride_a, stride_b, stride_c;
  const void *a, *b;
  void* c;

  // Stored (pre-op) dims of A and B.
  int64_t a_rows() const { return op_a == CUBLAS_OP_N ? m : k; }
  int64_t a_cols() const { return op_a == CUBLAS_OP_N ? k : m; }
  int64_t b_rows() const { return op_b == CUBLAS_OP_N ? k : n; }
  int64_t b_cols() const { return op_b == CUBLAS_OP_N ? n : k; }
};

// a [B?, M, K], b [B?, K, N], c [B?, M, N] (row-major, c contiguous) → c^T = b^T a^T.
ColumnMajorGemm to_column_major(const Tensor& a, const Tensor& b, const Tensor& c) {
  const int64_t nd = c.dim();
  const int64_t M = c.shape()[nd - 2], N = c.shape()[nd - 1], K = a.shape()[nd - 1];
  const OperandLayout la = layout_of(a), lb = layout_of(b);
  ColumnMajorGemm g{};
  g.op_a = lb.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.op_b = la.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  g.m = N;
  g.n = M;
  g.k = K;
  g.lda = lb.ld;
  g.ldb = la.ld;
  g.ldc = N;
  g.batch = nd == 3 ? c.shape()[0] : 1;
  g.stride_a = nd == 3 ? b.strides()[0] : 0;
  g.stride_b = nd == 3 ? a.strides()[0] : 0;
  g.stride_c = M * N;
  g.a = b.raw_data();
  g.b = a.raw_data();
  g.c = c.raw_data();
  // A batch of row-major a against one shared b is a single GEMM with M·batch rows when a's
  // matrices follow each other in memory (the common "activations @ weight" case).
  if (g.batch > 1 && g.stride_a == 0 && !la.transposed && g.stride_b == M * la.ld) {
    g.n = M * g.batch;
    g.batch = 1;
  }
  return g;
}

// Largest power of two (up to 16 bytes, all cuBLASLt asks for) that divides the address.
uint32_t alignment_of(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  return static_cast<uint32_t>(std::min<uintptr_t>(address & (~address + 1), 16));
}

// The first choice of cuBLASLt's heuristic, with split-K partial sums kept in the compute type
// (float32 for the 16-bit types; never in half precision); nullopt when it offers none.
std::optional<cublasLtMatmulAlgo_t> pick_algo(cublasLtHandle_t lt, cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a,
                                              cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                                              uint64_t workspace_bytes, const uint32_t (&alignments)[3], int device) {
  cublasLtMatmulPreferenceOpaque_t preference;
  DP_CUBLAS_CHECK(device, cublasLtMatmulPreferenceInit(&preference));
  auto prefer = [&](cublasLtMatmulPreferenceAttributes_t attribute, const auto& value) {
    DP_CUBLAS_CHECK(device, cublasLtMatmulPreferenceSetAttribute(&preference, attribute, &value, sizeof(value)));
  };
  prefer(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes);
  prefer(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, uint32_t{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE});
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignments[0]);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignments[1]);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignments[2]);
  prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignments[2]);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, &preference, 1, &result, &found);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || (status == CUBLAS_STATUS_SUCCESS && found == 0)) return std::nullopt;
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error("cublasLtMatmulAlgoGetHeuristic", status, device, "");
  return result.algo;
}

}  // namespace

void CudaBackend::gemm(const Tensor& a, const Tensor& b, const Tensor& c, double alpha, double beta) {
  DP_ASSERT(c.is_contiguous() && a.dim() == c.dim() && b.dim() == c.dim());
  DP_CHECK(a.dtype() == c.dtype() && b.dtype() == c.dtype(), "gemm: dtypes differ: ", a.str(), " @ ", b.str(),
           " → ", c.str());
  for (const Tensor* t : {&a, &b, &c})
    DP_CHECK(&t->device().backend() == this, "gemm: ", t->str(), " is not on ", device().str());
  const GemmTypes types = gemm_types(c.dtype(), options_.allow_tf32);
  ColumnMajorGemm g = to_column_major(a, b, c);
  if (g.m == 0 || g.n == 0 || g.batch == 0) return;
  activate();
  if (g.k == 0) {  // empty inner dim: c = beta * c
    const StridedShape<1> flat{1, {c.numel()}, {{1}}};
    DP_CUDA_CHECK(device_, beta == 0.0 ? launch_fill(c.raw_data(), c.dtype(), 0.0, flat, c.numel(), stream_)
                                       : launch_scale(c.raw_data(), c.dtype(), c.numel(), beta, stream_),
                  "gemm with K = 0 on ", c.str());
    return;
  }
  DP_CHECK(g.batch <= INT_MAX, "gemm: batch of ", g.batch, " matrices exceeds cuBLAS's int32 count");
  const Scale alpha_s(alpha), beta_s(beta);
  const auto batch = static_cast<int32_t>(g.batch);

  // ---- cuBLASLt descriptors (stack-allocated: nothing to free) ----
  cublasLtMatmulDescOpaque_t op_desc;
  DP_CUBLAS_CHECK(device_, cublasLtMatmulDescInit(&op_desc, types.compute, types.scale));
  DP_CUBLAS_CHECK(device_, cublasLtMatmulDescSetAttribute(&op_desc, CUBLASLT_MATMUL_DESC_TRANSA, &g.op_a,
                                                          sizeof(g.op_a)));
  DP_CUBLAS_CHECK(device_, cublasLtMatmulDescSetAttribute(&op_desc, CUBLASLT_MATMUL_DESC_TRANSB, &g.op_b,
                                                          sizeof(g.op_b)));
  cublasLtMatrixLayoutOpaque_t a_desc, b_desc, c_desc;
  auto describe = [&](cublasLtMatrixLayoutOpaque_t* desc, int64_t rows, int64_t cols, int64_t ld,
                      int64_t batch_stride) {
    DP_CUBLAS_CHECK(device_, cublasLtMatrixLayoutInit(desc, types.data, rows, cols, ld));
    if (batch == 1) return;
    DP_CUBLAS_CHECK(device_, cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                              sizeof(batch)));
    DP_CUBLAS_CHECK(device_, cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                              &batch_stride, sizeof(batch_stride)));
  };
  describe(&a_desc, g.a_rows(), g.a_cols(), g.lda, g.stride_a);
  describe(&b_desc, g.b_rows(), g.b_cols(), g.ldb, g.stride_b);
  describe(&c_desc, g.m, g.n, g.ldc, g.stride_c);

  // ---- Algorithm: cached per problem ----
  const uint32_t alignments[3] = {alignment_of(g.a), alignment_of(g.b), alignment_of(g.c)};
  const GemmProblemKey key{static_cast<int64_t>(c.dtype()), options_.allow_tf32, g.op_a, g.op_b, g.m, g.n, g.k,
                           g.lda, g.ldb, g.ldc, g.batch, g.stride_a, g.stride_b, g.stride_c,
                           alignments[0], alignments[1], alignments[2]};
  std::optional<cublasLtMatmulAlgo_t> algo;
  {
    std::lock_guard<std::mutex> lock(gemm_algos_->mutex);
    auto [entry, inserted] = gemm_algos_->algos.try_emplace(key);
    if (inserted) {
      try {
        entry->second = pick_algo(blas_lt_, &op_desc, &a_desc, &b_desc, &c_desc, options_.gemm_workspace_bytes,
                                  alignments, device_);
      } catch (...) {
        gemm_algos_->algos.erase(entry);
        throw;
      }
    }
    algo = entry->second;
  }

  if (algo) {
    DP_CUBLAS_CHECK(device_,
                    cublasLtMatmul(blas_lt_, &op_desc, alpha_s.in(types.scale), g.a, &a_desc, g.b, &b_desc,
                                   beta_s.in(types.scale), g.c, &c_desc, g.c, &c_desc, &*algo, workspace_,
                                   options_.gemm_workspace_bytes, stream_),
                    "gemm ", a.str(), " @ ", b.str());
    return;
  }
  // No cuBLASLt algorithm for this layout (e.g. an unusual broadcast batch): classic cuBLAS.
  DP_CUBLAS_CHECK(device_,
                  cublasGemmStridedBatchedEx_64(blas_, g.op_a, g.op_b, g.m, g.n, g.k, alpha_s.in(types.scale), g.a,
                                             types.data, g.lda, g.stride_a, g.b, types.data, g.ldb, g.stride_b,
                                             beta_s.in(types.scale), g.c, types.data, g.ldc, g.stride_c, g.batch,
                                             types.compute, CUBLAS_GEMM_DEFAULT),
                  "gemm ", a.str(), " @ ", b.str());
}

}  // namespace dp::cuda
