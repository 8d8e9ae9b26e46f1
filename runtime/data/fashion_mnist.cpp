#include "runtime/data/fashion_mnist.h"

#include <filesystem>

#include "runtime/data/idx_reader.h"

namespace dp {
namespace {

constexpr std::string_view kInstallHint = "install Debian's dataset-fashion-mnist or set data.root";

// The gzipped file when present, else an uncompressed copy, else the .gz name (whose open
// error then tells the user what to install).
std::string idx_path(const std::string& root, const std::string& stem) {
  const std::filesystem::path gz = std::filesystem::path(root) / (stem + ".gz");
  const std::filesystem::path plain = std::filesystem::path(root) / stem;
  return !std::filesystem::exists(gz) && std::filesystem::exists(plain) ? plain.string() : gz.string();
}

ImageClassificationDataset load(const std::string& root, Split split, Normalization normalization) {
  const std::string prefix = split == Split::Train ? "train" : "t10k";
  const std::string images_path = idx_path(root, prefix + "-images-idx3-ubyte");
  const std::string labels_path = idx_path(root, prefix + "-labels-idx1-ubyte");
  IdxArray images = read_idx_ubyte(images_path, 3, kInstallHint);
  const IdxArray labels = read_idx_ubyte(labels_path, 1, kInstallHint);

  constexpr int64_t side = FashionMnist::kImageSize;
  DP_CHECK(images.dims[1] == side && images.dims[2] == side, "'", images_path, "': images are ", images.dims[1], "x",
           images.dims[2], ", Fashion-MNIST's are ", side, "x", side);
  DP_CHECK(images.dims[0] == labels.dims[0], "Fashion-MNIST ", split_name(split), ": '", images_path, "' holds ",
           images.dims[0], " images but '", labels_path, "' holds ", labels.dims[0],
           " labels; the two files do not belong together");
  return ImageClassificationDataset(std::move(images.data), {1, side, side},
                                    std::vector<int64_t>(labels.data.begin(), labels.data.end()),
                                    FashionMnist::kNumClasses, normalization,
                                    "Fashion-MNIST " + std::string(split_name(split)) + " ('" + labels_path + "')");
}

}  // namespace

const char* split_name(Split split) { return split == Split::Train ? "train" : "test"; }

Split split_from_name(std::string_view name) {
  if (name == "train") return Split::Train;
  if (name == "test") return Split::Test;
  throw Error(detail::concat("unknown data split '", name, "'; expected 'train' or 'test'"));
}

FashionMnist::FashionMnist(const std::string& root, Split split, Normalization normalization)
    : FashionMnist(load(root, split, normalization), split) {}

}  // namespace dp
