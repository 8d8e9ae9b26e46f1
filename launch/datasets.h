// The training and evaluation datasets a recipe names (data.dataset, one of kDatasetNames in
// runtime/data/dataset_names.h), built from the data section.
#pragma once

#include <memory>

#include "launch/config.h"
#include "runtime/data/dataset.h"
#include "runtime/text/mlm_dataset.h"

namespace dp {

struct TrainAndEvalData {
  std::unique_ptr<Dataset> train;
  std::unique_ptr<Dataset> eval;
  // The same objects by kind: images (fashion_mnist, image_folder, synthetic) or masked-LM text;
  // the other pair is null.
  const ClassificationDataset* train_images = nullptr;
  const ClassificationDataset* eval_images = nullptr;
  const text::MlmDataset* train_text = nullptr;
  const text::MlmDataset* eval_text = nullptr;
};

// fashion_mnist: the IDX files in data.root; image_folder: data.root/train and data.root/val
// (val must have train's classes); synthetic: data.synthetic_train_size / _eval_size random
// images of model.num_classes classes; text: the token shards in data.root and data.eval_root
// (default data.root/eval) made with data.vocab (default data.root/vocab.txt), masked from
// run.seed. Augmentation draws from run.seed. Throws dp::Error naming the key or the file.
TrainAndEvalData make_datasets(const Config& config);

// Files skipped so far as unreadable (data.skip_bad_files) in `data`, with the first one's
// reason; {0, ""} for datasets that read no files.
std::pair<int64_t, std::string> skipped_files(const Dataset& data);
// An image folder's files decoded with a libjpeg warning so far and the first one's path and
// warning (ImageFolder::files_with_decode_warnings); {0, ""} for other datasets.
std::pair<int64_t, std::string> decode_warnings(const Dataset& data);

// The masked-LM options of the data section (max_predictions 0: ceil(mask_prob x max_seq_length)).
text::MlmMaskingOptions mlm_masking_options(const Config& config, int max_seq_length);

}  // namespace dp
