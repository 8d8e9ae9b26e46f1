// A small convolutional classifier for 28×28 images (Fashion-MNIST), written the way a PyTorch
// user would:
//
//   features   = Sequential(Conv2d(C, 32, 3, padding=1), ReLU(), MaxPool2d(2),      # 0, 1, 2
//                           Conv2d(32, 64, 3, padding=1), ReLU(), MaxPool2d(2))     # 3, 4, 5
//   flatten    = Flatten()
//   classifier = Sequential(Linear(64·7·7 = 3136, 128), ReLU(), Linear(128, classes))  # 0, 1, 2
//
// Parameters: features.0.{weight,bias}, features.3.{weight,bias}, classifier.0.{weight,bias},
// classifier.2.{weight,bias}; torch's default initialisation.
#pragma once

#include <memory>

#include "runtime/nn/flatten.h"
#include "runtime/nn/sequential.h"
#include "runtime/tensor/generator.h"

namespace dp {

class SmallCNN : public nn::Module {
 public:
  // image_size: the (square) input's side, a multiple of 4; 28 gives the 3136-wide classifier.
  SmallCNN(int64_t in_channels, int64_t num_classes, Device device, Generator& gen, int64_t image_size = 28);
  // x [N, C, S, S] → logits [N, classes]
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Sequential> features;
  std::shared_ptr<nn::Flatten> flatten;
  std::shared_ptr<nn::Sequential> classifier;
};

}  // namespace dp
