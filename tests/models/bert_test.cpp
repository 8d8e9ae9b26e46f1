// BERT (models/bert.h): Hugging Face's names, PyTorch's logits and gradients on the same weights
// (tests/fixtures/make_bert_fixtures.py), tied decoder, masks for padding and packed rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "common/expect_error.h"
#include "common/reference.h"
#include "model_test_util.h"

#include "models/bert.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/backend/cpu/cpu_backend.h"
#include "runtime/io/tensor_file.h"
#include "runtime/ops/creation.h"
#include "runtime/ops/elementwise.h"
#include "runtime/ops/reduce.h"

namespace dp {
namespace {

// The fixture's configuration (CONFIG in make_bert_fixtures.py).
BertConfig fixture_config() {
  BertConfig c;
  c.vocab_size = 96;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 16;
  c.type_vocab_size = 2;
  c.next_sentence = true;
  return c;
}

bool is_state_name(const std::string& name) { return name.rfind("bert.", 0) == 0 || name.rfind("cls.", 0) == 0; }

class BertTest : public ::testing::Test {
 protected:
  // The fixture's state entries (every Hugging Face name, tied ones included).
  std::vector<nn::NamedTensor> fixture_state() {
    std::vector<nn::NamedTensor> state;
    for (auto& [name, t] : load_tensors(std::string(DPTRAIN_SOURCE_DIR) + "/tests/fixtures/bert_tiny.safetensors", cpu))
      if (is_state_name(name)) state.emplace_back(name, t);
    return state;
  }

  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{60};
};

TEST_F(BertTest, NamesAreHuggingFacesAndTheDecoderIsTheWordEmbedding) {
  BertForPreTraining model(fixture_config(), cpu, gen);
  std::set<std::string> ours, theirs;
  for (const auto& [name, t] : model.state_dict()) ours.insert(name);
  for (const auto& [name, t] : fixture_state()) theirs.insert(name);
  ASSERT_EQ(theirs.size(), 48u);  // 5 + 2 layers × 16 + pooler 2 + cls 9; a truncated fixture would make the comparison vacuous
  EXPECT_EQ(ours, theirs);
  EXPECT_TRUE(model.cls->predictions->decoder->weight.same(model.bert->embeddings->word_embeddings->weight));
  EXPECT_TRUE(model.cls->predictions->decoder->bias.same(model.cls->predictions->bias));
  // Tied: one parameter each (as torch's named_parameters()), two state names.
  EXPECT_EQ(model.named_parameters().size() + 2, model.state_dict().size());
  const std::vector<std::string> names = testing::parameter_names(model);
  EXPECT_EQ(std::count(names.begin(), names.end(), "cls.predictions.decoder.weight"), 0);
  EXPECT_EQ(names.front(), "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(testing::parameter_count(model), 26306 - 96 * 32 - 96);  // the fixture's values less the tied copies
}

TEST_F(BertTest, LogitsMatchPyTorchOnTheSameWeights) {
  const testing::Fixture f("bert_tiny");
  BertForPreTraining model(fixture_config(), cpu, gen);
  const nn::Module::LoadReport report = model.load_state_dict(fixture_state());
  EXPECT_TRUE(report.missing.empty() && report.unexpected.empty());
  model.eval();
  BertInputs in;
  in.input_ids = f.tensor("input_ids", cpu);
  in.token_type_ids = f.tensor("token_type_ids", cpu);
  in.attention_mask = padding_attention_mask(f.tensor("key_mask", cpu));
  const Tensor hidden = model.bert->encode(in);
  // float32 against torch's float64 on the float32 weights.
  EXPECT_TENSOR_NEAR("mlm_logits", model.mlm_logits(hidden), f.tensor("mlm_logits", cpu), 1e-5);
  EXPECT_TENSOR_NEAR("nsp_logits", model.nsp_logits(hidden), f.tensor("nsp_logits", cpu), 1e-5);
}

TEST_F(BertTest, GradientsMatchPyTorch) {
  const testing::Fixture f("bert_tiny");
  BertForPreTraining model(fixture_config(), cpu, gen);
  model.load_state_dict(fixture_state());
  model.eval();  // no dropout: the fixture's gradients are eval mode's
  BertInputs in;
  in.input_ids = f.tensor("input_ids", cpu);
  in.token_type_ids = f.tensor("token_type_ids", cpu);
  in.attention_mask = padding_attention_mask(f.tensor("key_mask", cpu));
  const Tensor hidden = model.bert->encode(in);
  const Tensor loss = add(sum(mul(model.mlm_logits(hidden), f.tensor("grad_out", cpu).to(kFloat32))),
                          sum(model.nsp_logits(hidden)));
  loss.backward();
  std::map<std::string, Tensor> params;
  for (const auto& [name, t] : model.state_dict()) params.emplace(name, t);
  int checked = 0;
  for (const char* name :
       {"bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
        "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.0.attention.self.key.bias",
        "bert.encoder.layer.1.output.LayerNorm.weight", "bert.encoder.layer.1.intermediate.dense.weight",
        "bert.pooler.dense.weight", "cls.predictions.bias", "cls.predictions.transform.dense.weight",
        "cls.seq_relationship.weight"}) {
    const Tensor grad = params.at(name).grad();
    ASSERT_TRUE(grad.defined()) << name;
    // The word embedding's gradient sums the input lookup's and the tied decoder's.
    EXPECT_TENSOR_NEAR(std::string("grad of ") + name, grad, f.tensor(std::string("grad_") + name, cpu), 2e-5);
    ++checked;
  }
  const std::string listed = f.option("grad_names");
  EXPECT_EQ(checked, std::count(listed.begin(), listed.end(), ',') + 1);  // every gradient the fixture holds
}

// Two sequences packed into one row (positions restarting, the block mask) give each the hidden
// states it has alone.
TEST_F(BertTest, PackedSequencesDoNotSeeEachOther) {
  BertConfig c = fixture_config();
  BertModel model(c, cpu, gen);
  model.eval();
  const std::vector<int64_t> first = {5, 17, 33, 2}, second = {9, 41, 7, 60, 12};
  auto row = [&](const std::vector<int64_t>& ids) {
    return from_vector(ids, {1, static_cast<int64_t>(ids.size())}, cpu);
  };
  std::vector<int64_t> packed = first, positions, sequence;
  packed.insert(packed.end(), second.begin(), second.end());
  packed.insert(packed.end(), {0, 0});  // padding at the end of the row
  for (size_t i = 0; i < first.size(); ++i) positions.push_back(i), sequence.push_back(1);
  for (size_t i = 0; i < second.size(); ++i) positions.push_back(i), sequence.push_back(2);
  positions.insert(positions.end(), {0, 0});
  sequence.insert(sequence.end(), {0, 0});
  BertInputs in;
  in.input_ids = row(packed);
  in.position_ids = row(positions);
  in.attention_mask = packed_attention_mask(row(sequence));
  const Tensor together = model.encode(in);  // [1, 11, H]
  const Tensor alone_first = model.encode({row(first)}), alone_second = model.encode({row(second)});
  EXPECT_TENSOR_NEAR("first sequence", together.narrow(1, 0, 4).contiguous(), alone_first, 1e-5);
  EXPECT_TENSOR_NEAR("second sequence", together.narrow(1, 4, 5).contiguous(), alone_second, 1e-5);
}

TEST_F(BertTest, PresetsHaveGooglesSizes) {
  BertConfig base = BertConfig::preset("base", 30522);
  EXPECT_EQ(base.hidden_size, 768);
  EXPECT_EQ(base.num_attention_heads, 12);
  EXPECT_EQ(base.intermediate_size, 3072);
  base.next_sentence = true;
  BertForPreTraining model(base, cpu, gen);
  EXPECT_EQ(testing::parameter_count(model), 110106428);  // transformers' BertForPreTraining(bert-base-uncased)
  const BertConfig large = BertConfig::preset("large", 30522);
  EXPECT_EQ(large.num_hidden_layers, 24);
  EXPECT_EQ(large.hidden_size, 1024);
  EXPECT_EQ(large.num_attention_heads, 16);
  EXPECT_ERROR_CONTAINS(BertConfig::preset("huge", 30522), "unknown BERT size 'huge' (known: tiny, mini, small, medium, base, large)");
  BertConfig odd = fixture_config();
  odd.num_attention_heads = 5;
  EXPECT_ERROR_CONTAINS(BertModel(odd, cpu, gen).encode({zeros({1, 2}, kInt64, cpu)}), "hidden_size 32 is not a multiple of num_attention_heads 5");
}

TEST_F(BertTest, InputsAreChecked) {
  BertModel model(fixture_config(), cpu, gen);
  EXPECT_ERROR_CONTAINS(model.encode({zeros({2, 17}, kInt64, cpu)}), "sequence length 17 exceeds max_position_embeddings 16");
  EXPECT_ERROR_CONTAINS(model.encode({zeros({2, 4}, kFloat32, cpu)}), "input_ids must be int64");
  BertInputs in{zeros({2, 4}, kInt64, cpu)};
  in.attention_mask = zeros({2, 1, 4}, kFloat32, cpu);
  EXPECT_ERROR_CONTAINS(model.encode(in), "the attention mask must be [2, 1, 1 or 4, 4]");
}

}  // namespace
}  // namespace dp
