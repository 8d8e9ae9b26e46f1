// NOTE [ Tensor-core shapes ] (tensor_core_shapes.h).
#include "runtime/nn/tensor_core_shapes.h"

#include "runtime/nn/conv2d.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/linear.h"

namespace dp::nn {

std::vector<ShapeAdvice> tensor_core_shape_advice(Module& model, int64_t multiple) {
  std::vector<ShapeAdvice> advice;
  auto check = [&](const std::string& layer, const char* dimension, int64_t size) {
    if (size % multiple != 0) advice.push_back({layer, dimension, size});
  };
  for (const auto& [name, module] : model.named_modules()) {
    if (const auto* linear = dynamic_cast<const Linear*>(module)) {
      check(name, "in_features", linear->in_features);
      check(name, "out_features", linear->out_features);
    } else if (const auto* conv = dynamic_cast<const Conv2d*>(module)) {
      check(name, "in_channels per group", conv->in_channels / conv->options.groups);
      check(name, "out_channels", conv->out_channels);
    } else if (const auto* embedding = dynamic_cast<const Embedding*>(module)) {
      check(name, "embedding_dim", embedding->embedding_dim);
    }
  }
  return advice;
}

std::string describe(const std::vector<ShapeAdvice>& advice, size_t limit) {
  std::string out;
  for (size_t i = 0; i < advice.size() && i < limit; ++i)
    out += (i ? ", " : "") + advice[i].layer + " " + advice[i].dimension + " " + std::to_string(advice[i].size);
  if (advice.size() > limit) out += " and " + std::to_string(advice.size() - limit) + " more";
  return out;
}

}  // namespace dp::nn
