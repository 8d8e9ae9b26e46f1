// Operands handed to a kernel in one dtype: tensors already in it are used in place, others are
// cast into temporaries and, when the kernel writes them, cast back by finish(). Normalisation
// uses it for float32 per-feature tensors beside float16/bfloat16 activations; GEMM and
// convolution for float16/bfloat16 operands computed in float32 (NOTE [ CPU float16/bfloat16
// GEMM and convolution ] in gemm.cpp).
#pragma once

#include <vector>

#include "runtime/backend/backend.h"
#include "runtime/tensor/tensor.h"

namespace dp::cpu {

class ComputeOperands {
 public:
  ComputeOperands(DType dtype, Device device) : dtype_(dtype), device_(device) {}
  DType dtype() const { return dtype_; }
  // A tensor the kernel reads (any strides in, contiguous temporary out when cast).
  Tensor in(const Tensor& t) {
    if (!t.defined() || t.dtype() == dtype_) return t;
    Tensor tmp = Tensor::empty(t.shape(), dtype_, device_);
    device_.backend().copy(t, tmp);
    return tmp;
  }
  // A contiguous tensor the kernel writes (and reads first when `read`).
  Tensor out(const Tensor& t, bool read) {
    if (!t.defined() || t.dtype() == dtype_) return t;
    Tensor tmp = read ? in(t) : Tensor::empty(t.shape(), dtype_, device_);
    written_.push_back({tmp, t});
    return tmp;
  }
  // Casts what the kernel wrote back into the caller's tensors.
  void finish() {
    for (const Written& w : written_) device_.backend().copy(w.tmp, w.dst);
    written_.clear();
  }

 private:
  struct Written {
    Tensor tmp, dst;
  };
  DType dtype_;
  Device device_;
  std::vector<Written> written_;
};

}  // namespace dp::cpu
