#include "runtime/nn/linear.h"

#include "runtime/nn/init.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/matmul.h"

namespace dp::nn {

Linear::Linear(int64_t in_features, int64_t out_features, Device device, Generator& gen, bool with_bias, DType dtype)
    : in_features(in_features), out_features(out_features) {
  DP_CHECK(in_features > 0 && out_features > 0, "Linear: features must be positive, got in=", in_features,
           " out=", out_features);
  Tensor w = empty({out_features, in_features}, dtype, device);
  Tensor b = with_bias ? empty({out_features}, dtype, device) : Tensor();
  init::linear_default_(w, b, gen);
  weight = register_parameter("weight", w);
  if (with_bias) bias = register_parameter("bias", b);
}

Tensor Linear::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [*, in], weight [out, in], bias [out] → [*, out]
  DP_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear(in_features=", in_features,
           ", out_features=", out_features, "): expected input [*, ", in_features, "], got ", x.str());
  return linear(x, weight, bias);
}

}  // namespace dp::nn
