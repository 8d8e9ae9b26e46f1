#include "comm/mpi/mpi_reduce_ops.h"

#include <Eigen/Core>

#include <cstdio>

#include "comm/mpi/mpi_check.h"

namespace dp {
namespace {

// inout[i] = in[i] + inout[i] on 16-bit words of type T (Eigen::half or Eigen::bfloat16).
template <typename T>
void sum_16bit(void* in, void* inout, int* len, MPI_Datatype* /*datatype: MPI_UINT16_T*/) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float sum = static_cast<float>(Eigen::numext::bit_cast<T>(a[i])) +
                static_cast<float>(Eigen::numext::bit_cast<T>(b[i]));
    b[i] = Eigen::numext::bit_cast<uint16_t>(T(sum));
  }
}

template <typename T>
void divide_16bit(void* data, int64_t count, int divisor) {
  auto* words = static_cast<uint16_t*>(data);
  for (int64_t i = 0; i < count; ++i) {
    float value = static_cast<float>(Eigen::numext::bit_cast<T>(words[i])) / static_cast<float>(divisor);
    words[i] = Eigen::numext::bit_cast<uint16_t>(T(value));
  }
}

template <typename T>
void divide_native(void* data, int64_t count, int divisor) {
  auto* values = static_cast<T*>(data);
  for (int64_t i = 0; i < count; ++i) values[i] /= static_cast<T>(divisor);
}

}  // namespace

MPI_Datatype mpi_datatype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Float16: case DType::BFloat16: return MPI_UINT16_T;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    case DType::UInt8: case DType::Bool: return MPI_UINT8_T;
  }
  throw Error("mpi_datatype: unknown dtype");
}

bool mpi_reduction_supported(DType dtype, CollectiveReduce op, const char** why) {
  if (dtype == kUInt8 || dtype == kBool) {
    *why = "uint8 and bool tensors cannot be reduced (sums would overflow or lose meaning); "
           "convert to int32 first";
    return false;
  }
  if ((dtype == kInt32 || dtype == kInt64) && op == CollectiveReduce::Average) {
    *why = "the average of an integer tensor is not an integer; sum, then divide as floats";
    return false;
  }
  return true;
}

MpiReduceOps::MpiReduceOps() {
  check_mpi(MPI_Op_create(&sum_16bit<Eigen::half>, /*commute=*/1, &half_sum_), "MPI_Op_create",
            "creating the float16 sum");
  int rc = MPI_Op_create(&sum_16bit<Eigen::bfloat16>, /*commute=*/1, &bfloat16_sum_);
  if (rc != MPI_SUCCESS) {
    MPI_Op_free(&half_sum_);  // best effort: already failing
    throw_mpi_error(rc, "MPI_Op_create", "creating the bfloat16 sum");
  }
}

MpiReduceOps::~MpiReduceOps() {
  for (MPI_Op* op : {&half_sum_, &bfloat16_sum_}) {
    if (int rc = MPI_Op_free(op); rc != MPI_SUCCESS) {
      std::fprintf(stderr, "dptrain: MPI_Op_free failed: %s\n", mpi_error_text(rc).c_str());
    }
  }
}

MPI_Op MpiReduceOps::sum_op(DType dtype) const {
  if (dtype == kFloat16) return half_sum_;
  if (dtype == kBFloat16) return bfloat16_sum_;
  return MPI_SUM;
}

void divide_in_place(void* data, int64_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::Float32: return divide_native<float>(data, count, divisor);
    case DType::Float64: return divide_native<double>(data, count, divisor);
    case DType::Float16: return divide_16bit<Eigen::half>(data, count, divisor);
    case DType::BFloat16: return divide_16bit<Eigen::bfloat16>(data, count, divisor);
    default: throw Error(detail::concat("divide_in_place: ", dtype_name(dtype), " is not a floating type"));
  }
}

}  // namespace dp
