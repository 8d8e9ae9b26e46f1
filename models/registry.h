// Builds a model by name from a ModelSpec (what the config's `model:` section describes).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/nn/module.h"
#include "runtime/tensor/generator.h"

namespace dp {

struct ModelSpec {
  std::string name = "small_cnn";            // one of known_models()
  int64_t num_classes = 10;
  int64_t in_channels = 1;                   // 1 for Fashion-MNIST
  int64_t image_size = 28;                   // square inputs; small_cnn and mlp size their layers by it
  std::vector<int64_t> mlp_hidden = {1024, 1024};  // mlp only
  double dropout = 0.0;                      // mlp only
  bool zero_init_residual = false;           // resnet* only: last BN of each residual branch starts at 0
  // bert: a BertConfig preset (models/bert.h), the tokenizer's vocabulary size and the longest
  // sequence (position embeddings: the preset's 512, or more when the data needs more). dropout
  // is then the hidden and the attention-probability dropout.
  std::string bert_size = "tiny";
  int64_t vocab_size = 0;
  int64_t max_seq_length = 0;
};

// The names build_model knows, in the order they are listed in errors (kModelNames in
// models/model_names.h).
const std::vector<std::string>& known_models();

// The sides of square images a model built for `built_for` (ModelSpec::image_size) takes, as
// [first, last]: small_cnn's classifier is sized for its features after two 2x2 poolings (sides
// with the same side / 4), mlp's for the flattened image (that side only); the resnets' global
// average pooling takes any side ([1, INT64_MAX]).
std::pair<int64_t, int64_t> model_image_sides(const std::string& name, int64_t built_for);

// Builds the model on `device`, initialised from `gen`. With an mlp or bert and dropout > 0, the
// Dropout modules draw their masks from `gen`, which must then outlive the model. An unknown
// name throws dp::Error listing the known ones; dropout on a model other than mlp and bert, or
// zero_init_residual on one other than a resnet, throws too. Its modules are named for profiling
// (nn::Module::name_modules_for_profiling).
std::shared_ptr<nn::Module> build_model(const ModelSpec& spec, Device device, Generator& gen);

}  // namespace dp
