// Multi-layer perceptron classifier: flatten the input, then Linear → ReLU (→ Dropout) per
// hidden width, then a Linear to the classes:
//
//   flatten = Flatten()
//   layers  = Sequential(Linear(in, h0), ReLU(), [Dropout(p)], Linear(h0, h1), ReLU(), ...,
//                        Linear(h_last, classes))
//
// Parameters: layers.<i>.weight / layers.<i>.bias at the Linear positions (with hidden
// {1024, 1024} and no dropout: layers.0, layers.2, layers.4); torch's default initialisation.
#pragma once

#include <memory>
#include <vector>

#include "runtime/nn/flatten.h"
#include "runtime/nn/sequential.h"
#include "runtime/tensor/generator.h"

namespace dp {

class MLP : public nn::Module {
 public:
  // dropout > 0 inserts Dropout after each hidden ReLU; its masks come from `gen`, which must
  // then outlive the model.
  MLP(int64_t in_features, const std::vector<int64_t>& hidden, int64_t num_classes, double dropout, Device device,
      Generator& gen);
  // x [N, *] with in_features elements per sample → logits [N, classes]
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Sequential> layers;
};

}  // namespace dp
