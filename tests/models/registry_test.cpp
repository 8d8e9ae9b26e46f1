// build_model: every known name builds; unknown names and misplaced options fail clearly.
#include <gtest/gtest.h>

#include "model_test_util.h"

#include "models/registry.h"
#include "runtime/backend/cpu/cpu_backend.h"

namespace dp {
namespace {

class RegistryTest : public ::testing::Test {
 protected:
  CpuBackend backend{2};
  Device cpu{&backend};
  Generator gen{1};
};

TEST_F(RegistryTest, BuildsEveryKnownModel) {
  EXPECT_EQ(known_models(), (std::vector<std::string>{"small_cnn", "mlp", "resnet18", "resnet34", "resnet50",
                                                      "resnet101", "resnet152", "bert"}));
  ModelSpec spec;
  spec.name = "small_cnn";
  EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), 421'642);
  spec.name = "mlp";
  spec.mlp_hidden = {128, 64};
  spec.dropout = 0.2;
  EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10);
  spec.dropout = 0.0;
  spec.name = "resnet18";
  EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), 11'175'370);
  spec.in_channels = 3;
  spec.num_classes = 100;
  EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), 11'227'812);
  // BERT-tiny as Hugging Face's BertForMaskedLM (bert_uncased_L-2_H-128_A-2, vocab 30522): the
  // decoder is the word embedding (counted once), its bias is its own.
  spec = ModelSpec{};
  spec.name = "bert";
  spec.vocab_size = 30522;
  EXPECT_THROW(build_model(ModelSpec{.name = "bert"}, cpu, gen), Error) << "no vocabulary size";
  EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), 4'416'698);
  spec.max_seq_length = 1024;  // more positions than the preset's 512
  EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), 4'416'698 + 512 * 128);
}

// torchvision.models.resnet*(num_classes=10) with a 1-channel conv1.
TEST_F(RegistryTest, BuildsEveryResNetDepth) {
  const std::vector<std::pair<std::string, int64_t>> expected = {{"resnet18", 11'175'370},
                                                                  {"resnet34", 21'283'530},
                                                                  {"resnet50", 23'522'250},
                                                                  {"resnet101", 42'514'378},
                                                                  {"resnet152", 58'158'026}};
  for (const auto& [name, count] : expected) {
    ModelSpec spec;
    spec.name = name;
    EXPECT_EQ(testing::parameter_count(*build_model(spec, cpu, gen)), count) << name;
  }
}

TEST_F(RegistryTest, ZeroInitResidualReachesTheResNets) {
  ModelSpec spec;
  spec.name = "resnet50";
  spec.zero_init_residual = true;
  auto model = build_model(spec, cpu, gen);
  for (const auto& [name, p] : model->named_parameters()) {
    if (name.ends_with("bn3.weight")) {
      EXPECT_EQ(p.to_vector<float>(), std::vector<float>(static_cast<size_t>(p.numel()), 0.0f)) << name;
    }
  }
  spec.name = "small_cnn";
  EXPECT_THROW(build_model(spec, cpu, gen), Error);
  spec.name = "mlp";
  EXPECT_THROW(build_model(spec, cpu, gen), Error);
}

TEST_F(RegistryTest, UnknownNameListsTheKnownOnes) {
  ModelSpec spec;
  spec.name = "resnet51";
  try {
    build_model(spec, cpu, gen);
    FAIL() << "expected an unknown-model error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown model 'resnet51'; known models: small_cnn, mlp, resnet18, resnet34, resnet50, "
                           "resnet101, resnet152, bert");
  }
}

TEST_F(RegistryTest, DropoutIsOnlyForTheMlp) {
  ModelSpec spec;
  spec.name = "resnet18";
  spec.dropout = 0.1;
  EXPECT_THROW(build_model(spec, cpu, gen), Error);
}

}  // namespace
}  // namespace dp
