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
  EXPECT_EQ(known_models(), (std::vector<std::string>{"small_cnn", "mlp", "resnet18"}));
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
}

TEST_F(RegistryTest, UnknownNameListsTheKnownOnes) {
  ModelSpec spec;
  spec.name = "resnet50";
  try {
    build_model(spec, cpu, gen);
    FAIL() << "expected an unknown-model error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "unknown model 'resnet50'; known models: small_cnn, mlp, resnet18");
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
