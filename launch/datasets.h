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
  // Set where the classes are not the training set's (DataUse::EvaluationOnly of an image folder
  // without train/): a sentence saying where they come from.
  std::string classes_from_eval_set;
};

// What the datasets are opened for. Evaluation alone (`dptrain evaluate`) takes an image folder
// without train/: the evaluation folder's own class folders are then the classes (NOTE
// [ Evaluating weights ] in launch/evaluate_command.h), and it stands in for the training set,
// whose loader is never started (the model is still sized by data.image_size).
enum class DataUse { Training, EvaluationOnly };

// fashion_mnist: the IDX files in data.root; image_folder: data.root/train and data.root/val
// (val must have train's classes); synthetic: data.synthetic_train_size / _eval_size random
// images of model.num_classes classes; text: the token shards in data.root and data.eval_root
// (default data.root/eval) made with data.vocab (default data.root/vocab.txt), masked from
// run.seed. Augmentation draws from run.seed. Throws dp::Error naming the key or the file.
TrainAndEvalData make_datasets(const Config& config, DataUse use = DataUse::Training);

// What an image folder's files gave in one epoch of its loader (the evaluation set's loads all
// use epoch 0, so its counts are those of every evaluation so far): files skipped as unreadable
// (data.skip_bad_files) and files decoded with a libjpeg warning (damaged data used as decoded),
// with this process's first of each; zeros for datasets that read no files.
struct FileReport {
  int64_t skipped = 0, warned = 0;
  std::string first_skipped, first_warned;
};
FileReport file_report(const Dataset& data, int64_t epoch);

// The lines a run says of its files' troubles, given every rank's counts added up (`train` and
// `test`: this rank's, for the first files' names; `*_total`: over the ranks). Empty when none.
std::vector<std::string> describe_file_reports(const FileReport& train, const FileReport& test,
                                               const FileReport& train_total, const FileReport& test_total);

// The masked-LM options of the data section (max_predictions 0: ceil(mask_prob x max_seq_length)).
text::MlmMaskingOptions mlm_masking_options(const Config& config, int max_seq_length);

}  // namespace dp
