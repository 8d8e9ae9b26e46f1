#include "models/bert.h"

#include <cmath>
#include <limits>

#include "runtime/autograd/grad_mode.h"
#include "runtime/core/error.h"
#include "runtime/nn/init.h"
#include "runtime/ops/attention.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/matmul.h"

namespace dp {

namespace {

struct Preset {
  const char* name;
  int64_t layers, hidden;
};
constexpr Preset kPresets[] = {{"tiny", 2, 128},   {"mini", 4, 256},  {"small", 4, 512},
                               {"medium", 8, 512}, {"base", 12, 768}, {"large", 24, 1024}};

// Hugging Face's _init_weights: N(0, range²) weights, zero biases (LayerNorm keeps 1 / 0).
std::shared_ptr<nn::Linear> make_linear(int64_t in, int64_t out, const BertConfig& c, Device device, Generator& gen) {
  auto linear = std::make_shared<nn::Linear>(in, out, device, gen);
  NoGradGuard no_grad;
  nn::init::normal_(linear->weight, gen, 0.0, c.initializer_range);
  nn::init::zeros_(linear->bias);
  return linear;
}

std::shared_ptr<nn::Embedding> make_embedding(int64_t rows, int64_t dim, const BertConfig& c, Device device,
                                              Generator& gen, int64_t padding_idx = -1) {
  auto embedding = std::make_shared<nn::Embedding>(rows, dim, device, gen, padding_idx);
  NoGradGuard no_grad;
  nn::init::normal_(embedding->weight, gen, 0.0, c.initializer_range);
  if (padding_idx >= 0) embedding->weight.select(0, padding_idx).zero_();
  return embedding;
}

// The additive "masked" value: finite (a fully masked row then softmaxes to uniform instead of
// NaN), as Hugging Face's torch.finfo(dtype).min.
double masked_value(DType dtype) {
  switch (dtype) {
    case DType::Float16: return -65504.0;
    case DType::BFloat16: return -3.3895313892515355e38;
    case DType::Float64: return std::numeric_limits<double>::lowest();
    default: return std::numeric_limits<float>::lowest();
  }
}

}  // namespace

BertConfig BertConfig::preset(const std::string& name, int64_t vocab_size) {
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    BertConfig c;
    c.vocab_size = vocab_size;
    c.num_hidden_layers = p.layers;
    c.hidden_size = p.hidden;
    c.num_attention_heads = p.hidden / 64;
    c.intermediate_size = 4 * p.hidden;
    return c;
  }
  std::string known;
  for (const Preset& p : kPresets) known += std::string(known.empty() ? "" : ", ") + p.name;
  throw Error("model.size: unknown BERT size '" + name + "' (known: " + known + ")");
}

const std::vector<std::string>& BertConfig::preset_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Preset& p : kPresets) out.push_back(p.name);
    return out;
  }();
  return names;
}

void BertConfig::validate() const {
  auto positive = [](const char* key, int64_t v) {
    DP_CHECK(v > 0, "BERT ", key, ": expected a positive number, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("intermediate_size", intermediate_size);
  positive("max_position_embeddings", max_position_embeddings);
  positive("type_vocab_size", type_vocab_size);
  DP_CHECK(hidden_size % num_attention_heads == 0, "BERT hidden_size ", hidden_size,
           " is not a multiple of num_attention_heads ", num_attention_heads);
  for (double p : {hidden_dropout_prob, attention_probs_dropout_prob})
    DP_CHECK(p >= 0.0 && p < 1.0, "BERT dropout probabilities must be in [0, 1), got ", p);
  DP_CHECK(layer_norm_eps > 0 && initializer_range > 0, "BERT layer_norm_eps and initializer_range must be positive");
}

Tensor padding_attention_mask(const Tensor& key_mask, DType dtype) {
  DP_CHECK(key_mask.dim() == 2, "padding_attention_mask: expected a key mask [B, S], got ", key_mask.str());
  // (1 - keep) · min: 0 for real tokens, the masked value for padding.
  const Tensor keep = equal(key_mask.to(dtype), zeros({}, dtype, key_mask.device()));  // 1 where padding
  return mul(keep, masked_value(dtype)).reshape({key_mask.size(0), 1, 1, key_mask.size(1)});
}

Tensor packed_attention_mask(const Tensor& sequence_ids, DType dtype) {
  DP_CHECK(sequence_ids.dim() == 2, "packed_attention_mask: expected sequence ids [B, S], got ", sequence_ids.str());
  const int64_t b = sequence_ids.size(0), s = sequence_ids.size(1);
  const Tensor ids = sequence_ids.to(dtype);
  // Same sequence: ids[q] == ids[k]; and the key is not padding (id 0).
  const Tensor same = equal(ids.reshape({b, s, 1}), ids.reshape({b, 1, s}));  // [B, S, S]
  const Tensor real_key = sub(ones({}, dtype, ids.device()), equal(ids, zeros({}, dtype, ids.device())));
  const Tensor allowed = mul(same, real_key.reshape({b, 1, s}));
  return mul(sub(ones({}, dtype, ids.device()), allowed), masked_value(dtype)).reshape({b, 1, s, s});
}

// ---- Embeddings ---------------------------------------------------------------------------

BertEmbeddings::BertEmbeddings(const BertConfig& c, Device device, Generator& gen) {
  word_embeddings = register_module("word_embeddings",
                                    make_embedding(c.vocab_size, c.hidden_size, c, device, gen, /*padding_idx=*/0));
  position_embeddings =
      register_module("position_embeddings", make_embedding(c.max_position_embeddings, c.hidden_size, c, device, gen));
  token_type_embeddings =
      register_module("token_type_embeddings", make_embedding(c.type_vocab_size, c.hidden_size, c, device, gen));
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, device, c.layer_norm_eps));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob, gen));
}

Tensor BertEmbeddings::embed(const BertInputs& in) {
  const auto range = forward_range();
  const Tensor& ids = in.input_ids;
  DP_CHECK(ids.dim() == 2 && ids.dtype() == kInt64, "BERT: input_ids must be int64 [batch, sequence], got ",
           ids.str());
  const int64_t b = ids.size(0), s = ids.size(1);
  DP_CHECK(s <= position_embeddings->num_embeddings, "BERT: sequence length ", s, " exceeds max_position_embeddings ",
           position_embeddings->num_embeddings);
  const Tensor positions =
      in.position_ids.defined() ? in.position_ids : arange(0, static_cast<double>(s), 1, kInt64, ids.device()).reshape({1, s}).expand({b, s});
  const Tensor types = in.token_type_ids.defined() ? in.token_type_ids : zeros({b, s}, kInt64, ids.device());
  Tensor x = add(add(word_embeddings->forward(ids), token_type_embeddings->forward(types)),
                 position_embeddings->forward(positions));
  return dropout->forward(LayerNorm->forward(x));
}

// ---- Attention ----------------------------------------------------------------------------

BertSelfAttention::BertSelfAttention(const BertConfig& c, Device device, Generator& gen)
    : heads(c.num_attention_heads), head_size(c.hidden_size / c.num_attention_heads) {
  query = register_module("query", make_linear(c.hidden_size, c.hidden_size, c, device, gen));
  key = register_module("key", make_linear(c.hidden_size, c.hidden_size, c, device, gen));
  value = register_module("value", make_linear(c.hidden_size, c.hidden_size, c, device, gen));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.attention_probs_dropout_prob, gen));
}

Tensor BertSelfAttention::attend(const Tensor& x, const Tensor& mask) {
  const auto range = forward_range();
  DP_CHECK(x.dim() == 3, "BertSelfAttention: expected hidden states [batch, sequence, hidden], got ", x.str());
  const int64_t b = x.size(0), s = x.size(1), hidden = heads * head_size;
  // [B, S, H] → [B·heads, S, d]
  auto split_heads = [&](const Tensor& t) {
    return t.reshape({b, s, heads, head_size}).permute({0, 2, 1, 3}).reshape({b * heads, s, head_size});
  };
  const Tensor q = split_heads(query->forward(x)), k = split_heads(key->forward(x)), v = split_heads(value->forward(x));
  const Tensor scores = matmul(q, k.transpose(1, 2)).reshape({b, heads, s, s});
  if (mask.defined())
    DP_CHECK(mask.dim() == 4 && mask.size(0) == b && mask.size(1) == 1 && (mask.size(2) == 1 || mask.size(2) == s) &&
                 mask.size(3) == s,
             "BertSelfAttention: the attention mask must be [", b, ", 1, 1 or ", s, ", ", s, "], got ", mask.str());
  // softmax(scores / √d + mask) in one kernel (NOTE [ Attention softmax ]).
  const Tensor probs =
      dropout->forward(attention_softmax(scores, mask, 1.0 / std::sqrt(static_cast<double>(head_size))));
  const Tensor context = matmul(probs.reshape({b * heads, s, s}), v);  // [B·heads, S, d]
  return context.reshape({b, heads, s, head_size}).permute({0, 2, 1, 3}).reshape({b, s, hidden});
}

BertResidualOutput::BertResidualOutput(int64_t in_features, const BertConfig& c, Device device, Generator& gen) {
  dense = register_module("dense", make_linear(in_features, c.hidden_size, c, device, gen));
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, device, c.layer_norm_eps));
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.hidden_dropout_prob, gen));
}

Tensor BertResidualOutput::forward(const Tensor&) {
  throw Error("BertResidualOutput: call forward(x, residual)");
}

Tensor BertResidualOutput::forward(const Tensor& x, const Tensor& residual) {
  const auto range = forward_range();
  return LayerNorm->forward(add(dropout->forward(dense->forward(x)), residual));
}

BertAttention::BertAttention(const BertConfig& c, Device device, Generator& gen) {
  self = register_module("self", std::make_shared<BertSelfAttention>(c, device, gen));
  output = register_module("output", std::make_shared<BertResidualOutput>(c.hidden_size, c, device, gen));
}

Tensor BertAttention::attend(const Tensor& x, const Tensor& mask) {
  const auto range = forward_range();
  return output->forward(self->attend(x, mask), x);
}

// ---- Layers and encoder -------------------------------------------------------------------

BertIntermediate::BertIntermediate(const BertConfig& c, Device device, Generator& gen) {
  dense = register_module("dense", make_linear(c.hidden_size, c.intermediate_size, c, device, gen));
}

Tensor BertIntermediate::forward(const Tensor& x) {
  const auto range = forward_range();
  return gelu(dense->forward(x));
}

BertLayer::BertLayer(const BertConfig& c, Device device, Generator& gen) {
  attention = register_module("attention", std::make_shared<BertAttention>(c, device, gen));
  intermediate = register_module("intermediate", std::make_shared<BertIntermediate>(c, device, gen));
  output = register_module("output", std::make_shared<BertResidualOutput>(c.intermediate_size, c, device, gen));
}

Tensor BertLayer::run(const Tensor& x, const Tensor& mask) {
  const auto range = forward_range();
  const Tensor attended = attention->attend(x, mask);
  return output->forward(intermediate->forward(attended), attended);
}

BertEncoder::BertEncoder(const BertConfig& c, Device device, Generator& gen) {
  layer = register_module("layer", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(std::make_shared<BertLayer>(c, device, gen));
    layer->push_back(layers.back());
  }
}

Tensor BertEncoder::run(const Tensor& x, const Tensor& mask) {
  const auto range = forward_range();
  Tensor h = x;
  for (const auto& l : layers) h = l->run(h, mask);
  return h;
}

BertPooler::BertPooler(const BertConfig& c, Device device, Generator& gen) {
  dense = register_module("dense", make_linear(c.hidden_size, c.hidden_size, c, device, gen));
}

Tensor BertPooler::forward(const Tensor& hidden) {
  const auto range = forward_range();
  return tanh(dense->forward(hidden.select(1, 0)));
}

BertModel::BertModel(const BertConfig& c, Device device, Generator& gen) : config(c) {
  config.validate();
  embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(c, device, gen));
  encoder = register_module("encoder", std::make_shared<BertEncoder>(c, device, gen));
  if (c.next_sentence) pooler = register_module("pooler", std::make_shared<BertPooler>(c, device, gen));
}

Tensor BertModel::encode(const BertInputs& in) {
  const auto range = forward_range();
  return encoder->run(embeddings->embed(in), in.attention_mask);
}

// ---- Heads --------------------------------------------------------------------------------

BertPredictionHeadTransform::BertPredictionHeadTransform(const BertConfig& c, Device device, Generator& gen) {
  dense = register_module("dense", make_linear(c.hidden_size, c.hidden_size, c, device, gen));
  LayerNorm = register_module("LayerNorm", std::make_shared<nn::LayerNorm>(Shape{c.hidden_size}, device, c.layer_norm_eps));
}

Tensor BertPredictionHeadTransform::forward(const Tensor& x) {
  const auto range = forward_range();
  return LayerNorm->forward(gelu(dense->forward(x)));
}

BertTiedDecoder::BertTiedDecoder(const Tensor& word_embeddings, const Tensor& head_bias) {
  weight = register_parameter("weight", word_embeddings);
  bias = register_parameter("bias", head_bias);
}

Tensor BertTiedDecoder::forward(const Tensor& x) {
  const auto range = forward_range();
  return linear(x, weight, bias);
}

BertLMPredictionHead::BertLMPredictionHead(const BertConfig& c, const Tensor& word_embeddings, Device device,
                                           Generator& gen) {
  bias = register_parameter("bias", zeros({c.vocab_size}, kFloat32, device));
  transform = register_module("transform", std::make_shared<BertPredictionHeadTransform>(c, device, gen));
  decoder = register_module("decoder", std::make_shared<BertTiedDecoder>(word_embeddings, bias));
}

Tensor BertLMPredictionHead::forward(const Tensor& hidden) {
  const auto range = forward_range();
  return decoder->forward(transform->forward(hidden));
}

BertPreTrainingHeads::BertPreTrainingHeads(const BertConfig& c, const Tensor& word_embeddings, Device device,
                                           Generator& gen) {
  predictions = register_module("predictions", std::make_shared<BertLMPredictionHead>(c, word_embeddings, device, gen));
  if (c.next_sentence) seq_relationship = register_module("seq_relationship", make_linear(c.hidden_size, 2, c, device, gen));
}

BertForPreTraining::BertForPreTraining(const BertConfig& c, Device device, Generator& gen) {
  bert = register_module("bert", std::make_shared<BertModel>(c, device, gen));
  cls = register_module("cls",
                        std::make_shared<BertPreTrainingHeads>(c, bert->embeddings->word_embeddings->weight, device, gen));
}

Tensor BertForPreTraining::nsp_logits(const Tensor& hidden) {
  DP_CHECK(bert->pooler != nullptr, "BERT: next-sentence logits need model.next_sentence: true");
  return cls->seq_relationship->forward(bert->pooler->forward(hidden));
}

}  // namespace dp
