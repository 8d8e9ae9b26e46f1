#include "models/registry.h"

#include <algorithm>
#include <limits>
#include <string_view>
#include <utility>

#include "models/bert.h"
#include "models/mlp.h"
#include "models/model_names.h"
#include "models/resnet.h"
#include "models/small_cnn.h"

namespace dp {

namespace {
using ResNetFactory = std::shared_ptr<ResNet> (*)(int64_t num_classes, int64_t in_channels, Device device,
                                                  Generator& gen, bool zero_init_residual);
constexpr std::pair<std::string_view, ResNetFactory> kResNets[] = {
    {"resnet18", resnet18}, {"resnet34", resnet34}, {"resnet50", resnet50},
    {"resnet101", resnet101}, {"resnet152", resnet152}};
}  // namespace

const std::vector<std::string>& known_models() {
  static const std::vector<std::string> names(kModelNames.begin(), kModelNames.end());
  return names;
}

std::pair<int64_t, int64_t> model_image_sides(const std::string& name, int64_t built_for) {
  if (name == "small_cnn") return {built_for / 4 * 4, built_for / 4 * 4 + 3};
  if (name == "mlp") return {built_for, built_for};
  return {1, std::numeric_limits<int64_t>::max()};
}

namespace {

std::shared_ptr<nn::Module> make_model(const ModelSpec& spec, Device device, Generator& gen) {
  if (spec.name == "bert") {
    DP_CHECK(spec.vocab_size > 0, "build_model 'bert': the vocabulary size must be positive, got ", spec.vocab_size);
    DP_CHECK(!spec.zero_init_residual, "build_model 'bert': zero_init_residual is only supported by the resnet models");
    BertConfig c = BertConfig::preset(spec.bert_size, spec.vocab_size);
    c.hidden_dropout_prob = c.attention_probs_dropout_prob = spec.dropout;
    c.max_position_embeddings = std::max(c.max_position_embeddings, spec.max_seq_length);
    return std::make_shared<BertForPreTraining>(c, device, gen);
  }
  DP_CHECK(spec.num_classes > 0 && spec.in_channels > 0 && spec.image_size > 0, "build_model '", spec.name,
           "': num_classes, in_channels and image_size must be positive, got ", spec.num_classes, ", ",
           spec.in_channels, ", ", spec.image_size);
  DP_CHECK(spec.dropout == 0.0 || spec.name == "mlp", "build_model '", spec.name,
           "': dropout is only supported by the mlp and bert models (got dropout=", spec.dropout, ")");
  if (spec.name == "small_cnn" || spec.name == "mlp")
    DP_CHECK(!spec.zero_init_residual, "build_model '", spec.name,
             "': zero_init_residual is only supported by the resnet models");
  if (spec.name == "small_cnn") return std::make_shared<SmallCNN>(spec.in_channels, spec.num_classes, device, gen, spec.image_size);
  if (spec.name == "mlp")
    return std::make_shared<MLP>(spec.in_channels * spec.image_size * spec.image_size, spec.mlp_hidden,
                                 spec.num_classes, spec.dropout, device, gen);
  for (const auto& [name, factory] : kResNets)
    if (spec.name == name) return factory(spec.num_classes, spec.in_channels, device, gen, spec.zero_init_residual);
  std::string known;
  for (const std::string& n : known_models()) known += (known.empty() ? "" : ", ") + n;
  throw Error("unknown model '" + spec.name + "'; known models: " + known);
}

}  // namespace

std::shared_ptr<nn::Module> build_model(const ModelSpec& spec, Device device, Generator& gen) {
  std::shared_ptr<nn::Module> model = make_model(spec, device, gen);
  model->name_modules_for_profiling();  // NOTE [ NVTX ranges ]
  return model;
}

}  // namespace dp
