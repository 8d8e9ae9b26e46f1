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

TrainAndEvalData make_datasets(const Config& config, DataUse use) {
  const DataConfig& d = config.data;
  TrainAndEvalData data;
  DP_CHECK(d.eval_root.empty() || d.dataset == "image_folder" || d.dataset == "text", "data.eval_root is read by ",
           "data.dataset image_folder and text only; ", d.dataset, " has its own test split (remove the key)");
  if (d.dataset == "fashion_mnist") {
    const Normalization norm{d.mean.at(0), d.std.at(0)};
    data.train = std::make_unique<FashionMnist>(d.root, Split::Train, norm);
    data.eval = std::make_unique<FashionMnist>(d.root, Split::Test, norm);
  } else if (d.dataset == "image_folder") {
    const std::string root = std::filesystem::path(d.root).string();
    // data.eval_root: another folder of the same classes (a second test set, `dptrain evaluate`'s
    // robustness sets) instead of root/val.
    const std::string eval_root = d.eval_root.empty() ? root + "/val" : d.eval_root;
    const std::string train_root = root + "/train";
    if (use == DataUse::EvaluationOnly && !std::filesystem::exists(train_root)) {
      // A validation set alone (DataUse): its class folders, in the same sorted order, are the
      // classes; a weights file that records its training classes is checked against them. The
      // training set is a stand-in of the training images' shape and the class count, never read
      // (no second scan of the folder).
      auto eval = std::make_unique<ImageFolder>(eval_root, image_transform(config, false), d.skip_bad_files);
      data.classes_from_eval_set = detail::concat("classes: the ", eval->classes().size(), " class folders of ",
                                                  eval_root, " (", train_root, " does not exist)");
      data.train = std::make_unique<SyntheticImages>(eval->size(), eval->num_classes(), image_transform(config, true));
      data.eval = std::move(eval);
    } else {
      auto train = std::make_unique<ImageFolder>(train_root, image_transform(config, true), d.skip_bad_files);
      data.eval = std::make_unique<ImageFolder>(eval_root, image_transform(config, false), d.skip_bad_files,
                                                train->classes());
      data.train = std::move(train);
    }
  } else if (d.dataset == "synthetic") {
    data.train = std::make_unique<SyntheticImages>(d.synthetic_train_size, config.model.num_classes,
                                                   image_transform(config, true));
    data.eval = std::make_unique<SyntheticImages>(d.synthetic_eval_size, config.model.num_classes,
                                                  image_transform(config, false));
  } else if (d.dataset == "text") {
    namespace fs = std::filesystem;
    const std::string vocab_path = d.vocab.empty() ? (fs::path(d.root) / "vocab.txt").string() : d.vocab;
    DP_CHECK(fs::is_regular_file(vocab_path), d.vocab.empty() ? "data.vocab is unset and " : "data.vocab: ", "'",
             vocab_path, "' is not a file: set data.vocab to the vocab.txt the shards in '", d.root, "' were made with");
    std::shared_ptr<const text::Vocabulary> vocab;
    try {
      vocab = std::make_shared<const text::Vocabulary>(text::Vocabulary::load(vocab_path));
    } catch (const Error& e) {
      throw Error(detail::concat("data.vocab: ", e.what()));
    }
    const std::string eval_root = d.eval_root.empty() ? (fs::path(d.root) / "eval").string() : d.eval_root;
    // The masking options need the shards' length: open the training shards first.
    auto open = [&](const std::string& path, bool training, const char* key) {
      try {
        text::TextDataset shards = text::TextDataset::open(path, *vocab);
        const int length = shards.max_seq_length();
        return std::make_unique<text::MlmDataset>(std::move(shards), vocab, mlm_masking_options(config, length),
                                                  training, training ? "training text" : "evaluation text");
      } catch (const Error& e) {
        throw Error(detail::concat(key, ": ", e.what()));
      }
    };
    auto train = open(d.root, true, "data.root");
    DP_CHECK(!d.eval_root.empty() || fs::exists(eval_root), "data.eval_root is unset and data.root '", d.root,
             "' has no eval/ folder (prepare-text --eval-fraction 0 writes none): set data.eval_root to evaluation ",
             "shards made with the same vocabulary (dptrain prepare-text --vocab ", vocab_path, " ...)");
    auto eval = open(eval_root, false, d.eval_root.empty() ? "data.eval_root (unset: data.root/eval)" : "data.eval_root");
    data.train_text = train.get();
    data.eval_text = eval.get();
    data.train = std::move(train);
    data.eval = std::move(eval);
    return data;
  } else {
    std::string names;
    for (std::string_view n : kDatasetNames) names += (names.empty() ? "" : ", ") + std::string(n);
    throw Error("data.dataset: unknown dataset '" + d.dataset + "' (known: " + names + ")");
  }
  data.train_images = dynamic_cast<const ClassificationDataset*>(data.train.get());
  data.eval_images = dynamic_cast<const ClassificationDataset*>(data.eval.get());
  return data;
}

text::MlmMaskingOptions mlm_masking_options(const Config& config, int max_seq_length) {
  const DataConfig& d = config.data;
  text::MlmMaskingOptions o;
  o.mask_prob = d.mask_prob;
  const int length = d.max_seq_length > 0 ? static_cast<int>(d.max_seq_length) : max_seq_length;
  o.max_predictions = d.max_predictions > 0 ? static_cast<int>(d.max_predictions)
                                            : text::default_max_predictions(length, d.mask_prob);
  o.seed = config.run.seed;
  return o;
}

FileReport file_report(const Dataset& data, int64_t epoch) {
  FileReport r;
  if (const auto* folder = dynamic_cast<const ImageFolder*>(&data)) {
    r.skipped = folder->skipped_files(epoch);
    r.warned = folder->files_with_decode_warnings(epoch);
    r.first_skipped = folder->first_skipped();
    r.first_warned = folder->first_decode_warning();
  }
  return r;
}

std::vector<std::string> describe_file_reports(const FileReport& train, const FileReport& test,
                                               const FileReport& train_total, const FileReport& test_total) {
  // The first such file this process met in the counted loads (training's, else the test set's),
  // or where they are.
  auto first = [](int64_t train_count, const std::string& train_first, int64_t test_count,
                  const std::string& test_first) {
    if (train_count > 0) return "the first: " + train_first;
    if (test_count > 0) return "the first: " + test_first;
    return std::string("all in other ranks' shards (a run on one process names them)");
  };
  std::vector<std::string> lines;
  if (train_total.skipped > 0 || test_total.skipped > 0)
    lines.push_back(detail::concat("unreadable files skipped (data.skip_bad_files): ", train_total.skipped,
                                   " training this epoch, ", test_total.skipped, " test; ",
                                   first(train.skipped, train.first_skipped, test.skipped, test.first_skipped)));
  // Damaged JPEGs that still decode are used as decoded, as PIL does, but not without a word.
  if (train_total.warned > 0 || test_total.warned > 0)
    lines.push_back(detail::concat("JPEG files decoded with a libjpeg warning (damaged data, used as decoded, as "
                                   "PIL does): ", train_total.warned, " training this epoch, ", test_total.warned,
                                   " test; ", first(train.warned, train.first_warned, test.warned, test.first_warned)));
  return lines;
}

}  // namespace dp
