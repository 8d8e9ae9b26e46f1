// BERT (Devlin et al. 2018) in Hugging Face's exact layout and parameter names, so that its
// checkpoints load as they are (transformers' BertForPreTraining / BertForMaskedLM):
//
//   bert.embeddings: word_embeddings [V, H] + position_embeddings [P, H] + token_type_embeddings
//                    [T, H] → LayerNorm → dropout
//   bert.encoder.layer.<i> (×L):
//     attention.self.{query,key,value}  (H → H; heads of H / A)  → softmax(q·kᵀ/√d + mask) → dropout
//     attention.output.dense → dropout → LayerNorm(x + ·)
//     intermediate.dense (H → I) → GELU (erf form)
//     output.dense (I → H) → dropout → LayerNorm(· + ·)
//   bert.pooler.dense (H → H, tanh on [CLS])                     only with next_sentence
//   cls.predictions: transform.dense → GELU → transform.LayerNorm → decoder (the word embedding,
//                    tied: NOTE [ Tied parameters ] in runtime/nn/module.cpp) + cls.predictions.bias
//   cls.seq_relationship (H → 2)                                 only with next_sentence
//
// Names: bert.encoder.layer.0.attention.self.query.weight, cls.predictions.transform.dense.weight,
// cls.predictions.decoder.weight (= bert.embeddings.word_embeddings.weight), ... Init as
// Hugging Face: Linear and Embedding weights N(0, initializer_range²), biases 0, LayerNorm 1 / 0.
//
// The attention mask is additive (0 where a query may attend a key, a large negative number
// where not), [B, 1, 1, S] for padding or [B, 1, S, S] for packed rows, whose sequences must not
// see each other; make it with padding_attention_mask / packed_attention_mask below.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/nn/dropout.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/layernorm.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/sequential.h"
#include "runtime/tensor/generator.h"

namespace dp {

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;
  bool next_sentence = false;  // the pooler and the NSP head

  // Google's released sizes (bert_uncased_L-*_H-*_A-*): tiny L2/H128, mini L4/H256, small L4/H512,
  // medium L8/H512, base L12/H768, large L24/H1024; A = H/64, I = 4H. Unknown: a dp::Error
  // listing the known names.
  static BertConfig preset(const std::string& name, int64_t vocab_size);
  static const std::vector<std::string>& preset_names();
  // Checks the sizes (hidden divisible by the heads, everything positive); throws naming the key.
  void validate() const;
};

// input_ids [B, S] int64; token_type_ids and position_ids [B, S] int64 or undefined (zeros;
// 0..S-1 on every row); attention_mask additive [B, 1, 1, S] or [B, 1, S, S] or undefined.
struct BertInputs {
  Tensor input_ids{}, token_type_ids{}, position_ids{}, attention_mask{};
};

// Additive mask from a key mask [B, S] (nonzero: a real token) → [B, 1, 1, S] of `dtype`.
Tensor padding_attention_mask(const Tensor& key_mask, DType dtype = kFloat32);
// Additive mask for packed rows from per-token sequence ids [B, S] (0: padding, k > 0: the k-th
// sequence of the row) → [B, 1, S, S]: a token attends only to tokens of its own sequence.
Tensor packed_attention_mask(const Tensor& sequence_ids, DType dtype = kFloat32);

class BertEmbeddings : public nn::Module {
 public:
  BertEmbeddings(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& input_ids) override { return embed({input_ids}); }
  Tensor embed(const BertInputs& in);

  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
};

class BertSelfAttention : public nn::Module {
 public:
  BertSelfAttention(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override { return attend(x, Tensor()); }
  // x [B, S, H], additive mask or undefined → context [B, S, H]
  Tensor attend(const Tensor& x, const Tensor& mask);

  const int64_t heads, head_size;
  std::shared_ptr<nn::Linear> query, key, value;
  std::shared_ptr<nn::Dropout> dropout;
};

// dense → dropout → LayerNorm(· + residual): Hugging Face's BertSelfOutput and BertOutput.
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(int64_t in_features, const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override;  // without a residual: not how BERT calls it
  Tensor forward(const Tensor& x, const Tensor& residual);

  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
};

class BertAttention : public nn::Module {
 public:
  BertAttention(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override { return attend(x, Tensor()); }
  Tensor attend(const Tensor& x, const Tensor& mask);

  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<BertResidualOutput> output;
};

// dense (H → I) → GELU
class BertIntermediate : public nn::Module {
 public:
  BertIntermediate(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Linear> dense;
};

class BertLayer : public nn::Module {
 public:
  BertLayer(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override { return run(x, Tensor()); }
  Tensor run(const Tensor& x, const Tensor& mask);

  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<BertResidualOutput> output;
};

class BertEncoder : public nn::Module {
 public:
  BertEncoder(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override { return run(x, Tensor()); }
  Tensor run(const Tensor& x, const Tensor& mask);

  std::shared_ptr<nn::Sequential> layer;  // a container here: each layer also takes the mask
  std::vector<std::shared_ptr<BertLayer>> layers;
};

// tanh(dense([CLS] state))
class BertPooler : public nn::Module {
 public:
  BertPooler(const BertConfig& c, Device device, Generator& gen);
  // hidden [B, S, H] → [B, H]
  Tensor forward(const Tensor& hidden) override;

  std::shared_ptr<nn::Linear> dense;
};

class BertModel : public nn::Module {
 public:
  BertModel(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& input_ids) override { return encode({input_ids}); }
  // → the last layer's hidden states [B, S, H]
  Tensor encode(const BertInputs& in);

  const BertConfig config;
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;  // null without next_sentence
};

// dense → GELU → LayerNorm
class BertPredictionHeadTransform : public nn::Module {
 public:
  BertPredictionHeadTransform(const BertConfig& c, Device device, Generator& gen);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
};

// The MLM decoder: the word embedding matrix and the head's bias, registered again under the
// decoder's names (tied, as Hugging Face's decoder.weight / decoder.bias).
class BertTiedDecoder : public nn::Module {
 public:
  BertTiedDecoder(const Tensor& word_embeddings, const Tensor& bias);
  // [*, H] → [*, V]
  Tensor forward(const Tensor& x) override;

  Tensor weight, bias;
};

class BertLMPredictionHead : public nn::Module {
 public:
  BertLMPredictionHead(const BertConfig& c, const Tensor& word_embeddings, Device device, Generator& gen);
  // hidden [*, H] → logits [*, V]
  Tensor forward(const Tensor& hidden) override;

  Tensor bias;  // [V], registered first as in Hugging Face (cls.predictions.bias)
  std::shared_ptr<BertPredictionHeadTransform> transform;
  std::shared_ptr<BertTiedDecoder> decoder;
};

// cls: predictions (+ seq_relationship with next_sentence)
class BertPreTrainingHeads : public nn::Module {
 public:
  BertPreTrainingHeads(const BertConfig& c, const Tensor& word_embeddings, Device device, Generator& gen);
  Tensor forward(const Tensor& hidden) override { return predictions->forward(hidden); }

  std::shared_ptr<BertLMPredictionHead> predictions;
  std::shared_ptr<nn::Linear> seq_relationship;  // null without next_sentence
};

// BertForPreTraining with next_sentence; otherwise BertForMaskedLM's layout (no pooler, no NSP).
class BertForPreTraining : public nn::Module {
 public:
  BertForPreTraining(const BertConfig& c, Device device, Generator& gen);
  // input_ids [B, S] → MLM logits [B, S, V] (no mask: every token attends to every token).
  Tensor forward(const Tensor& input_ids) override { return cls->forward(bert->encode({input_ids})); }
  // Hidden states [*, H] (e.g. only the masked positions, gathered) → MLM logits [*, V].
  Tensor mlm_logits(const Tensor& hidden) { return cls->predictions->forward(hidden); }
  // Hidden states [B, S, H] → next-sentence logits [B, 2]; only with next_sentence.
  Tensor nsp_logits(const Tensor& hidden);

  std::shared_ptr<BertModel> bert;
  std::shared_ptr<BertPreTrainingHeads> cls;
};

}  // namespace dp
