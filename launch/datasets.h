// The training and evaluation datasets a recipe names (data.dataset, one of kDatasetNames in
// runtime/data/dataset_names.h), built from the data section.
#pragma once

#include <memory>

#include "launch/config.h"
#include "runtime/data/dataset.h"

namespace dp {

struct TrainAndEvalData {
  std::unique_ptr<ClassificationDataset> train;
  std::unique_ptr<ClassificationDataset> eval;
};

// fashion_mnist: the IDX files in data.root; image_folder: data.root/train and data.root/val
// (val must have train's classes); synthetic: data.synthetic_train_size / _eval_size random
// images of model.num_classes classes. Augmentation draws from run.seed. Throws dp::Error naming
// the key or the file.
TrainAndEvalData make_datasets(const Config& config);

// Files skipped so far as unreadable (data.skip_bad_files) in `data`, with the first one's
// reason; {0, ""} for datasets that read no files.
std::pair<int64_t, std::string> skipped_files(const ClassificationDataset& data);

}  // namespace dp
