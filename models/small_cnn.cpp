#include "models/small_cnn.h"

#include "runtime/nn/activation.h"
#include "runtime/nn/conv2d.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/pooling.h"

namespace dp {

SmallCNN::SmallCNN(int64_t in_channels, int64_t num_classes, Device device, Generator& gen, int64_t image_size) {
  DP_CHECK(image_size > 0 && image_size % 4 == 0, "small_cnn: image_size must be a positive multiple of 4, got ",
           image_size);
  const nn::Conv2dOptions same{.padding = 1};
  features = register_module(
      "features", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                      std::make_shared<nn::Conv2d>(in_channels, 32, 3, device, gen, same),
                      std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::MaxPool2d>(2),
                      std::make_shared<nn::Conv2d>(32, 64, 3, device, gen, same),
                      std::make_shared<nn::ReLU>(),
                      std::make_shared<nn::MaxPool2d>(2),
                  }));
  flatten = register_module("flatten", std::make_shared<nn::Flatten>());
  const int64_t side = image_size / 4;
  classifier = register_module(
      "classifier", std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
                        std::make_shared<nn::Linear>(64 * side * side, 128, device, gen),
                        std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(128, num_classes, device, gen),
                    }));
}

Tensor SmallCNN::forward(const Tensor& x) {
  const auto range = forward_range();
  // x [N, C, 28, 28] → features [N, 64, 7, 7] → [N, 3136] → logits [N, classes]
  return classifier->forward(flatten->forward(features->forward(x)));
}

}  // namespace dp
