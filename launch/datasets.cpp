#include "launch/datasets.h"

#include <filesystem>

#include "runtime/data/dataset_names.h"
#include "runtime/data/fashion_mnist.h"
#include "runtime/data/image_folder.h"

namespace dp {

namespace {

ImageTransformOptions image_transform(const Config& config, bool train) {
  const DataConfig& d = config.data;
  ImageTransformOptions t;
  t.train = train;
  t.crop_size = static_cast<int>(d.image_size);
  t.crop = {d.crop_scale[0], d.crop_scale[1], d.crop_ratio[0], d.crop_ratio[1]};
  t.horizontal_flip = d.horizontal_flip;
  t.eval_resize_size = static_cast<int>(d.eval_resize_size);
  t.eval_crop_size = static_cast<int>(d.eval_image_size);
  t.dct_scaling = d.jpeg_dct_scaling;
  t.seed = config.run.seed;
  // One value means every channel.
  t.mean = d.mean.size() == 1 ? std::vector<double>(3, d.mean[0]) : d.mean;
  t.std = d.std.size() == 1 ? std::vector<double>(3, d.std[0]) : d.std;
  return t;
}

}  // namespace

TrainAndEvalData make_datasets(const Config& config) {
  const DataConfig& d = config.data;
  TrainAndEvalData data;
  if (d.dataset == "fashion_mnist") {
    const Normalization norm{d.mean.at(0), d.std.at(0)};
    data.train = std::make_unique<FashionMnist>(d.root, Split::Train, norm);
    data.eval = std::make_unique<FashionMnist>(d.root, Split::Test, norm);
  } else if (d.dataset == "image_folder") {
    const std::string root = std::filesystem::path(d.root).string();
    auto train = std::make_unique<ImageFolder>(root + "/train", image_transform(config, true), d.skip_bad_files);
    const std::vector<std::string> classes = train->classes();
    data.eval = std::make_unique<ImageFolder>(root + "/val", image_transform(config, false), d.skip_bad_files, classes);
    data.train = std::move(train);
  } else if (d.dataset == "synthetic") {
    data.train = std::make_unique<SyntheticImages>(d.synthetic_train_size, config.model.num_classes,
                                                   image_transform(config, true));
    data.eval = std::make_unique<SyntheticImages>(d.synthetic_eval_size, config.model.num_classes,
                                                  image_transform(config, false));
  } else {
    std::string names;
    for (std::string_view n : kDatasetNames) names += (names.empty() ? "" : ", ") + std::string(n);
    throw Error("data.dataset: unknown dataset '" + d.dataset + "' (known: " + names + ")");
  }
  return data;
}

std::pair<int64_t, std::string> skipped_files(const ClassificationDataset& data) {
  if (const auto* folder = dynamic_cast<const ImageFolder*>(&data))
    return {folder->skipped_files(), folder->first_skipped()};
  return {0, ""};
}

}  // namespace dp
