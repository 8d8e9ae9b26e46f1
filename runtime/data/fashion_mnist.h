// Fashion-MNIST (Xiao et al. 2017): 28x28 greyscale images of clothing in 10 classes,
// 60000 for training and 10000 for testing, read from the IDX files that Debian's
// dataset-fashion-mnist package installs.
#pragma once

#include <array>
#include <string>
#include <string_view>

#include "runtime/data/dataset.h"

namespace dp {

enum class Split { Train, Test };

const char* split_name(Split split);  // "train", "test"
// Inverse of split_name; throws naming the accepted values.
Split split_from_name(std::string_view name);

class FashionMnist final : public ImageClassificationDataset {
 public:
  static constexpr const char* kDefaultRoot = "/usr/share/datasets/fashion-mnist";
  static constexpr int64_t kNumClasses = 10;
  static constexpr int64_t kImageSize = 28;
  // Pixel mean and std of the training split (on x / 255).
  static constexpr Normalization kNormalization{0.2860, 0.3530};
  static constexpr std::array<const char*, kNumClasses> kClassNames = {
      "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

  // Loads <root>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (or the same names without .gz).
  FashionMnist(const std::string& root, Split split, Normalization normalization = kNormalization);

  Split split() const { return split_; }
  std::vector<std::string> class_names() const override { return {kClassNames.begin(), kClassNames.end()}; }

 private:
  FashionMnist(ImageClassificationDataset&& loaded, Split split)
      : ImageClassificationDataset(std::move(loaded)), split_(split) {}

  Split split_;
};

}  // namespace dp
