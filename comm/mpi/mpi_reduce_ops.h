// MPI datatypes for dptrain dtypes, and the reductions MPI lacks.
//
// NOTE [ 16-bit sums over MPI ]
// MPI has no float16/bfloat16 types. Such tensors travel as raw 16-bit words (MPI_UINT16_T) and
// are summed by user-defined MPI ops that widen each pair to float32, add, and round back to
// nearest-even. Each pairwise addition rounds to the 16-bit type, as NCCL's half sums do, so the
// result can differ from a float32 sum rounded once; every rank receives the same bits. Averages
// divide the sum by the group size in float32 and round once more.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "comm/collective_log.h"
#include "runtime/core/dtype.h"

namespace dp {

// The MPI datatype whose elements have `dtype`'s size and (for sums) meaning.
MPI_Datatype mpi_datatype(DType dtype);

// Whether `op` over `dtype` is supported; if not, `why` says so (for the caller's error).
bool mpi_reduction_supported(DType dtype, CollectiveReduce op, const char** why);

// The float16 and bfloat16 sum ops. Created and freed by the thread that calls MPI (the group's
// communication thread); not copyable.
class MpiReduceOps {
 public:
  MpiReduceOps();
  ~MpiReduceOps();
  MpiReduceOps(const MpiReduceOps&) = delete;
  MpiReduceOps& operator=(const MpiReduceOps&) = delete;

  // MPI_SUM, or the 16-bit sum op for float16 / bfloat16 (Sum and Average both sum over MPI).
  MPI_Op sum_op(DType dtype) const;

 private:
  MPI_Op half_sum_ = MPI_OP_NULL;
  MPI_Op bfloat16_sum_ = MPI_OP_NULL;
};

// data[i] /= divisor, in place, for a floating `dtype` (16-bit types through float32).
void divide_in_place(void* data, int64_t count, DType dtype, int divisor);

}  // namespace dp
